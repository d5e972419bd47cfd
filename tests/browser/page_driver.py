"""What the browser tests do on the chat page, as a person would: type and press Enter, attach files
through the file picker, press Record and stop, open Settings, wait for an answer to end; and what
they read back (the last answer's text as the page received it, the attachments' token costs, the
notices). Also the same request sent straight to the API, for comparison, and WAV helpers for the
microphone test.
"""
import base64
import io
import json
import math
import time
import wave

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


def wait_until(fn, timeout=60, step=0.05, what="the condition"):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def by_id(d, id_):
    return d.find_element(By.ID, id_)


def answers(d):
    return d.find_elements(By.CSS_SELECTOR, "#messages .message.assistant")


def wait_answer(d, count=None, timeout=120):
    """Waits until no answer is streaming (and, with `count`, until there are that many answers);
    returns the last answer's <li>."""
    wait_until(lambda: not by_id(d, "stop").is_displayed() and (count is None or len(answers(d)) >= count),
               timeout, what="the answer to end")
    return answers(d)[-1]


def answer_text(li):
    """The answer's text exactly as the page received it (the rendered Markdown keeps it in data-raw)."""
    return li.find_element(By.CSS_SELECTOR, ".answer").get_attribute("data-raw")


def send(d, text):
    box = by_id(d, "input")
    box.clear()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def set_settings(d, **fields):
    """Opens Settings, fills the fields (ids: system-prompt, temperature, max-tokens, api-key, theme,
    ...) and closes it with Done."""
    by_id(d, "open-settings").click()
    wait_until(lambda: by_id(d, "settings").is_displayed(), 5, what="the settings dialog")
    for id_, value in fields.items():
        e = by_id(d, id_.replace("_", "-"))
        if e.tag_name == "select":
            d.execute_script("arguments[0].value = arguments[1]", e, value)
        else:
            e.clear()
            e.send_keys(str(value))
    by_id(d, "settings-done").click()
    wait_until(lambda: not by_id(d, "settings").is_displayed(), 5, what="the settings dialog to close")


def attach(d, path):
    """Attaches a file with the file picker; waits until the server counted or refused it and
    returns attachment_state() of it."""
    before = d.execute_script("return document.querySelectorAll('#attachments .attachment').length")
    by_id(d, "file-input").send_keys(path)
    return wait_counted(d, before + 1)


def attachment_state(d, n):
    """The n-th (1-based) attachment in the composer once it is counted or refused:
    {"text", "error", "src"} read in one step (the tray is redrawn whenever a count comes back);
    None while it is missing or still being counted."""
    return d.execute_script("""
        const li = document.querySelectorAll('#attachments .attachment')[arguments[0]];
        if (!li) return null;
        const err = li.querySelector('.attachment-error');
        const cost = li.querySelector('.attachment-cost');
        if (!err && (!cost || cost.textContent.includes('counting'))) return null;
        const media = li.querySelector('img, audio');
        return {text: li.innerText, error: err ? err.textContent : '', src: media ? media.src : ''};
    """, n - 1)


def wait_counted(d, n, timeout=60):
    return wait_until(lambda: attachment_state(d, n), timeout, what="the attachment to be counted")


def remove_attachment(d, n):
    d.find_elements(By.CSS_SELECTOR, "#attachments .attachment button.remove")[n - 1].click()


def notice(d):
    n = by_id(d, "notice")
    return n.text if n.is_displayed() else ""


def api_answer(server, messages, **params):
    body = {"model": "phi4mm", "messages": messages, "temperature": 0, **params}
    status, _, out = server.post_json("/v1/chat/completions", body)
    assert status == 200, out
    return out["choices"][0]["message"]["content"]


def data_url_bytes(url):
    assert url.startswith("data:"), url[:40]
    return base64.b64decode(url[url.index(",") + 1:])


def wav_samples(raw):
    """(samples as floats, rate) of 16-bit mono PCM WAV bytes."""
    with wave.open(io.BytesIO(raw)) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1
        frames = w.readframes(w.getnframes())
        rate = w.getframerate()
    n = len(frames) // 2
    ints = memoryview(frames).cast("h")
    return [ints[i] / 32768 for i in range(n)], rate


def envelope(samples, hop):
    """RMS per `hop` samples."""
    return [math.sqrt(sum(x * x for x in samples[i:i + hop]) / hop) for i in range(0, len(samples) - hop + 1, hop)]


def best_envelope_correlation(recorded, source, hop=160):
    """The highest Pearson correlation between the recording's loudness envelope (10 ms frames at
    16 kHz) and the source clip's (looped, as Chromium's fake microphone plays it) over all offsets."""
    a = envelope(recorded, hop)
    b = envelope(source, hop)
    b = b + b + b
    n = min(len(a), len(b) // 3)
    a = a[:n]
    ma = sum(a) / n
    va = math.sqrt(sum((x - ma) ** 2 for x in a))
    best = -1.0
    for off in range(len(b) // 3):
        w = b[off:off + n]
        mb = sum(w) / n
        vb = math.sqrt(sum((x - mb) ** 2 for x in w))
        if va == 0 or vb == 0:
            continue
        c = sum((x - ma) * (y - mb) for x, y in zip(a, w)) / (va * vb)
        best = max(best, c)
    return best


def storage(d, key):
    raw = d.execute_script("return localStorage.getItem(arguments[0])", key)
    return json.loads(raw) if raw else None
