"""Errors are lamino exceptions naming the argument, never a crash."""

import lamino
import numpy as np
import pytest


@pytest.fixture(scope="module")
def scan():
    return lamino.simulate("chip", size=16, angles=16, tilt_deg=30.0)


def test_wrong_dtype_is_an_input_error(scan):
    with pytest.raises(lamino.InputError, match="proj: dtype complex64"):
        lamino.reconstruct(scan["projections"].astype(np.complex64), scan["theta"], tilt=30)
    with pytest.raises(lamino.InputError, match="theta: dtype <U"):
        lamino.reconstruct(scan["projections"], ["a"] * 16, tilt=30)


def test_wrong_shape_is_an_input_error(scan):
    with pytest.raises(lamino.InputError, match=r"proj: expected 3 dimensions, got 2"):
        lamino.reconstruct(scan["projections"][0], scan["theta"], tilt=30)
    with pytest.raises(lamino.InputError, match="theta: 15 angles for 16 projections"):
        lamino.reconstruct(scan["projections"], scan["theta"][:15], tilt=30)
    with pytest.raises(lamino.InputError, match=r"shifts: has shape \[15, 2\]; expected \(16, 2\)"):
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, shifts=np.zeros((15, 2)))
    with pytest.raises(lamino.InputError, match="truth: shape"):
        lamino.score(scan["truth"], scan["truth"][:8])


def test_nan_is_an_input_error_with_its_index(scan):
    proj = scan["projections"].copy()
    proj[3, 4, 5] = np.nan
    with pytest.raises(lamino.InputError, match=r"proj: value at index \[3, 4, 5\] is not finite"):
        lamino.reconstruct(proj, scan["theta"], tilt=30)
    shifts = np.zeros((16, 2))
    shifts[2, 1] = np.inf
    with pytest.raises(lamino.InputError, match=r"shifts: value at index \[2, 1\] is not finite"):
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, shifts=shifts)


def test_other_layouts_and_dtypes_are_converted(scan):
    """Fortran order and float64 are converted once; the scores agree with float32 input."""
    fortran = np.asfortranarray(scan["truth"].astype(np.float64))
    a = lamino.score(fortran, scan["truth"])
    assert a["rel_l2"] == 0.0 and a["psnr"] is None


def test_bad_geometry_is_a_geometry_error(scan):
    with pytest.raises(lamino.GeometryError, match="center|rotation axis"):
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, center=1e6, iterations=1)
    with pytest.raises(lamino.GeometryError):
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=90, iterations=1)


def test_bad_options_are_input_errors(scan):
    args = (scan["projections"], scan["theta"])
    with pytest.raises(lamino.InputError, match="remove_stripe"):
        lamino.reconstruct(*args, tilt=30, remove_stripe="ti")
    with pytest.raises(lamino.InputError, match="memo"):
        lamino.reconstruct(*args, tilt=30, memo="sometimes")
    with pytest.raises(lamino.InputError, match="normal_operator"):
        lamino.reconstruct(*args, tilt=30, normal_operator="fft")
    with pytest.raises(lamino.InputError, match="iterations"):
        lamino.reconstruct(*args, tilt=30, iterations=0)
    with pytest.raises(lamino.InputError, match="device"):
        lamino.reconstruct(*args, tilt=30, device="fastest")
    with pytest.raises(lamino.InputError, match="progress"):
        lamino.reconstruct(*args, tilt=30, progress=3)
    with pytest.raises(lamino.InputError, match="phantom"):
        lamino.simulate("cat")


def test_each_solver_parameter_is_named(scan):
    """The argument at fault, not its neighbour (alpha=nan was reported as "iterations")."""
    args = (scan["projections"], scan["theta"])
    with pytest.raises(lamino.InputError, match="^alpha: NaN: it must be finite"):
        lamino.reconstruct(*args, tilt=30, alpha=np.nan, iterations=1)
    with pytest.raises(lamino.InputError, match="^alpha: -1: it must be"):
        lamino.reconstruct(*args, tilt=30, alpha=-1.0)
    with pytest.raises(lamino.InputError, match="^max_iterations: 0: it must be from 1 to 100000"):
        lamino.reconstruct(*args, tilt=30, max_iterations=0)
    with pytest.raises(lamino.InputError, match="^iterations: 0: it must be from 1 to 100000"):
        lamino.reconstruct(*args, tilt=30, iterations=0)


def test_binning_is_tomocupys_exponent(scan):
    """0 to 3, as the command line's --binning; the rest refused before any work."""
    volume = lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, iterations=1,
                                binning=1)
    assert volume.shape == (8, 8, 8)
    for binning in (4, 8, 2**63):
        with pytest.raises(lamino.InputError, match=f"^binning: {binning}: expected tomocupy's "
                           "exponent 0 to 3"):
            lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, binning=binning)


def test_degrees_are_refused_where_radians_are_taken(scan):
    """Angles spanning more than a turn and a step cannot be radians: refused by every call
    that takes theta, as the command line refuses radians it cannot read as radians."""
    degrees = np.rad2deg(scan["theta"])
    with pytest.raises(lamino.GeometryError, match="theta: .* more than a turn .* pass radians"):
        lamino.reconstruct(scan["projections"], degrees, tilt=30, iterations=1)
    with pytest.raises(lamino.GeometryError, match="theta: .* pass radians"):
        lamino.Operator((16, 16, 16), degrees, 30.0)
    # A full turn with both ends, and a few degrees' worth, are radians.
    assert lamino.reconstruct(scan["projections"], np.linspace(0, 2 * np.pi, 16), tilt=30,
                              iterations=1).shape == (16, 16, 16)


def test_software_adapter_refused_without_opt_in(scan, monkeypatch):
    software = [d["index"] for d in lamino.devices() if d["software"]]
    if not software:
        pytest.skip("no software adapter on this machine")
    monkeypatch.delenv("LAMINO_ALLOW_SOFTWARE_GPU")
    with pytest.raises(lamino.DeviceError, match="software adapter") as e:
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, device=software[0])
    # The advice in Python's terms.
    assert "pass allow_software_gpu=True" in str(e.value) and "lamino.devices()" in str(e.value)
    assert "--" not in str(e.value)
    with pytest.raises(lamino.DeviceError, match="software adapter"):
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, device=software[0],
                           allow_software_gpu=False)
    with pytest.raises(lamino.DeviceError, match="no adapter with index 99"):
        lamino.reconstruct(scan["projections"], scan["theta"], tilt=30, device=99,
                           allow_software_gpu=True)
