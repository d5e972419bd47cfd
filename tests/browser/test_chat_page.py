"""The chat page in headless Chromium against `phi4mm serve` on the trained fixture: text, image and
audio answers equal to the API's greedy answers, the microphone (Chromium's fake capture device
playing a WAV file), stop cancelling on the server, a multi-turn chat whose resent image hits the
media cache, bad files, an API-key server, history and export, and the narrow and dark layouts.
Screenshots of the main states go to build/webui-screenshots/.
"""
import base64
import json
import os
import time

import phi4mm_server as ps
from conftest import API_KEY, MIC_CLIP, shot
from page_driver import (answer_text, answers, api_answer, attach, best_envelope_correlation, by_id, data_url_bytes,
                         notice, remove_attachment, send, set_settings, storage, wait_answer, wait_counted, wait_until,
                         wav_samples)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

PHOTO = ps.fixture("images/photo_640x480.png")
CLIP = ps.fixture("audio/speech_16k.flac")
DISCONNECT = 'phi4mm_cancelled_total{reason="disconnect"}'


def image_part(path, detail="auto"):
    return {"type": "image_url", "image_url": {"url": ps.data_uri(path, "image/png"), "detail": detail}}


def count(server, part, **extra):
    status, _, out = server.post_json("/v1/chat/completions/input_tokens",
                                      {"model": "phi4mm", "messages": [{"role": "user", "content": [part]}], **extra})
    assert status == 200, out
    return out


def test_page_loads_offline_and_quickly(page, server):
    assert page.title == "phi4mm chat"
    wait_until(lambda: by_id(page, "model-name").text, 10, what="the model name")
    origin = f"http://127.0.0.1:{server.port}"
    resources = page.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(r.startswith(origin) for r in resources), resources
    paint = page.execute_script(
        "return performance.getEntriesByType('paint').filter(e => e.name === 'first-contentful-paint')"
        ".map(e => e.startTime)[0]")
    weight = 0
    for path in ["/"] + [f"/ui/{n}" for n in ("app.js", "api.js", "audio.js", "markdown.js", "store.js", "view.js",
                                              "style.css", "icon.svg")]:
        status, _, body = server.request("GET", path)
        assert status == 200, path
        weight += len(body)
    print(f"\n[webui] first contentful paint {paint:.0f} ms on loopback; page weight {weight} bytes "
          f"({weight / 1024:.1f} KiB) HTML+JS+CSS+icon, uncompressed")
    errors = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    shot(page, "01-empty")


def test_text_answers_equal_the_api_with_history_edit_regenerate_and_export(page, server, downloads):
    set_settings(page, max_tokens=40)
    send(page, "Hello")
    first = answer_text(wait_answer(page, 1))
    assert first and first == api_answer(server, [{"role": "user", "content": "Hello"}], max_completion_tokens=40)
    assert answers(page)[-1].find_element(By.CSS_SELECTOR, ".answer").text.strip()

    # Regenerate: greedy, so the same answer again.
    answers(page)[-1].find_element(By.CSS_SELECTOR, "button.regenerate").click()
    time.sleep(0.1)
    assert answer_text(wait_answer(page, 1)) == first
    assert len(answers(page)) == 1

    # Edit and resend: the answer is the API's for the new text, and the old answer is gone.
    page.find_element(By.CSS_SELECTOR, ".message.user button.edit").click()
    box = wait_until(lambda: page.find_elements(By.CSS_SELECTOR, ".message.user .edit-box"), 5, what="the edit box")[0]
    box.clear()
    box.send_keys("Tell me about lists")
    page.find_element(By.CSS_SELECTOR, ".message.user .edit-send").click()
    time.sleep(0.1)
    edited = answer_text(wait_answer(page, 1))
    assert len(answers(page)) == 1
    assert edited == api_answer(server, [{"role": "user", "content": "Tell me about lists"}], max_completion_tokens=40)

    # Shift+Enter is a new line, not a send.
    box = by_id(page, "input")
    box.send_keys("More")
    box.send_keys(Keys.SHIFT + Keys.ENTER)
    box.send_keys("please")
    assert by_id(page, "input").get_attribute("value") == "More\nplease" and len(answers(page)) == 1
    box.send_keys(Keys.ENTER)
    second = answer_text(wait_answer(page, 2))
    history = [{"role": "user", "content": "Tell me about lists"}, {"role": "assistant", "content": edited},
               {"role": "user", "content": "More\nplease"}]
    assert second == api_answer(server, history, max_completion_tokens=40)
    shot(page, "02-text-answers")

    # Kept in the browser, and exported as JSON with the same content.
    stored = storage(page, "phi4mm.conversations")
    assert [m["role"] for m in stored[0]["messages"]] == ["user", "assistant", "user", "assistant"]
    assert stored[0]["messages"][3]["text"] == second
    by_id(page, "export-chat").click()
    name = f"phi4mm-chat-{stored[0]['id']}.json"
    path = os.path.join(downloads, name)
    wait_until(lambda: os.path.exists(path) and os.path.getsize(path) > 0, 10, what="the exported file")
    with open(path) as f:
        assert json.load(f) == stored[0]

    # A reload shows the same conversation; New chat starts an empty one beside it.
    page.refresh()
    wait_until(lambda: len(answers(page)) == 2, 10, what="the conversation after a reload")
    assert answer_text(answers(page)[-1]) == second
    by_id(page, "new-chat").click()
    assert not answers(page)
    assert len(page.find_elements(By.CSS_SELECTOR, "#conversation-list li")) == 2


