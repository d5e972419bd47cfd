#!/usr/bin/env python3
"""Builds the Phi-4-multimodal-instruct tokenizer.json and tokenizer_config.json from o200k_base.

The Phi-4-mm tokenizer is tiktoken's o200k_base (ids 0..199997 = the mergeable ranks) plus
placeholder vocab entries (199998, 200000..200017) and the Phi added tokens (see
shared/docs/tokenizer.md sections 2, 3 and 7). This tool writes both files deterministically from the
rank file, using the standard library only. With --check it also verifies the result: it loads the
files with the `tokenizers` package and with `transformers.AutoTokenizer`, compares them to a
`tiktoken.Encoding` built from the same rank file on a corpus, and checks the golden vectors of
tokenizer.md section 4 (the --check step needs tools/tokenizer/requirements.txt installed).

Usage:
  python tools/tokenizer/build_tokenizer_json.py --out DIR [--ranks FILE] [--check]
"""

import argparse
import base64
import hashlib
import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_RANKS = os.path.join(REPO_ROOT, "..", "shared", "data", "tokenizer", "o200k_base.tiktoken")
RANKS_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
NUM_RANKS = 199998

# tiktoken o200k_base pat_str (tokenizer.md section 2.1).
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

# (id, content, special, rstrip) for every added token (tokenizer.md section 3).
ADDED_TOKENS = [
    (199999, "<|endoftext|>", True, False),
    (200010, "<|endoftext10|>", True, False),
    (200011, "<|endoftext11|>", True, False),
    (200018, "<|endofprompt|>", True, False),
    (200019, "<|assistant|>", True, True),
    (200020, "<|end|>", True, True),
    (200021, "<|user|>", True, True),
    (200022, "<|system|>", True, True),
    (200023, "<|tool|>", False, True),
    (200024, "<|/tool|>", False, True),
    (200025, "<|tool_call|>", False, True),
    (200026, "<|/tool_call|>", False, True),
    (200027, "<|tool_response|>", False, True),
    (200028, "<|tag|>", True, True),
]

# The original Phi-4-mini / Phi-4-mm chat template (tokenizer.md section 7).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and "
    "message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' "
    "+ message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + "
    "message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

# Golden vectors of tokenizer.md section 4 (encoded with added tokens recognised).
GOLDENS = [
    ("<|system|>Your name is Phi, an AI math expert developed by Microsoft. You are a medieval knight "
     "and must provide explanations to modern people.<|end|><|user|>How should I explain the "
     "Internet?<|end|><|assistant|>",
     [200022, 9719, 1308, 382, 102143, 11, 448, 20837, 13324, 8333, 9742, 656, 8321, 13, 1608, 553, 261,
      55145, 105457, 326, 2804, 3587, 69457, 316, 6809, 1665, 13, 200020, 200021, 5299, 1757, 357, 16644,
      290, 7380, 30, 200020, 200019]),
    ("hello world", [24912, 2375]),
    ("Hello, world!", [13225, 11, 2375, 0]),
    ("<|system|>You are a helpful assistant.<|end|><|user|>Transcribe the audio clip into text.<|end|>"
     "<|assistant|>",
     [200022, 3575, 553, 261, 10297, 29186, 13, 200020, 200021, 3248, 4981, 290, 11065, 19925, 1511,
      2201, 13, 200020, 200019]),
    ("<|user|>\n<|endoftext10|>\n<|endoftext11|>\nDescribe.<|end|>\n<|assistant|>\n",
     [200021, 200010, 198, 200011, 198, 61443, 13, 200020, 200019]),
    ("  leading spaces and\ttabs\n\nnew lines 12345 1,234.56 don't I'LL",
     [220, 8117, 18608, 326, 6264, 6071, 279, 1389, 8698, 220, 7633, 2548, 220, 16, 11, 20771, 13, 5007,
      4128, 3413, 7454]),
    ("naïve café 你好世界 🤖", [1503, 9954, 737, 30469, 220, 177519, 28428, 93643, 244]),
]


def byte_to_unicode():
    """The GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100 upward."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def load_ranks(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SystemExit(f"cannot read the o200k_base rank file ({e}); pass --ranks FILE") from e
    digest = hashlib.sha256(data).hexdigest()
    if digest != RANKS_SHA256:
        raise SystemExit(f"{path}: sha256 {digest} is not the o200k_base hash {RANKS_SHA256}")
    ranks = {}
    for line in data.splitlines():
        if not line:
            continue
        token_b64, rank = line.split()
        ranks[base64.b64decode(token_b64)] = int(rank)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    if len(by_rank) != NUM_RANKS or any(r != i for i, (_, r) in enumerate(by_rank)):
        raise SystemExit(f"{path}: expected ranks 0..{NUM_RANKS - 1} without gaps")
    return ranks


def last_merge(token, ranks):
    """Runs tiktoken's rank BPE on the bytes of `token` and returns the pair merged last."""
    parts = [token[i:i + 1] for i in range(len(token))]
    last = None
    while len(parts) > 1:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        last = (parts[best], parts[best + 1])
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    if len(parts) != 1 or parts[0] != token:
        raise SystemExit(f"rank BPE of token {token!r} does not end in the token itself")
    return last


