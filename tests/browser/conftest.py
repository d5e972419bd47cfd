"""pytest fixtures for the chat page's browser tests: `phi4mm serve` on the trained fixture (its own
process on 127.0.0.1:<ephemeral>, via tests/python/phi4mm_server.py), a second one with an API key,
and headless Chromium from Debian (`chromium`, `chromium-driver`) driven by Selenium, with the fake
media devices on: the microphone plays tests/fixtures/audio/speech_16k_pcm16.wav and permission
prompts are granted. Screenshots go to $PHI4MM_SCREENSHOTS (default build/webui-screenshots).
"""
import os
import shutil
import sys
import tempfile

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import phi4mm_server  # noqa: E402

API_KEY = "sk-page-0123456789"
MIC_CLIP = phi4mm_server.fixture("audio/speech_16k_pcm16.wav")
SCREENSHOTS = os.environ.get("PHI4MM_SCREENSHOTS", os.path.join(phi4mm_server.REPO, "build", "webui-screenshots"))


def _find(names, env):
    if os.environ.get(env):
        return os.environ[env]
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    raise pytest.UsageError(f"none of {names} found (install Debian's chromium and chromium-driver, or set {env})")


def pytest_configure(config):
    if not os.access(phi4mm_server.binary(), os.X_OK):
        raise pytest.UsageError(f"no server binary at {phi4mm_server.binary()} (build it, or set PHI4MM_BIN)")
    os.makedirs(SCREENSHOTS, exist_ok=True)


def _serve(*args):
    s = phi4mm_server.Server(*args, model=phi4mm_server.fixture("trained/orig"))
    yield s
    assert s.stop() == 0, "phi4mm serve did not exit 0 on SIGTERM"


@pytest.fixture(scope="session")
def server():
    yield from _serve()


@pytest.fixture(scope="session")
def keyed_server():
    yield from _serve("--api-key", API_KEY)


@pytest.fixture(scope="session")
def downloads():
    d = tempfile.mkdtemp(prefix="phi4mm-downloads-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def browser(downloads):
    o = webdriver.ChromeOptions()
    o.binary_location = _find(["chromium", "chromium-browser"], "PHI4MM_CHROMIUM")
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
              "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
              f"--use-file-for-fake-audio-capture={MIC_CLIP}", "--no-first-run", "--disable-extensions"]:
        o.add_argument(a)
    o.add_experimental_option("prefs", {"download.default_directory": downloads,
                                        "download.prompt_for_download": False})
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=o, service=Service(_find(["chromedriver"], "PHI4MM_CHROMEDRIVER")))
    d.set_script_timeout(60)
    yield d
    d.quit()


@pytest.fixture
def page(browser, server):
    """The page at the plain server, with empty storage and the wide window."""
    browser.set_window_size(1280, 900)
    browser.get(f"http://127.0.0.1:{server.port}/")
    browser.execute_script("localStorage.clear()")
    browser.get(f"http://127.0.0.1:{server.port}/")
    browser.get_log("browser")  # start each test with an empty console
    return browser


def shot(browser, name):
    browser.save_screenshot(os.path.join(SCREENSHOTS, f"{name}.png"))
