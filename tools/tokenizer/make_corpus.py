#!/usr/bin/env python3
"""Generates the tokenizer test fixtures: corpus.jsonl and chat_cases.json.

decode_cases.jsonl holds id sequences (cut mid-character, with special, tool and padding ids) and what
the `tokenizers` package decodes them to, with and without skip_special_tokens.
added_token_cases.jsonl holds strings that mix added tokens (<|user|>, <|end|>, ...) with text and
whitespace, with the ids of the `tokenizers` package (which applies the rstrip flags).
corpus.jsonl holds thousands of strings (code, prose, many scripts, whitespace runs, digits, emoji,
contractions, URLs, special-token look-alikes, combining marks, random unicode), each with the ids
that tiktoken o200k_base (built from the local rank file, ordinary text, no special tokens) gives.
No corpus string contains an added-token string, so these ids are also what the Phi tokenizer gives.
chat_cases.json holds chat conversations with the ids of transformers' apply_chat_template(...,
add_generation_prompt=True, tokenize=True) on the tokenizer built by build_tokenizer_json.py.
Everything is seeded, so the output is the same on every run.

Usage:
  python tools/tokenizer/make_corpus.py [--out tests/fixtures/tokenizer] [--ranks FILE] [--count N]
"""

import argparse
import json
import os
import random

import build_tokenizer_json as btj

CODE = [
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const add = (a, b) => a + b;\nexport default { add };\n// TODO: handle NaN\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "public static void main(String[] args) { System.out.println(\"Hello\"); }",
    "<div class=\"card\"><a href=\"/x?y=1&amp;z=2\">link</a></div>\r\n",
    "{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\"}}",
    "if [[ -f \"$HOME/.bashrc\" ]]; then\n  source ~/.bashrc\nfi\n",
    "template <typename T>\nstd::vector<T> f(std::span<const T> s) { return {s.begin(), s.end()}; }",
    "x <<= 2; y >>= 3; z ||= w && !v; a->b->c; p::q::r",
    "\t\t\tindented_with_tabs = True\n    \n\n\n        mixed\t \tindent",
]
PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "I'm sure you'll agree that we've done what they'd asked; isn't it?",
    "DON'T SHOUT. I'LL Be There. We'Re Fine. You'VE Got Mail. She'S here. He'D know.",
    "Mr. O'Neill's dog-eared copy cost $12.50 (about €11,99) on 2024-03-15 at 10:45pm.",
    "HelloWorld, XMLHttpRequest, iPhone, eBay, McDonald, camelCaseIdentifier, SCREAMING_SNAKE.",
    "Wait... what?! No way!!! Really??? Yes—absolutely – of course.",
    "E = mc² and ∑ᵢ xᵢ² ≤ ∞; ½ + ¼ = ¾; 10⁻³ m = 1 mm.",
]
SCRIPTS = {
    "zh": "我们今天去公园散步，天气很好。机器学习是人工智能的一个分支。",
    "ja": "東京は日本の首都です。ひらがなとカタカナ、そして漢字を使います。",
    "ko": "안녕하세요, 저는 학생입니다. 한국어는 아름다운 언어입니다.",
    "ar": "مرحبا بكم في عالم البرمجة. اللغة العربية تكتب من اليمين إلى اليسار.",
    "he": "שלום עולם, זהו משפט בעברית עם ניקוד: שָׁלוֹם.",
    "hi": "नमस्ते, मेरा नाम राम है। हिन्दी देवनागरी लिपि में लिखी जाती है।",
    "th": "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
    "ru": "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "el": "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "vi": "Tiếng Việt có nhiều dấu: ả, ã, ạ, ắ, ằ, ẳ, ẵ, ặ.",
    "tr": "İstanbul'da ılık bir gün; ŞEHİR çok güzel.",
    "de": "Größenwahnsinnige Straßenbahnschaffner über Äpfel und Öl.",
    "ta": "வணக்கம் உலகம், தமிழ் ஒரு பழமையான மொழி.",
    "am": "ሰላም ለዓለም። ኢትዮጵያ",
    "ka": "გამარჯობა მსოფლიო",
    "hy": "Բարեւ աշխարհ",
}
EMOJI = ["🤖", "😀", "👍🏽", "👩🏽‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🇯🇵", "🧑🏿‍🚀", "✋🏻", "🫠", "🐈‍⬛", "1️⃣", "©️", "™"]
LOOKALIKES = [
    "<|endoftext05|>", "<|endoftext98|>", "<|endoftext17|>", "<|user", "user|>", "<|image_1|>", "<|image_12|>",
    "<|audio_1|>", "<|audio_3|>", "<|im_start|>", "<|", "|>", "<||>", "<|end", "end|>", "< |user| >", "<|USER|>",
    "<|endoftext|", "|endoftext|>", "<|endoftext1|>", "<|assistant", "<|tool_resp", "<|/tool", "[INST]", "</s>",
]
URLS = [
    "https://www.example.com/path/to/page.html?query=value&other=1#section",
    "http://localhost:8080/api/v1/users/42", "ftp://files.example.org/pub/README.txt",
    "mailto:someone@example.com", "https://ja.wikipedia.org/wiki/日本", "C:\\Users\\me\\Documents\\file.txt",
    "/usr/local/lib/python3.11/site-packages/", "git@github.com:owner/repo.git",
]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t\n",
              "\u00a0", "\u3000", "\u2009", "\u200b", "\f", "\v", "\n\n\n\n", "\u180e", "\u0085", "\u1680",
              "\u2028", "\u205f", " \u180e", "\u202f "]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "\u0915\u094d\u0937", "Z\u0351\u036b\u0343",
             "\u0301", "\u0627\u064e", "i\u0307", "\u1100\u1161\u11a8"]