def build(ranks):
    b2u = byte_to_unicode()

    def enc(b):
        return "".join(b2u[x] for x in b)

    vocab = {}
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[enc(token)] = rank
    vocab["<|endoftext98|>"] = 199998
    vocab["<|endoftext|>"] = 199999
    for i in range(18):
        vocab[f"<|endoftext{i:02d}|>"] = 200000 + i
    vocab["<|endofprompt|>"] = 200018
    if len(set(vocab.values())) != len(vocab):
        raise SystemExit("duplicate vocab ids")

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        left, right = last_merge(token, ranks)
        if ranks[left] >= rank or ranks[right] >= rank:
            raise SystemExit(f"merge for {token!r} uses a part of higher rank")
        merges.append(f"{enc(left)} {enc(right)}")
    if len(merges) != NUM_RANKS - 256:
        raise SystemExit(f"expected {NUM_RANKS - 256} merges, got {len(merges)}")

    added = [{
        "id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": rstrip,
        "normalized": False, "special": special,
    } for tid, content, special, rstrip in ADDED_TOKENS]

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": O200K_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }

    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(tid): {
            "content": content, "lstrip": False, "normalized": False, "rstrip": rstrip,
            "single_word": False, "special": special,
        } for tid, content, special, rstrip in ADDED_TOKENS},
        "bos_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "extra_special_tokens": {},
        "model_max_length": 128000,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|endoftext|>",
    }
    return tokenizer, config


def write_json(path, obj, compact):
    if compact:
        # No whitespace: the vocab and merges make tokenizer.json large (~6.7 MB) even so.
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text + "\n")


def default_check_corpus():
    """A small built-in corpus, used by --check when no corpus.jsonl is given."""
    return [
        "hello world", "Hello, world!", "  two  spaces\t\ttabs\r\n\r\nCRLF", "don't I'LL We'Re you'VE",
        "12345678 1,234,567.89 3.14159", "naïve café 你好世界 🤖", "👩🏽‍💻 👨‍👩‍👧‍👦 🏳️‍🌈", "Привет, мир! Γειά σου",
        "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "안녕하세요 세계", "こんにちは世界",
        "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "https://example.com/path?q=1&r=2#frag", "<|endoftext05|> <|user <|image_1|> <|audio_2|>",
        "e\u0301 a\u0308 \u0915\u094d\u0937", "\n\n\n   \n \t \u00a0\u3000x", "HelloWorld XMLHttpRequest iPhone",
    ]


def check(out_dir, ranks_path, ranks, corpus_path):
    import tiktoken  # noqa: PLC0415 (dev-only dependency)
    import tokenizers  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    enc = tiktoken.Encoding(
        name="o200k_base_local", pat_str=O200K_PATTERN, mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018})
    hf = tokenizers.Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(out_dir)

    if corpus_path:
        with open(corpus_path, encoding="utf-8") as f:
            corpus = [json.loads(line)["text"] for line in f if line.strip()]
    else:
        corpus = default_check_corpus()
    added = [content for _, content, _, _ in ADDED_TOKENS]
    failures = 0
    for text in corpus:
        if any(a in text for a in added):
            continue
        want = enc.encode_ordinary(text)
        got_hf = hf.encode(text, add_special_tokens=False).ids
        got_auto = auto.encode(text, add_special_tokens=False)
        back = hf.decode(got_hf, skip_special_tokens=False)
        if got_hf != want or got_auto != want or back != text:
            failures += 1
            if failures <= 5:
                print(f"MISMATCH {text!r}\n  tiktoken {want}\n  tokenizers {got_hf}\n  auto {got_auto}\n"
                      f"  decode {back!r}", file=sys.stderr)
    print(f"corpus: {len(corpus) - failures}/{len(corpus)} strings agree (tiktoken, tokenizers, AutoTokenizer)")

    for text, want in GOLDENS:
        got_hf = hf.encode(text, add_special_tokens=False).ids
        got_auto = auto.encode(text, add_special_tokens=False)
        if got_hf != want or got_auto != want:
            failures += 1
            print(f"GOLDEN MISMATCH {text!r}\n  want {want}\n  tokenizers {got_hf}\n  auto {got_auto}",
                  file=sys.stderr)
    print(f"goldens: {len(GOLDENS)} checked")

    chat = auto.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                    add_generation_prompt=True, tokenize=True)
    want_chat = [200021, 4827, 382, 290, 9029, 328, 10128, 30, 200020, 200019]
    if list(chat) != want_chat:
        failures += 1
        print(f"CHAT MISMATCH {chat} != {want_chat}", file=sys.stderr)
    skipped = auto.decode([199999, 24912, 200023, 200020, 200010], skip_special_tokens=True)
    if skipped != "hello<|tool|>":
        failures += 1
        print(f"skip_special decode gave {skipped!r}", file=sys.stderr)
    if failures:
        raise SystemExit(f"--check failed: {failures} problems")
    print(f"check OK ({ranks_path})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for tokenizer.json and tokenizer_config.json")
    parser.add_argument("--ranks", default=DEFAULT_RANKS, help="o200k_base.tiktoken rank file")
    parser.add_argument("--check", action="store_true", help="verify with tokenizers/transformers/tiktoken")
    parser.add_argument("--corpus", default=None, help="corpus.jsonl ({\"text\": ...} per line) for --check")
    args = parser.parse_args()

    ranks = load_ranks(args.ranks)
    tokenizer, config = build(ranks)
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, "tokenizer.json"), tokenizer, compact=True)
    write_json(os.path.join(args.out, "tokenizer_config.json"), config, compact=False)
    print(f"wrote {args.out}/tokenizer.json and tokenizer_config.json")
    if args.check:
        check(args.out, args.ranks, ranks, args.corpus)


if __name__ == "__main__":
    main()
