#!/usr/bin/env python3
"""Replicas of `phi4mm serve` behind vLLM's router (vllm-router), on loopback: a load driver.

For each routing policy asked for (cache_aware, round_robin, consistent_hash, ...), it starts N
replicas of `phi4mm serve` on free ports, then `vllm-router` in front of them, and runs C clients
at once, each a T-turn chat about its own image (a random PNG, different for every client) that
resends the whole history, the image included, every turn, as OpenAI clients do, and sends an
`X-Session-ID` header (what consistent_hash pins a conversation by). It measures, per policy:

- the image reuse rate of turns 2..T: the share of follow-up turns whose image was not run through
  the vision encoder again (it was served by the replica's prefix cache or its media cache). Every
  image is new on turn 1, so the follow-up misses are the encoder runs counted by the replicas'
  `phi4mm_images_encoded_total` beyond the C first turns;
- the time to first token per turn (client side, streamed; median and p90);
- errors (any status but 200, a broken stream), and how the requests spread over the replicas.

With --kill-after K, the last policy's run SIGKILLs one replica once K requests have completed:
the requests it had in flight fail, the router's health checks take it out, and the rest of the
run must complete on the others; the report says how many failed and when the last one did.

Bounded: every request has a timeout (--request-timeout), the whole run a deadline (--deadline);
processes are stopped (SIGTERM, then SIGKILL) whatever happens. Nothing but 127.0.0.1 is used.

Usage (docs/deploy.md):
  python tools/replicas/replica_driver.py --model tests/fixtures/trained/orig \\
      --router build/router-venv/bin/vllm-router --policies cache_aware,round_robin,consistent_hash
"""
import argparse
import base64
import json
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOPICS = ["harbour", "forest", "kitchen", "mountain", "library", "market", "garden", "station", "beach",
          "workshop", "museum", "bridge", "desert", "village", "stadium", "river"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_png(width, height, seed):
    """A PNG of random RGB pixels (each client's own image)."""
    rng = random.Random(seed)
    raw = b"".join(b"\x00" + rng.randbytes(width * 3) for _ in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def http(method, url, body=None, headers=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def metrics(port):
    """phi4mm's /metrics as {"name{labels}": value}; None when the replica does not answer."""
    try:
        status, raw = http("GET", f"http://127.0.0.1:{port}/metrics", timeout=5)
    except OSError:
        return None
    out = {}
    for line in raw.decode().splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def answers(url):
    """True when GET url answers 200."""
    try:
        return http("GET", url, timeout=2)[0] == 200
    except OSError:
        return False


def wait_until_ready(proc, ready, what, log, deadline):
    """Polls ready() until it holds; raises when `proc` exits first or `deadline` passes."""
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; see {log}")
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready in time")


def stop(proc, grace=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Replica:
    def __init__(self, binary, model, threads, extra, logdir, index):
        self.log = open(os.path.join(logdir, f"replica{index}.log"), "w")
        self.out = os.path.join(logdir, f"replica{index}.out")
        cmd = [binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "--no-webui", *extra]
        if threads:
            cmd += ["--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, stdout=open(self.out, "w"), stderr=self.log, stdin=subprocess.DEVNULL)
        self.port = None
        self.killed = False

    def wait_ready(self, deadline):
        def healthy():
            if self.port is None:
                with open(self.out) as f:
                    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
                if m:
                    self.port = int(m.group(1))
            return self.port is not None and answers(f"http://127.0.0.1:{self.port}/health")
        wait_until_ready(self.proc, healthy, "a replica", self.log.name, deadline)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


# A request sent to a replica that has just died fails to connect; the router retries it, choosing
# a worker again each time, but only the health check (every second) takes the dead one out of its
# policy. vllm-router's default retries (5 attempts, 50 ms backoff growing 1.5x) give up after about
# 0.4 s, so a request sent in the rest of that second failed. These span 4.5 s (8 attempts; 100,
# 200, 400, 800 ms, then 1 s apart): longer than a health interval. A live worker answers the first.
RETRIES = ["--retry-max-retries", "8", "--retry-initial-backoff-ms", "100", "--retry-backoff-multiplier", "2",
           "--retry-max-backoff-ms", "1000"]


class Router:
    def __init__(self, binary, policy, workers, logdir, extra=()):
        self.port, self.metrics_port = free_port(), free_port()
        self.log = open(os.path.join(logdir, f"router-{policy}.log"), "w")
        cmd = [binary, "--host", "127.0.0.1", "--port", str(self.port), "--worker-urls", *workers,
               "--policy", policy, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
               "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
               "--health-check-timeout-secs", "2", *RETRIES, "--log-level", "warning", *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self, deadline):
        wait_until_ready(self.proc, lambda: answers(f"http://127.0.0.1:{self.port}/v1/models"), "vllm-router",
                         self.log.name, deadline)

    def counters(self):
        """From the router's own metrics: how it got token ids for its policy (result="render": from
        the workers' render endpoint; "multimodal_input": it did not ask, the request has media), its
        prefix-routing outcomes, and its retries (a failed attempt sent again; exhausted: given up)."""
        try:
            _, raw = http("GET", f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        except OSError:
            return {}
        out = {}
        for line in raw.decode().splitlines():
            m = re.match(r'^vllm_router_(kv_routing_inputs|prefix_routing_decisions)_total\{.*'
                         r'(?:result|outcome)="([^"]+)".*\}\s+(\S+)$', line)
            if m:
                key = f"{m.group(1)}:{m.group(2)}"
                out[key] = out.get(key, 0) + float(m.group(3))
            m = re.match(r'^vllm_router_(retries_total|retries_exhausted_total)(?:\{.*\})?\s+(\S+)$', line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
        return out


def stream_chat(url, body, session, timeout):
    """(seconds to the first content, answer text); raises on any failure."""
    data = json.dumps({**body, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=data, method="POST",
                                 headers={"Content-Type": "application/json", "X-Session-ID": session})
    start = time.monotonic()
    first = None
    text = ""
    done = False
    with urllib.request.urlopen(req, timeout=timeout) as r:
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                raise RuntimeError(chunk["error"].get("message", "error event"))
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {}).get("content") or ""
                if (delta or choice.get("finish_reason")) and first is None:
                    first = time.monotonic() - start
                text += delta
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    return first if first is not None else time.monotonic() - start, text


def run_policy(args, policy, images, kill, logdir):
    deadline = time.monotonic() + args.deadline
    replicas = [Replica(args.phi4mm, args.model, args.threads, args.serve_arg, logdir, i) for i in range(args.replicas)]
    router = None
    try:
        for r in replicas:
            r.wait_ready(deadline)
        router = Router(args.router, policy, [r.url for r in replicas], logdir, args.router_arg)
        router.wait_ready(deadline)
        # One text-only chat first: for it the router can ask the workers for token ids (render).
        stream_chat(f"http://127.0.0.1:{router.port}", {"model": "phi4mm", "max_tokens": 2, "temperature": 0,
                    "messages": [{"role": "user", "content": "Which policy routed this?"}]}, "probe", args.request_timeout)
        before = [metrics(r.port) for r in replicas]
        results = []  # dicts: client, turn, ttft, ok, error, end
        lock = threading.Lock()
        completed = [0]
        kill_info = {}

        def client(c):
            image = "data:image/png;base64," + base64.b64encode(images[c]).decode()
            topic = TOPICS[c % len(TOPICS)]
            history = []
            for turn in range(args.turns):
                if time.monotonic() > deadline:
                    break
                text = (f"Chat {c}: this photo was taken near a {topic}. What do you see in it?" if turn == 0
                        else f"Chat {c}, question {turn + 1}: tell me more about the {topic} in the picture.")
                if turn == 0:
                    content = [{"type": "image_url", "image_url": {"url": image, "detail": args.detail}},
                               {"type": "text", "text": text}]
                    history.append({"role": "user", "content": content})
                else:
                    history.append({"role": "user", "content": text})
                body = {"model": "phi4mm", "messages": history, "max_tokens": args.max_tokens, "temperature": 0}
                rec = {"client": c, "turn": turn + 1, "start": time.monotonic()}
                try:
                    ttft, answer = stream_chat(f"http://127.0.0.1:{router.port}", body, f"chat-{c}",
                                               args.request_timeout)
                    rec.update(ok=True, ttft=ttft)
                    history.append({"role": "assistant", "content": answer})
                except Exception as e:  # noqa: BLE001 (any failure is counted and reported)
                    rec.update(ok=False, error=str(e)[:200])
                    history.pop()  # the next turn asks its own question; a chat whose image failed ends
                rec["end"] = time.monotonic()
                with lock:
                    results.append(rec)
                    completed[0] += 1
                if not rec["ok"] and turn == 0:
                    break

        def killer():
            while completed[0] < kill and time.monotonic() < deadline:
                time.sleep(0.02)
            victim = replicas[-1]
            m = metrics(victim.port) or {}
            kill_info["in_flight"] = m.get("phi4mm_requests_running", 0) + m.get("phi4mm_requests_waiting", 0)
            kill_info["encoded_before_kill"] = m.get("phi4mm_images_encoded_total", 0)
            victim.proc.send_signal(signal.SIGKILL)
            victim.killed = True
            kill_info["at"] = time.monotonic()

        threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
        if kill:
            threads.append(threading.Thread(target=killer))
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - started
        after = [None if r.killed else metrics(r.port) for r in replicas]
        return summarize(args, policy, results, before, after, replicas, kill_info, router.counters(), wall)
    finally:
        if router is not None:
            stop(router.proc)
        for r in replicas:
            stop(r.proc)


def summarize(args, policy, results, before, after, replicas, kill_info, routing, wall):
    ok = [r for r in results if r["ok"]]
    errors = [r for r in results if not r["ok"]]
    out = {"policy": policy, "requests": len(results), "errors": len(errors), "wall_seconds": round(wall, 1),
           "router_counters": routing}
    per_replica = []
    encoded = 0
    for i, (b, a) in enumerate(zip(before, after)):
        if a is None:
            encoded += kill_info.get("encoded_before_kill", 0) - b.get("phi4mm_images_encoded_total", 0)
            per_replica.append({"replica": i, "killed": True})
            continue
        d = {k: a.get(k, 0) - b.get(k, 0) for k in ("phi4mm_images_encoded_total", "phi4mm_media_cache_hits_total",
                                                    "phi4mm_prefix_cache_hit_tokens_total")}
        chats = sum(v - b.get(k, 0) for k, v in a.items() if k.startswith('phi4mm_requests_total{endpoint="/v1/chat/completions"'))
        encoded += d["phi4mm_images_encoded_total"]
        per_replica.append({"replica": i, "chat_requests": int(chats), "images_encoded": int(d["phi4mm_images_encoded_total"]),
                            "media_cache_hits": int(d["phi4mm_media_cache_hits_total"]),
                            "prefix_cache_hit_tokens": int(d["phi4mm_prefix_cache_hit_tokens_total"])})
    out["replicas"] = per_replica
    out["requests_detail"] = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                               if k not in ("start", "end")} for r in results]
    first_turns = sum(1 for r in ok if r["turn"] == 1)
    follow_ups = sum(1 for r in ok if r["turn"] > 1)
    if not kill_info and follow_ups:
        misses = max(0, encoded - first_turns)
        out["image_reuse_rate_turns_2_plus"] = round(1 - misses / follow_ups, 4)
        out["follow_up_reencodes"] = int(misses)
    for t in range(1, args.turns + 1):
        ttfts = sorted(r["ttft"] for r in ok if r["turn"] == t)
        if ttfts:
            out[f"ttft_turn{t}"] = {"median": round(statistics.median(ttfts), 3),
                                    "p90": round(ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], 3), "n": len(ttfts)}
    fu = [r["ttft"] for r in ok if r["turn"] > 1]
    if fu:
        out["ttft_follow_up_median"] = round(statistics.median(fu), 3)
        out["ttft_follow_up_mean"] = round(statistics.fmean(fu), 3)
    if kill_info:
        at = kill_info["at"]
        late = [r for r in errors if r["end"] > at + 5]
        out["kill"] = {"in_flight_on_killed_replica": int(kill_info["in_flight"]),
                       "in_flight_anywhere": sum(1 for r in results if r["start"] < at < r["end"]),
                       "failed": len(errors), "failed_sent_after_kill": sum(1 for r in errors if r["start"] > at),
                       "failed_later_than_5s_after_kill": len(late),
                       "completed_after_kill": sum(1 for r in ok if r["end"] > at),
                       "last_failure_seconds_after_kill": round(max((r["end"] - at for r in errors), default=0), 2),
                       "errors": sorted({r["error"] for r in errors})[:5]}
    elif errors:
        out["error_samples"] = sorted({r["error"] for r in errors})[:5]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder each replica serves")
    ap.add_argument("--phi4mm", default=os.path.join(REPO, "build", "phi4mm"))
    ap.add_argument("--router", default=os.path.join(REPO, "build", "router-venv", "bin", "vllm-router"))
    ap.add_argument("--policies", default="cache_aware,round_robin")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="--threads of each replica (0: the server's default)")
    ap.add_argument("--serve-arg", action="append", default=[], help="another `phi4mm serve` argument (repeatable)")
    ap.add_argument("--router-arg", action="append", default=[], help="another vllm-router argument (repeatable)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--detail", default="low", choices=["low", "auto", "high"])
    ap.add_argument("--image-size", default="320x240")
    ap.add_argument("--kill-after", type=int, default=0, help="SIGKILL one replica after this many requests of the last policy")
    ap.add_argument("--request-timeout", type=float, default=600)
    ap.add_argument("--deadline", type=float, default=1800, help="seconds for each policy's run in all")
    ap.add_argument("--json", help="write the report here too")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the run meets what CI requires (check())")
    args = ap.parse_args()
    if args.clients < 1 or args.turns < 2 or args.replicas < 1:
        ap.error("need at least 1 client, 2 turns and 1 replica")
    for path, what in ((args.phi4mm, "phi4mm"), (args.router, "vllm-router")):
        if not os.access(path, os.X_OK):
            ap.error(f"no {what} at {path}")
    w, h = (int(v) for v in args.image_size.split("x"))
    images = [random_png(w, h, seed) for seed in range(args.clients)]
    policies = [p for p in args.policies.split(",") if p]
    logdir = tempfile.mkdtemp(prefix="phi4mm-replicas-")
    reports = []
    for i, policy in enumerate(policies):
        kill = args.kill_after if i == len(policies) - 1 else 0
        report = run_policy(args, policy, images, kill, logdir)
        reports.append(report)
        print(json.dumps({k: v for k, v in report.items() if k != "requests_detail"}), flush=True)
    print(f"logs: {logdir}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": reports}, f, indent=1)
    problems = check(reports) if args.check else []
    for p in problems:
        print(f"CHECK FAILED: {p}")
    return 1 if problems else 0


def check(reports):
    """What CI requires of a run (--check): no errors without a kill; consistent_hash reuses every
    image; cache_aware got token ids from render for the text-only probe; after a kill, only
    requests in flight at that moment fail (none sent after it, none ending later than 5 s after it).
    The killed replica's own count of running and waiting requests is reported beside it; it misses
    requests still in its HTTP layer."""
    problems = []
    for r in reports:
        if "kill" in r:
            k = r["kill"]
            if k["failed_sent_after_kill"] or k["failed_later_than_5s_after_kill"] or k["failed"] > k["in_flight_anywhere"]:
                problems.append(f"{r['policy']}: requests failed that were not in flight at the kill: {k}")
        elif r["errors"]:
            problems.append(f"{r['policy']}: {r['errors']} errors: {r.get('error_samples')}")
        if r["policy"] == "consistent_hash" and "kill" not in r and r.get("image_reuse_rate_turns_2_plus") != 1.0:
            problems.append(f"consistent_hash re-encoded images: {r.get('follow_up_reencodes')}")
        if r["policy"] == "cache_aware" and not r["router_counters"].get("kv_routing_inputs:render"):
            problems.append(f"cache_aware never used the render endpoint: {r['router_counters']}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
