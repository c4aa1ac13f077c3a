//! One pass of an FFT on the GPU: what it computes ([`PassSpec`]), how it is launched ([`Launch`],
//! the part that tuning chooses), its kernel and its uniform parameters.

use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

use super::layout::Layout;
use super::recipe::{largest_prime_factor, stage_radices};
use super::two_level::{self, split};
use super::{Direction, FftError};
use crate::gpu::{GpuContext, Kernel, KernelSpec};
use crate::shaders;

/// Largest sub-length of one pass, whatever workgroup memory allows (eight register stages hold
/// every smooth length up to here).
const MAX_SUB: usize = 8192;
/// Largest sub-length of the private-exchange kernels (one invocation holds the whole column).
/// On lavapipe 512 and 1024 run about twice as fast privately as in workgroup memory (512^2 x 32:
/// 127 -> 69 ms); a 4096-point private kernel did not finish compiling in ten minutes.
pub(crate) const MAX_PRIVATE_SUB: usize = 1024;
/// Largest sub-length a CPU rasteriser gets a private kernel for by default; longer ones go to two
/// levels of rows. Private kernels take the longer to compile the longer their array (LLVM 15,
/// lavapipe, specialised 1D plans of 64 MiB): sub 128 compiled in ~15 s, 256 in ~48 s and 512 in
/// more than ten minutes, while two levels compiled 256 in ~2 s and ran it faster (648 against 804
/// ms). A process pays that compile on its first transform; tuning may still pick them.
const SOFTWARE_PRIVATE_SUB: usize = 128;
/// Problems with at least this many elements get kernels specialised to their sizes; smaller ones
/// share one pipeline per size class (compiling a pipeline costs far more than running them).
pub(crate) const SPECIALIZE_MIN_ELEMS: u64 = 1 << 16;

/// Where a pass exchanges data between its register stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exchange {
    /// Workgroup memory shared by the invocations of a column.
    Shared,
    /// The private array of a single invocation per column (sub-lengths up to 1024).
    Private,
    /// Two levels of rows, each row in one invocation's registers, with one exchange through
    /// workgroup memory between them (specialised kernels; see [`super::two_level`]).
    TwoLevel,
}

/// How a pass is launched: what tuning chooses. None of it changes which arithmetic is done except
/// `max_radix` (the register radices) and `twiddle_table` (computed or tabulated twiddles); every
/// choice meets the same accuracy bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Launch {
    pub exchange: Exchange,
    /// Invocations per column.
    pub threads: u32,
    /// Columns per workgroup.
    pub columns: u32,
    /// Neighbouring lanes take neighbouring columns (else a column's butterflies).
    pub columns_fastest: bool,
    /// Largest power-of-two register radix: 8 or 16.
    pub max_radix: u32,
    /// Twiddles of the register stages from a table of roots instead of computed in the kernel.
    pub twiddle_table: bool,
}

impl std::fmt::Display for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}x{}{} r{}{}",
            match self.exchange {
                Exchange::Shared => "shared",
                Exchange::Private => "private",
                Exchange::TwoLevel => "two-level",
            },
            self.threads,
            self.columns,
            if self.columns_fastest { " cols" } else { "" },
            self.max_radix,
            if self.twiddle_table { " table" } else { "" }
        )
    }
}

/// What one pass computes: the sub-transforms of length `sub` of a transform of length `len`,
/// after earlier passes of total length `ns`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PassSpec {
    pub len: usize,
    pub sub: usize,
    pub ns: usize,
    pub direction: Direction,
    /// Bluestein: multiply input e by the chirp and read zero for e >= hook_len.
    pub load_hook: bool,
    /// Bluestein: 1 multiplies output e by a table (the kernel spectrum); 2 also keeps only
    /// e < hook_len (the chirp of the result).
    pub store_hook: u32,
    pub scale: f32,
}

impl PassSpec {
    /// Columns per transform.
    pub fn columns_per_transform(&self) -> u64 {
        (self.len / self.sub) as u64
    }
}

