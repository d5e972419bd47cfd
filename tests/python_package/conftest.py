"""pytest fixtures for the Python package's tests (scripts/python_package_checks.sh): the
installed `phi4mm` package, one Model of the trained fixture (a 4-layer Phi-4-mini-shaped decoder
with the real tokenizer, its vision and speech encoders and LoRA adapters) shared by the module,
and the `phi4mm` program installed with the package, for parity with `phi4mm run`."""
import os
import pathlib

import pytest

import phi4mm

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
TRAINED = FIXTURES / "trained" / "orig"


@pytest.fixture(scope="session")
def model():
    return phi4mm.Model(TRAINED, threads=int(os.environ.get("PHI4MM_TEST_THREADS", "2")))


@pytest.fixture(scope="session")
def cli():
    path = phi4mm.cli_path()
    assert os.access(path, os.X_OK), f"the package has no phi4mm program at {path}"
    return path