def test_image_and_audio_answers_equal_the_api_and_costs_are_shown(page, server):
    set_settings(page, max_tokens=24)
    img = attach(page, PHOTO)
    expected_img = count(server, image_part(PHOTO))
    assert f"{sum(expected_img['image_tokens'])} tokens" in img["text"], img
    clip = attach(page, CLIP)
    expected_clip = count(server, ps.audio_part(CLIP))
    assert f"{sum(expected_clip['audio_tokens'])} tokens" in clip["text"], clip
    wait_until(lambda: "This prompt:" in by_id(page, "cost").text, 10, what="the prompt's cost")
    shot(page, "03-attachments-with-costs")

    # The image detail is the biggest cost lever: low is one crop, recounted at once.
    page.execute_script("const s = document.getElementById('detail'); s.value = 'low';"
                        "s.dispatchEvent(new Event('change'))")
    low = sum(count(server, image_part(PHOTO, "low"))["image_tokens"])
    assert low < sum(expected_img["image_tokens"])
    wait_until(lambda: f"{low} tokens" in (wait_counted(page, 1)["text"]), 10, what="the low-detail count")

    send(page, "What is in the picture and the clip?")
    got = answer_text(wait_answer(page, 1))
    want = api_answer(server, [{"role": "user", "content": [image_part(PHOTO, "low"), ps.audio_part(CLIP),
                                                             {"type": "text", "text": "What is in the picture and the clip?"}]}],
                      max_completion_tokens=24)
    assert got == want
    assert page.find_elements(By.CSS_SELECTOR, ".message.user .attachments img")
    assert page.find_elements(By.CSS_SELECTOR, ".message.user .attachments audio")
    shot(page, "04-image-audio-answer")


def test_microphone_recording_is_answered_like_the_api(page, server):
    set_settings(page, max_tokens=24)
    by_id(page, "record").click()
    wait_until(lambda: by_id(page, "record").get_attribute("aria-pressed") == "true", 10, what="recording to start")
    time.sleep(3)
    by_id(page, "record").click()
    li = wait_counted(page, 1)
    assert not li["error"], li
    wav = data_url_bytes(li["src"])
    samples, rate = wav_samples(wav)
    assert rate == 16000 and 2.0 < len(samples) / rate < 5.0, (rate, len(samples))
    source, source_rate = wav_samples(open(MIC_CLIP, "rb").read())
    assert source_rate == 16000
    corr = best_envelope_correlation(samples, source)
    print(f"\n[webui] microphone: {len(samples) / rate:.2f} s recorded, loudness-envelope correlation with the "
          f"clip the fake device plays {corr:.3f}")
    assert corr > 0.8, corr

    send(page, "What was said?")
    got = answer_text(wait_answer(page, 1))
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}}
    want = api_answer(server, [{"role": "user", "content": [audio, {"type": "text", "text": "What was said?"}]}],
                      max_completion_tokens=24)
    assert got == want
    shot(page, "05-microphone-answer")


