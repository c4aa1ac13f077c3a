"""lamino.Operator: planned once, applied many times; exact adjoint; the bits of `lamino apply`."""

import json
import math
import subprocess
import threading

import numpy as np
import pytest

import lamino

TILT = 30.0  # degrees from the tomography plane (phi = 120 degrees)


def random_complex(shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def uneven_angles(n):
    """Angles over a full turn, not equispaced (the operator takes any list)."""
    return np.sort(np.random.default_rng(7).uniform(0.0, 2.0 * np.pi, n))


@pytest.fixture(scope="module")
def operator():
    return lamino.Operator((16, 16, 16), uneven_angles(12), TILT, center=8.75)


def test_adjoint_in_numpy(operator):
    """<L u, d> = <u, L* d> to f32 precision: the mismatch, relative to |L u| |d| (the bound of
    the inner products), stays within a few f32 rounding errors per level of the computation."""
    u = random_complex(operator.volume_shape, 1)
    d = random_complex(operator.data_shape, 2)
    lu = operator.forward(u)
    lad = operator.adjoint(d)
    assert lu.dtype == np.complex64 and lu.shape == operator.data_shape
    assert lad.dtype == np.complex64 and lad.shape == operator.volume_shape
    lhs = np.vdot(d.astype(np.complex128), lu.astype(np.complex128))
    rhs = np.vdot(lad.astype(np.complex128), u.astype(np.complex128))
    scale = np.linalg.norm(lu.astype(np.complex128)) * np.linalg.norm(d.astype(np.complex128))
    mismatch = abs(lhs - rhs) / scale
    n = u.size + d.size
    tolerance = 4.0 * np.finfo(np.float32).eps * math.log2(n)
    assert mismatch <= tolerance, (mismatch, tolerance)


def test_repeated_application_gives_the_same_bits(operator):
    """The plan is reused: applying twice, or from two threads at once, gives the same bits."""
    u = random_complex(operator.volume_shape, 3)
    first = operator.forward(u)
    results = [None, None]

    def apply(i):
        results[i] = operator.forward(u)

    threads = [threading.Thread(target=apply, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in [operator.forward(u)] + results:
        assert np.array_equal(r.view(np.uint32), first.view(np.uint32))


def test_a_real_volume_is_read_as_complex(operator):
    u = np.random.default_rng(4).standard_normal(operator.volume_shape)
    from_real = operator.forward(u)  # float64: converted once to complex64
    from_complex = operator.forward(u.astype(np.complex64))
    assert np.array_equal(from_real.view(np.uint32), from_complex.view(np.uint32))


def test_same_bits_as_the_command_line(tmp_path, lamino_cli):
    """The Python operator and `lamino apply forward|adjoint` on the same input and geometry
    give the same bits (one library path). The detector is left to its default, (z, x)."""
    theta = uneven_angles(10)
    shape = (16, 16, 12)
    op = lamino.Operator(shape, theta, TILT, center=5.5)
    geometry = {
        "n0": 16,
        "n1": 16,
        "n2": 12,
        "deth": 16,
        "detw": 12,
        "theta": theta.tolist(),
        "phi": math.radians(90.0 + TILT),
        "center": 5.5,
    }
    (tmp_path / "g.json").write_text(json.dumps(geometry))
    for what, x in [("forward", random_complex(shape, 5)), ("adjoint", random_complex(op.data_shape, 6))]:
        np.save(tmp_path / "x.npy", x)
        run = subprocess.run(
            [lamino_cli, "apply", what, "--geometry", tmp_path / "g.json",
             "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy"],
            capture_output=True, text=True,
        )
        assert run.returncode == 0, run.stderr
        cli = np.load(tmp_path / "y.npy")
        python = getattr(op, what)(x)
        assert cli.dtype == python.dtype == np.complex64, what
        assert cli.shape == python.shape, what
        assert np.array_equal(cli.view(np.uint32), python.view(np.uint32)), what


def test_properties(operator):
    assert operator.volume_shape == (16, 16, 16)
    assert operator.data_shape == (12, 16, 16)
    assert operator.center == 8.75
    assert "lamino.Operator(volume_shape=(16, 16, 16), angles=12, tilt=30" in repr(operator)


def test_errors_name_the_argument(operator):
    with pytest.raises(lamino.InputError, match="volume: shape \\[16, 16, 8\\], but this operator reads \\[16, 16, 16\\]"):
        operator.forward(np.zeros((16, 16, 8), np.complex64))
    with pytest.raises(lamino.InputError, match="data: expected 3 dimensions"):
        operator.adjoint(np.zeros((12, 256), np.complex64))
    bad = np.zeros(operator.volume_shape, np.complex64)
    bad[1, 2, 3] = complex(0.0, np.nan)
    with pytest.raises(lamino.InputError, match="volume: value at index \\[1, 2, 3\\] is not finite"):
        operator.forward(bad)
    with pytest.raises(lamino.InputError, match="volume: dtype bool"):
        operator.forward(np.zeros(operator.volume_shape, bool))


def test_bad_geometry_is_a_geometry_error():
    with pytest.raises(lamino.GeometryError, match="must be even"):
        lamino.Operator((15, 16, 16), np.zeros(4), TILT)
    with pytest.raises(lamino.GeometryError, match="tilt = 90 degrees"):
        lamino.Operator((16, 16, 16), np.zeros(4), 90.0)
    with pytest.raises(lamino.GeometryError, match="tilt = NaN degrees"):
        lamino.Operator((16, 16, 16), np.zeros(4), float("nan"))
    with pytest.raises(lamino.GeometryError, match="rotation axis at column 40"):
        lamino.Operator((16, 16, 16), np.zeros(4), TILT, center=40.0)
    with pytest.raises(lamino.InputError, match="theta: value at index \\[1\\] is not finite"):
        lamino.Operator((16, 16, 16), [0.0, np.inf], TILT)
