"""The chat page's defences: the Content-Security-Policy on every file it is made of (no inline
script, no remote source; checked in the browser by trying both), model output and user text that
contain HTML or script shown as text, links only to http(s)/mailto, and the caching headers.
"""
import json

from conftest import shot
from page_driver import answers, by_id, wait_until
from selenium.webdriver.common.by import By

FILES = ["/", "/ui/app.js", "/ui/api.js", "/ui/audio.js", "/ui/markdown.js", "/ui/store.js", "/ui/view.js",
         "/ui/style.css", "/ui/icon.svg"]
HOSTILE = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">\n\n'
           '**bold** and [a link](javascript:window.__pwned=3) and [ok](https://example.org/x)\n\n'
           '```html\n<script>window.__pwned = 4</script>\n```')


def test_every_file_carries_the_policy_and_an_etag(server):
    for path in FILES:
        status, h, body = server.request("GET", path)
        assert status == 200 and body, path
        csp = h["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp and "connect-src 'self'" in csp, csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "http" not in csp, csp
        assert h["x-content-type-options"] == "nosniff"
        status2, h2, body2 = server.request("GET", path, headers={"If-None-Match": h["etag"]})
        assert status2 == 304 and body2 == b"" and h2["etag"] == h["etag"], path
    _, h, _ = server.request("GET", "/ui/app.js")
    assert h["content-type"].startswith("text/javascript")
    assert server.request("GET", "/ui/nothing.js")[0] == 404
    assert server.request("GET", "/ui/../index.html")[0] == 404


def test_inline_and_remote_scripts_are_refused_by_the_browser(page):
    blocked = page.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const seen = [];
        document.addEventListener('securitypolicyviolation', (e) => seen.push(e.violatedDirective));
        const inline = document.createElement('script');
        inline.textContent = 'window.__inline = 1';
        document.body.append(inline);
        const remote = document.createElement('script');
        remote.src = 'https://cdn.example.org/x.js';
        document.body.append(remote);
        const img = document.createElement('img');
        img.src = 'https://example.org/pixel.png';
        document.body.append(img);
        setTimeout(() => done({seen, inline: window.__inline === undefined}), 500);
    """)
    assert blocked["inline"], "an inline script ran"
    assert sum(d.startswith("script-src") for d in blocked["seen"]) == 2, blocked
    assert any(d.startswith("img-src") for d in blocked["seen"]), blocked


def test_html_in_answers_and_messages_is_shown_as_text(page):
    conversation = {"id": "c1", "title": "hostile", "created": "2026-12-06T00:00:00Z", "messages": [
        {"role": "user", "text": '<img src=x onerror="window.__pwned = 5">', "attachments": []},
        {"role": "assistant", "text": HOSTILE, "finish": "stop", "usage": None}]}
    page.execute_script("localStorage.setItem('phi4mm.conversations', arguments[0])", json.dumps([conversation]))
    page.refresh()
    wait_until(lambda: answers(page), 10, what="the stored conversation")
    assert page.execute_script("return window.__pwned") is None
    answer = answers(page)[0].find_element(By.CSS_SELECTOR, ".answer")
    assert "<script>window.__pwned = 1</script>" in answer.text
    assert answer.find_element(By.TAG_NAME, "strong").text == "bold"
    assert not answer.find_elements(By.TAG_NAME, "img") and not answer.find_elements(By.TAG_NAME, "script")
    links = answer.find_elements(By.TAG_NAME, "a")
    assert [a.get_attribute("href") for a in links] == ["https://example.org/x"]
    assert links[0].get_attribute("rel") == "noopener noreferrer nofollow"
    assert answer.find_element(By.CSS_SELECTOR, ".code-block code").text == "<script>window.__pwned = 4</script>"
    user = page.find_element(By.CSS_SELECTOR, ".message.user .text")
    assert user.text == '<img src=x onerror="window.__pwned = 5">' and not user.find_elements(By.TAG_NAME, "img")
    assert by_id(page, "messages").find_elements(By.TAG_NAME, "script") == []
    shot(page, "12-html-as-text")