def test_stop_cancels_the_request_on_the_server(page, server):
    before = server.metrics().get(DISCONNECT, 0)
    send(page, "Write a long story about the sea.")  # greedy, it runs to the server's default 2048 tokens
    wait_until(lambda: answers(page) and answer_text(answers(page)[-1]), 30, what="the first words")
    by_id(page, "stop").click()
    li = wait_answer(page, 1)
    assert "stopped" in li.find_element(By.CSS_SELECTOR, ".meta").text
    held, value = server.wait_metric(DISCONNECT, lambda v: v == before + 1, timeout=10)
    assert held, value
    assert server.wait_idle(10) is not None
    shot(page, "06-stopped")


def test_a_resent_image_is_not_encoded_again(page, server):
    """The page resends the whole conversation, its images included, every turn. The second turn's
    prompt starts with the first's, so the prefix cache serves the image's rows (no encoder run);
    a new chat with a system prompt in front asks for the same image at other positions, and the
    media cache serves its features."""
    set_settings(page, max_tokens=16)
    attach(page, PHOTO)
    send(page, "Describe the picture.")
    first = answer_text(wait_answer(page, 1))
    image_tokens = sum(count(server, image_part(PHOTO))["image_tokens"])
    m0 = server.metrics()
    send(page, "And its colours?")
    second = answer_text(wait_answer(page, 2))
    m1 = server.metrics()
    assert m1["phi4mm_image_encode_seconds_count"] == m0["phi4mm_image_encode_seconds_count"]
    assert m1["phi4mm_prefix_cache_hit_tokens_total"] - m0["phi4mm_prefix_cache_hit_tokens_total"] >= image_tokens
    history = [{"role": "user", "content": [image_part(PHOTO), {"type": "text", "text": "Describe the picture."}]},
               {"role": "assistant", "content": first}, {"role": "user", "content": "And its colours?"}]
    assert second == api_answer(server, history, max_completion_tokens=16)

    by_id(page, "new-chat").click()
    set_settings(page, system_prompt="You describe pictures.")
    attach(page, PHOTO)
    send(page, "Describe the picture.")
    third = answer_text(wait_answer(page, 1))
    m2 = server.metrics()
    assert m2["phi4mm_media_cache_hits_total"] == m1["phi4mm_media_cache_hits_total"] + 1
    assert m2["phi4mm_image_encode_seconds_count"] == m1["phi4mm_image_encode_seconds_count"]
    assert third == api_answer(server, [{"role": "system", "content": "You describe pictures."}, history[0]],
                               max_completion_tokens=16)


def test_bad_files_show_the_servers_error_and_the_page_keeps_working(page, server):
    set_settings(page, max_tokens=8)
    bad = ps.fixture("images/bad_truncated.png")
    li = attach(page, bad)
    status, _, out = server.post_json("/v1/chat/completions/input_tokens", {
        "model": "phi4mm", "messages": [{"role": "user", "content": [image_part(bad)]}]})
    assert status == 400
    assert li["error"] == out["error"]["message"]
    send(page, "Hello")
    assert "Remove bad_truncated.png first" in notice(page)
    assert not answers(page)
    shot(page, "07-bad-file")

    remove_attachment(page, 1)
    by_id(page, "file-input").send_keys(ps.fixture("images/unknown.bin"))
    wait_until(lambda: "not an image or an audio file" in notice(page), 10, what="the notice for a non-media file")
    garbage = attach(page, ps.fixture("audio/garbage.wav"))
    assert garbage["error"], garbage
    remove_attachment(page, 1)

    send(page, "Hello")
    assert answer_text(wait_answer(page, 1)) == api_answer(server, [{"role": "user", "content": "Hello"}],
                                                           max_completion_tokens=8)
    assert not notice(page)


