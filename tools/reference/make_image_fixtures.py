#!/usr/bin/env python3
"""Image fixtures for phi4mm's decoder and image-processor tests.

Writes, with fixed seeds:
  tests/fixtures/images/            test images (synthetic, smooth content so that they stay small),
                                    bad inputs (empty, truncated, corrupt, unsupported, header bombs),
                                    and a copy of the real photo pipeline-cat-chonk.jpeg
  tests/fixtures/image_processor/   reference outputs of the image processor, cases.json + files

The reference is Microsoft's original processing_phi4mm.Phi4MMImageProcessor.preprocess, whose steps
are re-run here with the same library calls (PIL Image.convert('RGB'), torchvision.transforms
.functional.resize/pad on the PIL image, ToTensor + Normalize, torch bicubic interpolate); crop_size
is a parameter so that tiny geometries can store every value. transformers 4.57.1's
Phi4MultimodalImageProcessorFast is run on the same PIL images and its differences from the original
are recorded in cases.json (hf_*), see docs/reference-deviations.md "Images".

Per case (image, crop_size, dynamic_hd): grid, image_sizes, num_img_tokens, the attention mask
(safetensors U8), the uint8 HD canvas before normalisation (PNG, lossless), and the global view:
every value (F32) when crop_size is small, else a strided sample plus sums (F64).

Run: tools/reference/.venv/bin/python tools/reference/make_image_fixtures.py
     (needs torchvision==0.20.1 next to torch 2.5.1 for the transformers comparison)
     --check-ties: verify that equal-product ratios never tie for the closest aspect ratio.
"""
import argparse
import io
import json
import math
import os
import shutil
import struct
import sys
import zlib
from fractions import Fraction

import numpy as np
import torch
from PIL import Image, ImageDraw
from safetensors.numpy import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
IMG_DIR = os.path.join(ROOT, "tests", "fixtures", "images")
REF_DIR = os.path.join(ROOT, "tests", "fixtures", "image_processor")
# The real-goldens folder of the team's shared data, beside the repository unless PHI4MM_REAL_GOLDENS names it.
REAL_GOLDENS = os.environ.get("PHI4MM_REAL_GOLDENS", os.path.join(ROOT, "..", "shared", "data", "real-goldens"))
CAT = os.path.join(REAL_GOLDENS, "pipeline-cat-chonk.jpeg")
FULL_VALUE_LIMIT = 400_000  # store every pixel value when the output has at most this many floats
GLOBAL_SAMPLES = 4099       # otherwise this many global-view values (prime stride) plus sums


# ----------------------------------------------------------------------------- synthetic images
def synth(w, h, seed, mode="RGB", linear=False):
    """Smooth gradients (sine waves, or linear ramps for the largest images) plus a few flat shapes
    with sharp edges: small when compressed."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for _ in range(3):
        a, b = rng.uniform(-1, 1, 2)
        f = rng.uniform(1.5, 4.0)
        if linear:
            v = 128 + 120 * (a * x / max(w, 1) + b * y / max(h, 1))
        else:
            v = 128 + 100 * np.sin((a * x / max(w, 1) + b * y / max(h, 1)) * f * math.pi + rng.uniform(0, 6))
        chans.append(v)
    arr = np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)
    img = Image.fromarray(arr, "RGB")
    d = ImageDraw.Draw(img)
    for _ in range(6):
        x0, x1 = sorted(rng.integers(0, max(w, 2), 2))
        y0, y1 = sorted(rng.integers(0, max(h, 2), 2))
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            d.rectangle([x0, y0, x1, y1], fill=col)
        else:
            d.ellipse([x0, y0, x1, y1], fill=col)
    if mode != "RGB":
        img = img.convert(mode)
    return img


def noise(w, h, seed):
    """Small random images: every pixel different, for exact resampling checks."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def raw_png(w, h, color_type, depth, rows):
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
            png_chunk(b"IEND", b""))


