"""Spec section I item 1: text answers, plain and streamed, through the official `openai` client,
and the SSE bytes as curl receives them (role chunk first, `data: [DONE]` last, a usage chunk with
`choices: []` only when `stream_options.include_usage` asks for it). Also the legacy
/v1/completions, /v1/models, /health and /metrics.
"""
import json
import subprocess

from phi4mm_server import sse_events

HELLO = [{"role": "user", "content": "Hello! Who are you?"}]


def test_plain_answer_has_the_openai_shape(client, server, model_name):
    r = client.chat.completions.create(model="anything", messages=HELLO, max_tokens=8, temperature=0)
    assert r.id.startswith("chatcmpl-") and len(r.id) == len("chatcmpl-") + 32
    assert r.object == "chat.completion"
    assert r.model == model_name
    assert r.system_fingerprint.startswith("phi4mm-")
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The prompt costs what /input_tokens says it will.
    _, _, count = server.post_json("/v1/chat/completions/input_tokens", {"model": "x", "messages": HELLO})
    assert count["object"] == "response.input_tokens"
    assert r.usage.prompt_tokens == count["input_tokens"] == count["text_tokens"]


def test_stream_equals_the_plain_answer(client):
    plain = client.chat.completions.create(model="m", messages=HELLO, max_tokens=10, temperature=0)
    chunks = list(client.chat.completions.create(model="m", messages=HELLO, max_tokens=10, temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    assert all(ch.usage is None for ch in chunks)
    assert all(ch.id == chunks[0].id and ch.object == "chat.completion.chunk" for ch in chunks)
    finishes = [ch.choices[0].finish_reason for ch in chunks]
    assert finishes[-1] == plain.choices[0].finish_reason and all(f is None for f in finishes[:-1])
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == plain.choices[0].message.content


def test_stream_usage_chunk_comes_last_with_empty_choices(client):
    chunks = list(client.chat.completions.create(model="m", messages=HELLO, max_tokens=6, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(ch.usage is None for ch in chunks[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    streamed = sum(1 for ch in chunks[:-1] if ch.choices and ch.choices[0].delta.content)
    assert last.usage.completion_tokens >= streamed
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens


def curl(server, path, body, *extra):
    """(headers text, body bytes) of a POST made by curl, which prints the bytes as they come."""
    r = subprocess.run(["curl", "-sS", "-N", "--max-time", "120", "-D", "-", "-H", "Content-Type: application/json",
                        "-d", json.dumps(body), *extra, f"http://127.0.0.1:{server.port}{path}"],
                       capture_output=True, timeout=130, check=True)
    head, _, raw = r.stdout.partition(b"\r\n\r\n")
    return head.decode(), raw


def test_sse_bytes_with_curl(server):
    body = {"model": "m", "messages": HELLO, "max_tokens": 6, "temperature": 0, "stream": True}
    head, raw = curl(server, "/v1/chat/completions", body)
    assert head.startswith("HTTP/1.1 200")
    lower = head.lower()
    assert "content-type: text/event-stream" in lower
    assert "x-accel-buffering: no" in lower and "x-request-id: req_" in lower
    assert "transfer-encoding: chunked" in lower
    assert raw.startswith(b"data: {") and raw.endswith(b"\n\ndata: [DONE]\n\n")
    events = sse_events(raw)
    first = json.loads(events[0])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    # Every event is one `data:` line followed by a blank line; anything else is a `:` comment.
    for block in raw.decode().split("\n\n")[:-1]:
        assert block.startswith("data: ") or block.startswith(":"), block

    body["stream_options"] = {"include_usage": True}
    _, raw = curl(server, "/v1/chat/completions", body)
    chunks = [json.loads(e) for e in sse_events(raw)[:-1]]
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
    assert sse_events(raw)[-1] == "[DONE]"


def test_curl_d_without_content_type_is_read_as_json(server):
    r = subprocess.run(["curl", "-sS", "--max-time", "120", "-d",
                        json.dumps({"messages": HELLO, "max_tokens": 2}),
                        f"http://127.0.0.1:{server.port}/v1/chat/completions"],
                       capture_output=True, timeout=130, check=True)
    assert json.loads(r.stdout)["object"] == "chat.completion"


def test_legacy_completions(client):
    r = client.completions.create(model="m", prompt="The sea is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 6
    chunks = list(client.completions.create(model="m", prompt="The sea is", max_tokens=6, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_models_health_metrics(client, server, model_name):
    models = client.models.list()
    assert [m.id for m in models.data] == [model_name] == ["orig"]
    assert models.data[0].owned_by == "phi4mm"
    assert client.models.retrieve(model_name).id == model_name
    status, _, raw = server.request("GET", "/health")
    assert status == 200 and json.loads(raw) == {"status": "ok"}
    client.chat.completions.create(model="m", messages=HELLO, max_tokens=2, temperature=0)
    m = server.metrics()
    assert m['phi4mm_requests_total{endpoint="/v1/models",status="200"}'] >= 1
    assert m["process_resident_memory_bytes"] > 0 and m["phi4mm_kv_budget_bytes"] > 0
    # The engine's rows: split by LoRA mode they add up to prompt + decode rows; the rows-per-step
    # histogram counts every step once and sums to the same rows.
    by_mode = [m[f'phi4mm_batch_rows_total{{lora_mode="{k}"}}'] for k in ("none", "vision", "speech")]
    rows = m["phi4mm_prefill_rows_total"] + m["phi4mm_decode_rows_total"]
    assert by_mode[0] > 0 and sum(by_mode) == rows
    assert m["phi4mm_step_rows_count"] == m["phi4mm_engine_steps_total"] == m['phi4mm_step_rows_bucket{le="+Inf"}']
    assert m["phi4mm_step_rows_sum"] == rows
    assert m['phi4mm_step_rows_bucket{le="1"}'] <= m['phi4mm_step_rows_bucket{le="512"}'] <= m["phi4mm_step_rows_count"]


def server_model_name(server):
    return server.post_json("/v1/chat/completions", {"model": "m", "messages": HELLO, "max_tokens": 1})[2]["model"]


def test_metrics_parse_as_prometheus_and_openmetrics(client, server):
    """/metrics as Prometheus's text parser and, when asked for, OpenMetrics's parser read it: every
    family once, with its type, and the values the simple parser of these tests reads."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
    from prometheus_client.parser import text_string_to_metric_families as text_families
    client.chat.completions.create(model="m", messages=HELLO, max_tokens=2, temperature=0)
    status, headers, raw = server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    families = list(text_families(raw.decode()))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    types = {f.name: f.type for f in families}
    assert types["phi4mm_requests"] == "counter" and types["phi4mm_step_rows"] == "histogram"
    assert types["phi4mm_kv_cache_bytes"] == "gauge" and types["phi4mm_media_budget_bytes"] == "gauge"
    # vLLM's names for what routers and gateways read (docs/deploy.md), with vLLM's types and labels.
    for name, kind in [("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:gpu_cache_usage_perc", "gauge"),
                       ("vllm:prefix_cache_queries", "counter"), ("vllm:prefix_cache_hits", "counter"),
                       ("vllm:lora_requests_info", "gauge"), ("vllm:time_to_first_token_seconds", "histogram"),
                       ("vllm:inter_token_latency_seconds", "histogram"),
                       ("vllm:e2e_request_latency_seconds", "histogram"), ("vllm:request_success", "counter")]:
        assert types[name] == kind, (name, types.get(name))
    waiting = {f.name: f for f in families}["vllm:num_requests_waiting"].samples[0]
    assert waiting.labels == {"model_name": server_model_name(server), "engine": "0"}
    lora = {f.name: f for f in families}["vllm:lora_requests_info"].samples[0]
    assert set(lora.labels) == {"running_lora_adapters", "waiting_lora_adapters", "max_lora"}
    status, headers, raw = server.request("GET", "/metrics",
                                          headers={"Accept": "application/openmetrics-text;version=1.0.0,"
                                                             "text/plain;version=0.0.4;q=0.5"})
    assert status == 200 and headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    om = list(om_families(raw.decode()))
    assert sorted(f.name for f in om) == sorted(names)
    counter = {f.name: f for f in om}["phi4mm_generation_tokens"]
    assert counter.type == "counter" and counter.samples[0].name == "phi4mm_generation_tokens_total"
    assert counter.samples[0].value == server.metrics()["phi4mm_generation_tokens_total"]
