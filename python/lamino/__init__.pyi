"""Type stubs of the lamino package: the extension lamino._lamino as the package re-exports it
(numpy in, numpy out; see docs/python.md)."""

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

Backend = Literal["vulkan", "gl", "metal", "dx12"]
Limits = Literal["adapter", "portable"]

def devices(*, backend: Optional[Backend] = None) -> list[Adapter]: ...

# ---- Reconstruction, simulation, scores (python/src/reconstruct.rs, simulate.rs) -------------

ArrayLike = npt.ArrayLike
Volume = npt.NDArray[np.float32]

class Defaults(TypedDict):
    alpha: float
    max_iterations: int
    inner_iterations: int
    """CG steps per outer iteration on volumes narrower than ``inner_wide_from`` voxels."""
    inner_iterations_wide: int
    """CG steps per outer iteration from ``inner_wide_from`` voxels wide on."""
    inner_wide_from: int
    rho0: float
    memo: str
    normal_operator: str

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
    shifts: Optional[ArrayLike] = None,
    alpha: float = ...,
    max_iterations: int = ...,
    iterations: Optional[int] = None,
    memo: str = "off",
    normal_operator: Literal["auto", "toeplitz", "gridding"] = "auto",
    binning: int = 0,
    remove_stripe: Optional[Literal["fw", "sort"]] = None,
    device: Union[Device, Sequence[int]] = "best",
    allow_software_gpu: Optional[bool] = None,
    backend: Optional[Backend] = None,
    limits: Optional[Limits] = None,
    progress: Union[None, bool, Callable[[IterationReport], Any]] = None,
) -> Volume:
    """ADMM-TV volume (z, y, x) float32 from line integrals (ntheta, deth, detw); theta in
    radians, tilt in degrees, shifts (ntheta, 2) each projection's (du, dv) in pixels, binning
    tomocupy's exponent (2**binning pixels)."""

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

class Operator:
    """The laminography operator of one geometry, planned once; tilt in degrees, theta in radians."""

    def __init__(
        self,
        volume_shape: tuple[int, int, int],
        theta: ArrayLike,
        tilt: float,
        *,
        detector_shape: Optional[tuple[int, int]] = None,
        center: Optional[float] = None,
        eps: float = 1e-3,
        device: Device = "best",
        allow_software_gpu: Optional[bool] = None,
        backend: Optional[Backend] = None,
        limits: Optional[Limits] = None,
    backend: Optional[Backend] = None,
    limits: Optional[Limits] = None,
    ) -> None: ...
    def forward(self, volume: ArrayLike) -> npt.NDArray[np.complex64]: ...
    def adjoint(self, data: ArrayLike) -> npt.NDArray[np.complex64]: ...
    @property
    def volume_shape(self) -> tuple[int, int, int]: ...
    @property
    def data_shape(self) -> tuple[int, int, int]: ...
    @property
    def center(self) -> float: ...

def normalize(
    proj: ArrayLike, flat: ArrayLike, dark: ArrayLike
) -> npt.NDArray[np.float32]: ...
def minus_log(proj: ArrayLike) -> npt.NDArray[np.float32]: ...
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
    tomo: ArrayLike,
    method: Literal["fw", "sort"] = "fw",
    *,
    level: Optional[int] = None,
    sigma: Optional[float] = None,
    size: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...

def find_rotation_axis(
    proj: ArrayLike,
    theta: ArrayLike,
    tilt: float,
    *,
    centers: Optional[ArrayLike] = None,
    tilts: Optional[ArrayLike] = None,
    slab_slices: Optional[int] = None,
    slab_z: float = 0.0,
    device: Device = "best",
    allow_software_gpu: Optional[bool] = None,
    backend: Optional[Backend] = None,
    limits: Optional[Limits] = None,
) -> tuple[float, dict[str, Any]]: ...

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
        device: Device = "best",
        allow_software_gpu: Optional[bool] = None,
        backend: Optional[Backend] = None,
        limits: Optional[Limits] = None,
    backend: Optional[Backend] = None,
    limits: Optional[Limits] = None,
    ) -> None: ...
    def fit(self, images: ArrayLike) -> None: ...
    def transform(self, images: ArrayLike) -> npt.NDArray[np.float32]: ...
    def fit_transform(self, images: ArrayLike) -> npt.NDArray[np.float32]: ...
    @property
    def flatfield(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def darkfield(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def baseline(self) -> Optional[npt.NDArray[np.float32]]: ...
    @property
    def report(self) -> Optional[dict[str, Any]]: ...
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
