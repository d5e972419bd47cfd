#!/usr/bin/env python3
"""Serving benchmark of `phi4mm serve` through HTTP (not run in CI; the figures of issue 11's closing
note and docs/server.md): the same measurements as `phi4mm bench --concurrency`, taken by a client.

It starts `phi4mm serve -m MODEL -t THREADS` on 127.0.0.1 (an ephemeral port), then for each N of
--concurrency runs N streamed chat completions at once (a distinct text prompt of about
--prompt-tokens tokens each, max_tokens --decode-tokens, greedy, `logprobs: true` so that every
chunk says how many tokens it carries) and reports:
  * aggregate tok/s: the tokens that arrived while every stream was decoding (from the last
    stream's first token to the first stream's last token), over that window's length; the best
    of --rounds runs (2, as `phi4mm bench --concurrency` keeps the best of its --rounds);
  * inter-token latency p50 / p95 / max over every stream's consecutive tokens (a chunk carrying k
    tokens after a gap g counts as k gaps of g / k), and p50 / p95 within the window where all
    decode (the rest includes the gaps while later streams' prompts prefill, one chunk per step);
  * time to first token per stream (its prefill, queued behind the others');
  * the CPU this client itself used over the run, in cores.
Then, with 4 text streams decoding, it sends one image request (a synthetic --image-size² PNG as
a data URI, detail "low" so that it is one 448² crop, max_tokens 1) and reports its time to first
token and the longest gap the text streams saw meanwhile. Only the Python standard library.

    python3 tools/server/http_bench.py --phi4mm build/phi4mm -m Q4_FOLDER [--json OUT.json]
"""
import argparse
import base64
import http.client
import json
import os
import struct
import sys
import threading
import time
import zlib

# The tests' server runner: starts `phi4mm serve` on 127.0.0.1:<ephemeral>, waits for /health.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
import phi4mm_server  # noqa: E402

FILLER = ("The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly; "
          "pack my box with five dozen liquor jugs and sphinx of black quartz, judge my vow. ")


def png(size):
    """A size x size RGB gradient as PNG bytes."""
    rows = b"".join(b"\x00" + bytes(c for x in range(size) for c in (x * 255 // size, y * 255 // size,
                                                                        (x + y) * 127 // size))
                    for y in range(size))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))


class Stream(threading.Thread):
    """One streamed chat completion; `events` holds (arrival time, tokens in the chunk)."""

    def __init__(self, port, content, max_tokens, start_gate=None):
        super().__init__(daemon=True)
        self.port, self.content, self.max_tokens, self.gate = port, content, max_tokens, start_gate
        self.events, self.error, self.sent_at = [], None, None
        self.stop_flag = threading.Event()

    def run(self):
        body = {"model": "phi4mm", "messages": [{"role": "user", "content": self.content}], "stream": True,
                "max_tokens": self.max_tokens, "temperature": 0, "logprobs": True}
        try:
            if self.gate is not None:
                self.gate.wait()
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
            self.sent_at = time.monotonic()
            c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                self.error = f"HTTP {r.status}: {r.read()[:300]!r}"
                return
            while not self.stop_flag.is_set():
                line = r.fp.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    break
                ev = json.loads(line[6:])
                if "error" in ev:
                    self.error = json.dumps(ev["error"])
                    break
                for ch in ev.get("choices", []):
                    lp = (ch.get("logprobs") or {}).get("content") or []
                    if lp:
                        self.events.append((time.monotonic(), len(lp)))
            c.close()
        except OSError as e:
            self.error = str(e)

    def tokens(self):
        return sum(k for _, k in self.events)


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def gaps(events, since=None, until=None):
    out = []
    for (t0, _), (t1, k) in zip(events, events[1:]):
        if (since is None or t1 >= since) and (until is None or t0 <= until):
            out += [(t1 - t0) / k] * k
    return out


