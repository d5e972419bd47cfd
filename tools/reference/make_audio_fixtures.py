#!/usr/bin/env python3
"""Generates tests/fixtures/audio: test clips and reference log-mel features for the C++ audio path.

Clips: espeak-ng speech (deterministic), tones, silence, a 45 s FLAC clip, stereo, 8/22.05/44.1/48 kHz
versions, WAV in 8/16/24/32-bit PCM and float, FLAC, OGG/Vorbis and MP3, the real LibriSpeech clip
from the shared real-goldens folder ($PHI4MM_REAL_GOLDENS, default ../shared/data/real-goldens), and bad files (zero bytes, no samples, truncated, corrupt,
NaN/inf floats, absurd rates, shorter than a frame).

Reference features come from `original_log_mel` below, a port written from Microsoft's original
processing_phi4mm.Phi4MMAudioFeatureExtractor (_extract_spectrogram, _extract_features,
_compute_audio_embed_size, speechlib_mel; reference-spec §4), keeping its dtypes: soundfile float64
input, float32 frames, float64 window and FFT, complex64 spectrum, float32 mel product and log.
One deliberate change, also made in C++ (docs/reference-deviations.md, Audio): rates that are not
16 kHz, 8 kHz or a multiple of 16 kHz are resampled to 16 kHz with resample_poly(up, down) from the
gcd instead of the original's integer-divided factor. On 16 kHz clips the result is cross-checked
against transformers' Phi4MultimodalFeatureExtractor; the only expected difference is the mel cell
(bin 246, filter 79) that HF fills and the original leaves at 0.

Outputs: <clip files>, features/<sha>.f32 (float32 [frames_stored, 80] little endian) and
manifest.json. Run with the reference venv: tools/reference/.venv/bin/python
tools/reference/make_audio_fixtures.py. Needs espeak-ng on PATH.
"""
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import scipy.signal

# Read and write with the system libsndfile, the one the C++ engine links, not the copy bundled in
# the soundfile wheel: lossless formats decode identically with both, but libvorbis versions differ
# in the last bit of some OGG samples (measured 1.2e-7 max; MP3 identical), and the fixtures must
# test our decoding, not the codec versions.
sys.modules["_soundfile_data"] = None
import soundfile as sf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "audio")
# The real-goldens folder of the team's shared data, beside the repository unless PHI4MM_REAL_GOLDENS names it.
REAL_GOLDENS = os.environ.get("PHI4MM_REAL_GOLDENS", os.path.join(ROOT, "..", "shared", "data", "real-goldens"))
REAL_CLIP = os.path.join(REAL_GOLDENS, "652-129742-0006.flac")
SHORT_TEXT = "Hello, this is a short test."
LONG_TEXT = (
    "Speech recognition turns sound into words. The model listens to short frames of ten milliseconds, "
    "computes eighty mel bands for each one, and the encoder compresses eight frames into one token. "
    "This clip is long enough to cover several thousand frames, so that every step of the feature "
    "pipeline is exercised on realistic audio with pauses, voiced sounds and hissing consonants. "
    "Numbers such as three hundred and seventy five, or one thousand and twenty four, add variety. "
    "The end of the clip must be processed as carefully as the beginning."
)


# ---------------------------------------------------------------------------------------------
# The original extractor (processing_phi4mm.py), ported.
# ---------------------------------------------------------------------------------------------
def speechlib_mel(sample_rate, n_fft, n_mels, fmin, fmax):
    """processing_phi4mm.speechlib_mel: triangles in kaldi mel space over bins [f2bin(fmin)+1,
    f2bin(fmax)), float32 [n_mels, 1 + n_fft/2]."""
    def mel(f):
        return 1127.0 * np.log(1.0 + f / 700.0)

    def bin2mel(k):
        return 1127.0 * np.log(1.0 + k * sample_rate / (n_fft * 700.0))

    def f2bin(f):
        return int((f * n_fft / sample_rate) + 0.5)

    klo = f2bin(fmin) + 1
    khi = max(f2bin(fmax), klo)
    mlo, mhi = mel(fmin), mel(fmax)
    centers = np.linspace(mlo, mhi, n_mels + 2)
    ms = (mhi - mlo) / (n_mels + 1)
    matrix = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for m in range(n_mels):
        for k in range(klo, khi):
            b = bin2mel(k)
            if centers[m] < b < centers[m + 2]:
                matrix[m, k] = 1.0 - abs(centers[m + 1] - b) / ms
    return matrix


