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


def test_backend_lists_and_opens_only_that_apis_adapters():
    """backend= is the command line's --backend: devices() lists that API's adapters, indexed
    among themselves, and device= indexes them (tests/cli.rs compares the CLI's GL and Vulkan
    volumes)."""
    every = lamino.devices()
    for name in ("vulkan", "gl"):
        listed = lamino.devices(backend=name)
        assert [d["index"] for d in listed] == list(range(len(listed)))
        assert all(d["backend"].lower() == name for d in listed), listed
        assert len(listed) == sum(d["backend"].lower() == name for d in every)
    gl = lamino.devices(backend="gl")
    if not gl or not lamino.devices(backend="vulkan"):
        pytest.skip("GL and Vulkan adapters are both needed (CI installs Mesa's EGL)")
    s = lamino.simulate("chip", size=SIZE, angles=SIZE, tilt_deg=30)
    args = (s["projections"], s["theta"])
    on_vulkan = lamino.reconstruct(*args, tilt=30.0, iterations=2, device=0, backend="vulkan")
    on_gl = lamino.reconstruct(*args, tilt=30.0, iterations=2, device=0, backend="gl")
    # Another shader compiler: close, not the same bits (the CLI's test allows 1e-4).
    assert np.linalg.norm(on_gl - on_vulkan) <= 1e-4 * np.linalg.norm(on_vulkan)


def test_portable_limits_give_the_adapters_volume():
    """limits="portable" (WebGPU's defaults) is the command line's --limits portable: the same
    kernels within smaller bindings, the same volume on this adapter."""
    s = lamino.simulate("chip", size=SIZE, angles=SIZE, tilt_deg=30)
    args = (s["projections"], s["theta"])
    adapter = lamino.reconstruct(*args, tilt=30.0, iterations=2, limits="adapter")
    portable = lamino.reconstruct(*args, tilt=30.0, iterations=2, limits="portable")
    assert np.linalg.norm(portable - adapter) <= 1e-6 * np.linalg.norm(adapter)


@pytest.mark.parametrize("argument, value", [("backend", "opengl"), ("backend", ""),
                                             ("limits", "webgpu"), ("limits", "")])
def test_bad_backend_or_limits_are_input_errors_naming_the_argument(argument, value):
    theta = np.linspace(0, np.pi, 8, endpoint=False)
    with pytest.raises(lamino.InputError, match=argument):
        lamino.Operator((16, 16, 16), theta, 30.0, **{argument: value})
    if argument == "backend":
        with pytest.raises(lamino.InputError, match="backend"):
            lamino.devices(backend=value)
