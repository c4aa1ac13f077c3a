"""pytest setup: the tests run on whatever adapter exists, lavapipe included (CI has no GPU)."""

import os
import pathlib
import subprocess

import pytest

# Before lamino opens any device: the software adapter is allowed for the whole session (a test
# that checks the refusal removes it with monkeypatch).
os.environ["LAMINO_ALLOW_SOFTWARE_GPU"] = "1"
# The Vulkan loader complains on every start without it.
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def lamino_cli():
    """The command-line binary of the same checkout: LAMINO_CLI when set (CI, where `cargo test`
    has built it: building it again after `maturin develop` would recompile the core crate),
    else built by cargo into the shared target/."""
    if os.environ.get("LAMINO_CLI"):
        return pathlib.Path(os.environ["LAMINO_CLI"])
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    subprocess.run(["cargo", "build", "-q", "--bin", "lamino"], cwd=ROOT, check=True)
    binary = target / "debug" / "lamino"
    assert binary.is_file(), f"cargo build left no {binary}"
    return binary