def random_unicode(rng, n):
    out = []
    for _ in range(n):
        block = rng.random()
        if block < 0.3:
            cp = rng.randint(0x20, 0x7E)
        elif block < 0.5:
            cp = rng.randint(0xA0, 0x24F)
        elif block < 0.7:
            cp = rng.randint(0x370, 0x1FFF)
        elif block < 0.85:
            cp = rng.randint(0x2000, 0xD7FF)
        elif block < 0.95:
            cp = rng.randint(0xE000, 0xFFFD)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0x41
        out.append(chr(cp))
    return "".join(out)


def number(rng):
    kind = rng.randint(0, 6)
    if kind == 0:
        return str(rng.randint(0, 10 ** rng.randint(1, 20)))
    if kind == 1:
        return f"{rng.randint(0, 10 ** 9):,}"
    if kind == 2:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
    if kind == 3:
        return f"{rng.randint(0, 999)}.{rng.randint(0, 999)}.{rng.randint(0, 999)}"
    if kind == 4:
        return f"+1 ({rng.randint(100, 999)}) {rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if kind == 5:
        return "".join(rng.choice("٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３") for _ in range(rng.randint(1, 8)))
    return f"{rng.randint(1, 31):02d}/{rng.randint(1, 12):02d}/{rng.randint(1900, 2100)}"


def fragment(rng):
    kind = rng.randint(0, 11)
    if kind == 0:
        return rng.choice(CODE)
    if kind == 1:
        return rng.choice(PROSE)
    if kind == 2:
        text = rng.choice(list(SCRIPTS.values()))
        start = rng.randint(0, len(text) - 1)
        return text[start:start + rng.randint(1, 40)]
    if kind == 3:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4)))
    if kind == 4:
        return rng.choice(LOOKALIKES)
    if kind == 5:
        return rng.choice(URLS)
    if kind == 6:
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 4)))
    if kind == 7:
        return number(rng)
    if kind == 8:
        return rng.choice(COMBINING)
    if kind == 9:
        return random_unicode(rng, rng.randint(1, 12))
    if kind == 10:
        word = rng.choice(["dont", "Ill", "weve", "shes", "theyd", "youre", "its"])
        word = word[:-1] + "'" + word[-1:] if len(word) > 2 else word
        return "".join(c.upper() if rng.random() < 0.5 else c for c in word)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 .,;:!?-_'\"()[]{}")
                   for _ in range(rng.randint(1, 20)))