def save(img, name, **kw):
    path = os.path.join(IMG_DIR, name)
    img.save(path, **kw)
    return path


def write_bytes(name, data):
    with open(os.path.join(IMG_DIR, name), "wb") as f:
        f.write(data)


def make_images():
    os.makedirs(IMG_DIR, exist_ok=True)
    valid = {}
    valid["tiny_5x7.png"] = save(noise(5, 7, 1), "tiny_5x7.png")
    valid["noise_61x47.png"] = save(noise(61, 47, 2), "noise_61x47.png")
    valid["square_448.png"] = save(synth(448, 448, 3), "square_448.png", optimize=True)
    valid["photo_640x480.png"] = save(synth(640, 480, 4), "photo_640x480.png", optimize=True)
    valid["hd_1920x1080.jpg"] = save(synth(1920, 1080, 5, linear=True), "hd_1920x1080.jpg", quality=75)
    valid["wide_2000x100.png"] = save(synth(2000, 100, 6), "wide_2000x100.png", optimize=True)
    valid["tall_90x1500.png"] = save(synth(90, 1500, 7), "tall_90x1500.png", optimize=True)
    valid["big_3000x3000.png"] = save(synth(3000, 3000, 8, linear=True), "big_3000x3000.png", optimize=True)
    # Alpha: random alpha over smooth colour; convert('RGB') must drop it without compositing.
    rgba = synth(300, 200, 9).convert("RGBA")
    a = np.array(rgba)
    a[..., 3] = (np.arange(300)[None, :] * 7 + np.arange(200)[:, None] * 3).astype(np.uint8)
    a[:50, :50, 3] = 0
    valid["rgba_300x200.png"] = save(Image.fromarray(a, "RGBA"), "rgba_300x200.png")
    valid["la_64x40.png"] = save(synth(64, 40, 11).convert("LA"), "la_64x40.png")
    valid["gray_200x150.png"] = save(synth(200, 150, 12, "L"), "gray_200x150.png")
    pal = synth(120, 90, 13).convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    valid["palette_120x90.png"] = save(pal, "palette_120x90.png")
    valid["palette_trns_120x90.png"] = save(pal, "palette_trns_120x90.png", transparency=5)
    g16 = (np.arange(40 * 30, dtype=np.uint32).reshape(30, 40) * 53 % 65536).astype(">u2")
    write_bytes("gray16_40x30.png", raw_png(40, 30, 0, 16, [r.tobytes() for r in g16]))
    valid["gray16_40x30.png"] = os.path.join(IMG_DIR, "gray16_40x30.png")
    c16 = (np.random.default_rng(14).integers(0, 65536, (30, 40, 3))).astype(">u2")
    write_bytes("rgb16_40x30.png", raw_png(40, 30, 2, 16, [r.tobytes() for r in c16]))
    valid["rgb16_40x30.png"] = os.path.join(IMG_DIR, "rgb16_40x30.png")
    valid["bmp_130x70.bmp"] = save(synth(130, 70, 15), "bmp_130x70.bmp")
    valid["gif_100x80.gif"] = save(synth(100, 80, 16).convert("P", palette=Image.Palette.ADAPTIVE, colors=32),
                                   "gif_100x80.gif")
    gt = synth(40, 30, 27).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    valid["gif_trns_40x30.gif"] = save(gt, "gif_trns_40x30.gif", transparency=3)
    valid["ppm_64x48.ppm"] = save(synth(64, 48, 17), "ppm_64x48.ppm")
    valid["pgm_64x48.pgm"] = save(synth(64, 48, 18, "L"), "pgm_64x48.pgm")
    valid["webp_lossless_160x120.webp"] = save(synth(160, 120, 19), "webp_lossless_160x120.webp", lossless=True)
    wa = np.array(synth(160, 120, 20).convert("RGBA"))
    wa[..., 3] = np.linspace(0, 255, 160, dtype=np.uint8)[None, :]
    valid["webp_lossy_alpha_160x120.webp"] = save(Image.fromarray(wa, "RGBA"), "webp_lossy_alpha_160x120.webp",
                                                  quality=80)
    frames = [synth(96, 64, 21 + i) for i in range(3)]
    frames[0].save(os.path.join(IMG_DIR, "webp_anim_96x64.webp"), save_all=True, append_images=frames[1:],
                   duration=100, lossless=True)
    valid["webp_anim_96x64.webp"] = os.path.join(IMG_DIR, "webp_anim_96x64.webp")
    # JPEG without chroma subsampling (decoder differences limited to IDCT and colour conversion).
    valid["jpeg444_320x240.jpg"] = save(synth(320, 240, 24), "jpeg444_320x240.jpg", quality=90, subsampling=0)
    valid["jpeg_gray_96x64.jpg"] = save(synth(96, 64, 25, "L"), "jpeg_gray_96x64.jpg", quality=90)
    shutil.copyfile(CAT, os.path.join(IMG_DIR, "pipeline-cat-chonk.jpeg"))
    valid["pipeline-cat-chonk.jpeg"] = os.path.join(IMG_DIR, "pipeline-cat-chonk.jpeg")

    # Bad inputs.
    write_bytes("bad_empty.png", b"")
    good_png = open(valid["photo_640x480.png"], "rb").read()
    write_bytes("bad_truncated.png", good_png[: len(good_png) // 2])
    crc = bytearray(open(valid["tiny_5x7.png"], "rb").read())
    crc[40] ^= 0x55  # inside the IDAT data: the chunk CRC no longer matches
    write_bytes("bad_crc.png", bytes(crc))
    jpg = open(valid["jpeg444_320x240.jpg"], "rb").read()
    write_bytes("bad_truncated.jpg", jpg[: len(jpg) * 2 // 3])
    gif = open(valid["gif_100x80.gif"], "rb").read()
    write_bytes("bad_truncated.gif", gif[: len(gif) // 2])
    bmp = open(valid["bmp_130x70.bmp"], "rb").read()
    write_bytes("bad_truncated.bmp", bmp[: len(bmp) - 1000])
    webp = open(valid["webp_lossless_160x120.webp"], "rb").read()
    write_bytes("bad_truncated.webp", webp[: len(webp) // 2])
    ppm = open(valid["ppm_64x48.ppm"], "rb").read()
    write_bytes("bad_truncated.ppm", ppm[: len(ppm) - 100])
    # A valid PNG whose IHDR declares 100000 x 100000 pixels (1e10): must be refused before decoding.
    write_bytes("bomb_100000x100000.png", raw_png(100000, 100000, 2, 8, [b"\x00\x00\x00"])[:])
    bmp_hdr = bytearray(b"BM" + struct.pack("<IHHI", 54 + 16, 0, 0, 54))
    bmp_hdr += struct.pack("<IiiHHIIiiII", 40, 100000, 100000, 1, 24, 0, 16, 2835, 2835, 0, 0) + bytes(16)
    write_bytes("bomb_100000x100000.bmp", bytes(bmp_hdr))
    write_bytes("unsupported.tif", b"II*\x00\x08\x00\x00\x00" + bytes(64))
    write_bytes("unsupported.heic", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(32))
    write_bytes("unsupported_ascii.ppm", b"P3\n2 1\n255\n255 0 0 0 255 0\n")
    write_bytes("unsupported_maxval.pgm", b"P5\n2 2\n15\n\x00\x05\x0a\x0f")
    write_bytes("unknown.bin", bytes(range(7, 71)))
    save(synth(32, 24, 26).convert("CMYK"), "unsupported_cmyk.jpg", quality=90)
    return valid


# ----------------------------------------------------------------------------- reference
def orig_process(pil, dynamic_hd, base, patch):
    """processing_phi4mm.Phi4MMImageProcessor.preprocess for one image, base_resolution = `base`."""
    import torchvision.transforms.functional as TF
    import torchvision.transforms as T

    image = pil.convert("RGB")
    mask_res = base // patch
    W, H = image.size
    w_crop, h_crop = math.ceil(W / float(base)), math.ceil(H / float(base))
    if w_crop * h_crop > dynamic_hd:
        ar = W / H
        ratios = sorted({(i, j) for n in range(1, dynamic_hd + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                         if 1 <= i * j <= dynamic_hd}, key=lambda x: x[0] * x[1])
        best, best_diff, area = (1, 1), float("inf"), W * H
        for r in ratios:
            d = abs(ar - r[0] / r[1])
            if d < best_diff:
                best_diff, best = d, r
            elif d == best_diff and area > 0.5 * base * base * r[0] * r[1]:
                best = r
        grid = best
    else:
        grid = (w_crop, h_crop)
    tw, th = base * grid[0], base * grid[1]
    rw, rh = tw / W, th / H
    if rw < rh:
        new, pw, ph = (tw, int(H * rw)), 0, th - int(H * rw)
    else:
        new, pw, ph = (int(W * rh), th), tw - int(W * rh), 0
    mask = torch.ones((int(mask_res * grid[1]), int(mask_res * grid[0])))
    if pw >= patch:
        mask[:, -math.floor(pw / patch):] = 0
    if ph >= patch:
        mask[-math.floor(ph / patch):, :] = 0
    if min(new[1], th) < 10 or min(new[0], tw) < 10:
        raise ValueError(f"the aspect ratio is very extreme {new}")
    img = TF.resize(image, [new[1], new[0]])
    img = TF.pad(img, [0, 0, pw, ph], fill=[255, 255, 255])
    canvas_u8 = np.array(img)
    hd = T.Compose([T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])(img)
    glob = torch.nn.functional.interpolate(hd.unsqueeze(0).float(), size=(base, base), mode="bicubic").to(hd.dtype)
    h, w = hd.shape[1:]
    crops = hd.reshape(1, 3, h // base, base, w // base, base).permute(0, 2, 4, 1, 3, 5).reshape(-1, 3, base, base)
    mh, mw = mask.shape
    mcrops = mask.reshape(1, mh // mask_res, mask_res, mw // mask_res, mask_res).permute(0, 1, 3, 2, 4)
    mcrops = mcrops.reshape(-1, mask_res, mask_res)
    half = mask_res // 2 + mask_res % 2
    ds = mcrops[:, 0::2, 0::2].reshape(1, mh // mask_res, mw // mask_res, half, half).permute(0, 1, 3, 2, 4)
    ds = ds.reshape(ds.size(1) * ds.size(2), ds.size(3) * ds.size(4))
    tokens_orig_formula = 256 + 1 + int(ds.sum()) + int(ds[:, 0].sum()) + 16
    tokens = half * half + 1 + int(ds.sum()) + int(ds[:, 0].sum()) + half
    pixel_values = torch.cat([glob, crops], 0)
    masks = torch.cat([torch.ones(1, mask_res, mask_res), mcrops], 0)
    return dict(grid=grid, canvas=canvas_u8, pixel_values=pixel_values.numpy(), mask=masks.numpy().astype(np.uint8),
                image_sizes=[int(h), int(w)], tokens=tokens, tokens_orig_formula=tokens_orig_formula)


def hf_process(pil, dynamic_hd, base, patch):
    try:
        from transformers.models.phi4_multimodal.image_processing_phi4_multimodal_fast import (
            Phi4MultimodalImageProcessorFast)
    except ImportError as e:  # torchvision missing
        return None, str(e)
    proc = Phi4MultimodalImageProcessorFast(size={"height": base, "width": base}, patch_size=patch,
                                            dynamic_hd=dynamic_hd)
    out = proc(pil, return_tensors="pt")
    return out, None


def check_ties(max_n=64):
    """Equal-product ratios never tie for the minimum: some ratio is strictly closer to their midpoint."""
    for n in range(1, max_n + 1):
        ratios = {Fraction(i, j) for i in range(1, n + 1) for j in range(1, n + 1) if i * j <= n}
        by_product = {}
        for i in range(1, n + 1):
            for j in range(1, n + 1):
                if i * j <= n:
                    by_product.setdefault(i * j, set()).add(Fraction(i, j))
        for p, rs in by_product.items():
            rs = sorted(rs)
            for a in range(len(rs)):
                for b in range(a + 1, len(rs)):
                    mid = (rs[a] + rs[b]) / 2
                    half = (rs[b] - rs[a]) / 2
                    if not any(abs(mid - r) < half for r in ratios):
                        print(f"max_num {n}: product {p} ratios {rs[a]} and {rs[b]} can tie", file=sys.stderr)
                        return 1
    print(f"no equal-product ties for max_num 1..{max_n}")
    return 0


CASES = [
    # (image, crop_size, dynamic_hd)
    ("tiny_5x7.png", 448, 36), ("tiny_5x7.png", 56, 36), ("tiny_5x7.png", 28, 1),
    ("noise_61x47.png", 56, 36), ("noise_61x47.png", 28, 4), ("noise_61x47.png", 14, 36),
    ("square_448.png", 448, 36), ("square_448.png", 448, 1),
    ("photo_640x480.png", 448, 36), ("photo_640x480.png", 448, 4), ("photo_640x480.png", 448, 1),
    ("photo_640x480.png", 56, 5),
    ("hd_1920x1080.jpg", 448, 36), ("hd_1920x1080.jpg", 448, 4), ("hd_1920x1080.jpg", 448, 1),
    ("wide_2000x100.png", 448, 36), ("wide_2000x100.png", 448, 4), ("wide_2000x100.png", 28, 8),
    ("tall_90x1500.png", 448, 36), ("tall_90x1500.png", 448, 2),
    ("big_3000x3000.png", 448, 36), ("big_3000x3000.png", 448, 4),
    ("rgba_300x200.png", 448, 36), ("la_64x40.png", 28, 36), ("gray_200x150.png", 448, 36),
    ("palette_120x90.png", 448, 36), ("palette_trns_120x90.png", 56, 2),
    ("gray16_40x30.png", 56, 36), ("rgb16_40x30.png", 56, 36),
    ("bmp_130x70.bmp", 448, 36), ("gif_100x80.gif", 448, 36), ("ppm_64x48.ppm", 28, 36), ("pgm_64x48.pgm", 28, 36),
    ("webp_lossless_160x120.webp", 448, 36), ("webp_lossy_alpha_160x120.webp", 56, 3),
    ("webp_anim_96x64.webp", 28, 4),
    ("jpeg444_320x240.jpg", 448, 36), ("jpeg_gray_96x64.jpg", 28, 2),
    ("pipeline-cat-chonk.jpeg", 448, 36), ("pipeline-cat-chonk.jpeg", 448, 16),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-ties", action="store_true")
    args = ap.parse_args()
    if args.check_ties:
        return check_ties()
    torch.manual_seed(0)
    valid = make_images()
    os.makedirs(REF_DIR, exist_ok=True)
    for f in os.listdir(REF_DIR):
        os.remove(os.path.join(REF_DIR, f))
    cases, canvases = [], {}
    for name, base, dyn in CASES:
        pil = Image.open(valid[name])
        pil.load()
        r = orig_process(pil, dyn, base, 14)
        cid = f"{os.path.splitext(name)[0]}_c{base}_d{dyn}"
        key = (name, base, r["grid"])
        lossy = name.endswith((".jpg", ".jpeg"))
        if lossy:
            canvases[key] = None
        elif key not in canvases:
            canvases[key] = f"canvas_{os.path.splitext(name)[0]}_c{base}_{r['grid'][0]}x{r['grid'][1]}.png"
            Image.fromarray(r["canvas"]).save(os.path.join(REF_DIR, canvases[key]), optimize=True)
        pv = r["pixel_values"]
        tensors = {"attention_mask": r["mask"]}
        full = pv.size <= FULL_VALUE_LIMIT
        if full:
            tensors["pixel_values"] = np.ascontiguousarray(pv, dtype=np.float32)
        else:
            g = pv[0].reshape(-1).astype(np.float32)
            stride = g.size // GLOBAL_SAMPLES
            tensors["global_sample"] = np.ascontiguousarray(g[::stride][:GLOBAL_SAMPLES])
            tensors["global_sums"] = np.array([g.astype(np.float64).sum(), (g.astype(np.float64) ** 2).sum()])
        if lossy:
            tensors["crop_channel_means"] = pv.astype(np.float64).mean(axis=(2, 3))
        save_file(tensors, os.path.join(REF_DIR, cid + ".safetensors"))
        case = dict(id=cid, image=name, crop_size=base, patch_size=14, dynamic_hd=dyn, grid_w=r["grid"][0],
                    grid_h=r["grid"][1], num_crops=int(pv.shape[0]), image_sizes=r["image_sizes"],
                    num_img_tokens=r["tokens"], canvas=canvases[key], full_pixel_values=full,
                    orig_size=list(pil.size))
        if not full:
            case["global_sample_stride"] = int(pv[0].size // GLOBAL_SAMPLES)
        if base == 448:
            assert r["tokens"] == r["tokens_orig_formula"]
        hf, err = hf_process(pil, dyn, base, 14)
        if hf is None:
            case["hf"] = f"not run: {err}"
        else:
            hpv = hf["image_pixel_values"][0].numpy()
            case["hf_num_img_tokens"] = int(hf["num_img_tokens"][0])
            case["hf_mask_equal"] = bool((hf["image_attention_mask"][0].numpy().astype(np.uint8) == r["mask"]).all())
            case["hf_image_sizes"] = [int(v) for v in hf["image_sizes"][0]]
            d = np.abs(hpv - pv)
            case["hf_max_abs_diff"] = float(d.max())
            case["hf_max_abs_diff_hd_crops"] = float(d[1:].max())
            case["hf_frac_values_differing"] = float((d > 0).mean())
        cases.append(case)
        print(cid, case["grid_w"], case["grid_h"], case["num_img_tokens"],
              {k: v for k, v in case.items() if k.startswith("hf")})
    # Pillow's decode of a few lossy files, to measure decoder differences exactly (PNG, lossless).
    decoded = {}
    for name in ["jpeg444_320x240.jpg", "jpeg_gray_96x64.jpg", "pipeline-cat-chonk.jpeg",
                 "webp_lossy_alpha_160x120.webp", "webp_anim_96x64.webp", "rgba_300x200.png", "la_64x40.png",
                 "palette_trns_120x90.png", "gray16_40x30.png", "rgb16_40x30.png", "gif_100x80.gif",
                 "bmp_130x70.bmp", "ppm_64x48.ppm", "pgm_64x48.pgm", "palette_120x90.png", "gray_200x150.png",
                 "gif_trns_40x30.gif"]:
        out = f"pil_rgb_{os.path.splitext(name)[0]}.png"
        Image.open(valid[name]).convert("RGB").save(os.path.join(REF_DIR, out), optimize=True)
        decoded[name] = out
    with open(os.path.join(REF_DIR, "cases.json"), "w") as f:
        json.dump({"generator": "tools/reference/make_image_fixtures.py", "reference":
                   "processing_phi4mm.Phi4MMImageProcessor (original) via PIL " + Image.__version__ +
                   ", torch " + torch.__version__, "cases": cases, "pil_decoded": decoded}, f, indent=1)
    total = sum(os.path.getsize(os.path.join(d, f)) for d in (IMG_DIR, REF_DIR) for f in os.listdir(d))
    print(f"fixtures: {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