def test_a_server_with_an_api_key_refuses_without_it_and_answers_with_it(browser, keyed_server):
    browser.get(f"http://127.0.0.1:{keyed_server.port}/")
    browser.execute_script("localStorage.clear()")
    browser.get(f"http://127.0.0.1:{keyed_server.port}/")
    wait_until(lambda: "API key" in notice(browser), 10, what="the API-key notice")
    send(browser, "Hello")
    li = wait_answer(browser, 1)
    assert "API key" in li.find_element(By.CSS_SELECTOR, ".error").text
    shot(browser, "08-api-key-needed")

    set_settings(browser, api_key=API_KEY, max_tokens=8)
    wait_until(lambda: not notice(browser), 10, what="the notice to clear")
    send(browser, "Hello")
    got = answer_text(wait_answer(browser, 2))
    status, _, out = keyed_server.post_json("/v1/chat/completions", {
        "model": "phi4mm", "messages": [{"role": "user", "content": "Hello"}], "temperature": 0,
        "max_completion_tokens": 8}, headers={"Authorization": f"Bearer {API_KEY}"})
    assert status == 200 and got == out["choices"][0]["message"]["content"]


def test_narrow_and_dark_layouts(page, server):
    set_settings(page, max_tokens=8)
    send(page, "Hello")
    wait_answer(page, 1)
    page.set_window_size(390, 844)
    time.sleep(0.3)
    history = by_id(page, "history")
    assert history.rect["x"] + history.rect["width"] <= 1, history.rect  # slid out of view
    toggle = by_id(page, "toggle-history")
    assert toggle.is_displayed()
    toggle.click()
    wait_until(lambda: by_id(page, "history").rect["x"] >= -1, 5, what="the conversation list to slide in")
    assert toggle.get_attribute("aria-expanded") == "true"
    shot(page, "09-phone-history")
    toggle.click()
    wait_until(lambda: by_id(page, "history").rect["x"] + by_id(page, "history").rect["width"] <= 1, 5,
               what="the conversation list to slide out")
    shot(page, "10-phone-chat")

    page.set_window_size(1280, 900)
    set_settings(page, theme="dark")
    bg = page.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert bg == "rgb(23, 24, 27)", bg
    shot(page, "11-dark")
    set_settings(page, theme="light")
    assert page.execute_script("return getComputedStyle(document.body).backgroundColor") == "rgb(255, 255, 255)"


def test_images_by_drop_and_paste_and_the_camera_picker(page, server):
    png = base64.b64encode(open(PHOTO, "rb").read()).decode()
    make_file = ("const bytes = Uint8Array.from(atob(arguments[0]), (c) => c.charCodeAt(0));"
                 "const dt = new DataTransfer(); dt.items.add(new File([bytes], arguments[1], {type: 'image/png'}));")
    page.execute_script(make_file + "document.getElementById('main').dispatchEvent("
                        "new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));", png, "dropped.png")
    dropped = wait_counted(page, 1)
    page.execute_script(make_file + "document.getElementById('input').dispatchEvent("
                        "new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));", png,
                        "pasted.png")
    pasted = wait_counted(page, 2)
    tokens = sum(count(server, image_part(PHOTO))["image_tokens"])
    assert "dropped.png" in dropped["text"] and f"{tokens} tokens" in dropped["text"], dropped
    assert "pasted.png" in pasted["text"] and f"{tokens} tokens" in pasted["text"], pasted
    camera = by_id(page, "camera-input")
    assert camera.get_attribute("capture") == "environment" and camera.get_attribute("accept") == "image/*"


def test_every_control_has_a_name_for_screen_readers(page):
    set_settings(page, max_tokens=8)
    send(page, "Hello")
    wait_answer(page, 1)
    attach(page, PHOTO)
    unnamed = page.execute_script("""
        const name = (e) => (e.getAttribute('aria-label') || (e.labels && e.labels.length && e.labels[0].textContent)
                             || e.textContent || e.getAttribute('title') || e.getAttribute('alt') || '').trim();
        return Array.from(document.querySelectorAll('button, input, select, textarea, img, audio'))
            .filter((e) => !name(e)).map((e) => e.outerHTML.slice(0, 80));
    """)
    assert unnamed == []
    assert by_id(page, "messages").get_attribute("aria-live") == "polite"
    assert page.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
