"""Python threads streaming through one phi4mm.Model against `phi4mm bench --concurrency`, on the
same checkpoint, side by side in one run.

For each stream count N: N Python threads each stream `generate` over random prompt ids (the EOS
ids biased away, as the bench's streams ignore EOS), every token timestamped as Python receives
it; the aggregate tok/s is taken over the window where all N decode (the last first token to the
first last token), as `phi4mm bench --concurrency` measures the engine from its own callbacks.
The binding's cost per token is the CPU time the consuming Python threads spend (time.thread_time:
waiting costs none) divided by the tokens, against the wall time of a decode step. Rounds
alternate the two sides; each figure keeps its best round.

    python tools/python/bench_threads.py --model DIR --threads 2 --concurrency 1,4 --rounds 2
"""

import argparse
import json
import random
import subprocess
import threading
import time

import phi4mm


def stream_window(model, n, prompt, decode, eos_bias, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(1000, 100000) for _ in range(prompt)] for _ in range(n)]
    stamps = [[] for _ in range(n)]
    cpu = [0.0] * n
    go = threading.Barrier(n)

    def worker(i):
        go.wait()
        c0 = time.thread_time()
        for _ in model.generate(prompts[i], max_tokens=decode, logit_bias=eos_bias, stream=True):
            stamps[i].append(time.perf_counter())
        cpu[i] = time.thread_time() - c0

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(s) == decode for s in stamps), [len(s) for s in stamps]
    begin = max(s[0] for s in stamps)
    end = min(s[-1] for s in stamps)
    in_window = sum(1 for s in stamps for t in s if begin < t <= end)
    itl = [b - a for s in stamps for a, b in zip(s, s[1:]) if a >= begin and b <= end]  # as the bench: in the window
    return {"aggregate_tok_per_s": in_window / (end - begin) if end > begin else 0.0,
            "itl_mean_ms": 1e3 * sum(itl) / max(1, len(itl)),
            "python_cpu_ms_per_token": 1e3 * sum(cpu) / (n * decode)}


def engine_bench(args, ns):
    cmd = [phi4mm.cli_path(), "bench", "-m", args.model, "-t", str(args.threads), "--concurrency", ",".join(map(str, ns)),
           "--prompt-tokens", str(args.prompt_tokens), "--decode-tokens", str(args.decode_tokens), "--lora", "none",
           "--vision-crops", "0", "--json"]
    if args.quant:
        cmd += ["--quant", args.quant]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    runs = json.loads(out[out.index("{"):])["runs"]
    return {r["streams"]: r for r in runs if r["lora"] == "none"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--quant", default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    ns = [int(x) for x in args.concurrency.split(",")]

    best_py, best_cli = {}, {}
    for rnd in range(args.rounds):
        model = phi4mm.Model(args.model, quant=args.quant, threads=args.threads, max_running=max(ns))
        eos = model.tokenize("<|endoftext|><|end|>")
        bias = {str(i): -100 for i in eos}
        for n in ns:
            r = stream_window(model, n, args.prompt_tokens, args.decode_tokens, bias, seed=rnd * 100 + n)
            if r["aggregate_tok_per_s"] > best_py.get(n, {}).get("aggregate_tok_per_s", 0):
                best_py[n] = r
        del model
        for n, r in engine_bench(args, ns).items():
            if r["aggregate_tok_per_s"] > best_cli.get(n, {}).get("aggregate_tok_per_s", 0):
                best_cli[n] = r
    print(f"{'N':>3} {'python tok/s':>13} {'bench tok/s':>12} {'ratio':>7} {'py itl ms':>10} {'bench itl ms':>13}"
          f" {'py cpu ms/token':>16} {'share of itl':>13}")
    for n in ns:
        p, c = best_py[n], best_cli[n]
        share = p["python_cpu_ms_per_token"] * n / p["itl_mean_ms"]
        print(f"{n:>3} {p['aggregate_tok_per_s']:>13.2f} {c['aggregate_tok_per_s']:>12.2f}"
              f" {p['aggregate_tok_per_s'] / c['aggregate_tok_per_s']:>7.3f} {p['itl_mean_ms']:>10.1f}"
              f" {c['itl_mean_ms']:>13.1f} {p['python_cpu_ms_per_token']:>16.3f} {100 * share:>12.2f}%")


if __name__ == "__main__":
    main()
