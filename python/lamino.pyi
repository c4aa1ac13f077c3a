"""Type stubs of the lamino extension module (numpy in, numpy out; see docs/python.md)."""

from typing import Any, Callable, Literal, Optional, TypedDict, Union

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

ArrayLike = npt.ArrayLike
Volume = npt.NDArray[np.float32]

class Defaults(TypedDict):
    alpha: float
    max_iterations: int
    inner_iterations: int
    rho0: float
    memo: str

DEFAULTS: Defaults
"""The solver's defaults, from the library's parameter definitions."""

class IterationReport(TypedDict):
    iteration: int
    total: int
    elapsed_s: float
    eta_s: float
    data_term: float
    tv_term: float
    dual_term: float
    penalty_term: float
    lagrangian: float
    primal_residual: float
    dual_residual: float
    rho: float
    change: float
    primal_relative: float
    dual_relative: float

def reconstruct(
    proj: ArrayLike,
    theta: ArrayLike,
    *,
    tilt: float,
    center: Optional[float] = None,
    volume_shape: Optional[tuple[int, int, int]] = None,
    alpha: float = ...,
    max_iterations: int = ...,
    iterations: Optional[int] = None,
    memo: str = "off",
    binning: int = 1,
    remove_stripe: Optional[Literal["fw", "sort"]] = None,
    device: Device = "best",
    allow_software_gpu: Optional[bool] = None,
    progress: Union[None, bool, Callable[[IterationReport], Any]] = None,
) -> Volume:
    """ADMM-TV volume (z, y, x) float32 from line integrals (ntheta, deth, detw); theta in
    radians, tilt in degrees, binning a factor."""

class SimulatedScan(TypedDict):
    truth: Volume
    projections: npt.NDArray[np.float32]
    theta: npt.NDArray[np.float64]
    tilt: float

def simulate(
    phantom: Literal["chip", "shepp", "blobs"] = "chip",
    size: int = 64,
    angles: int = 64,
    tilt_deg: float = 30.0,
    photons: Optional[float] = None,
    seed: int = 0,
) -> SimulatedScan: ...

class Score(TypedDict):
    rel_l2: float
    psnr: Optional[float]
    ssim: float

def score(volume: ArrayLike, truth: ArrayLike) -> Score: ...

# ---- Operator, preprocessing, BaSiC, files (python/src/operator.rs, basic.rs, preprocess.rs) --
# The stubs of Operator, normalize, minus_log, read_dxchange, find_rotation_axis, remove_stripe
# and BaSiC go here (written with those calls).
