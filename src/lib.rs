//! lamino: X-ray laminography reconstruction on any GPU through wgpu.
//!
//! # The front
//!
//! What an application that embeds lamino needs is re-exported here; the public modules below
//! hold the pipeline's steps for applications that take it apart (the Python package and the
//! desktop viewer do). The benchmark drivers and the CPU references are the command line's
//! (`lamino bench`, `lamino selftest`), public only with the feature `internals`, which this
//! package's own tests and benchmarks turn on.
//!
//! - A device: [`GpuContext`] from [`DeviceOptions`] ([`DeviceSelection`], [`list_adapters`]).
//! - A scan: [`Projections`] of a [`Geometry`] (its [`Tilt`] given in degrees or radians), made
//!   from intensities with flats and darks
//!   ([`Projections::from_intensities`], tomopy's `normalize` + `minus_log`, frames as
//!   [`Stack`]s) or from line integrals ([`Projections::new`]).
//! - A run: [`Reconstructor`] with [`AdmmParams`], budgets, [`Progress`] reports, a cancel
//!   flag and checkpoints ([`CheckpointInterval`]); it gives a [`Reconstruction`] (the volume
//!   in memory) or a [`Solved`] whose volume is read a slab at a time ([`VolumeSlabs`],
//!   [`write_volume`]).
//! - Errors: [`GpuError`], [`ScanError`], [`ReconError`], [`IoError`]; and [`Complex32`] (with
//!   [`num_complex`]), the complex type of the operator's public signatures.
//!
//! ```no_run
//! use lamino::{DeviceOptions, Geometry, GpuContext, Projections, Reconstructor, Stack, Tilt};
//!
//! let ctx = GpuContext::new(&DeviceOptions::default())?;
//! let geometry = Geometry::cube(32, 32, Tilt::from_degrees(20.0));
//! let (ntheta, h, w) = (32, 32, 32);
//! let data = Stack { shape: [ntheta, h, w], values: vec![900.0; ntheta * h * w] };
//! let flats = Stack { shape: [1, h, w], values: vec![1000.0; h * w] };
//! let darks = Stack { shape: [1, h, w], values: vec![0.0; h * w] };
//! let (projections, _clamped) = Projections::from_intensities(geometry, &data, &flats, &darks)?;
//! let result = Reconstructor::new(&ctx).run(&projections)?;
//! assert_eq!(result.volume.len(), 32 * 32 * 32);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The modules
//!
//! A scan goes in through [`recon::input`] (or [`io`]) as [`scan::Projections`], is reconstructed by [`recon`] (ADMM-TV from
//! [`solver`] over the operator of [`operator`]) and written with previews from [`plot`]; the
//! command line (`src/cli/`, one module per command, which the binary's `main.rs` calls through
//! [`run_command_line`]) is a thin layer over these.
//!
//! Modules, one line each:
//! - [`array`](mod@array): the arrays of a reconstruction (device-, host- or scratch-resident fields) and the
//!   scalars its kernels share.
//! - `bench` (public with `internals`): benchmark drivers behind `lamino bench ...`, one module per subcommand,
//!   that measure and print figures (the memo frontier and comparison among them).
//! - [`distributed`]: several devices and MPI ranks (feature `mpi`) on one reconstruction, with
//!   the bits of one device.
//! - [`fft`]: complex FFT plans on the GPU (Stockham, mixed radix, Bluestein).
//! - [`flatfield`]: BaSiC flat-field, dark-field and baseline estimation and correction.
//! - [`geometry`]: the scan's geometry in its units (sizes, angles, the tilt in degrees or
//!   radians, the rotation axis's detector column in its frame, volume boxes, the gridding accuracy).
//! - [`gpu`]: the GPU runtime, the only module that calls wgpu (device policy, buffers, kernels,
//!   recordings, and its typed errors [`GpuError`]).
//! - [`hash`]: the crate's one checksum (64-bit FNV-1a) for checkpoints and fingerprints.
//! - [`io`]: array files (`.npy`, TIFF stacks and volumes, DXchange HDF5) and atomic writes.
//! - [`memo`]: memoization of the gridding stages across solver iterations.
//! - [`memory`]: host memory figures and up-front refusals of work that would not fit.
//! - [`metrics`]: image quality against a ground truth (relative L2, PSNR, SSIM).
//! - [`operator`]: the laminography operator `L = F_adj . U2 . U1`, its adjoint, and what it
//!   samples of the geometry.
//! - [`params`]: the reconstruction's parameters and their defaults, in one place.
//! - [`plan`]: the memory planner (in-core or streaming, decided before anything is allocated).
//! - [`plot`]: pictures (previews, comparison panels, convergence and flat-field plots).
//! - [`random`]: the one seeded random source (SplitMix64) of noise, start vectors and test data.
//! - [`recon`]: the reconstruction pipeline as a library: reading a scan ([`recon::input`]), solving
//!   (progress, cancellation, checkpoints), writing the outputs.
//! - `reference` (public with `internals`): f64 CPU references the GPU kernels are tested against.
//! - [`scan`]: projections (line integrals with their geometry) as the solver takes them.
//! - [`shaders`]: the WGSL sources and the bindings each entry point declares.
//! - [`simulate`]: simulated scans (phantoms, exact projections, Poisson noise).
//! - [`solver`]: the ADMM-TV solver, its parameters, convergence test and checkpoints.

pub mod array;
// The benchmark drivers and the CPU references are the command line's and the tests' (feature
// `internals`, which the package's own tests and benchmarks turn on), not the library's front.
#[cfg(feature = "internals")]
pub mod bench;
#[cfg(not(feature = "internals"))]
// What only the tests and benchmarks call or name (through the front of `bench`) is unused here.
#[allow(dead_code, unused_imports)]
mod bench;
mod cli;
pub mod distributed;
pub mod fft;
pub mod flatfield;
pub mod geometry;
pub mod gpu;
pub mod hash;
pub mod io;
pub mod memo;
pub mod memory;
pub mod metrics;
pub mod operator;
pub mod params;
pub mod plan;
pub mod plot;
pub mod preprocess;
pub mod random;
pub mod recon;
#[cfg(feature = "internals")]
pub mod reference;
#[cfg(not(feature = "internals"))]
#[allow(dead_code, unused_imports)]
mod reference;
pub mod scan;
pub mod shaders;
pub mod simulate;
pub mod solver;

pub use geometry::{DetectorColumn, Geometry, Tilt};
pub use gpu::{
    list_adapters, DeviceOptions, DeviceSelection, GpuContext, GpuError, SliceAxis, SliceMode,
    SlicePass,
};
pub use io::{write_volume, IoError, Stack, VolumeSlabs};
pub use num_complex::{self, Complex32};
pub use params::AdmmParams;
pub use recon::{
    CheckpointInterval, IterateView, Job, JobError, JobEvent, JobInput, Preparation, Progress,
    ReconError, Reconstruction, Reconstructor, Solved,
};
pub use scan::{Projections, ScanError};

/// The `lamino` command as its binary runs it: parses the process's arguments, runs the command
/// and gives its exit status.
pub fn run_command_line() -> std::process::ExitCode {
    cli::main()
}
