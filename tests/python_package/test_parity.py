"""Greedy answers from Python equal `phi4mm run`'s, for text, an image given as a PIL image, a
numpy array and a path, audio given as numpy samples (mono and stereo, int16 and float) and as a
path, and an image with audio; `generate` on the chat prompt's ids equals the chat's tokens."""
import pathlib
import subprocess
import wave

import numpy as np
import pytest
from PIL import Image

from conftest import FIXTURES, TRAINED

MAX_TOKENS = 16
PHOTO = FIXTURES / "images" / "photo_640x480.png"  # 640×480: a multi-crop image
SPEECH = FIXTURES / "audio" / "speech_16k_pcm16.wav"
STEREO = FIXTURES / "audio" / "stereo_16k.wav"


def run_cli(cli, prompt, images=(), audios=()):
    args = [cli, "run", "-m", str(TRAINED), "-t", "2", "-n", str(MAX_TOKENS), "-p", prompt]
    for i in images:
        args += ["--image", str(i)]
    for a in audios:
        args += ["--audio", str(a)]
    out = subprocess.run(args, check=True, capture_output=True).stdout.decode()
    assert out.endswith("\n")
    return out[:-1]


def wav_samples(path):
    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2
        frames = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return frames.reshape(-1, w.getnchannels()), w.getframerate()


def chat(model, *parts):
    r = model.chat([{"role": "user", "content": list(parts)}], max_tokens=MAX_TOKENS)
    assert r.usage["completion_tokens"] == len(r.tokens) > 0
    return r


def test_text(model, cli):
    r = chat(model, "Tell me about the sea.")
    assert r.text == run_cli(cli, "Tell me about the sea.")
    assert r.usage["prompt_tokens_details"]["image_tokens"] == 0


@pytest.mark.parametrize("form", ["pil", "numpy", "path", "bytes"])
def test_image(model, cli, form):
    obj = {"pil": lambda: Image.open(PHOTO),
           "numpy": lambda: np.asarray(Image.open(PHOTO).convert("RGB")),
           "path": lambda: pathlib.Path(PHOTO),
           "bytes": lambda: PHOTO.read_bytes()}[form]()
    r = chat(model, {"type": "image", "image": obj}, "What is in the picture?")
    assert r.text == run_cli(cli, "What is in the picture?", images=[PHOTO])
    assert r.usage["prompt_tokens_details"]["image_tokens"] > 0


@pytest.mark.parametrize("form", ["numpy_int16", "numpy_float32", "path"])
def test_audio(model, cli, form):
    samples, rate = wav_samples(SPEECH)
    obj = {"numpy_int16": (samples[:, 0], rate),
           "numpy_float32": (samples[:, 0].astype(np.float32) / 32768.0, rate),
           "path": pathlib.Path(SPEECH)}[form]
    r = chat(model, {"type": "audio", "audio": obj}, "Transcribe the audio clip into text.")
    assert r.text == run_cli(cli, "Transcribe the audio clip into text.", audios=[SPEECH])
    assert r.usage["prompt_tokens_details"]["audio_tokens"] > 0


def test_stereo_audio_is_averaged_as_the_file_reader_does(model, cli):
    samples, rate = wav_samples(STEREO)
    assert samples.shape[1] == 2
    r = chat(model, (samples, rate), "Transcribe the audio clip into text.")
    assert r.text == run_cli(cli, "Transcribe the audio clip into text.", audios=[STEREO])


def test_image_and_audio(model, cli):
    samples, rate = wav_samples(SPEECH)
    r = chat(model, Image.open(PHOTO), (samples[:, 0], rate), "Answer the question in the clip about the picture.")
    assert r.text == run_cli(cli, "Answer the question in the clip about the picture.", images=[PHOTO], audios=[SPEECH])
    d = r.usage["prompt_tokens_details"]
    assert d["image_tokens"] > 0 and d["audio_tokens"] > 0


def test_generate_on_the_chat_prompt_ids(model):
    r = chat(model, "Tell me about the sea.")
    ids = model.tokenize("<|user|>Tell me about the sea.<|end|><|assistant|>")
    g = model.generate(ids, max_tokens=MAX_TOKENS)
    assert g.tokens == r.tokens and g.text == r.text
    streamed = model.generate(ids, max_tokens=MAX_TOKENS, stream=True)
    assert list(streamed) == r.tokens and streamed.result.text == r.text
    assert model.detokenize(r.tokens, skip_special=True) == r.text


def test_count_is_what_the_answer_uses(model):
    msgs = [{"role": "user", "content": [Image.open(PHOTO), "What is in the picture?"]}]
    c = model.count(msgs)
    r = model.chat(msgs, max_tokens=1)
    assert c["total_tokens"] == r.usage["prompt_tokens"]
    assert c["image_tokens"] == [r.usage["prompt_tokens_details"]["image_tokens"]] and c["lora_mode"] == "vision"


def test_speculation_and_a_prediction_change_nothing_but_the_steps(model, cli):
    ask = [{"role": "user", "content": "Tell me about the sea."}]
    plain = model.chat(ask, max_tokens=MAX_TOKENS)
    assert plain.text == run_cli(cli, "Tell me about the sea.")
    assert "completion_tokens_details" not in plain.usage
    guided = model.chat(ask, max_tokens=MAX_TOKENS, prediction={"type": "content", "content": plain.text})
    assert (guided.text, guided.tokens) == (plain.text, plain.tokens)
    # Some of it is taken (not all: the answer's text tokenizes otherwise where the model wrote
    # runs of "~" one token at a time).
    d = guided.usage["completion_tokens_details"]
    assert d["accepted_prediction_tokens"] > 0, d
    assert model.chat(ask, max_tokens=MAX_TOKENS, speculative="ngram").tokens == plain.tokens
    with pytest.raises(ValueError, match="speculative"):
        model.chat(ask, max_tokens=4, speculative="eagle")
