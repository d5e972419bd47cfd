"""Helpers shared by the Python tests of `phi4mm serve` and by the load driver: start the server
binary as a separate process on a loopback port (`--port 0`, the port read from the
"listening on http://HOST:PORT" line it prints), wait for /health, stop it with SIGTERM; read
/metrics into a dict; raw HTTP over a socket (for byte-level checks and disconnects); fixture
paths and data URIs; and `phi4mm run` for the same prompt and media (the greedy reference).

Paths come from the environment when set (PHI4MM_BIN, PHI4MM_MODEL), else the build/ and
tests/fixtures/ folders of the repository this file lives in. Nothing here talks to anything but
127.0.0.1.
"""
import base64
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "fixtures")


def binary():
    return os.environ.get("PHI4MM_BIN", os.path.join(REPO, "build", "phi4mm"))


def model_dir():
    return os.environ.get("PHI4MM_MODEL", os.path.join(FIXTURES, "tiny", "orig"))


def fixture(rel):
    return os.path.join(FIXTURES, rel)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def b64(path):
    return base64.b64encode(read_bytes(path)).decode()


def data_uri(path, mime):
    return f"data:{mime};base64,{b64(path)}"


def image_part(path, detail=None):
    url = {"url": data_uri(path, "image/png")}
    if detail:
        url["detail"] = detail
    return {"type": "image_url", "image_url": url}


def audio_part(path, fmt=None):
    fmt = fmt or os.path.splitext(path)[1][1:]
    return {"type": "input_audio", "input_audio": {"data": b64(path), "format": fmt}}


def wide_model(folder, context):
    """A copy of the tiny model in `folder` (links to its files) whose context holds `context`
    positions instead of 512, for prompts with two images or a multi-turn chat about an image
    (one image alone takes 481 of the 512). Returns the folder."""
    src = model_dir()
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(src):
        if name != "config.json":
            os.symlink(os.path.join(src, name), os.path.join(folder, name))
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["max_position_embeddings"] = context
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return folder


def text_part(text):
    return {"type": "text", "text": text}


class Server:
    """One `phi4mm serve` process on 127.0.0.1:<ephemeral>."""

    def __init__(self, *extra_args, model=None, env=None, ready_timeout=120, wait=True):
        self.log = tempfile.NamedTemporaryFile(prefix="phi4mm-serve-", suffix=".log", delete=False)
        self.out = tempfile.NamedTemporaryFile(prefix="phi4mm-serve-", suffix=".out", delete=False)
        cmd = [binary(), "serve", "-m", model or model_dir(), "--host", "127.0.0.1", "--port", "0", *extra_args]
        e = dict(os.environ)
        e.pop("PHI4MM_API_KEY", None)
        e.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.log, stdin=subprocess.DEVNULL, env=e)
        self.port = self._read_port(ready_timeout)
        self.host = "127.0.0.1"
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        if wait:
            self.wait_ready(ready_timeout)

    @property
    def pid(self):
        return self.proc.pid

    def _read_port(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with open(self.out.name) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"phi4mm serve exited with {self.proc.returncode}: {self.stderr()}")
            time.sleep(0.02)
        raise RuntimeError("phi4mm serve printed no 'listening on' line")

    def wait_ready(self, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            status, _, _ = self.request("GET", "/health")
            if status == 200:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"phi4mm serve exited with {self.proc.returncode}: {self.stderr()}")
            time.sleep(0.05)
        raise RuntimeError("phi4mm serve did not become healthy")

    def stderr(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, timeout=60):
        """SIGTERM, then the exit status (0 expected)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.log, self.out):
            f.close()
            os.unlink(f.name)
        return self.proc.returncode

    # --- HTTP ------------------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict with lower-case names, body bytes); never raises on a status."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = dict(headers or {})
        if data is not None and "Content-Type" not in h:
            h["Content-Type"] = "application/json"
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def post_json(self, path, body, headers=None):
        status, h, raw = self.request("POST", path, body, headers)
        return status, h, json.loads(raw) if raw.strip() else None

    def metrics(self, headers=None):
        status, _, raw = self.request("GET", "/metrics", headers=headers)
        assert status == 200, raw
        return parse_metrics(raw.decode())

    def rss_bytes(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def wait_metric(self, name, pred, timeout=5.0, step=0.02):
        """Polls /metrics until pred(value of name) holds; returns (held, last value)."""
        end = time.monotonic() + timeout
        v = None
        while True:
            v = self.metrics().get(name, 0.0)
            if pred(v):
                return True, v
            if time.monotonic() > end:
                return False, v
            time.sleep(step)

    def wait_idle(self, timeout=5.0):
        """Until nothing runs or waits and no KV is reserved; returns the seconds it took (or None)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            m = self.metrics()
            if m["phi4mm_requests_running"] == 0 and m["phi4mm_requests_waiting"] == 0 and m["phi4mm_kv_cache_bytes"] == 0:
                return time.monotonic() - start
            time.sleep(0.02)
        return None

    # --- raw sockets -----------------------------------------------------------------------------
    def raw_post(self, path, body, extra_headers=""):
        """Connects, sends a POST with a JSON body, returns the socket (the answer is not read)."""
        data = json.dumps(body).encode()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n{extra_headers}\r\n".encode() + data)
        return s


def read_until(sock, needle, have=b"", limit=1 << 22):
    """Reads from sock until `needle` occurs (counted from the start of `have`); returns all bytes read."""
    buf = have
    while needle not in buf and len(buf) < limit:
        more = sock.recv(65536)
        if not more:
            break
        buf += more
    return buf


def dechunk(body):
    """The payload of a chunked HTTP body (as far as it was read)."""
    out, i = b"", 0
    while True:
        eol = body.find(b"\r\n", i)
        if eol < 0:
            return out
        size = int(body[i:eol].split(b";")[0], 16)
        if size == 0:
            return out
        out += body[eol + 2:eol + 2 + size]
        i = eol + 2 + size + 2


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)$")


def parse_metrics(text):
    """Prometheus text -> {"name{labels}": value} (labels exactly as the server writes them)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def sse_events(raw):
    """The data: payloads of an SSE body, in order (comments and blank lines dropped)."""
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(line[6:])
    return events


def run_cli(prompt, images=(), audios=(), max_tokens=12, extra=(), model=None):
    """`phi4mm run` greedy on the same model; the answer as text (the newline it appends removed)."""
    cmd = [binary(), "run", "-m", model or model_dir(), "-p", prompt, "-n", str(max_tokens), "--temperature", "0", *extra]
    for i in images:
        cmd += ["--image", i]
    for a in audios:
        cmd += ["--audio", a]
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = r.stdout.decode()
    assert out.endswith("\n"), out
    return out[:-1]
