"""lamino.BaSiC: BaSiCPy's names over the fit and correction of `lamino flatfield fit|apply`."""

import ast
import pathlib
import re
import subprocess

import numpy as np
import pytest

import lamino

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The smallest of the repository's BaSiC fixtures (assets/basic/README.md): 48 u8 time-lapse
# images of 128 x 171.
IMAGES = ROOT / "assets" / "basic" / "timelapse_nanog.images.npy"

# BaSiCPy's parameters that lamino.BaSiC takes with the same meaning (docs/python.md lists them).
BASICPY_NAMES = {
    "get_darkfield": False,
    "smoothness_flatfield": 2.5,
    "smoothness_darkfield": 0.5,
    "max_iterations": 300,
    "optimization_tol": 1e-5,
    "max_reweight_iterations": 10,
    "reweighting_tol": 1e-2,
    "working_size": 64,
    "epsilon": 0.2,
    "sort_intensity": True,
}


def cli(binary, *args):
    run = subprocess.run([binary, *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def images():
    return np.load(IMAGES)


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_fit_and_transform_are_the_bits_of_the_command_line(tmp_path, lamino_cli, images):
    """The same fixture through `lamino flatfield fit` / `apply` and through BaSiC.fit /
    transform: flatfield, darkfield, baseline and the corrected stack agree bit for bit."""
    cli(lamino_cli, "flatfield", "fit", IMAGES, "--out", tmp_path / "fields")
    cli(lamino_cli, "flatfield", "apply", IMAGES, "--fields", tmp_path / "fields",
        "--out", tmp_path / "corrected")
    basic = lamino.BaSiC()
    assert basic.flatfield is None and basic.baseline is None and basic.report is None
    basic.fit(images)  # uint8, converted once to float32 (exactly)
    for name in ["flatfield", "darkfield", "baseline"]:
        want = np.load(tmp_path / "fields" / f"{name}.npy")
        got = getattr(basic, name)
        assert got.shape == want.shape, name
        assert np.array_equal(bits(got), bits(want)), name
    corrected = basic.transform(images)
    want = np.load(tmp_path / "corrected" / "corrected.npy")
    assert corrected.dtype == np.float32 and np.array_equal(bits(corrected), bits(want))
    assert basic.flatfield.shape == images.shape[1:] and basic.baseline.shape == images.shape[:1]
    report = basic.report
    assert report["lambda_flatfield"] > 0 and isinstance(report["warnings"], list)
    # fit_transform: both steps at once, the same bits.
    again = lamino.BaSiC()
    assert np.array_equal(bits(again.fit_transform(images)), bits(corrected))
    assert np.array_equal(bits(again.flatfield), bits(basic.flatfield))


def test_basicpy_names_are_taken_and_read_back():
    basic = lamino.BaSiC(**BASICPY_NAMES)
    for name, value in BASICPY_NAMES.items():
        assert getattr(basic, name) == value, name
    text = (ROOT / "docs" / "python.md").read_text()
    section = text.split("### `BaSiC`", 1)[1].split("\n## ", 1)[0]
    for name in BASICPY_NAMES:
        assert f"`{name}`" in section, f"docs/python.md does not list {name}"


def test_docstring_defaults_are_the_defaults():
    """Every `name : type, default VALUE` of the docstring is what BaSiC() holds: the defaults
    come from the core crate's parameters, the docstring must not drift from them."""
    basic = lamino.BaSiC()
    documented = re.findall(r"^\s*(\w+) : [^\n]*?, default ([^\s;]+)", lamino.BaSiC.__doc__, re.M)
    names = [name for name, _ in documented]
    assert set(BASICPY_NAMES) <= set(names), names
    for name, text in documented:
        if name == "device":
            continue
        value, want = getattr(basic, name), ast.literal_eval(text)
        if isinstance(want, float):  # flat_min is float32
            assert value == pytest.approx(want, rel=1e-7), name
        else:
            assert value == want, name


def test_errors(images):
    basic = lamino.BaSiC()
    with pytest.raises(lamino.InputError, match="call fit first"):
        basic.transform(images)
    with pytest.raises(lamino.InputError, match="optimization_tol: 0: needs a finite value above 0"):
        lamino.BaSiC(optimization_tol=0.0)
    with pytest.raises(lamino.InputError, match="smoothness_flatfield: -1: needs a finite value of at least 0"):
        lamino.BaSiC(smoothness_flatfield=-1.0)
    with pytest.raises(lamino.InputError, match="smoothness: sharp: needs standard or auto-data"):
        lamino.BaSiC(smoothness="sharp")
    with pytest.raises(lamino.InputError, match="flat_min"):
        lamino.BaSiC(flat_min=0.0)
    with pytest.raises(TypeError):
        lamino.BaSiC(fitting_mode="ladmap")  # BaSiCPy's, with no counterpart here
    bad = images[:4].astype(np.float32)
    bad[2, 5, 7] = np.inf
    with pytest.raises(lamino.InputError, match="images: value at index \\[2, 5, 7\\] is not finite"):
        basic.fit(bad)
    with pytest.raises(lamino.InputError, match="all 4 images are entirely zero"):
        basic.fit(np.zeros((4, 16, 16), np.uint16))
    with pytest.raises(lamino.InputError, match="images: expected 3 dimensions"):
        basic.fit(images[0])
