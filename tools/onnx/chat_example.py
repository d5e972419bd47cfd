#!/usr/bin/env python3
"""A multi-turn chat with a package written by `phi4mm export`, on onnxruntime-genai's Python API.

This is the loop users write with ORT GenAI (pinned versions: tools/onnx/requirements.txt): one og.Generator for
the whole conversation, the first turn (with its optional images and audio) through the package's multimodal
processor, every later turn added with append_tokens(), each answer streamed token by token. It has one line
that ORT GenAI's own examples lack and that follow-up turns need with 0.18: generator.get_logits() after the
last generate_next_token() of an answer cut short (not ended by the model) and before the next turn's
append_tokens() (see the comment there, and docs/onnx-export.md, "Multi-turn with ORT GenAI").

Usage: chat_example.py --package DIR [--image PNG_OR_JPEG ...] [--audio WAV ...] [--turns TEXT ...] [--max-tokens N]
"""
import argparse

import onnxruntime_genai as og

END = "<|end|>"
# The whole conversation must fit; with past_present_share_buffer ORT GenAI allocates the KV cache at this length.
MAX_LENGTH = 16384


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", required=True, help="the folder `phi4mm export` wrote")
    ap.add_argument("--image", nargs="*", default=[], help="images for the first turn (PNG or JPEG only)")
    ap.add_argument("--audio", nargs="*", default=[], help="audio clips for the first turn")
    ap.add_argument("--turns", nargs="+", help="the user's messages, one per turn")
    ap.add_argument("--max-tokens", type=int, default=64, help="at most this many tokens per answer")
    args = ap.parse_args()
    turns = args.turns or (["Describe it.", "Say that again in one sentence."] if args.image or args.audio
                           else ["What is a Python list?", "And a tuple?"])

    config = og.Config(args.package)
    config.clear_providers()  # CPU; drop this line to use the providers genai_config.json names
    model = og.Model(config)
    processor = model.create_multimodal_processor()
    tokenizer = og.Tokenizer(model)
    stream = processor.create_stream()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=MAX_LENGTH)
    generator = og.Generator(model, params)
    for turn, text in enumerate(turns):
        if turn == 0:
            # Media go in the first turn only: ORT GenAI takes images and audio in a generator's first set_inputs.
            tags = "".join(f"<|image_{i + 1}|>" for i in range(len(args.image))) + \
                "".join(f"<|audio_{i + 1}|>" for i in range(len(args.audio)))
            inputs = processor(f"<|user|>{tags}{text}{END}<|assistant|>",
                               images=og.Images.open(*args.image) if args.image else None,
                               audios=og.Audios.open(*args.audio) if args.audio else None)
            generator.set_inputs(inputs)
        else:
            # Close the previous answer, then the next user message. Always with <|end|>: an answer the model ended
            # itself stopped at an end-of-sequence token, which ORT GenAI does not add to the sequence.
            generator.append_tokens(tokenizer.encode(f"{END}<|user|>{text}{END}<|assistant|>"))
        print(f"user: {text}\nassistant: ", end="", flush=True)
        for _ in range(args.max_tokens):
            if generator.is_done():
                break
            generator.generate_next_token()
            print(stream.decode(generator.get_next_tokens()[0]), end="", flush=True)
        print()
        # The extra line, for an answer cut short (here by --max-tokens; a stop string or a user's interrupt in
        # practice). generate_next_token() adds the token it picks to the sequence but runs the model on it only at
        # the next generate_next_token() or get_logits(), and ORT GenAI 0.18's append_tokens() does not run it
        # first: without this call that last token never enters the KV cache, and the next turn fails in
        # GroupQueryAttention ("total_sequence_length must equal past_sequence_length + kv_sequence_length") with
        # this package's past_present_share_buffer false, or gives wrong logits (that cache row left unwritten)
        # with past_present_share_buffer true. get_logits() runs the model on that token; its result is not needed.
        # Not after an answer the model ended (the generator is done): its end token is not in the sequence, and
        # running the model on it would put a token the sequence lacks into the cache (wrong logits from then on).
        if not generator.is_done():
            generator.get_logits()


if __name__ == "__main__":
    main()