/// Device limits that bound a launch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Complex elements of workgroup memory.
    pub shared_elems: u64,
    pub max_invocations: u32,
    pub software: bool,
}

impl Limits {
    pub fn of(ctx: &GpuContext) -> Self {
        Self {
            shared_elems: ctx.max_workgroup_storage_bytes() as u64 / 8,
            max_invocations: ctx.max_invocations_per_workgroup(),
            software: ctx.info().software,
        }
    }

    /// Largest sub-length one pass transforms.
    pub fn max_sub(&self) -> usize {
        (self.shared_elems as usize).min(MAX_SUB)
    }
}

/// Elements of workgroup memory a column takes: the sub-length itself when the kernel is
/// specialised, else its power-of-two class (so that lengths share pipelines).
fn shared_len(sub: usize, specialized: bool) -> u64 {
    if specialized {
        sub as u64
    } else {
        sub.next_power_of_two() as u64
    }
}

impl Launch {
    /// Whether the device can run this launch for sub-length `sub`.
    pub(crate) fn fits(&self, limits: &Limits, sub: usize, specialized: bool) -> bool {
        let invocations = self.threads as u64 * self.columns as u64;
        let exchange = match self.exchange {
            Exchange::Shared => {
                self.columns as u64 * shared_len(sub, specialized) <= limits.shared_elems
            }
            Exchange::Private => self.threads == 1 && sub <= MAX_PRIVATE_SUB,
            Exchange::TwoLevel => {
                specialized
                    && self.columns == 1
                    && !self.columns_fastest
                    && sub as u64 <= limits.shared_elems
                    && split(sub).is_some_and(|(a, b)| self.threads as usize == a.max(b))
            }
        };
        exchange
            && self.threads >= 1
            && self.columns >= 1
            && invocations <= limits.max_invocations as u64
            && matches!(self.max_radix, 8 | 16)
    }

    /// The launch used without tuning. Small problems share one pipeline per size class; large
    /// ones get a shape that suits the device class: one column per SIMD lane on CPU rasterisers
    /// (invocations there are lanes of one core, and barriers switch between them), about one
    /// radix-16 butterfly per invocation and at least 64 invocations per workgroup on GPUs.
    pub(crate) fn default_for(
        limits: &Limits,
        sub: usize,
        specialized: bool,
        strided: bool,
    ) -> Self {
        let class = sub.next_power_of_two() as u64;
        let fit = |threads: u64, columns: u64| {
            let by_memory = (limits.shared_elems / shared_len(sub, specialized)).max(1);
            let by_invocations = (limits.max_invocations as u64 / threads).max(1);
            columns.clamp(1, by_memory.min(by_invocations)) as u32
        };
        let shared = |threads: u64, columns: u64, columns_fastest: bool| Self {
            exchange: Exchange::Shared,
            threads: threads as u32,
            columns: fit(threads, columns),
            columns_fastest,
            max_radix: 16,
            twiddle_table: false,
        };
        if !specialized {
            let threads = (class / 16).clamp(1, 64);
            return shared(threads, 64 / threads, false);
        }
        if limits.software {
            // Beyond the private kernels, rows in registers with one exchange: on lavapipe,
            // 64 MiB of 4096 points in 49 ms against 74 ms with three radix-16 stages in
            // workgroup memory, 2000 in 62 against 78 ms. Long rows with a radix 11 or 13 (whose
            // butterflies loop over tables) ran slower: 1331 = 11 x 121 in 1232 against 355 ms,
            // 1183 = 13 x 91 in 376 against 245 ms.
            if let Some(two_level) = Self::two_level(limits, sub) {
                let long_odd_rows = two_level.threads > 64 && largest_prime_factor(sub as u64) > 7;
                if !long_odd_rows {
                    return two_level;
                }
            }
            if sub <= SOFTWARE_PRIVATE_SUB {
                return Self {
                    exchange: Exchange::Private,
                    threads: 1,
                    columns: 8,
                    columns_fastest: true,
                    max_radix: 16,
                    twiddle_table: false,
                };
            }
            let threads = if class >= 4096 { 8 } else { 2 };
            return shared(threads, 8, true);
        }
        let threads = (class / 16).clamp(1, 64);
        shared(threads, (64 / threads).max(1), strided)
    }