def make_corpus(count, seed):
    rng = random.Random(seed)
    fixed = CODE + PROSE + list(SCRIPTS.values()) + EMOJI + LOOKALIKES + URLS + WHITESPACE + COMBINING
    fixed += [t for t, _ in btj.GOLDENS if "<|" not in t]
    fixed += ["a\u180e b", "a \u180eb", "x\u0085y", " \u0085 z", "a\u1680 b", "\u200b \u200b", " " * 300 + "x",
              "=" * 500, "\n" * 200 + "end", "1" * 100, "A" * 200 + "a" * 200,
              # Letters added in Unicode 15/16 (PCRE2's tables and the Rust regex crate's may differ).
              "a\u1c89b", "A\u1c89", "x\U00010d50\U00010d70y", " \U00016100\U00016101", "\U0001e5d0\U0001e5d1 z",
              "x\u0c5c y", "q\U000118a0", "\U0001f8b0\U0001fa89", "k\U00011f00\U00011f41 m"]
    texts = list(dict.fromkeys(fixed))
    seen = set(texts)
    while len(texts) < count:
        text = "".join(fragment(rng) + (rng.choice(WHITESPACE) if rng.random() < 0.4 else "")
                       for _ in range(rng.randint(1, 5)))
        if text in seen:
            continue
        seen.add(text)
        texts.append(text)
    added = [content for _, content, _, _ in btj.ADDED_TOKENS]
    return [t for t in texts if not any(a in t for a in added)]


CHAT_CASES = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "Transcribe the audio clip into text."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "\nLeading newline and trailing spaces   "},
     {"role": "assistant", "content": "\n\nok\n"}, {"role": "user", "content": "  again\t"}],
    [{"role": "user", "content": "<|image_1|>\nDescribe the image."}],
    [{"role": "user", "content": "<|image_1|>\n<|image_2|>\n<|audio_1|>\nCompare them and summarise the audio."}],
    [{"role": "user", "content": "<|endoftext10|>\n<|endoftext11|>\nWhat do you see and hear?"}],
    [{"role": "user", "content": "<|audio_1|>Transcribe the audio to text, and then translate it to French."}],
    [{"role": "system", "content": "Sys with <|endoftext05|> look-alike and emoji 🤖👩🏽‍💻"},
     {"role": "user", "content": "日本語で答えてください。مرحبا"}],
    [{"role": "user", "content": "Code:\n```python\ndef f(x):\n    return x\n```\n"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "naïve café 12345 1,234.56 don't I'LL"},
     {"role": "assistant", "content": "<|tool_call|>{\"name\": \"f\"}<|/tool_call|>"},
     {"role": "tool", "content": "{\"result\": 3}"}],
]


def make_added_token_cases(count, seed):
    """Strings that mix added tokens with text and whitespace (to pin down lstrip/rstrip handling)."""
    rng = random.Random(seed)
    added = [content for _, content, _, _ in btj.ADDED_TOKENS]
    spaces = WHITESPACE + ["", "", "", " \u3000\u00a0 ", "\u2028", "\u180e"]
    out = []
    while len(out) < count:
        parts = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.random()
            if kind < 0.45:
                parts.append(rng.choice(added))
            elif kind < 0.75:
                parts.append(rng.choice(spaces))
            else:
                parts.append(fragment(rng))
        text = "".join(parts)
        if text:
            out.append(text)
    return list(dict.fromkeys(out))


def make_decode_cases(count, seed, texts, enc):
    """Id sequences for decode tests: slices of corpus encodings (cut mid-character), random ids,
    special, tool and padding ids."""
    rng = random.Random(seed)
    specials = [tid for tid, _, _, _ in btj.ADDED_TOKENS] + [199998, 200005, 200030, 200063]
    out = []
    for _ in range(count):
        ids = list(enc.encode_ordinary(rng.choice(texts)))
        if ids and rng.random() < 0.7:
            a = rng.randrange(len(ids))
            ids = ids[a:a + rng.randint(1, 12)]
        for _ in range(rng.randint(0, 4)):
            pos = rng.randint(0, len(ids))
            ids.insert(pos, rng.choice(specials) if rng.random() < 0.6 else rng.randrange(199998))
        out.append(ids)
    return out


