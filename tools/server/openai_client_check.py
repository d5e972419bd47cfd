#!/usr/bin/env python3
"""Drives a running `phi4mm serve` with the official `openai` Python client (not run in CI; the
C++ tests cover the same ground without Python). Checks, against the server at --base-url:
text (non-streaming and streaming with usage), an image (data URI, detail low), audio
(input_audio wav), image+audio, tools (request accepted, answer well formed), the models list,
a transcription, and that errors arrive as openai.BadRequestError / AuthenticationError.

    pip install openai          # in a venv outside the repository
    phi4mm serve -m tests/fixtures/tiny/orig --port 8080 &
    python tools/server/openai_client_check.py --base-url http://127.0.0.1:8080/v1 \
        --image tests/fixtures/images/tiny_5x7.png --audio tests/fixtures/audio/tone_1s_16k.wav

Exits non-zero on the first failed check.
"""
import argparse
import base64
import sys

import openai


def data_uri(path, mime):
    with open(path, "rb") as f:
        return f"data:{mime};base64," + base64.b64encode(f.read()).decode()


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + (f": {detail}" if detail else ""))
    if not cond:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--image", required=True)
    ap.add_argument("--audio", required=True)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=300)

    models = client.models.list()
    model = models.data[0].id
    check("models.list", len(models.data) == 1, model)

    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello!"}],
                                       max_tokens=8, temperature=0)
    text = r.choices[0].message.content
    check("chat text", isinstance(text, str) and r.choices[0].finish_reason in ("stop", "length"),
          repr(text)[:60])
    check("usage", r.usage.prompt_tokens > 0 and r.usage.completion_tokens <= 8, str(r.usage))

    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello!"}], max_tokens=8, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("chat stream equals non-stream", streamed == text, repr(streamed)[:60])
    check("stream usage chunk", chunks[-1].usage is not None and chunks[-1].choices == [])

    img = {"type": "image_url", "image_url": {"url": data_uri(a.image, "image/png"), "detail": "low"}}
    aud = {"type": "input_audio", "input_audio": {"data": b64(a.audio), "format": "wav"}}
    for name, parts in (("image", [img]), ("audio", [aud]), ("image+audio", [img, aud])):
        r = client.chat.completions.create(
            model=model, max_tokens=6, temperature=0,
            messages=[{"role": "user", "content": parts + [{"type": "text", "text": "Describe it."}]}])
        d = r.usage.model_dump().get("prompt_tokens_details") or {}
        check(f"chat {name}", isinstance(r.choices[0].message.content, str), str(d))

    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    r = client.chat.completions.create(model=model, max_tokens=16, temperature=0, tools=tools,
                                       messages=[{"role": "user", "content": "Weather in Paris?"}])
    msg = r.choices[0].message
    check("tools", r.choices[0].finish_reason in ("stop", "length", "tool_calls") and
          (msg.content is not None or msg.tool_calls), r.choices[0].finish_reason)
    stream = list(client.chat.completions.create(model=model, max_tokens=16, temperature=0, tools=tools,
                                                 stream=True,
                                                 messages=[{"role": "user", "content": "Weather in Paris?"}]))
    check("tools stream", stream[-1].choices[0].finish_reason is not None)

    with open(a.audio, "rb") as f:
        t = client.audio.transcriptions.create(model="whisper-1", file=f)
    check("transcription", isinstance(t.text, str), repr(t.text)[:60])

    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], n=2)
        check("n=2 refused", False)
    except openai.BadRequestError as e:
        check("n=2 refused", e.body.get("param") == "n", str(e.body))
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}])
        check("bad base64 refused", False)
    except openai.BadRequestError as e:
        check("bad base64 refused", "image_url.url" in (e.body.get("param") or ""), str(e.body))
    print("all checks passed")


if __name__ == "__main__":
    main()
