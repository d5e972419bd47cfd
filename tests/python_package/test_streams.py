"""Streams: the deltas concatenate to the plain answer; four Python threads streaming at once get
the answers each gets alone (the engine batches them, the GIL released while it computes);
leaving a stream early cancels the request and frees its KV at once (engine stats); the
structured-output arguments of the server work here; errors are exceptions with the engine's
message; `python -m phi4mm` runs the CLI."""
import json
import subprocess
import sys
import threading

import pytest
from PIL import Image

import phi4mm
from conftest import FIXTURES

PROMPTS = ["Tell me about the sea.", "Write a poem about trees.", "What is 2 + 2?", "Name three colours."]


def ask(text):
    return [{"role": "user", "content": text}]


def test_stream_equals_plain(model):
    plain = model.chat(ask(PROMPTS[0]), max_tokens=24)
    s = model.chat(ask(PROMPTS[0]), max_tokens=24, stream=True)
    deltas = list(s)
    assert "".join(deltas) == plain.text and len(deltas) > 1
    assert s.result.tokens == plain.tokens and s.finish_reason == plain.finish_reason == "length"
    # The streamed request found the plain one's prompt in the prefix cache: only that part differs.
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert s.usage[k] == plain.usage[k]


def test_four_threads_stream_what_each_gets_alone(model):
    alone = [model.chat(ask(p), max_tokens=32, temperature=0.8, seed=7).text for p in PROMPTS]
    got = [None] * len(PROMPTS)
    steps_before = model.stats()["steps"]

    def worker(i):
        got[i] = "".join(model.chat(ask(PROMPTS[i]), max_tokens=32, temperature=0.8, seed=7, stream=True))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone
    st = model.stats()
    # Batched: fewer steps than the four answers' tokens decoded one after another.
    assert st["steps"] - steps_before < 4 * 32


def wait_idle(model):
    st = model.stats()
    assert st["running"] == 0 and st["waiting"] == 0
    return st


def test_closing_a_stream_frees_its_kv_at_once(model):
    before = wait_idle(model)
    s = model.chat(ask(PROMPTS[1]), max_tokens=400, stream=True)
    it = iter(s)
    next(it), next(it)
    st = model.stats()
    assert st["running"] == 1 and st["kv_reserved_bytes"] > 0
    s.close()
    st = wait_idle(model)
    assert st["kv_reserved_bytes"] == 0 and st["cancelled"] == before["cancelled"] + 1
    assert s.result.finish_reason == "cancelled" and 2 <= len(s.result.tokens) < 400


def test_breaking_out_of_the_loop_frees_its_kv(model):
    before = wait_idle(model)
    for n, _ in enumerate(model.chat(ask(PROMPTS[2]), max_tokens=400, stream=True)):
        if n == 2:
            break
    st = wait_idle(model)
    assert st["kv_reserved_bytes"] == 0 and st["cancelled"] == before["cancelled"] + 1


def test_json_schema(model):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = model.chat(ask("Answer with JSON only."), temperature=1, seed=3, max_tokens=200,
                   response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert r.finish_reason == "stop"
    v = json.loads(r.text)
    assert set(v) == {"name", "age"} and isinstance(v["age"], int)


def test_required_tool_call(model):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}]
    kw = dict(tools=tools, tool_choice="required", parallel_tool_calls=False, temperature=1, seed=1, max_tokens=200)
    r = model.chat(ask("Weather in Paris?"), **kw)
    assert r.finish_reason == "tool_calls" and len(r.tool_calls) == 1 and r.text == ""
    call = r.tool_calls[0]
    assert call["function"]["name"] == "get_weather" and "city" in json.loads(call["function"]["arguments"])
    s = model.chat(ask("Weather in Paris?"), stream=True, **kw)
    assert list(s) == [] and s.finish_reason == "tool_calls"
    assert [c["function"] for c in s.tool_calls] == [c["function"] for c in r.tool_calls]


def test_logprobs(model):
    r = model.chat(ask(PROMPTS[3]), max_tokens=4, logprobs=True, top_logprobs=2)
    content = r.logprobs["content"]
    assert len(content) == len(r.tokens) and all(len(c["top_logprobs"]) == 2 for c in content)


@pytest.mark.parametrize("call,exc,words", [
    (lambda m: m.chat(ask("hi"), max_tokenz=3), ValueError, "max_tokenz"),
    (lambda m: m.chat(ask("hi"), temperature=-1), ValueError, "temperature"),
    (lambda m: m.chat([{"role": "user", "content": [b"not an image", "hi"]}]), ValueError, "messages[0].content[0]"),
    (lambda m: m.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]),
     ValueError, "does not fetch"),
    (lambda m: m.chat([{"role": "user", "content": [{"type": "image", "image": FIXTURES / "images" / "none.png"}]}]),
     FileNotFoundError, "none.png"),
    (lambda m: m.chat([{"role": "user", "content": [(b"\0\0" * 10, 16000)]}]), ValueError, "audio"),
    (lambda m: m.chat([{"role": "robot", "content": "hi"}]), ValueError, "robot"),
    (lambda m: m.chat(ask("hi"), n=2), ValueError, "n must be 1"),
    (lambda m: m.generate([300000]), ValueError, "300000"),
    (lambda m: phi4mm.Model(FIXTURES / "no-such-model"), FileNotFoundError, "no-such-model"),
    (lambda m: phi4mm.Model(FIXTURES / "trained" / "orig", quant="q3"), ValueError, "q3"),
])
def test_errors_are_exceptions_with_the_engines_message(model, call, exc, words):
    with pytest.raises(exc) as e:
        call(model)
    assert words in str(e.value)


def test_bad_image_pixels(model):
    import numpy as np
    with pytest.raises(ValueError, match="uint8"):
        model.chat([{"role": "user", "content": [np.zeros((8, 8, 3), dtype=np.float32)]}])
    with pytest.raises(ValueError, match="H×W×3"):
        model.chat([{"role": "user", "content": [np.zeros((8, 8, 2), dtype=np.uint8)]}])


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "phi4mm", "--help"], check=True, capture_output=True, text=True)
    assert "serve" in out.stdout
    info = subprocess.run([sys.executable, "-m", "phi4mm", "info", "-m", str(FIXTURES / "trained" / "orig")],
                          check=True, capture_output=True, text=True)
    assert "context" in info.stdout.lower()


def test_info_is_what_phi4mm_info_prints(model, cli):
    out = subprocess.run([cli, "info", "--json", "-m", str(FIXTURES / "trained" / "orig")], check=True,
                         capture_output=True, text=True).stdout
    info = dict(model.info)
    assert info.pop("threads") == 2
    assert info == json.loads(out)


def test_grey_and_rgba_arrays_are_converted_as_pil_does(model):
    import numpy as np
    rgba = Image.open(FIXTURES / "images" / "rgba_300x200.png")
    assert rgba.mode == "RGBA"
    a = model.chat([{"role": "user", "content": [np.asarray(rgba), "Describe."]}], max_tokens=6)
    b = model.chat([{"role": "user", "content": [rgba, "Describe."]}], max_tokens=6)
    assert a.tokens == b.tokens