    /// The two-level launch of sub-length `sub`, beyond the private kernels a CPU rasteriser
    /// compiles quickly, where the device runs it.
    fn two_level(limits: &Limits, sub: usize) -> Option<Self> {
        if sub <= SOFTWARE_PRIVATE_SUB {
            return None;
        }
        let (a, b) = split(sub)?;
        let launch = Self {
            exchange: Exchange::TwoLevel,
            threads: a.max(b) as u32,
            columns: 1,
            columns_fastest: false,
            max_radix: 16,
            twiddle_table: false,
        };
        launch.fits(limits, sub, true).then_some(launch)
    }

    /// The launches tuning measures for sub-length `sub`, the default first.
    pub(crate) fn candidates(limits: &Limits, sub: usize, strided: bool) -> Vec<Self> {
        let mut out = vec![Self::default_for(limits, sub, true, strided)];
        let mut push = |l: Self| {
            if l.fits(limits, sub, true) && !out.contains(&l) {
                out.push(l);
            }
        };
        let max_threads = (sub as u32 / 2).clamp(1, 64);
        for target in [8u32, 64] {
            let mut threads = 1;
            while threads <= max_threads.min(target) {
                let by_memory = (limits.shared_elems / sub as u64).max(1) as u32;
                push(Self {
                    exchange: Exchange::Shared,
                    threads,
                    columns: (target / threads).clamp(1, by_memory),
                    columns_fastest: strided || threads <= 2,
                    max_radix: 16,
                    twiddle_table: false,
                });
                threads *= 2;
            }
        }
        if let Some(two_level) = Self::two_level(limits, sub) {
            push(two_level);
        }
        for columns in [8, 16] {
            push(Self {
                exchange: Exchange::Private,
                threads: 1,
                columns,
                columns_fastest: true,
                max_radix: 16,
                twiddle_table: false,
            });
        }
        out
    }

    /// Variants of a winning launch that change the arithmetic or the lane order (the second round
    /// of tuning).
    pub(crate) fn refinements(&self, limits: &Limits, sub: usize) -> Vec<Self> {
        let mut out = Vec::new();
        for l in [
            Self {
                max_radix: 24 - self.max_radix,
                ..*self
            },
            Self {
                twiddle_table: !self.twiddle_table,
                ..*self
            },
            Self {
                columns_fastest: !self.columns_fastest,
                ..*self
            },
        ] {
            if l.fits(limits, sub, true)
                && (l.threads > 1 || l.columns_fastest == self.columns_fastest)
            {
                out.push(l);
            }
        }
        out
    }
}

/// The uniform parameters of a pass; mirrors `PassParams` in `shaders/fft/pass.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct PassParams {
    pub src: GpuLayout,
    pub dst: GpuLayout,
    pub columns: u32,
    pub scale: f32,
    pub len: u32,
    pub sub: u32,
    pub ns: u32,
    pub dir: f32,
    pub hook_len: u32,
    pub load_table: u32,
    pub store_table: u32,
    pub twiddle_table: u32,
    pub pad: [u32; 2],
    pub radices: [u32; 8],
    pub nexts: [u32; 8],
}

/// A batched strided layout as the kernels see it; mirrors `Layout` in `shaders/shared/complex.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct GpuLayout {
    offset: u32,
    stride: u32,
    count0: u32,
    dist0: u32,
    count1: u32,
    dist1: u32,
    dist2: u32,
    batch_base: u32,
}

