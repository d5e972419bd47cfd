"""pytest fixtures for the Python tests of `phi4mm serve` (the spec's section I): the server binary
started as its own process on the tiny fixture model at 127.0.0.1:<ephemeral port>, one per
configuration (plain; `--max-running 1 --max-queue 1` for overload; with an API key), each stopped
with SIGTERM at the end and required to exit 0; the official `openai` client pointed at it.
"""
import os

import openai
import pytest

import phi4mm_server

API_KEY = "sk-test-0123456789"


def pytest_configure(config):
    if not os.access(phi4mm_server.binary(), os.X_OK):
        raise pytest.UsageError(f"no server binary at {phi4mm_server.binary()} (build it, or set PHI4MM_BIN)")


def _serve(*args, **kw):
    s = phi4mm_server.Server(*args, **kw)
    yield s
    rc = s.stop()
    assert rc == 0, "phi4mm serve did not exit 0 on SIGTERM"


@pytest.fixture(scope="session")
def server():
    # --sse-ping-seconds 0.2 makes the keep-alive comments of the spec visible within a test.
    yield from _serve("--sse-ping-seconds", "0.2")


@pytest.fixture(scope="session")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model_name(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def small_server(wide_model):
    """One running slot and one queue place: the third simultaneous request gets 429. On the wide
    model, so that a request can keep the slot busy for seconds (the tiny model decodes 480 tokens,
    its whole context, in a quarter of a second)."""
    yield from _serve("--max-running", "1", "--max-queue", "1", model=wide_model)


@pytest.fixture(scope="module")
def keyed_server():
    yield from _serve("--api-key", API_KEY)


@pytest.fixture(scope="session")
def wide_model(tmp_path_factory):
    """The tiny model with a 16384-position context (phi4mm_server.wide_model): room for two images,
    a chat about one, a 3000x3000 image at 36 crops, a 12000-token prompt."""
    return phi4mm_server.wide_model(str(tmp_path_factory.mktemp("tiny-wide") / "wide"), 16384)


@pytest.fixture(scope="session")
def wide_server(wide_model):
    yield from _serve(model=wide_model)


@pytest.fixture(scope="session")
def wide_client(wide_server):
    return openai.OpenAI(base_url=wide_server.base_url, api_key="unused", max_retries=0, timeout=120)
