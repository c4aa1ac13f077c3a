"""lamino.devices() and the device policy."""

import lamino
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