impl GpuLayout {
    /// The layout relative to a binding that starts at element `window_start`, for transforms
    /// numbered from `batch_base`. Offsets and distances are reduced modulo 2^32: the kernels use
    /// wrapping u32 arithmetic and every index they form lies inside the binding.
    pub fn of(layout: &Layout, window_start: u64, batch_base: u64) -> Self {
        let dim = |i: usize| layout.batch.get(i).map_or((1, 0), |d| (d.count, d.dist));
        let (c0, d0) = dim(0);
        let (c1, d1) = dim(1);
        let (_, d2) = dim(2);
        Self {
            offset: layout.offset.wrapping_sub(window_start) as u32,
            stride: layout.stride as u32,
            count0: c0 as u32,
            dist0: d0 as u32,
            count1: c1 as u32,
            dist1: d1 as u32,
            dist2: d2 as u32,
            batch_base: batch_base as u32,
        }
    }
}

/// Table offsets of a pass (elements into its table binding).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TableOffsets {
    pub hook_len: u32,
    pub load: u32,
    pub store: u32,
    pub twiddle: u32,
}

/// The register radices of a pass and the block length after each stage.
fn stages(sub: usize, launch: &Launch) -> Result<([u32; 8], [u32; 8]), FftError> {
    let radices = stage_radices(sub, launch.max_radix).ok_or_else(|| {
        FftError::IndexOverflow(format!("sub-length {sub} has a prime factor above 13"))
    })?;
    let mut r = [1u32; 8];
    let mut next = [1u32; 8];
    let mut block = sub as u32;
    for (s, &radix) in radices.iter().enumerate() {
        r[s] = radix;
        block /= radix;
        next[s] = block;
    }
    Ok((r, next))
}

impl PassParams {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: &PassSpec,
        launch: &Launch,
        src: GpuLayout,
        dst: GpuLayout,
        transforms: u64,
        tables: TableOffsets,
    ) -> Result<Self, FftError> {
        let (radices, nexts) = stages(spec.sub, launch)?;
        Ok(Self {
            src,
            dst,
            columns: (transforms * spec.columns_per_transform()) as u32,
            scale: spec.scale,
            len: spec.len as u32,
            sub: spec.sub as u32,
            ns: spec.ns as u32,
            dir: spec.direction.sign(),
            hook_len: tables.hook_len,
            load_table: tables.load,
            store_table: tables.store,
            twiddle_table: tables.twiddle,
            pad: [0; 2],
            radices,
            nexts,
        })
    }
}

/// The pipeline of a pass; `unit_strides` says whether the source and the destination layouts
/// have stride 1.
pub(crate) fn pass_kernel(
    ctx: &GpuContext,
    spec: &PassSpec,
    launch: &Launch,
    in_place: bool,
    specialized: bool,
    unit_strides: [bool; 2],
) -> Result<std::sync::Arc<Kernel>, FftError> {
    let mut entry = "fft_pass";
    let shader = match launch.exchange {
        Exchange::Shared => &shaders::FFT_PASS_SHARED,
        Exchange::TwoLevel => {
            let (a, b) = split(spec.sub).ok_or_else(|| {
                FftError::IndexOverflow(format!("sub-length {} has no two-level split", spec.sub))
            })?;
            entry = "fft_pass_two_level";
            two_level::shader(a, b, launch.max_radix)
        }
        Exchange::Private => shaders::FFT_PASS_PRIVATE
            .iter()
            .find(|(len, _)| *len >= spec.sub)
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                FftError::IndexOverflow(format!(
                    "sub-length {} exceeds the private-exchange kernels",
                    spec.sub
                ))
            })?,
    };
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut overrides = vec![
        ("THREADS", launch.threads as f64),
        ("COLUMNS", launch.columns as f64),
        ("WORKGROUP", (launch.threads * launch.columns) as f64),
        ("COLUMNS_FASTEST", flag(launch.columns_fastest)),
        ("IN_PLACE", flag(in_place)),
        ("LOAD_HOOK", flag(spec.load_hook)),
        ("STORE_HOOK", spec.store_hook as f64),
        ("TWIDDLE_TABLE", flag(launch.twiddle_table)),
        ("SPECIALIZED", flag(specialized)),
        ("SRC_UNIT_STRIDE", flag(unit_strides[0])),
        ("DST_UNIT_STRIDE", flag(unit_strides[1])),
    ];
    if matches!(launch.exchange, Exchange::Shared | Exchange::TwoLevel) {
        let shared = launch.columns as u64 * shared_len(spec.sub, specialized);
        overrides.push(("SHARED", shared as f64));
    }
    if specialized {
        let (radices, _) = stages(spec.sub, launch)?;
        const NAMES: [&str; 8] = ["S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7"];
        overrides.extend([
            ("LEN", spec.len as f64),
            ("SUB", spec.sub as f64),
            ("NS", spec.ns as f64),
            ("DIR", specialized_direction(ctx, spec.direction)),
        ]);
        overrides.extend(NAMES.iter().zip(radices).map(|(n, r)| (*n, r as f64)));
    }
    Ok(ctx.kernel(&KernelSpec {
        shader,
        entry,
        overrides,
    })?)
}

