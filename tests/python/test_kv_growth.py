"""KV that grows on demand, through the server (docs/server.md, "The KV cache grows on demand"): 8
greedy requests of 1500 new tokens each (a worst case of 0.58 MB of KV) against a 2 MB KV budget
on the tiny model with a 16384-position context. Reserving worst cases would run 3 at a time; they
run all 8 at once, the server preempts and swaps caches out as they grow past the budget (8 x 0.58
MB), and every answer equals the answer of the same request sent alone.
"""
import concurrent.futures

import openai
import pytest

from phi4mm_server import Server

PROMPTS = ["Tell me about the sea.", "Name three rivers.", "What is a prime number?", "Write a haiku about rain.",
           "Describe a lighthouse.", "Count to ten.", "What is LoRA?", "List the planets."]
NO_EOS = {"200020": -100, "199999": -100}


@pytest.fixture(scope="module")
def budget_server(wide_model):
    # 2 MB of KV (0.00186 GiB: 5201 positions of the tiny model's 384 bytes); 8 sequences at once.
    s = Server("--kv-budget-gb", "0.00186", "--max-running", "8", model=wide_model)
    yield s
    assert s.stop() == 0


def ask(client, i, max_tokens):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPTS[i]}],
                                       max_tokens=max_tokens, temperature=0, logit_bias=NO_EOS)
    return r.choices[0].message.content, r.usage.completion_tokens


def test_generous_max_tokens_run_together_and_preempted_answers_are_exact(budget_server):
    client = openai.OpenAI(base_url=budget_server.base_url, api_key="x", max_retries=0, timeout=300)
    alone = [ask(client, i, 1500) for i in range(8)]
    assert all(n == 1500 for _, n in alone)
    before = budget_server.metrics()
    with concurrent.futures.ThreadPoolExecutor(1) as watch, concurrent.futures.ThreadPoolExecutor(8) as pool:
        running = watch.submit(lambda: max_running(budget_server))
        together = list(pool.map(lambda i: ask(client, i, 1500), range(8)))
        most = running.result()
    after = budget_server.metrics()
    assert together == alone
    assert most == 8, f"at most {most} ran at once"
    assert after["phi4mm_kv_preemptions_total"] > before["phi4mm_kv_preemptions_total"]
    assert after["phi4mm_kv_swapped_in_total"] > before["phi4mm_kv_swapped_in_total"]
    assert after["phi4mm_kv_cache_bytes"] == 0 and after["phi4mm_kv_swap_bytes"] == 0


def max_running(server, seconds=60):
    """The most requests the server ran at once while they last (polled every 5 ms)."""
    import time
    most, end, seen = 0, time.monotonic() + seconds, False
    while time.monotonic() < end:
        m = server.metrics()
        n = m["phi4mm_requests_running"]
        most = max(most, n)
        seen = seen or n > 0
        if seen and n == 0 and m["phi4mm_requests_waiting"] == 0:
            break
        time.sleep(0.005)
    return int(most)
