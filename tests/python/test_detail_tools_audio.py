"""Spec section I items 3, 5 and 6: `detail` low/auto/high and the `dynamic_hd` extension change
`usage.prompt_tokens` exactly as /v1/chat/completions/input_tokens predicts; a request with `tools`
renders the native block (its answer equals `phi4mm run` with the same block written into the
system prompt by hand, and the counts agree), tool-call history is accepted, and a streamed answer
that opens with the `<|tool_call|>` token sends no text after it; /v1/audio/transcriptions and
/translations through `client.audio`, json and text, equal `phi4mm run` with the instruction.
(The tool-call parser's cases, BFCL-style outputs, are unit-tested in C++: ServerToolCalls.)
"""
import json

import openai
import pytest

from phi4mm_server import fixture, image_part, run_cli, text_part

PHOTO = fixture("images/photo_640x480.png")


def image_request(detail=None, **extra):
    return {"model": "m", "messages": [{"role": "user", "content": [image_part(PHOTO, detail), text_part("What?")]}],
            "max_tokens": 1, "temperature": 0, **extra}


@pytest.mark.parametrize("detail,extra", [(None, {}), ("low", {}), ("high", {}), ("auto", {"dynamic_hd": 2})])
def test_detail_changes_prompt_tokens_as_input_tokens_predicts(wide_server, wide_client, detail, extra):
    _, _, predicted = wide_server.post_json("/v1/chat/completions/input_tokens", image_request(detail, **extra))
    body = image_request(detail, **extra)
    r = wide_client.chat.completions.create(
        model="m", messages=body["messages"], max_tokens=1, temperature=0, extra_body=extra)
    assert r.usage.prompt_tokens == predicted["input_tokens"]
    assert r.usage.prompt_tokens_details.image_tokens == sum(predicted["image_tokens"])
    assert r.usage.model_extra["dynamic_hd"] == predicted["dynamic_hd"]
    want = {None: 36, "low": 1, "high": 36, "auto": 2}[detail]
    assert predicted["dynamic_hd"] == want


def test_detail_low_costs_fewer_tokens(wide_server):
    counts = {d: wide_server.post_json("/v1/chat/completions/input_tokens", image_request(d))[2]["input_tokens"]
              for d in (None, "low")}
    assert counts["low"] < counts[None]


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
# The block the server renders (keys of `parameters` sorted, Python-style separators).
SYSTEM = "You are a helpful assistant with some tools.<|tool|>" + json.dumps(
    [{k: v for k, v in WEATHER[0]["function"].items()}], ensure_ascii=False) + "<|/tool|>"


def test_tools_render_the_native_block(client, server):
    r = client.chat.completions.create(model="m", messages=ASK, tools=WEATHER, max_tokens=12, temperature=0)
    assert r.choices[0].message.content == run_cli("Weather in Paris?", max_tokens=12, extra=["--system", SYSTEM])
    count = lambda body: server.post_json("/v1/chat/completions/input_tokens", body)[2]["input_tokens"]  # noqa: E731
    with_tools = count({"messages": ASK, "tools": WEATHER})
    assert with_tools == count({"messages": [{"role": "system", "content": SYSTEM}] + ASK})
    assert with_tools > count({"messages": ASK}) + 20
    assert count({"messages": ASK, "tools": WEATHER, "tool_choice": "none"}) == count({"messages": ASK})


def test_tool_history_is_accepted(client):
    msgs = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=WEATHER, max_tokens=6, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_text_stops_at_the_tool_call_token(client):
    """The first token forced to <|tool_call|> (200025): no text delta follows it, stream or not,
    and what the tiny model writes after it is no call, so it comes back as the content."""
    kw = dict(model="m", messages=ASK, tools=WEATHER, max_tokens=8, temperature=0,
              logit_bias={"200025": 100})
    plain = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant" and deltas[-1].content is None
    # The buffered text arrives in one piece when the answer ends, not token by token.
    texts = [d.content for d in deltas[1:-1] if d.content]
    assert texts == [plain.choices[0].message.content] and texts[0].startswith("<|tool_call|>")
    assert plain.choices[0].message.tool_calls is None
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason


WAV = fixture("audio/speech_16k_pcm16.wav")
TRANSCRIBE = "Transcribe the audio clip into text."  # the server's instruction (the model card's)


def test_transcriptions_json_and_text(client):
    want = run_cli(TRANSCRIBE, audios=[WAV], max_tokens=10)
    with open(WAV, "rb") as f:
        t = client.audio.transcriptions.create(model="whisper-1", file=f, extra_body={"max_tokens": 10})
    assert t.text == want
    with open(WAV, "rb") as f:
        t = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="text",
                                               extra_body={"max_tokens": 10})
    assert t == want
    with open(WAV, "rb") as f:
        t = client.audio.translations.create(model="whisper-1", file=f, extra_body={"max_tokens": 10})
    assert t.text == run_cli("Translate the audio to English.", audios=[WAV], max_tokens=10)


def test_transcription_formats_without_timestamps_are_refused(client):
    with open(WAV, "rb") as f, pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model="whisper-1", file=f, response_format="srt")
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"RIFF garbage"))
    assert e.value.body["param"] == "file"
