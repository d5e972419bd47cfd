"""Spec section I item 2: images and audio through the `openai` client. The greedy answer must equal
`phi4mm run`'s for the same prompt and media in all four modality mixes (text, image, audio,
image+audio), and for two images and for the second turn of a chat about an image (as the raw
prompt the chat template makes of it). Audio arrives as `input_audio` wav and flac and as an
`audio_url` data URI; http(s) media URLs are refused (the server fetches nothing). The second turn
that resends the first turn's image does not run the vision encoder again: /metrics shows the
prefix-cache hit, and, once the prompt differs before the image, the media-cache hit.
"""
import openai
import pytest

from phi4mm_server import audio_part, data_uri, fixture, image_part, run_cli, text_part

IMAGE = fixture("images/tiny_5x7.png")  # one crop: 481 of the tiny model's 512 positions
IMAGE2 = fixture("images/noise_61x47.png")
WAV = fixture("audio/speech_16k_pcm16.wav")
FLAC = fixture("audio/speech_16k.flac")
TONE = fixture("audio/tone_1s_16k.wav")


def answer(client, content, max_tokens, **kw):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                       max_tokens=max_tokens, temperature=0, **kw)
    return r


MIXES = {
    "text": ("Tell me about the sea.", [], [], 16),
    "image": ("What is in this picture?", [IMAGE], [], 12),
    "audio": ("What do you hear?", [], [WAV], 16),
    "image+audio": ("Describe both.", [IMAGE], [TONE], 8),
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_greedy_answer_equals_phi4mm_run(client, mix):
    prompt, images, audios, n = MIXES[mix]
    content = [image_part(i) for i in images] + [audio_part(a) for a in audios] + [text_part(prompt)]
    r = answer(client, content if images or audios else prompt, n)
    want = run_cli(prompt, images, audios, n)
    assert r.choices[0].message.content == want
    d = r.usage.prompt_tokens_details
    assert (d.image_tokens > 0) == bool(images) and (d.audio_tokens > 0) == bool(audios)
    # The streamed answer is the same text.
    chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                                 max_tokens=n, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


def test_flac_and_audio_url_data_uri(client, server):
    before = server.metrics()
    want_flac = run_cli("What do you hear?", [], [FLAC], 12)
    r = answer(client, [audio_part(FLAC), text_part("What do you hear?")], 12)
    assert r.choices[0].message.content == want_flac
    want_tone = run_cli("And now?", [], [TONE], 12)
    url = {"type": "audio_url", "audio_url": {"url": data_uri(TONE, "audio/wav")}}
    r = answer(client, [url, text_part("And now?")], 12)
    assert r.choices[0].message.content == want_tone
    # The declared format loses to the bytes: flac bytes declared as wav decode as flac.
    r = answer(client, [audio_part(FLAC, "wav"), text_part("What do you hear?")], 12)
    assert r.choices[0].message.content == want_flac
    # Every speech-encoder run is one observation of the audio encode-time histogram.
    after = server.metrics()
    runs = after["phi4mm_audios_encoded_total"] - before["phi4mm_audios_encoded_total"]
    assert runs >= 1
    assert after["phi4mm_audio_encode_seconds_count"] - before["phi4mm_audio_encode_seconds_count"] == runs
    assert after["phi4mm_audio_encode_seconds_sum"] > before["phi4mm_audio_encode_seconds_sum"]


@pytest.mark.parametrize("part,param", [
    ({"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}, "messages[0].content[0].image_url.url"),
    ({"type": "image_url", "image_url": {"url": "https://127.0.0.1:9/cat.png"}}, "messages[0].content[0].image_url.url"),
    ({"type": "audio_url", "audio_url": {"url": "http://127.0.0.1:9/a.wav"}}, "messages[0].content[0].audio_url.url"),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "messages[0].content[0].image_url.url"),
])
def test_remote_and_file_urls_are_refused(client, part, param):
    with pytest.raises(openai.BadRequestError) as e:
        answer(client, [part, text_part("What?")], 2)
    assert e.value.status_code == 400 and e.value.body["param"] == param


def test_two_images_equal_phi4mm_run(wide_client, wide_model):
    prompt = "Compare the two pictures."
    r = answer(wide_client, [image_part(IMAGE), image_part(IMAGE2), text_part(prompt)], 16)
    assert r.choices[0].message.content == run_cli(prompt, [IMAGE, IMAGE2], [], 16, model=wide_model)
    assert r.usage.prompt_tokens_details.image_tokens == 481 + 494


def test_multi_turn_with_an_image_hits_the_media_cache(wide_client, wide_server, wide_model):
    turn1 = [{"role": "user", "content": [image_part(IMAGE), text_part("What is this?")]}]
    r1 = wide_client.chat.completions.create(model="m", messages=turn1, max_tokens=12, temperature=0)
    a1 = r1.choices[0].message.content
    assert a1 == run_cli("What is this?", [IMAGE], [], 12, model=wide_model)
    m1 = wide_server.metrics()
    # Every encoder run is one observation of the encode-time histogram.
    assert m1["phi4mm_image_encode_seconds_count"] == m1["phi4mm_images_encoded_total"] >= 1
    assert m1["phi4mm_image_encode_seconds_sum"] > 0
    # Its prompt ran in the vision LoRA mode.
    assert m1['phi4mm_batch_rows_total{lora_mode="vision"}'] >= r1.usage.prompt_tokens

    turn2 = turn1 + [{"role": "assistant", "content": a1}, {"role": "user", "content": "Tell me more."}]
    r2 = wide_client.chat.completions.create(model="m", messages=turn2, max_tokens=12, temperature=0)
    m2 = wide_server.metrics()
    # The image was not encoded again: the second turn starts with the whole first turn, so its
    # prompt comes from the prefix cache (the image's rows included).
    assert m2["phi4mm_images_encoded_total"] == m1["phi4mm_images_encoded_total"]
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= r1.usage.prompt_tokens and cached < r2.usage.prompt_tokens
    assert m2["phi4mm_prefix_cache_hit_tokens_total"] - m1["phi4mm_prefix_cache_hit_tokens_total"] == cached
    # The answer is the one a fresh run gives for the same conversation as a raw prompt.
    raw = f"<|user|><|image_1|>\nWhat is this?<|end|><|assistant|>{a1}<|end|><|user|>Tell me more.<|end|><|assistant|>"
    assert r2.choices[0].message.content == run_cli(raw, [IMAGE], [], 12, extra=["--raw"], model=wide_model)

    # With a system turn put in front the prompt differs before the image, so no prefix matches:
    # the image's features come from the media cache instead of the encoder.
    turn3 = [{"role": "system", "content": "Be brief."}] + turn2
    r3 = wide_client.chat.completions.create(model="m", messages=turn3, max_tokens=12, temperature=0)
    m3 = wide_server.metrics()
    assert r3.usage.prompt_tokens_details.cached_tokens == 0
    assert m3["phi4mm_images_encoded_total"] == m1["phi4mm_images_encoded_total"]
    assert m3["phi4mm_media_cache_hits_total"] == m2["phi4mm_media_cache_hits_total"] + 1
    assert m3["phi4mm_image_encode_seconds_count"] == m1["phi4mm_image_encode_seconds_count"]
    assert r3.choices[0].message.content == run_cli("<|system|>Be brief.<|end|>" + raw, [IMAGE], [], 12,
                                                    extra=["--raw"], model=wide_model)
