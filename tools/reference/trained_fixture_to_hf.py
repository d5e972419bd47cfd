"""Writes the trained fixture's base decoder (tests/fixtures/trained/orig) as a Hugging Face
Phi3ForCausalLM folder, the input of llama.cpp's convert_hf_to_gguf.py in
tools/anchors/quant_quality_llamacpp.sh, without training again: the same folder that
train_tiny_decoder.py --hf-out writes, rebuilt from the committed weights (the LoRA adapters and
the vision and speech towers are left out; Phi-3 has neither).

Usage: python tools/reference/trained_fixture_to_hf.py OUT_DIR [FIXTURE_ORIG_DIR]
"""
import glob
import os
import sys

import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny_decoder as trained  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def base_decoder_state(orig_dir):
    """The Phi-3 names of the base decoder's tensors: the original layout's `.base_layer` linear
    weights under their plain names, the embedding, the norms; no LoRA, no towers."""
    dec = {}
    for path in sorted(glob.glob(os.path.join(orig_dir, "*.safetensors"))):
        with safe_open(path, "pt") as f:
            for name in f.keys():
                if "lora_" in name or "embed_tokens_extend" in name:
                    continue
                dec[name.replace(".base_layer.", ".")] = f.get_tensor(name).to(torch.float32)
    return dec


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    orig = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "tests", "fixtures", "trained", "orig")
    trained.save_hf_phi3(out, base_decoder_state(orig), orig)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
