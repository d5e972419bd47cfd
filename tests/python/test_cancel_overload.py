"""Spec section I items 7 and 8. Cancellation: a client that closes its socket cancels its request
in every phase — while its stream decodes (after the role chunk and two content chunks), while a
non-streaming answer decodes, while it waits in the queue, while its image is being encoded, while
its prompt is prefilled — and within 1 s `phi4mm_requests_running` is back to 0 and
`phi4mm_kv_cache_bytes` to its idle value, with one more `phi4mm_cancelled_total{reason="disconnect"}`
and the work it would have done not done (the engine's row counters, which move with every step;
phi4mm_generation_tokens_total only counts finished answers). Overload: `--max-running 1 --max-queue 1` and 4
simultaneous requests: at least 2 get 429 with Retry-After, the admitted ones finish, nothing
crashes.
"""
import threading
import time

import openai

from phi4mm_server import fixture, image_part, read_until, text_part

NO_EOS = {"200020": -100, "199999": -100}  # <|end|> and <|endoftext|>: the answer runs to max_tokens
DISCONNECT = 'phi4mm_cancelled_total{reason="disconnect"}'


# The wide model's context holds 12000 new tokens: seconds of decoding, so an answer cannot finish
# (the tiny model's 512 positions take a quarter of a second) before its client's leaving is noticed.
LONG = 12000


def long_body(stream, max_tokens=LONG, content="Write a long poem about the sea."):
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream, "logit_bias": NO_EOS}


