"""Spec section I item 4: every error of section E, one test each, as the official `openai` client
raises it (the exception class for the status, and the body's message/type/param/code), plus the
raw HTTP where the client cannot send the request (bad JSON, wrong method). Media bombs are
refused from their headers before anything is decoded: a 20000x20000 PNG whose pixel data is 30
bytes and a 2-hour WAV over a second of samples get `image_too_large` / `audio_too_long` (a decoder
that had started would fail on the missing data instead), quickly. 503 is shown while the model
loads (its tokenizer file is a pipe the test fills only after checking) and while draining. 429
is in test_overload.py, the mid-stream error event in test_timeout_*. 500 is an engine failure: an
image request on a checkpoint whose vision tower lacks a tensor (with --lazy-towers; by default such
a checkpoint fails the start).
"""
import base64
import json
import os
import shutil
import signal
import struct
import time
import zlib

import openai
import pytest

import phi4mm_server
from conftest import API_KEY
from phi4mm_server import Server, audio_part, dechunk, fixture, image_part, read_until, sse_events

IMG = "messages[0].content[0].image_url.url"
AUD = "messages[0].content[0].input_audio"


def ask(client, content, **kw):
    kw.setdefault("max_tokens", 2)
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}], **kw)


def bad_request(client, content, param, code=None, **kw):
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, content, **kw)
    err = e.value.body
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error", err
    assert err["param"] == param, err
    if code:
        assert err["code"] == code, err
    assert err["message"]
    return err


def uri(raw, mime="image/png"):
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def png_header_only(width, height):
    """A PNG signature, a valid IHDR for width x height RGB and a 30-byte IDAT: far too little data."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)[:30]) + chunk(b"IEND", b"")


def wav_claiming(seconds, rate=16000):
    """A 16-bit mono WAV whose header claims `seconds` of audio, followed by one second of silence."""
    data_bytes = int(seconds * rate * 2)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt +
            b"data" + struct.pack("<I", data_bytes) + b"\0" * (rate * 2))


# --- 400 -------------------------------------------------------------------------------------------

def test_bad_json_and_wrong_top_level(server):
    for raw, msg in ((b'{"messages": [', "not valid JSON"), (b"[1,2]", "JSON object"), (b"", "not valid JSON")):
        status, _, body = server.request("POST", "/v1/chat/completions", raw)
        err = json.loads(body)["error"]
        assert status == 400 and msg in err["message"] and err["type"] == "invalid_request_error", err


def test_wrong_types_name_the_field(client):
    bad_request(client, 5, "messages[0].content")
    bad_request(client, [7], "messages[0].content[0]")
    bad_request(client, [{"type": "text"}], "messages[0].content[0].text", "missing_field")
    bad_request(client, "x", "max_tokens", max_tokens="ten")
    bad_request(client, "x", "temperature", temperature=5)
    bad_request(client, "x", "stop[0]", stop=[1])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "x"}])
    assert e.value.body["param"] == "messages[0].role"


def test_unknown_part_type(client):
    err = bad_request(client, [{"type": "video_url", "video_url": {"url": "x"}}], "messages[0].content[0].type")
    assert "image_url" in err["message"] and "input_audio" in err["message"]


def test_bad_base64(client):
    bad_request(client, [{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!@@@"}}], IMG,
                "invalid_base64")
    bad_request(client, [{"type": "input_audio", "input_audio": {"data": "@@@", "format": "wav"}}], AUD + ".data")


def test_truncated_and_undecodable_media(client):
    bad_request(client, [image_part(fixture("images/bad_truncated.png"))], IMG, "invalid_image")
    bad_request(client, [{"type": "image_url", "image_url": {"url": uri(b"not an image at all")}}], IMG,
                "invalid_image")
    bad_request(client, [audio_part(fixture("audio/truncated.wav"))], AUD + ".data")
    bad_request(client, [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "amr"}}], AUD + ".format",
                "unsupported_audio_format")


def test_20000x20000_png_header_is_refused_before_decoding(client):
    t0 = time.monotonic()
    err = bad_request(client, [{"type": "image_url", "image_url": {"url": uri(png_header_only(20000, 20000))}}],
                      IMG, "image_too_large")
    assert "20000" in err["message"] and "--max-image-pixels" in err["message"]
    assert time.monotonic() - t0 < 5


def flac_claiming(seconds):
    """The speech FLAC fixture (16 kHz) with STREAMINFO's total-samples field set to `seconds`."""
    raw = bytearray(phi4mm_server.read_bytes(fixture("audio/speech_16k.flac")))
    assert raw[:4] == b"fLaC" and raw[4] & 0x7F == 0  # STREAMINFO first, its data at byte 8
    bits = int.from_bytes(raw[8 + 10:8 + 18], "big")  # rate(20) channels(3) bps(5) total(36)
    bits = (bits & ~((1 << 36) - 1)) | int(seconds * 16000)
    raw[8 + 10:8 + 18] = bits.to_bytes(8, "big")
    return bytes(raw)


