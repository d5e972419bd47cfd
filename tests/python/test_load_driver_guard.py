"""The load driver (section J) refuses any base URL that is not loopback, before connecting."""
import os
import subprocess
import sys

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load_driver.py")


def test_load_driver_refuses_non_loopback_urls():
    for url in ("http://192.0.2.1:8080/v1", "http://example.com/v1", "http://[2001:db8::1]:80/v1"):
        r = subprocess.run([sys.executable, DRIVER, "--base-url", url, "--pid", "1"], capture_output=True,
                           timeout=60)
        assert r.returncode != 0 and b"refusing" in r.stderr, r.stderr