def poll(server, pred, timeout=60.0):
    """Polls /metrics (every 5 ms) until pred(metrics) holds; the metrics then (None on timeout)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = server.metrics()
        if pred(m):
            return m
        time.sleep(0.005)
    return None


def closed_and_released(server, sock, before):
    """Closes the socket; asserts the request is gone within 1 s and counted; the metrics after."""
    sock.close()
    t0 = time.monotonic()
    idle = poll(server, lambda m: m["phi4mm_requests_running"] == 0 and m["phi4mm_requests_waiting"] == 0 and
                m["phi4mm_kv_cache_bytes"] == before["phi4mm_kv_cache_bytes"], timeout=5)
    took = time.monotonic() - t0
    assert idle is not None, "the request still holds its slot 5 s after its client left"
    assert took < 1.0, f"released {took:.2f} s after the disconnect"
    assert idle[DISCONNECT] == before[DISCONNECT] + 1, idle
    assert idle["phi4mm_generation_tokens_total"] == before["phi4mm_generation_tokens_total"], \
        "the cancelled answer was counted as finished"
    return idle


def idle_metrics(server):
    assert server.wait_idle(60) is not None
    return server.metrics()


def test_disconnect_while_streaming(wide_server):
    server = wide_server
    before = idle_metrics(server)
    sock = server.raw_post("/v1/chat/completions", long_body(True))
    got = read_until(sock, b"\r\n\r\n")
    while got.count(b"data: ") < 3:  # the role chunk and two content chunks
        more = sock.recv(65536)
        assert more, got
        got += more
    after = closed_and_released(server, sock, before)
    assert after["phi4mm_decode_rows_total"] - before["phi4mm_decode_rows_total"] < LONG // 2


def test_disconnect_while_a_plain_answer_decodes(wide_server):
    server = wide_server
    before = idle_metrics(server)
    sock = server.raw_post("/v1/chat/completions", long_body(False))
    assert poll(server, lambda m: m["phi4mm_decode_rows_total"] > before["phi4mm_decode_rows_total"])
    after = closed_and_released(server, sock, before)
    assert after["phi4mm_decode_rows_total"] - before["phi4mm_decode_rows_total"] < LONG // 2


def test_disconnect_while_queued(small_server):
    s = small_server
    before = idle_metrics(s)
    # Thousands of tokens: the slot must stay taken until the queued request's disconnect is
    # noticed, else the queued request is admitted and the test measures nothing.
    busy = s.raw_post("/v1/chat/completions", long_body(True))
    read_until(busy, b"data: ")
    # The role chunk can come before the engine admits the request: until it runs, the one waiting
    # request the gauge shows may be this one.
    assert poll(s, lambda m: m["phi4mm_requests_running"] == 1)
    queued = s.raw_post("/v1/chat/completions", long_body(False))
    assert poll(s, lambda m: m["phi4mm_requests_waiting"] == 1 and m["phi4mm_requests_running"] == 1)
    queued.close()
    t0 = time.monotonic()
    m = poll(s, lambda m: m["phi4mm_requests_waiting"] == 0, timeout=5)
    assert m and time.monotonic() - t0 < 1.0 and m["phi4mm_requests_running"] == 1
    assert m[DISCONNECT] == before[DISCONNECT] + 1
    before[DISCONNECT] += 1
    closed_and_released(s, busy, before)  # neither answer finished: the busy one ran all along


def test_disconnect_while_the_image_encodes(wide_server):
    """A 3000x3000 image at 36 crops: closed once the engine has admitted it and before the vision
    encoder finished; the encoder stops there (no image counted as encoded, no token generated)."""
    s = wide_server
    before = idle_metrics(s)
    body = {"model": "m", "messages": [{"role": "user", "content": [
        image_part(fixture("images/big_3000x3000.png"), "high"), text_part("What is this?")]}],
        "max_tokens": 4, "temperature": 0, "stream": True}
    sock = s.raw_post("/v1/chat/completions", body)
    m = poll(s, lambda m: m["phi4mm_requests_running"] == 1)
    assert m and m["phi4mm_images_encoded_total"] == before["phi4mm_images_encoded_total"], \
        "the image was encoded before the test saw the request running"
    after = closed_and_released(s, sock, before)
    assert after["phi4mm_images_encoded_total"] == before["phi4mm_images_encoded_total"]
    assert after["phi4mm_decode_rows_total"] == before["phi4mm_decode_rows_total"]
    assert after["phi4mm_prefill_rows_total"] == before["phi4mm_prefill_rows_total"]


def test_disconnect_while_prefilling(wide_server):
    s = wide_server
    before = idle_metrics(s)
    body = long_body(True, 8, "sea " * 12000)
    sock = s.raw_post("/v1/chat/completions", body)
    m = poll(s, lambda m: m["phi4mm_prefill_rows_total"] > before["phi4mm_prefill_rows_total"])
    assert m and m["phi4mm_decode_rows_total"] == before["phi4mm_decode_rows_total"]
    after = closed_and_released(s, sock, before)
    assert after["phi4mm_decode_rows_total"] == before["phi4mm_decode_rows_total"]
    assert after["phi4mm_prefill_rows_total"] - before["phi4mm_prefill_rows_total"] < 12000


def test_overload_is_answered_429_with_retry_after(small_server):
    s = small_server
    before = idle_metrics(s)
    c = openai.OpenAI(base_url=s.base_url, api_key="x", max_retries=0, timeout=300)
    go = threading.Barrier(4)
    results = [None] * 4

    def one(i):
        go.wait()
        try:
            r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Tell me a story."}],
                                          max_tokens=3000, temperature=0, logit_bias=NO_EOS)
            results[i] = r.choices[0].finish_reason
        except openai.RateLimitError as e:
            results[i] = (429, e.response.headers.get("retry-after"), e.body)
        except Exception as e:  # anything else is a failure, reported below
            results[i] = repr(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy = [r for r in results if isinstance(r, tuple)]
    assert len(busy) >= 2 and results.count("length") == 4 - len(busy), results
    for _, retry_after, body in busy:
        assert retry_after and int(retry_after) >= 1
        assert body["type"] == "rate_limit_error" and body["code"] == "server_overloaded"
    m = idle_metrics(s)
    assert m['phi4mm_requests_rejected_total{reason="queue_full"}'] - \
        before.get('phi4mm_requests_rejected_total{reason="queue_full"}', 0) == len(busy)
    assert s.request("GET", "/health")[0] == 200