MEL_T = speechlib_mel(16000, 512, 80, 0, 7690).T  # [257, 80]


def to_model_rate(wav, fs):
    """Resampling before _extract_spectrogram. 16 kHz and 8 kHz pass through (8 kHz takes the
    "fillzero" path); multiples of 16 kHz are resample_poly(wav, 1, fs // 16000) exactly as the
    original; other rates resample_poly(wav, 16000/g, fs/g) (the documented deviation)."""
    if fs in (16000, 8000):
        return wav, fs
    g = math.gcd(16000, fs)
    return scipy.signal.resample_poly(wav, 16000 // g, fs // g), 16000


def original_log_mel(wav, fs):
    """Phi4MMAudioFeatureExtractor._extract_spectrogram + _extract_features on float64 wav."""
    wav, fs = to_model_rate(wav, fs)
    if fs == 8000:
        n_fft, win, hop, window = 256, 200, 80, np.hamming(200)
    else:
        n_fft, win, hop, window = 512, 400, 160, np.hamming(400)
    n_batch = (wav.shape[0] - win) // hop + 1
    frames = np.array([wav[s:s + win] for s in range(0, hop * n_batch, hop)], dtype=np.float32)
    prev = np.roll(frames, 1, axis=1)
    prev[:, 0] = prev[:, 1]
    frames = (frames - 0.97 * prev) * 32768
    spec = np.fft.rfft(window * frames, n=n_fft, axis=1).astype(np.complex64)
    if fs == 8000:
        pad = np.zeros((spec.shape[0], spec.shape[1]))
        spec = np.concatenate((spec[:, 0:-1], pad), axis=1)
    spec = np.abs(spec).astype(np.float32)
    power = spec ** 2
    fbank = np.clip(power.dot(MEL_T), 1.0, None)
    return np.log(fbank).astype(np.float32)


def audio_embed_size(frames, compression_rate=8, qformer_rate=1):
    """_compute_audio_embed_size (audio_feat_stride = 1)."""
    r = frames // compression_rate + (1 if frames % compression_rate else 0)
    return r // qformer_rate + (1 if r % qformer_rate else 0)


def hf_log_mel(wav16):
    from transformers.models.phi4_multimodal.feature_extraction_phi4_multimodal import (
        Phi4MultimodalFeatureExtractor,
    )
    fe = Phi4MultimodalFeatureExtractor()
    out = fe(wav16.astype(np.float32), sampling_rate=16000, return_tensors="np")
    return np.asarray(out["audio_input_features"][0], dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Clip generation.
# ---------------------------------------------------------------------------------------------
def espeak(text):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", p, text], check=True)
        x, fs = sf.read(p, dtype="float64")
    assert fs == 22050, fs
    return x


def resample(x, fs_from, fs_to):
    g = math.gcd(fs_from, fs_to)
    return scipy.signal.resample_poly(x, fs_to // g, fs_from // g)


def q16(x):
    """Quantise to the int16 grid (what a 16-bit file stores), as float64."""
    return np.clip(np.round(x * 32768.0), -32768, 32767) / 32768.0


def fnv1a64(data):
    """FNV-1a 64 over bytes (a plain byte loop, so only used for clips up to 200000 samples)."""
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def decoded_mono(path):
    """What the original sees: soundfile.read (float64) then `wav.mean(1)` for multi-channel."""
    x, fs = sf.read(path, dtype="float64")
    if x.ndim == 2:
        x = x.mean(1)
    return x, fs


def main():
    os.makedirs(os.path.join(OUT, "features"), exist_ok=True)
    for f in os.listdir(os.path.join(OUT, "features")):
        os.remove(os.path.join(OUT, "features", f))
    rng = np.random.default_rng(20250101)
    clips = []  # (file, kind)

    def write(name, data, fs, subtype, fmt=None, kind="speech"):
        sf.write(os.path.join(OUT, name), data, fs, subtype=subtype, format=fmt)
        clips.append((name, kind))

    s22 = espeak(SHORT_TEXT)
    s22 = 0.8 * s22 / np.max(np.abs(s22))
    s16 = resample(s22, 22050, 16000)
    s16q = q16(s16)
    write("speech_16k_pcm16.wav", s16q, 16000, "PCM_16")
    write("speech_16k_u8.wav", s16, 16000, "PCM_U8")
    write("speech_16k_pcm24.wav", s16, 16000, "PCM_24")
    write("speech_16k_pcm32.wav", s16, 16000, "PCM_32")
    write("speech_16k_float.wav", s16, 16000, "FLOAT")
    write("speech_16k.flac", s16q, 16000, "PCM_16", "FLAC")
    write("speech_16k.ogg", s16, 16000, "VORBIS", "OGG", kind="lossy")
    write("speech_16k.mp3", s16, 16000, "MPEG_LAYER_III", "MP3", kind="lossy")
    write("speech_8k.wav", q16(resample(s22, 22050, 8000)), 8000, "PCM_16")
    write("speech_22k.flac", q16(s22), 22050, "PCM_16", "FLAC")
    write("speech_44k.flac", q16(resample(s22, 22050, 44100)), 44100, "PCM_16", "FLAC")
    write("speech_48k.flac", q16(resample(s22, 22050, 48000)), 48000, "PCM_16", "FLAC")
    # Stereo: left the 16-bit speech clip, right a 440 Hz tone on the int16 grid.
    t = np.arange(len(s16)) / 16000.0
    tone = np.round(0.3 * np.sin(2 * np.pi * 440.0 * t) * 32768.0) / 32768.0
    write("stereo_16k.wav", np.stack([s16q, tone], axis=1), 16000, "PCM_16", kind="stereo")
    t1 = np.arange(16000) / 16000.0
    write("tone_1s_16k.wav", q16(0.3 * np.sin(2 * np.pi * 440 * t1) + 0.2 * np.sin(2 * np.pi * 1000 * t1)),
          16000, "PCM_16", kind="tone")
    write("silence_1s_16k.wav", np.zeros(16000), 16000, "PCM_16", kind="silence")
    # 400 + 160*8 samples: 9 frames, ceil(9/8) = 2 tokens; 400 samples: exactly one frame.
    write("noise_9frames_16k.wav", q16(0.1 * rng.standard_normal(1680)), 16000, "PCM_16", kind="noise")
    write("noise_1frame_16k.wav", q16(0.1 * rng.standard_normal(400)), 16000, "PCM_16", kind="noise")
    write("noise_1frame_8k.wav", q16(0.1 * rng.standard_normal(200)), 8000, "PCM_16", kind="noise")

    long22 = espeak(LONG_TEXT)
    while len(long22) < 46 * 22050:
        long22 = np.concatenate([long22, long22])
    long16 = resample(0.8 * long22 / np.max(np.abs(long22)), 22050, 16000)[: 45 * 16000]
    write("long_45s_16k.flac", q16(long16), 16000, "PCM_16", "FLAC", kind="long")

    shutil.copyfile(REAL_CLIP, os.path.join(OUT, "real_652-129742-0006.flac"))
    clips.append(("real_652-129742-0006.flac", "real"))

    manifest = {"clips": [], "bad": []}
    hf_diffs = {}
    for name, kind in clips:
        wav, fs = decoded_mono(os.path.join(OUT, name))
        feats = original_log_mel(wav, fs)
        stride = 10 if kind == "long" else 1
        stored = np.ascontiguousarray(feats[::stride]).astype("<f4")
        sha = hashlib.sha1(stored.tobytes()).hexdigest()[:16]
        fpath = os.path.join(OUT, "features", sha + ".f32")
        if not os.path.exists(fpath):
            stored.tofile(fpath)
        mono32 = wav.astype(np.float32)
        entry = {
            "file": name, "kind": kind, "sample_rate": fs, "num_samples": int(len(wav)),
            "channels": int(sf.info(os.path.join(OUT, name)).channels),
            "samples_fnv1a64": "%016x" % fnv1a64(mono32.astype("<f4").tobytes()) if len(mono32) <= 200000 else None,
            "sample_probe_stride": 97,
            "sample_probe": [float(v) for v in mono32[::97][:64]],
            "frames": int(feats.shape[0]), "frame_stride": stride, "features": "features/" + sha + ".f32",
            "num_tokens": int(audio_embed_size(feats.shape[0])),
        }
        if fs == 16000:
            hf = hf_log_mel(wav)
            assert hf.shape == feats.shape, (hf.shape, feats.shape)
            d = np.abs(hf - feats)
            entry["hf_max_abs_diff"] = float(d.max())
            # Without the one mel cell, HF and the original agree to float rounding.
            mel_hf = MEL_T.copy()
            mel_hf[246, 79] = np.float32(hf_mel_cell())
            alt = original_log_mel_with_mel(wav, fs, mel_hf)
            entry["hf_max_abs_diff_same_mel"] = float(np.abs(hf - alt).max())
            hf_diffs[name] = (entry["hf_max_abs_diff"], entry["hf_max_abs_diff_same_mel"])
        manifest["clips"].append(entry)

    make_bad_files(manifest, s16q, rng)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    for k, (a, b) in hf_diffs.items():
        print(f"HF vs original  {k:32s} max|diff| {a:.3e}   with HF's mel cell {b:.3e}")
    for e in manifest["clips"]:
        print(f"{e['file']:32s} fs={e['sample_rate']:6d} n={e['num_samples']:7d} frames={e['frames']:5d} "
              f"tokens={e['num_tokens']}")


def hf_mel_cell():
    from transformers.audio_utils import mel_filter_bank
    m = mel_filter_bank(num_frequency_bins=257, num_mel_filters=80, min_frequency=0, max_frequency=7690,
                        sampling_rate=16000, norm=None, triangularize_in_mel_space=True, mel_scale="kaldi")
    return m[246, 79]


def original_log_mel_with_mel(wav, fs, mel_t):
    global MEL_T
    saved = MEL_T
    MEL_T = mel_t
    try:
        return original_log_mel(wav, fs)
    finally:
        MEL_T = saved


def make_bad_files(manifest, s16q, rng):
    def bad(name, data, expect):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        manifest["bad"].append({"file": name, "expect": expect})

    def wav_bytes(x, fs, subtype):
        p = os.path.join(OUT, "_tmp.wav")
        sf.write(p, x, fs, subtype=subtype)
        with open(p, "rb") as f:
            b = f.read()
        os.remove(p)
        return b

    good = wav_bytes(s16q[:16000], 16000, "PCM_16")
    bad("zero_bytes.wav", b"", "empty")
    bad("no_samples.wav", wav_bytes(np.zeros(0), 16000, "PCM_16"), "no samples")
    bad("truncated.wav", good[: len(good) // 2], "truncated")
    with open(os.path.join(OUT, "speech_16k.flac"), "rb") as f:
        flac = f.read()
    bad("truncated.flac", flac[: len(flac) // 2], "truncated")
    bad("garbage.wav", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), "not a readable audio file")
    bad("corrupt_header.wav", b"RIFF" + good[4:8] + b"WAVEfmt " + b"\xff" * 200, "not a readable audio file")
    x = np.asarray(s16q[:16000], dtype=np.float32).copy()
    x[1234] = np.nan
    bad("nan_float.wav", wav_bytes(x, 16000, "FLOAT"), "NaN")
    x = np.asarray(s16q[:16000], dtype=np.float32).copy()
    x[77] = np.inf
    bad("inf_float.wav", wav_bytes(x, 16000, "FLOAT"), "infinite")
    bad("rate_4k.wav", wav_bytes(s16q[:4000], 4000, "PCM_16"), "sample rate")
    # Sample-rate field patched in a valid 16-bit WAV header (bytes 24..27 rate, 28..31 byte rate).
    # libsndfile itself refuses a zero rate ("SF_INFO struct incomplete"), so that one fails at open.
    for rate, name, expect in ((1, "rate_1hz.wav", "sample rate 1 Hz"), (10_000_000, "rate_10mhz.wav",
                               "sample rate 10000000 Hz"), (0, "rate_0hz.wav", "not a readable audio file")):
        b = bytearray(good)
        b[24:28] = struct.pack("<I", rate)
        b[28:32] = struct.pack("<I", rate * 2)
        bad(name, bytes(b), expect)
    bad("too_short_16k.wav", wav_bytes(s16q[:399], 16000, "PCM_16"), "shorter than one")


if __name__ == "__main__":
    sys.exit(main())
