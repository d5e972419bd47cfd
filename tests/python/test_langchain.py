"""Spec section I item 9: a LangChain `ChatOpenAI` smoke test (`invoke`, `stream`, `bind_tools`),
the client most agent code reaches the server through. Each answer must equal what the official
`openai` client gets for the same request (greedy), so LangChain's request building and response
parsing are checked against ours, not just for not failing. Skipped when langchain-openai is not
installed (scripts/python_tests.sh installs tests/python/requirements-langchain.txt).
"""
import json

import pytest

langchain_openai = pytest.importorskip("langchain_openai")

from test_detail_tools_audio import ASK, WEATHER  # noqa: E402

HELLO = "Hello! Who are you?"


@pytest.fixture(scope="module")
def chat(server):
    return langchain_openai.ChatOpenAI(base_url=server.base_url, api_key="unused", model="phi4mm",
                                       temperature=0, max_tokens=10, max_retries=0, timeout=120)


def test_invoke_equals_the_openai_client(chat, client):
    want = client.chat.completions.create(model="m", messages=[{"role": "user", "content": HELLO}], max_tokens=10,
                                          temperature=0)
    got = chat.invoke(HELLO)
    assert got.content == want.choices[0].message.content and got.content
    assert got.response_metadata["finish_reason"] == want.choices[0].finish_reason
    assert got.usage_metadata["output_tokens"] == want.usage.completion_tokens


def test_stream_concatenates_to_the_invoke_answer(chat):
    pieces = [c.content for c in chat.stream(HELLO)]
    assert len([p for p in pieces if p]) >= 2
    assert "".join(pieces) == chat.invoke(HELLO).content


def test_bind_tools_sends_the_tools_and_parses_the_answer(chat, client):
    tool = WEATHER[0]["function"]
    want = client.chat.completions.create(model="m", messages=ASK, tools=WEATHER, max_tokens=10, temperature=0)
    got = chat.bind_tools([{"type": "function", "function": tool}]).invoke(ASK[0]["content"])
    msg = want.choices[0].message
    assert got.content == (msg.content or "")
    want_calls = [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    assert [(c["name"], json.dumps(c["args"])) for c in got.tool_calls] == \
        [(n, json.dumps(json.loads(a))) for n, a in want_calls]
