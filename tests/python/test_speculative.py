"""Speculative decoding through the official `openai` client on the trained fixture (a 4-layer
Phi-4-mini-shaped decoder with the real tokenizer): OpenAI's Predicted Outputs (`prediction`)
give the answer given without them, byte for byte, greedy and seeded, streamed or not, and
`usage.completion_tokens_details` counts the accepted and rejected prediction tokens; a server
started with `--speculative ngram` (and a request's own `"speculative"`) answers as a plain one,
and its n-gram pool drafts a request's answer from an earlier one's (nothing with
`--ngram-pool-mb 0`);
a malformed prediction is a 400 naming the field.
"""
import openai
import pytest

import phi4mm_server

PASSAGE = ("The quick brown fox jumps over the lazy dog near the river bank while the old lighthouse keeper "
           "watches the boats come home, counting them one by one until the last light fades.")
ASK = [{"role": "user", "content": "Repeat this text exactly: " + PASSAGE}]


@pytest.fixture(scope="module")
def plain():
    s = phi4mm_server.Server(model=phi4mm_server.fixture("trained/orig"))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def ngram():
    s = phi4mm_server.Server("--speculative", "ngram", "--draft-max", "6", model=phi4mm_server.fixture("trained/orig"))
    yield s
    assert s.stop() == 0


def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def answer(c, stream=False, **kw):
    if not stream:
        r = c.chat.completions.create(model="m", messages=ASK, max_tokens=48, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    for ch in c.chat.completions.create(model="m", messages=ASK, max_tokens=48, stream=True,
                                        stream_options={"include_usage": True}, **kw):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = ch.usage
    return text, finish, usage


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 11}])
@pytest.mark.parametrize("stream", [False, True])
def test_a_prediction_changes_nothing_but_the_steps(plain, sampling, stream):
    c = client(plain)
    want, want_finish, want_usage = answer(c, stream, **sampling)
    assert want_usage.completion_tokens_details is None or not want_usage.completion_tokens_details.accepted_prediction_tokens
    # The prediction is the answer itself (all of it can be taken), then a wrong one.
    for prediction, taken in ((want, True), ("Something else entirely, not this text at all.", False)):
        got, finish, usage = answer(c, stream, prediction={"type": "content", "content": prediction}, **sampling)
        assert (got, finish) == (want, want_finish)
        assert usage.completion_tokens == want_usage.completion_tokens
        d = usage.completion_tokens_details
        if taken:
            # Mostly taken (measured greedy: 21 of 25 drafted; the answer's text tokenizes otherwise
            # where the model wrote "~" one token at a time, so not all of it can be drafted).
            assert d.accepted_prediction_tokens > max(10, d.rejected_prediction_tokens), d
        elif d is not None:
            assert d.accepted_prediction_tokens <= d.rejected_prediction_tokens, d


def test_a_prediction_as_text_parts(plain):
    c = client(plain)
    want, _, _ = answer(c)
    half = len(want) // 2
    got, _, usage = answer(c, prediction={"type": "content", "content": [{"type": "text", "text": want[:half]},
                                                                        {"type": "text", "text": want[half:]}]})
    assert got == want
    assert usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_ngram_servers_and_requests_answer_as_plain_ones(plain, ngram):
    base, fast = client(plain), client(ngram)
    for sampling in ({"temperature": 0}, {"temperature": 0.9, "seed": 5, "top_p": 0.9}):
        want = answer(base, **sampling)[:2]
        assert answer(fast, **sampling)[:2] == want
        assert answer(fast, stream=True, **sampling)[:2] == want
        assert answer(base, extra_body={"speculative": "ngram"}, **sampling)[:2] == want
        assert answer(fast, extra_body={"speculative": "none"}, **sampling)[:2] == want
    _, _, usage = answer(fast)
    d = usage.completion_tokens_details
    assert d is not None and d.accepted_prediction_tokens > 0, "the copying prompt took no draft"


def test_the_ngram_pool_drafts_from_earlier_requests_unless_it_is_off(plain, ngram):
    poem = [{"role": "user", "content": "Write four lines about a quiet harbour at night."}]

    def ask(server):
        r = client(server).chat.completions.create(model="m", messages=poem, max_tokens=40, temperature=0)
        return r.choices[0].message.content

    def pool(server):
        m = server.metrics()
        return m["phi4mm_ngram_pool_accepted_tokens_total"], m["phi4mm_ngram_pool_bytes"]

    want = ask(plain)
    off = phi4mm_server.Server("--speculative", "ngram", "--ngram-pool-mb", "0",
                               model=phi4mm_server.fixture("trained/orig"))
    try:
        before, _ = pool(ngram)
        assert [ask(ngram), ask(ngram)] == [want, want]
        after, size = pool(ngram)
        assert after > before, "the second request took nothing from the first one's answer"
        assert 0 < size <= 16 << 20
        assert [ask(off), ask(off)] == [want, want]
        assert pool(off) == (0, 0)
    finally:
        assert off.stop() == 0
    with pytest.raises(RuntimeError, match="serve limits must be positive"):
        phi4mm_server.Server("--ngram-pool-mb", "-1", model=phi4mm_server.fixture("trained/orig"))


@pytest.mark.parametrize("body,param", [
    ({"prediction": {"type": "text", "content": "x"}}, "prediction.type"),
    ({"prediction": {"type": "content", "content": 5}}, "prediction.content"),
    ({"prediction": {"type": "content", "content": [{"type": "image_url"}]}}, "prediction.content[0].type"),
    ({"speculative": "eagle"}, "speculative"),
])
def test_malformed_speculation_is_a_400_naming_the_field(plain, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client(plain).chat.completions.create(model="m", messages=ASK, max_tokens=4, extra_body=body)
    assert e.value.body["param"] == param, e.value.body