def test_two_hour_audio_headers_are_refused_before_decoding(client):
    # A FLAC whose header says 2 hours: too long, from the header, at once.
    t0 = time.monotonic()
    err = bad_request(client, [{"type": "input_audio", "input_audio": {
        "data": base64.b64encode(flac_claiming(2 * 3600)).decode(), "format": "flac"}}], AUD + ".data", "audio_too_long")
    assert "--max-audio-seconds" in err["message"]
    # A WAV whose header says 2 hours over one second of samples: the header and the file's size
    # disagree, which is found (from the header too) before the length and reported as such.
    err = bad_request(client, [{"type": "input_audio", "input_audio": {
        "data": base64.b64encode(wav_claiming(2 * 3600)).decode(), "format": "wav"}}], AUD + ".data", "invalid_audio")
    assert "truncated" in err["message"]
    assert time.monotonic() - t0 < 5
    # A real WAV over the limit (601 s of 8 kHz 8-bit silence, 4.8 MB): too long.
    rate, secs = 8000, 601
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)
    wav = b"RIFF" + struct.pack("<I", 36 + rate * secs) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + \
        b"data" + struct.pack("<I", rate * secs) + b"\x80" * (rate * secs)
    err = bad_request(client, [{"type": "input_audio", "input_audio": {
        "data": base64.b64encode(wav).decode(), "format": "wav"}}], AUD + ".data", "audio_too_long")
    assert "600 s" in err["message"]


def test_too_many_images(client):
    err = bad_request(client, [image_part(fixture("images/tiny_5x7.png"))] * 9, "messages[0].content[8]",
                      "too_many_images")
    assert "8" in err["message"]


def test_prompt_over_the_context(client):
    err = bad_request(client, "sea " * 2000, "messages", "context_length_exceeded")
    assert "512" in err["message"]


