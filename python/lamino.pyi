"""Type stubs of the lamino extension module (numpy in, numpy out; see docs/python.md)."""

from typing import Any, Callable, Literal, Optional, Sequence, TypedDict, Union

import numpy as np
import numpy.typing as npt

__version__: str

# ---- Exceptions ------------------------------------------------------------------------------

class LaminoError(Exception): ...
class GeometryError(LaminoError): ...
class InputError(LaminoError): ...
class DeviceError(LaminoError): ...
class OutOfMemoryError(LaminoError): ...

# ---- Devices ---------------------------------------------------------------------------------

class Adapter(TypedDict):
    index: int
    name: str
    backend: str
    type: str
    software: bool
    driver: str
    max_buffer_bytes: int

Device = Union[int, str]

def devices() -> list[Adapter]: ...

# ---- Reconstruction, simulation, scores (python/src/reconstruct.rs, simulate.rs) -------------

# ---- Operator, preprocessing, BaSiC, files (python/src/operator.rs, basic.rs, preprocess.rs) --
