"""`n` > 1 through the official client: the choices are those of n separate requests with seeds
seed, seed + 1, ... (the engine's batch invariance), the prompt is prefilled once (the other
choices find it in the prefix cache and run only its last position: phi4mm_prefill_rows_total
grows by prompt + n - 1), streamed chunks carry each choice's index, and usage counts the prompt
once and every choice's completion.
"""
import random

def prefill_rows(server):
    server.wait_idle()
    return server.metrics()["phi4mm_prefill_rows_total"]


def unique_prompt(seed):
    rng = random.Random(seed)
    words = ["river", "stone", "lamp", "cloud", "violet", "engine", "paper", "orbit", "salt", "meadow"]
    return [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(40))}]


def test_n_choices_equal_separate_requests_with_the_prompt_prefilled_once(client, server):
    messages = unique_prompt(1)
    before = prefill_rows(server)
    r = client.chat.completions.create(model="m", messages=messages, n=4, temperature=1, seed=100, max_tokens=12)
    after = prefill_rows(server)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    prompt = r.usage.prompt_tokens
    assert after - before == prompt + 3, (after - before, prompt)
    completions = []
    for i, c in enumerate(r.choices):
        alone = client.chat.completions.create(model="m", messages=messages, temperature=1, seed=100 + i, max_tokens=12)
        assert c.message.content == alone.choices[0].message.content, f"choice {i}"
        assert c.finish_reason == alone.choices[0].finish_reason
        completions.append(alone.usage.completion_tokens)
    assert r.usage.completion_tokens == sum(completions)
    assert len({c.message.content for c in r.choices}) > 1, "the choices sample with different seeds"


def test_n_choices_stream_with_their_indices(client):
    messages = unique_prompt(2)
    plain = client.chat.completions.create(model="m", messages=messages, n=3, temperature=1, seed=7, max_tokens=10)
    text, finish = {}, {}
    for ch in client.chat.completions.create(model="m", messages=messages, n=3, temperature=1, seed=7, max_tokens=10,
                                             stream=True, stream_options={"include_usage": True}):
        if not ch.choices:
            assert ch.usage.completion_tokens == plain.usage.completion_tokens
            continue
        c = ch.choices[0]
        text[c.index] = text.get(c.index, "") + (c.delta.content or "")
        if c.finish_reason:
            finish[c.index] = c.finish_reason
    assert text == {c.index: c.message.content for c in plain.choices}
    assert finish == {c.index: c.finish_reason for c in plain.choices}


def test_n_choices_on_legacy_completions(client):
    r = client.completions.create(model="m", prompt="river stone lamp", n=2, temperature=1, seed=3, max_tokens=6)
    assert [c.index for c in r.choices] == [0, 1]
    alone = client.completions.create(model="m", prompt="river stone lamp", temperature=1, seed=4, max_tokens=6)
    assert r.choices[1].text == alone.choices[0].text