def test_malformed_n_structured_output_and_modalities(client):
    # n, response_format and tool_choice are served (test_choices.py, test_structured.py); their
    # malformed forms are 400s naming the field.
    bad_request(client, "x", "n", "out_of_range", n=17)
    bad_request(client, "x", "response_format.json_schema.schema", "invalid_schema", response_format={
        "type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "if": {}}}})
    bad_request(client, "x", "response_format.type", response_format={"type": "xml"})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    bad_request(client, "x", "tool_choice.function.name", tools=tools,
                tool_choice={"type": "function", "function": {"name": "g"}})
    bad_request(client, "x", "modalities[1]", modalities=["text", "audio"])


def test_placeholder_count_mismatch(client):
    bad_request(client, "look at <|image_1|> please", "messages")


# --- 401 / 404 / 405 / 413 -------------------------------------------------------------------------

def test_missing_or_wrong_key_is_401(keyed_server):
    for key in (None, "wrong"):
        status, h, body = keyed_server.request(
            "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
            {} if key is None else {"Authorization": f"Bearer {key}"})
        assert status == 401 and h["www-authenticate"] == "Bearer"
        assert json.loads(body)["error"]["type"] == "authentication_error"
    bad = openai.OpenAI(base_url=keyed_server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    assert keyed_server.request("GET", "/health")[0] == 200
    assert keyed_server.request("GET", "/metrics")[0] == 401
    good = openai.OpenAI(base_url=keyed_server.base_url, api_key=API_KEY, max_retries=0)
    r = good.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_unknown_path_is_404_and_wrong_method_405(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model="m", input="x")
    assert e.value.body["type"] == "not_found_error"
    status, h, body = server.request("GET", "/v1/chat/completions")
    assert status == 405 and h["allow"] == "POST" and json.loads(body)["error"]["code"] == "method_not_allowed"
    status, h, _ = server.request("POST", "/v1/models", {})
    assert status == 405 and h["allow"] == "GET"


@pytest.fixture(scope="module")
def limits_server(wide_model):
    # The 16384-position model, so that the timeout test's answer has thousands of tokens to go
    # when its 0.3 s run out (the tiny model decodes ~2000 tokens a second).
    s = Server("--max-body-mb", "3", "--max-media-mb", "1", "--request-timeout", "0.3", model=wide_model)
    yield s
    assert s.stop() == 0


def test_body_over_the_limit_is_413(limits_server):
    c = openai.OpenAI(base_url=limits_server.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "a" * (4 << 20)}])
    assert e.value.status_code == 413 and e.value.body["code"] == "request_too_large"
    assert "3 MiB" in e.value.body["message"]


def test_media_item_over_the_limit_is_413(limits_server):
    c = openai.OpenAI(base_url=limits_server.base_url, api_key="x", max_retries=0)
    blob = os.urandom(3 << 19)  # 1.5 MiB decoded, 2 MiB as base64: under the body limit
    with pytest.raises(openai.APIStatusError) as e:
        ask(c, [{"type": "image_url", "image_url": {"url": uri(blob)}}])
    assert e.value.status_code == 413 and e.value.body["param"] == IMG
    assert "--max-media-mb" in e.value.body["message"]


def test_timeout_ends_the_stream_with_an_error_event(limits_server):
    """--request-timeout 0.3 s against a 12000-token answer: an error event, then [DONE]."""
    body = {"messages": [{"role": "user", "content": "Write a long poem."}], "max_tokens": 12000, "stream": True,
            "logit_bias": {"200020": -100, "199999": -100}}
    status, _, raw = limits_server.request("POST", "/v1/chat/completions", body)
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "request_timeout"
    c = openai.OpenAI(base_url=limits_server.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.APIError) as e:
        for _ in c.chat.completions.create(model="m", stream=True, **{k: v for k, v in body.items() if k != "stream"}):
            pass
    assert "longer than" in str(e.value)
    assert limits_server.metrics()['phi4mm_cancelled_total{reason="timeout"}'] == 2


def test_a_plain_answer_that_fails_after_admission_raises(limits_server):
    """Not streamed, the same timeout: the client gets the error's own status (504) and raises, with
    the text generated before the failure in the error body; never a 200 whose body is an error."""
    c = openai.OpenAI(base_url=limits_server.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Write a long poem."}],
                                  max_tokens=12000, logit_bias={"200020": -100, "199999": -100})
    assert e.value.status_code == 504, e.value
    assert e.value.body["code"] == "request_timeout" and e.value.body["type"] == "timeout_error"
    assert e.value.body["partial_text"], e.value.body
    assert limits_server.metrics()['phi4mm_cancelled_total{reason="timeout"}'] == 3  # after the test above


# --- 503 -------------------------------------------------------------------------------------------

def test_503_while_the_model_loads(tmp_path):
    """The tokenizer file is a pipe: loading blocks on it until the test writes the real file in."""
    src = phi4mm_server.model_dir()
    folder = tmp_path / "slow"
    folder.mkdir()
    for name in os.listdir(src):
        if name != "tokenizer.json":
            os.symlink(os.path.join(src, name), folder / name)
    os.mkfifo(folder / "tokenizer.json")
    s = Server(model=str(folder), wait=False)
    try:
        status, h, body = s.request("GET", "/health")
        assert status == 503 and json.loads(body)["error"]["message"] == "Loading model", body
        c = openai.OpenAI(base_url=s.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert e.value.status_code == 503 and e.value.body["type"] == "unavailable_error"
        assert e.value.response.headers["retry-after"] == "5"
    finally:
        with open(folder / "tokenizer.json", "wb") as f:
            f.write(phi4mm_server.read_bytes(os.path.join(src, "tokenizer.json")))
    s.wait_ready()
    assert s.request("GET", "/health")[0] == 200
    assert s.stop() == 0


def test_503_while_draining(wide_model):
    """SIGTERM: /health and new requests answer 503 at once, the running stream finishes, exit 0.
    On the wide model with 3000 tokens to go, so the stream is still running when SIGTERM comes."""
    s = Server("--drain-seconds", "300", model=wide_model)
    try:
        body = {"messages": [{"role": "user", "content": "Write a long poem."}], "max_tokens": 3000, "stream": True,
                "temperature": 0, "logit_bias": {"200020": -100, "199999": -100}}
        sock = s.raw_post("/v1/chat/completions", body)
        got = read_until(sock, b"\n\n", read_until(sock, b"\r\n\r\n"))
        s.proc.send_signal(signal.SIGTERM)
        for _ in range(200):
            status, _, raw = s.request("GET", "/health")
            if status == 503:
                break
            time.sleep(0.01)
        assert status == 503 and json.loads(raw)["error"]["type"] == "unavailable_error"
        status, h, raw = s.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        assert status == 503 and "shutting down" in json.loads(raw)["error"]["message"] and "retry-after" in h
        got = read_until(sock, b"data: [DONE]", got)
        sock.close()
        events = [json.loads(e) for e in sse_events(dechunk(got.split(b"\r\n\r\n", 1)[1])) if e.startswith("{")]
        assert "choices" in events[-1] and events[-1]["choices"][0]["finish_reason"] == "length", events[-1]
        assert s.proc.wait(60) == 0
        assert "(1 requests in flight)" in s.stderr()
    finally:
        assert s.stop() == 0


# --- 500 -------------------------------------------------------------------------------------------

MISSING = "model.embed_tokens_extend.image_embed.img_processor.embeddings.patch_embedding.weight"


def without_patch_embedding(folder):
    """A copy of the tiny model in `folder` whose vision tower lacks one tensor (renamed in place)."""
    shutil.copytree(phi4mm_server.model_dir(), folder)
    old = MISSING
    new = old[:-1] + "x"  # same length: the shard's data offsets stay valid
    for shard in folder.glob("*.safetensors"):
        raw = bytearray(shard.read_bytes())
        n = struct.unpack("<Q", raw[:8])[0]
        header = raw[8:8 + n].decode()
        if f'"{old}"' in header:
            raw[8:8 + n] = header.replace(f'"{old}"', f'"{new}"').encode()
            shard.write_bytes(raw)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"][new] = index["weight_map"].pop(old)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_a_tower_that_cannot_load_fails_the_start(tmp_path):
    """By default the towers load before /health turns 200, so a broken one stops the server with
    its message instead of failing image requests later."""
    s = Server(model=str(without_patch_embedding(tmp_path / "no_patch_embedding")), wait=False)
    assert s.proc.wait(60) == 1
    assert "loading the vision part" in s.stderr() and MISSING in s.stderr()


def test_500_when_the_engine_fails(tmp_path):
    """With --lazy-towers the same checkpoint serves text, and an image request fails inside the
    engine: 500 `server_error` naming the missing tensor, plainly and as an error event then [DONE]
    in a stream; text still works after."""
    old = MISSING
    s = Server("--lazy-towers", model=str(without_patch_embedding(tmp_path / "no_patch_embedding")))
    try:
        c = openai.OpenAI(base_url=s.base_url, api_key="x", max_retries=0)
        text = [{"role": "user", "content": "Hello"}]
        assert c.chat.completions.create(model="m", messages=text, max_tokens=2).choices[0].message.content
        image = [{"role": "user", "content": [image_part(fixture("images/tiny_5x7.png")),
                                              {"type": "text", "text": "What is this?"}]}]
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model="m", messages=image, max_tokens=2)
        assert e.value.status_code == 500 and e.value.body["type"] == "server_error"
        assert "loading the vision part" in e.value.body["message"] and old in e.value.body["message"]
        status, _, raw = s.request("POST", "/v1/chat/completions", {"messages": image, "max_tokens": 2, "stream": True})
        assert status == 200
        events = sse_events(raw)
        assert events[-1] == "[DONE]"
        err = json.loads(events[-2])["error"]
        assert err["type"] == "server_error" and old in err["message"]
        assert c.chat.completions.create(model="m", messages=text, max_tokens=2).choices[0].message.content
        assert s.metrics()['phi4mm_requests_total{endpoint="/v1/chat/completions",status="500"}'] == 1
    finally:
        assert s.stop() == 0