/// The `DIR` override of a specialised kernel. A CPU rasteriser spends most of a small run
/// compiling pipelines (lavapipe: ~1 s per specialised pass, 92 % of a 16^3 reconstruction), so
/// there the direction stays a parameter and one pipeline serves both directions (0); a device
/// gets the sign folded into its butterflies.
fn specialized_direction(ctx: &GpuContext, direction: Direction) -> f64 {
    if ctx.info().software {
        0.0
    } else {
        direction.sign() as f64
    }
}

/// Workgroups of a dispatch over `transforms` transforms.
pub(crate) fn workgroups(spec: &PassSpec, launch: &Launch, transforms: u64) -> u32 {
    (transforms * spec.columns_per_transform()).div_ceil(launch.columns as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lavapipe() -> Limits {
        Limits {
            shared_elems: 4096,
            max_invocations: 1024,
            software: true,
        }
    }

    #[test]
    fn launches_respect_the_limits() {
        let gpu = Limits {
            shared_elems: 6144,
            max_invocations: 1024,
            software: false,
        };
        for limits in [lavapipe(), gpu] {
            for sub in [2usize, 3, 16, 100, 256, 768, 1024, 4096] {
                for specialized in [false, true] {
                    let d = Launch::default_for(&limits, sub, specialized, false);
                    assert!(d.fits(&limits, sub, specialized), "{sub}: {d:?}");
                }
                let c = Launch::candidates(&limits, sub, true);
                assert!(!c.is_empty() && c.iter().all(|l| l.fits(&limits, sub, true)));
                for l in &c {
                    assert!(l
                        .refinements(&limits, sub)
                        .iter()
                        .all(|r| r.fits(&limits, sub, true)));
                }
            }
        }
        // Private exchange only for one invocation per column and short sub-lengths.
        let private = Launch {
            exchange: Exchange::Private,
            threads: 1,
            columns: 8,
            columns_fastest: true,
            max_radix: 16,
            twiddle_table: false,
        };
        assert!(private.fits(&lavapipe(), MAX_PRIVATE_SUB, true));
        assert!(!private.fits(&lavapipe(), MAX_PRIVATE_SUB + 1, true));
        // By default a CPU rasteriser compiles no long private kernel (minutes of LLVM each).
        for sub in SOFTWARE_PRIVATE_SUB + 1..=MAX_PRIVATE_SUB {
            let d = Launch::default_for(&lavapipe(), sub, true, false);
            assert_ne!(d.exchange, Exchange::Private, "{sub}: {d:?}");
        }
        // Every private sub-length has a kernel whose array holds it.
        assert_eq!(
            shaders::FFT_PASS_PRIVATE.last().map(|(len, _)| *len),
            Some(MAX_PRIVATE_SUB)
        );
    }

    #[test]
    fn stage_tables_end_with_block_length_one() {
        let launch = Launch::default_for(&lavapipe(), 768, true, false);
        let (r, next) = stages(768, &launch).unwrap();
        assert_eq!(r, [16, 16, 3, 1, 1, 1, 1, 1]);
        assert_eq!(next, [48, 3, 1, 1, 1, 1, 1, 1]);
    }
}
