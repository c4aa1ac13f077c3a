"""lamino.devices() and the device policy."""

import lamino
import numpy as np
import pytest


def test_devices_lists_adapters_with_the_documented_keys():
    found = lamino.devices()
    assert isinstance(found, list)
    assert len(found) >= 1, "lavapipe or a GPU must be installed for the tests"
    for i, d in enumerate(found):
        assert d["index"] == i
        assert {"index", "name", "backend", "type", "software"} <= set(d)
        assert isinstance(d["name"], str) and d["name"]


def test_exception_classes_derive_from_lamino_error():
    for cls in (lamino.GeometryError, lamino.InputError, lamino.DeviceError, lamino.OutOfMemoryError):
        assert issubclass(cls, lamino.LaminoError)
    assert issubclass(lamino.LaminoError, Exception)


SIZE = 16


def test_reconstruct_on_two_devices_gives_the_one_device_bits():
    """device= takes several adapters as the CLI's --device 0,0 does (tests/cli.rs): the same
    adapter opened twice is two devices, each computing its share of every iteration."""
    s = lamino.simulate("chip", size=SIZE, angles=SIZE, tilt_deg=30)
    args = (s["projections"], s["theta"])
    one = lamino.reconstruct(*args, tilt=30.0, iterations=2, device=0)
    two = lamino.reconstruct(*args, tilt=30.0, iterations=2, device=[0, 0])
    # The command line's spelling leases the same two devices.
    spelled = lamino.reconstruct(*args, tilt=30.0, iterations=2, device="0,0")
    assert one.shape == two.shape == (SIZE, SIZE, SIZE)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
    assert np.array_equal(one.view(np.uint32), spelled.view(np.uint32))


@pytest.mark.parametrize("device", [[], [0, "x"], "0,x", "fastest"])
def test_bad_device_lists_are_input_errors(device):
    s = lamino.simulate("chip", size=SIZE, angles=SIZE, tilt_deg=30)
    with pytest.raises((lamino.InputError, TypeError), match="device"):
        lamino.reconstruct(s["projections"], s["theta"], tilt=30.0, device=device)


def test_one_device_calls_refuse_several():
    theta = np.linspace(0, np.pi, 8, endpoint=False)
    with pytest.raises(lamino.InputError, match="runs on one device"):
        lamino.Operator((16, 16, 16), theta, 30.0, device=[0, 0])
    with pytest.raises(lamino.InputError, match="runs on one device"):
        lamino.BaSiC(device="all")


def test_several_devices_follow_the_software_policy(monkeypatch):
    software = [d["index"] for d in lamino.devices() if d["software"]]
    if not software:
        pytest.skip("no software adapter on this machine")
    s = lamino.simulate("chip", size=SIZE, angles=SIZE, tilt_deg=30)
    # allow_software_gpu=False refuses the software adapter whatever the environment says.
    with pytest.raises(lamino.DeviceError, match="software adapter"):
        lamino.reconstruct(s["projections"], s["theta"], tilt=30.0, iterations=1,
                           device=[software[0]] * 2, allow_software_gpu=False)
    monkeypatch.delenv("LAMINO_ALLOW_SOFTWARE_GPU")
    with pytest.raises(lamino.DeviceError, match="software adapter"):
        lamino.reconstruct(s["projections"], s["theta"], tilt=30.0, iterations=1,
                           device=[software[0]] * 2)
