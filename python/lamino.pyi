"""Type stubs of the lamino extension module (numpy in, numpy out; see docs/python.md)."""

import os
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

class Operator:
    """The laminography operator of one geometry, planned once; tilt in degrees, theta in radians."""

    def __init__(
        self,
        volume_shape: tuple[int, int, int],
        theta: npt.ArrayLike,
        tilt: float,
        *,
        detector_shape: Optional[tuple[int, int]] = None,
        center: Optional[float] = None,
        eps: float = 1e-3,
        device: Optional[Device] = None,
        allow_software_gpu: Optional[bool] = None,
    ) -> None: ...
    def forward(self, volume: npt.ArrayLike) -> npt.NDArray[np.complex64]: ...
    def adjoint(self, data: npt.ArrayLike) -> npt.NDArray[np.complex64]: ...
    @property
    def volume_shape(self) -> tuple[int, int, int]: ...
    @property
    def data_shape(self) -> tuple[int, int, int]: ...
    @property
    def center(self) -> float: ...

def normalize(
    proj: npt.ArrayLike, flat: npt.ArrayLike, dark: npt.ArrayLike
) -> npt.NDArray[np.float32]: ...
def minus_log(proj: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
def read_dxchange(
    path: Union[str, os.PathLike[str]], *, theta_units: Optional[Literal["deg", "rad"]] = None
) -> tuple[
    npt.NDArray[np.float32],
    npt.NDArray[np.float32],
    npt.NDArray[np.float32],
    npt.NDArray[np.float64],
    Optional[float],
]: ...
def remove_stripe(
    tomo: npt.ArrayLike,
    method: Literal["fw", "sort"] = "fw",
    *,
    level: Optional[int] = None,
    sigma: Optional[float] = None,
    size: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...

class AxisScores(TypedDict):
    center: npt.NDArray[np.float64]
    tilt: npt.NDArray[np.float64]
    score: npt.NDArray[np.float64]
    best_center: float
    best_tilt: float
    refined_tilt: float
    peak_half_width: Optional[float]
    slab_slices: int

def find_rotation_axis(
    proj: npt.ArrayLike,
    theta: npt.ArrayLike,
    tilt: float,
    *,
    centers: Optional[npt.ArrayLike] = None,
    tilts: Optional[npt.ArrayLike] = None,
    slab_slices: Optional[int] = None,
    slab_z: float = 0.0,
    device: Optional[Device] = None,
    allow_software_gpu: Optional[bool] = None,
) -> tuple[float, AxisScores]: ...

class BasicReport(TypedDict):
    lambda_flatfield: float
    lambda_darkfield: float
    reweighting_rounds: int
    converged: bool
    fallback: bool
    brightness_spread: float
    warnings: list[str]
    changed_parameters: list[str]

class BaSiC:
    """BaSiC flat-field estimation with BaSiCPy's names; defaults from lamino's BasicParams."""

    def __init__(
        self,
        *,
        get_darkfield: Optional[bool] = None,
        smoothness_flatfield: Optional[float] = None,
        smoothness_darkfield: Optional[float] = None,
        max_iterations: Optional[int] = None,
        optimization_tol: Optional[float] = None,
        max_reweight_iterations: Optional[int] = None,
        reweighting_tol: Optional[float] = None,
        working_size: Optional[int] = None,
        epsilon: Optional[float] = None,
        sort_intensity: Optional[bool] = None,
        smoothness: Optional[Literal["standard", "auto-data"]] = None,
        darkfield_ratio: Optional[float] = None,
        flat_min: Optional[float] = None,
        clip_negative: Optional[bool] = None,
        device: Optional[Device] = None,
        allow_software_gpu: Optional[bool] = None,
    ) -> None: ...
    def fit(self, images: npt.ArrayLike) -> None: ...
    def transform(self, images: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
    def fit_transform(self, images: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
    @property
    def flatfield(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def darkfield(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def baseline(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def report(self) -> Optional[BasicReport]: ...
    get_darkfield: bool
    smoothness_flatfield: Optional[float]
    smoothness_darkfield: Optional[float]
    max_iterations: int
    optimization_tol: float
    max_reweight_iterations: int
    reweighting_tol: float
    working_size: int
    epsilon: float
    sort_intensity: bool
    smoothness: str
    darkfield_ratio: float
    flat_min: float
    clip_negative: bool