def prompt_for(i, words):
    return f"Request {i}: " + " ".join((FILLER * (words // len(FILLER.split()) + 1)).split()[:words])


def fit_words(server, target):
    """The filler length whose chat prompt costs about `target` tokens (/input_tokens)."""
    words = target
    for _ in range(4):
        status, _, data = server.request("POST", "/v1/chat/completions/input_tokens", {
            "model": "phi4mm", "messages": [{"role": "user", "content": prompt_for(0, words)}]})
        if status != 200:
            sys.exit(f"/input_tokens answered {status}: {data[:300]!r}")
        have = json.loads(data)["input_tokens"]
        words = max(1, round(words * target / have))
    return words, have


def run_streams(server, n, words, decode, first_id=None):
    """n streams at once, each with its own prompt (no prefix-cache hits)."""
    gate = threading.Barrier(n)
    first = 1000 * n if first_id is None else first_id
    cpu0, wall0 = os.times(), time.monotonic()
    streams = [Stream(server.port, prompt_for(first + i, words), decode, gate) for i in range(n)]
    for s in streams:
        s.start()
    for s in streams:
        s.join()
    cpu1, wall1 = os.times(), time.monotonic()
    for s in streams:
        if s.error:
            sys.exit(f"a stream failed: {s.error}")
        if not s.events:
            sys.exit("a stream produced no tokens")
    start = max(s.events[0][0] for s in streams)
    end = min(s.events[-1][0] for s in streams)
    inside = sum(k for s in streams for t, k in s.events if start < t <= end)
    all_gaps = [g for s in streams for g in gaps(s.events)]
    steady = [g for s in streams for g in gaps([e for e in s.events if start <= e[0] <= end])]
    return {"streams": n,
            "aggregate_tok_s": inside / (end - start) if end > start else float("nan"),
            "window_s": end - start,
            "itl_p50_ms": 1e3 * percentile(all_gaps, 50), "itl_p95_ms": 1e3 * percentile(all_gaps, 95),
            "itl_max_ms": 1e3 * max(all_gaps, default=float("nan")),
            "steady_itl_p50_ms": 1e3 * percentile(steady, 50), "steady_itl_p95_ms": 1e3 * percentile(steady, 95),
            "ttft_s": [round(s.events[0][0] - s.sent_at, 3) for s in streams],
            "tokens": [s.tokens() for s in streams],
            # This client's own CPU use over the run, in cores (it shares the machine with the server).
            "client_cores": (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0)}


def image_under_load(server, words, size, text_streams):
    texts = [Stream(server.port, prompt_for(i + 9000, words), 300) for i in range(text_streams)]
    for s in texts:
        s.start()
    deadline = time.monotonic() + 900
    while any(s.tokens() < 3 for s in texts):
        if time.monotonic() > deadline or any(s.error for s in texts):
            sys.exit(f"text streams did not start: {[s.error for s in texts]}")
        time.sleep(0.05)
    uri = "data:image/png;base64," + base64.b64encode(png(size)).decode()
    img = Stream(server.port, [{"type": "image_url", "image_url": {"url": uri, "detail": "low"}},
                               {"type": "text", "text": "Describe the picture."}], 1)
    img.start()
    img.join()
    for s in texts:
        s.stop_flag.set()
    if img.error or not img.events:
        sys.exit(f"the image request failed: {img.error}")
    t_sent, t_first = img.sent_at, img.events[0][0]
    stall = max((g for s in texts for g in gaps(s.events, t_sent, t_first)), default=float("nan"))
    for s in texts:
        s.join(timeout=120)
    return {"text_streams": text_streams, "image": f"{size}x{size}", "image_ttft_s": t_first - t_sent,
            "text_stall_max_ms": 1e3 * stall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phi4mm", default="build/phi4mm")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2, help="runs per concurrency, the best kept (as `phi4mm bench`)")
    ap.add_argument("--image-size", type=int, default=448)
    ap.add_argument("--image-streams", type=int, default=4, help="text streams decoding during the image request")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("serve_args", nargs="*", help="more `phi4mm serve` flags (after --)")
    a = ap.parse_args()
    os.environ["PHI4MM_BIN"] = a.phi4mm
    server = phi4mm_server.Server("-t", str(a.threads), *a.serve_args, model=a.model, ready_timeout=600)
    try:
        words, tokens = fit_words(server, a.prompt_tokens)
        print(f"prompt: {tokens} tokens; decode {a.decode_tokens} tokens per stream; {a.threads} threads")
        results = {"prompt_tokens": tokens, "decode_tokens": a.decode_tokens, "runs": []}
        run_streams(server, 1, words, 4, first_id=-1)  # warm-up: page in the weights
        base = None
        for n in [int(x) for x in a.concurrency.split(",")]:
            # Best of --rounds, as `phi4mm bench --concurrency` keeps its best round; each round has
            # prompts of its own, so that none is served from the prefix cache.
            rounds = [run_streams(server, n, words, a.decode_tokens, first_id=1000 * n + 100 * k)
                      for k in range(a.rounds)]
            r = max(rounds, key=lambda x: x["aggregate_tok_s"])
            r["rounds_tok_s"] = [x["aggregate_tok_s"] for x in rounds]
            base = base or r["aggregate_tok_s"]
            r["x_one_stream"] = r["aggregate_tok_s"] / base
            results["runs"].append(r)
            print(f"{n} streams: aggregate {r['aggregate_tok_s']:.2f} tok/s ({r['x_one_stream']:.2f}x one stream; "
                  f"rounds {' '.join(f'{x:.2f}' for x in r['rounds_tok_s'])}), "
                  f"inter-token p50 {r['itl_p50_ms']:.0f} ms p95 {r['itl_p95_ms']:.0f} ms max {r['itl_max_ms']:.0f} ms "
                  f"(while all decode: p50 {r['steady_itl_p50_ms']:.0f} p95 {r['steady_itl_p95_ms']:.0f}), "
                  f"time to first token {min(r['ttft_s']):.2f}-{max(r['ttft_s']):.2f} s, "
                  f"client CPU {r['client_cores']:.3f} cores", flush=True)
        if a.image_streams > 0:
            r = image_under_load(server, words, a.image_size, a.image_streams)
            results["image"] = r
            print(f"image {r['image']} (detail low) sent while {r['text_streams']} text streams decode: time to first "
                  f"token {r['image_ttft_s']:.2f} s, longest text-stream gap meanwhile {r['text_stall_max_ms']:.0f} ms")
    finally:
        server.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