REAL_GOLDEN_CASES = ["text-only", "single-image", "multi-image", "short-audio", "multi-image-audio",
                     "image-short-audio"]


def real_goldens(goldens_dir):
    """input_ids recorded from the real Phi-4-mm processor, with the prompt each was made from."""
    import re  # noqa: PLC0415

    cases = []
    for name in REAL_GOLDEN_CASES:
        with open(os.path.join(goldens_dir, f"phi4mm-{name}.yaml"), encoding="utf-8") as f:
            yaml_text = f.read()
        prompt = re.search(r'prompts:\n\s+- "([^"]*)"', yaml_text).group(1)
        images = len(re.findall(r'\.jpe?g"', yaml_text))
        audios = len(re.findall(r'\.flac"', yaml_text))
        with open(os.path.join(goldens_dir, f"phi4mm-{name}.json"), encoding="utf-8") as f:
            ids = json.load(f)["input_ids"]
        image_counts, audio_counts, run = [], [], None
        for tid in ids + [None]:
            if run and run[0] != tid:
                (image_counts if run[0] == 200010 else audio_counts).append(run[1])
                run = None
            if tid in (200010, 200011):
                run = [tid, run[1] + 1] if run else [tid, 1]
        content = "".join(f"<|image_{i + 1}|>\n" for i in range(images))
        content += "".join(f"<|audio_{i + 1}|>\n" for i in range(audios)) + prompt
        cases.append({"case": name, "user_content": content, "image_token_counts": image_counts,
                      "audio_token_counts": audio_counts, "input_ids": ids})
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(btj.REPO_ROOT, "tests", "fixtures", "tokenizer"))
    parser.add_argument("--ranks", default=btj.DEFAULT_RANKS)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=20250314)
    args = parser.parse_args()

    import tiktoken  # noqa: PLC0415 (dev-only dependency)
    import transformers  # noqa: PLC0415

    ranks = btj.load_ranks(args.ranks)
    enc = tiktoken.Encoding(name="o200k_base_local", pat_str=btj.O200K_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018})
    tokenizer, config = btj.build(ranks)
    os.makedirs(args.out, exist_ok=True)
    btj.write_json(os.path.join(args.out, "tokenizer.json"), tokenizer, compact=True)
    btj.write_json(os.path.join(args.out, "tokenizer_config.json"), config, compact=False)

    texts = make_corpus(args.count, args.seed)
    with open(os.path.join(args.out, "corpus.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for text in texts:
            f.write(json.dumps({"text": text, "ids": enc.encode_ordinary(text)}, ensure_ascii=False) + "\n")

    auto = transformers.AutoTokenizer.from_pretrained(args.out)
    with open(os.path.join(args.out, "added_token_cases.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for text in make_added_token_cases(600, args.seed + 1):
            ids = auto.backend_tokenizer.encode(text, add_special_tokens=False).ids
            if ids != auto.encode(text, add_special_tokens=False):
                raise SystemExit(f"tokenizers and AutoTokenizer disagree on {text!r}")
            f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")
    cases = []
    for messages in CHAT_CASES:
        text = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        no_gen = auto.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
        cases.append({"messages": messages, "text": text, "ids": list(ids), "text_no_generation_prompt": no_gen})
    with open(os.path.join(args.out, "chat_cases.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    with open(os.path.join(args.out, "decode_cases.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for ids in make_decode_cases(500, args.seed + 2, texts, enc):
            f.write(json.dumps({"ids": ids, "text": auto.backend_tokenizer.decode(ids, skip_special_tokens=False),
                                "text_skip_special": auto.backend_tokenizer.decode(ids, skip_special_tokens=True)},
                               ensure_ascii=False) + "\n")
    goldens_dir = os.path.join(btj.REPO_ROOT, "..", "shared", "data", "real-goldens")
    with open(os.path.join(args.out, "real_goldens.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps({"source": "shared/data/real-goldens (real microsoft/Phi-4-multimodal-instruct "
                                      "processor and chat template, transformers)",
                            "cases": real_goldens(goldens_dir)}, separators=(",", ":")) + "\n")
    print(f"wrote {len(texts)} corpus strings and {len(cases)} chat cases to {args.out}")


if __name__ == "__main__":
    main()
