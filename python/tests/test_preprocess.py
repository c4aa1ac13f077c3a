"""tomopy's preprocessing calls: normalize, minus_log, read_dxchange, remove_stripe and the
rotation-axis search of `lamino try`."""

import math
import pathlib

import numpy as np
import pytest

import lamino

ROOT = pathlib.Path(__file__).resolve().parents[2]
DXCHANGE = ROOT / "assets" / "dxchange"


def intensities(seed=0, shape=(5, 6, 7)):
    rng = np.random.default_rng(seed)
    flat = rng.uniform(900.0, 1100.0, (3,) + shape[1:]).astype(np.float32)
    dark = rng.uniform(5.0, 15.0, (2,) + shape[1:]).astype(np.float32)
    proj = rng.uniform(100.0, 900.0, shape).astype(np.float32)
    return proj, flat, dark


def test_normalize_is_tomopys_formula_with_mean_fields():
    """(proj - mean(dark)) / (mean(flat) - mean(dark)), in float64 rounded once: with fewer than
    8 frames numpy sums them in order, as lamino does, so the bits agree."""
    proj, flat, dark = intensities()
    f = flat.astype(np.float64).mean(axis=0)
    d = dark.astype(np.float64).mean(axis=0)
    want = ((proj.astype(np.float64) - d) / (f - d)).astype(np.float32)
    got = lamino.normalize(proj, flat, dark)
    assert got.dtype == np.float32 and got.shape == proj.shape
    assert np.array_equal(got, want)
    # Integer counts (any real dtype) are converted once, to the same values.
    counts = lamino.normalize(proj.astype(np.uint16), flat.astype(np.uint16), dark.astype(np.uint16))
    want_counts = lamino.normalize(
        proj.astype(np.uint16).astype(np.float32),
        flat.astype(np.uint16).astype(np.float32),
        dark.astype(np.uint16).astype(np.float32),
    )
    assert np.array_equal(counts, want_counts)


def test_dead_pixels_are_zero_then_floored_by_minus_log():
    proj, flat, dark = intensities()
    flat[:, 2, 3] = 1.0  # below the darks: no transmission to measure
    ratio = lamino.normalize(proj, flat, dark)
    assert np.all(ratio[:, 2, 3] == 0.0)
    line = lamino.minus_log(ratio)
    assert np.all(line[:, 2, 3] == np.float32(-math.log(1e-6)))
    assert np.all(np.isfinite(line))


def test_minus_log_is_tomopys_with_a_floor():
    x = np.array([[[1.0, 0.5, 2.0, 1e-7, 0.0, -3.0, 0.25]]], np.float32)
    got = lamino.minus_log(x)
    want = (-np.log(np.maximum(x.astype(np.float64), 1e-6))).astype(np.float32)
    # log in float64 (libm here, numpy's there), each rounded once to float32: one step at most.
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))
    assert got[0, 0, 0] == 0.0 and got[0, 0, 4] == got[0, 0, 5] == got[0, 0, 3]
    assert np.array_equal(x[0, 0, :2], [1.0, 0.5])  # the input is not modified


def test_errors_name_the_argument():
    proj, flat, dark = intensities()
    with pytest.raises(lamino.InputError, match="normalize: flats has shape \\[3, 6, 8\\]"):
        lamino.normalize(proj, np.ones((3, 6, 8), np.float32), dark)
    bad = proj.copy()
    bad[1, 1, 1] = np.nan
    with pytest.raises(lamino.InputError, match="proj: value at index \\[1, 1, 1\\] is not finite"):
        lamino.normalize(bad, flat, dark)
    with pytest.raises(lamino.InputError, match="proj: value at index \\[1, 1, 1\\] is not finite"):
        lamino.minus_log(bad)
    with pytest.raises(lamino.InputError, match="dark: expected 3 dimensions"):
        lamino.normalize(proj, flat, dark[0])
    with pytest.raises(lamino.InputError, match="proj: dtype complex64"):
        lamino.minus_log(proj.astype(np.complex64))


def test_read_dxchange_gives_radians_and_the_tilt_in_degrees():
    h5py = pytest.importorskip("h5py")
    path = DXCHANGE / "h5py_contiguous_f32.h5"
    proj, flat, dark, theta, tilt = lamino.read_dxchange(path)
    with h5py.File(path) as f:
        assert np.array_equal(proj, f["/exchange/data"][()])
        assert np.array_equal(flat, f["/exchange/data_white"][()])
        assert np.array_equal(dark, f["/exchange/data_dark"][()])
        assert np.array_equal(theta, np.deg2rad(f["/exchange/theta"][()]))
        assert tilt == pytest.approx(f["/lamino/phi_deg"][()] - 90.0, abs=1e-12)
    assert proj.dtype == flat.dtype == dark.dtype == np.float32 and theta.dtype == np.float64
    assert tilt == pytest.approx(20.0, abs=1e-12)


def test_read_dxchange_without_darks_or_theta():
    """Angles from rotation_start + i rotation_step, one dark frame of zeros, uint16 as float32."""
    h5py = pytest.importorskip("h5py")
    path = DXCHANGE / "h5py_rotation_no_dark_u16.h5"
    proj, flat, dark, theta, tilt = lamino.read_dxchange(str(path))
    with h5py.File(path) as f:
        assert np.array_equal(proj, f["/exchange/data"][()].astype(np.float32))
        rotation = f["/process/acquisition/rotation"]
        start, step = rotation["rotation_start"][0], rotation["rotation_step"][0]
    assert dark.shape == (1,) + proj.shape[1:] and not dark.any()
    assert np.allclose(theta, np.deg2rad(start + step * np.arange(proj.shape[0])), rtol=0, atol=1e-12)
    assert tilt is None


def test_read_dxchange_errors(tmp_path):
    with pytest.raises(lamino.InputError, match="theta_units: \"grad\""):
        lamino.read_dxchange(DXCHANGE / "h5py_contiguous_f32.h5", theta_units="grad")
    # The advice names Python's argument, not the command line's option.
    with pytest.raises(lamino.InputError, match="say which with theta_units=\"deg\" or \"rad\"") as e:
        lamino.read_dxchange(DXCHANGE / "h5py_theta_radians_f32.h5")
    assert "--" not in str(e.value)
    # Unit-less degrees said to be radians span more than a turn: refused, not read as radians.
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "degrees.h5", "w") as f:
        f["/exchange/data"] = np.ones((4, 2, 2), np.float32)
        f["/exchange/data_white"] = np.ones((1, 2, 2), np.float32)
        f["/exchange/theta"] = np.array([0.0, 90.0, 180.0, 270.0])
    assert np.allclose(lamino.read_dxchange(tmp_path / "degrees.h5")[3], np.pi / 2 * np.arange(4))
    with pytest.raises(lamino.InputError, match="in radians .*theta_units.*: the angles run from "
                       "0 to 270, more than a turn") as e:
        lamino.read_dxchange(tmp_path / "degrees.h5", theta_units="rad")
    assert "--" not in str(e.value)
    radians = lamino.read_dxchange(DXCHANGE / "h5py_theta_radians_f32.h5", theta_units="rad")[3]
    degrees = lamino.read_dxchange(DXCHANGE / "h5py_contiguous_f32.h5")[3]
    assert np.allclose(radians, degrees, rtol=0, atol=1e-6)
    with pytest.raises(lamino.InputError, match="no-such-file.h5"):
        lamino.read_dxchange(DXCHANGE / "no-such-file.h5")


def striped_sinograms(rows=3, angles=64, columns=48):
    """Smooth sinograms of a disc plus an additive stripe (a detector column's gain error)."""
    theta = np.linspace(0, np.pi, angles, endpoint=False)
    u = np.arange(columns) - columns / 2
    sino = np.stack([np.sqrt(np.maximum(0.0, 15.0**2 - (u - 6 * np.cos(t)) ** 2)) for t in theta])
    clean = np.repeat(sino[:, None, :], rows, axis=1).astype(np.float32) / 10.0
    striped = clean.copy()
    striped[:, :, 20] += 0.5
    return clean, striped


@pytest.mark.parametrize("method", ["fw", "sort"])
def test_remove_stripe_removes_an_additive_stripe(method):
    clean, striped = striped_sinograms()
    cleaned = lamino.remove_stripe(striped, method)
    assert cleaned.dtype == np.float32 and cleaned.shape == striped.shape
    before = np.abs(striped - clean)[:, :, 20].mean()
    after = np.abs(cleaned - clean)[:, :, 20].mean()
    # Measured: fw (one level on 48 columns) leaves 39 % of the stripe, sort 6 %; both change
    # the columns away from it by about 1 % of the stripe.
    assert after <= 0.5 * before, (before, after)
    away = np.abs(cleaned - clean)[:, :, np.r_[0:17, 24:48]].mean()
    assert away <= 0.05 * before, (before, away)
    # A sinogram alone (angles, columns) is a scan of one row.
    one = lamino.remove_stripe(striped[:, 1, :], method)
    assert np.array_equal(one, cleaned[:, 1, :])


def test_remove_stripe_parameters():
    _, striped = striped_sinograms()
    default = lamino.remove_stripe(striped)
    assert np.array_equal(default, lamino.remove_stripe(striped, "fw", level=1, sigma=1.0))
    assert not np.array_equal(default, lamino.remove_stripe(striped, "fw", sigma=2.0))
    assert np.array_equal(lamino.remove_stripe(striped, "sort"), lamino.remove_stripe(striped, "sort", size=5))
    with pytest.raises(lamino.InputError, match="method: \"ti\""):
        lamino.remove_stripe(striped, "ti")
    with pytest.raises(lamino.InputError, match="size: applies to method=\"sort\""):
        lamino.remove_stripe(striped, "fw", size=5)
    with pytest.raises(lamino.InputError, match="sigma: applies to method=\"fw\""):
        lamino.remove_stripe(striped, "sort", sigma=2.0)
    with pytest.raises(lamino.InputError, match="sigma = -1: must be positive"):
        lamino.remove_stripe(striped, "fw", sigma=-1.0)
    # A window wider than the 48 columns is refused before it is allocated (2^32 aborted the
    # interpreter, 2^64 - 1 panicked).
    assert lamino.remove_stripe(striped, "sort", size=48).shape == striped.shape
    for size in (50, 2**32, 2**64 - 1):
        with pytest.raises(lamino.InputError, match=f"size = {size}: median window .* at most 49 "):
            lamino.remove_stripe(striped, "sort", size=size)


# Balls: (z, y, x) centre in voxels from the volume's centre, radius, density.
BALLS = [
    ((0.0, 0.0, 0.0), 9.0, 1.0),
    ((2.0, 3.0, -4.0), 4.0, 1.0),
    ((-4.0, -5.0, 5.0), 3.0, 2.0),
    ((5.0, -2.0, 6.0), 2.5, 1.5),
]


def ball_projections(theta, tilt, center, rows, columns):
    """Exact line integrals of BALLS: a ball of radius r projects to chords 2 sqrt(r^2 - rho^2)
    around where its centre projects (docs/operator-method.md, "Geometry": rows
    x0 sin(t) cos(phi) - y0 cos(t) cos(phi) + z0 sin(phi) from row rows/2, columns
    x0 cos(t) + y0 sin(t) from the rotation axis, phi = 90 + tilt degrees). Measured against
    lamino.Operator's forward of the voxelised balls: correlation 0.997."""
    phi = np.radians(90.0 + tilt)
    v = np.arange(rows)[None, :, None] - rows // 2
    u = np.arange(columns)[None, None, :] - center
    t = np.asarray(theta)[:, None, None]
    p = np.zeros((len(theta), rows, columns))
    for (z0, y0, x0), r, density in BALLS:
        sv = x0 * np.sin(t) * np.cos(phi) - y0 * np.cos(t) * np.cos(phi) + z0 * np.sin(phi)
        su = x0 * np.cos(t) + y0 * np.sin(t)
        rho2 = (v - sv) ** 2 + (u - su) ** 2
        p += density * 2.0 * np.sqrt(np.maximum(r * r - rho2, 0.0))
    return p.astype(np.float32)


def test_find_rotation_axis_finds_the_axis_of_a_simulated_scan():
    """Exact projections of balls around a rotation axis at column 17.3: the library's search
    (that of ``--rotation-axis auto``) and the grid of ``lamino try`` find it within a quarter
    pixel (measured 17.26)."""
    theta = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    tilt = 20.0
    proj = ball_projections(theta, tilt, 17.3, 32, 32)
    center, scores = lamino.find_rotation_axis(proj, theta, tilt)
    assert abs(center - 17.3) <= 0.25, (center, scores)
    # Laminography: the slab search alone, its first pass over columns/2 +- columns/8.
    assert scores["method"] == "slab" and scores["fourier_center"] is None, scores
    first = np.arange(12.0, 20.01, 0.5)
    assert np.array_equal(scores["center"][: len(first)], first)
    assert np.all(scores["tilt"] == tilt) and scores["score"].shape == scores["center"].shape
    assert scores["peak_half_width"] is not None and scores["slab_slices"] >= 1
    # The same candidates as a grid: the first pass's scores, bit for bit, and the same axis.
    on_grid, grid = lamino.find_rotation_axis(proj, theta, tilt, centers=first)
    assert np.array_equal(grid["score"], scores["score"][: len(first)])
    assert grid["best_center"] == grid["center"][np.argmax(grid["score"])]
    assert abs(on_grid - 17.3) <= 0.25, (on_grid, grid)
    # Only the axis given: its score alone, the same bits as within the range.
    one, alone = lamino.find_rotation_axis(proj, theta, tilt, centers=[17.0])
    assert one == 17.0 and alone["peak_half_width"] is None
    assert alone["score"][0] == grid["score"][list(first).index(17.0)]


def test_find_rotation_axis_of_plain_ct_starts_from_the_fourier_estimate():
    """A simulated CT scan over 360 degrees: the Fourier estimate comes first, the decision is
    the one ``lamino try`` makes on a grid of candidates, and both find the axis (16)."""
    scan = lamino.simulate(phantom="shepp", size=32, angles=64, tilt_deg=0.0, photons=1e4, seed=1)
    proj, theta = scan["projections"], scan["theta"]
    center, scores = lamino.find_rotation_axis(proj, theta, 0.0)
    assert scores["method"] in ("fourier", "fourier+slab"), scores["reason"]
    assert scores["fourier_center"] is not None and abs(scores["fourier_center"] - 16.0) <= 0.5
    assert abs(center - 16.0) <= 0.5, (center, scores["reason"])
    on_grid, grid = lamino.find_rotation_axis(proj, theta, 0.0, centers=np.arange(12.0, 20.01, 0.5))
    assert grid["method"] in ("fourier", "fourier+slab"), grid["reason"]
    assert abs(on_grid - center) <= 1.0, (on_grid, center)


def test_find_rotation_axis_errors():
    proj = np.zeros((8, 16, 16), np.float32)
    theta = np.linspace(0, np.pi, 8)
    with pytest.raises(lamino.InputError, match="theta: 7 angles for 8 projections"):
        lamino.find_rotation_axis(proj, theta[:7], 20.0)
    with pytest.raises(lamino.GeometryError, match="tilt = 95 degrees"):
        lamino.find_rotation_axis(proj, theta, 95.0)
    with pytest.raises(lamino.GeometryError, match="tilt = -90 degrees"):
        lamino.find_rotation_axis(proj, theta, 20.0, tilts=[10.0, -90.0])
    with pytest.raises(lamino.InputError, match="centers: value at index \\[0\\] is not finite"):
        lamino.find_rotation_axis(proj, theta, 20.0, centers=[np.nan])
    with pytest.raises(lamino.InputError, match="more than 10000 candidates"):
        lamino.find_rotation_axis(proj, theta, 20.0, centers=np.arange(200.0), tilts=np.arange(60.0))
    # Bounded by the volume's height before any work (2^63 spun for minutes).
    for slices in (0, 17, 2**63):
        with pytest.raises(lamino.InputError, match=f"slab_slices: {slices}: must lie in 1..=16"):
            lamino.find_rotation_axis(proj, theta, 20.0, slab_slices=slices)
    # Degrees are not radians.
    with pytest.raises(lamino.GeometryError, match="theta: .* pass radians"):
        lamino.find_rotation_axis(proj, np.rad2deg(theta), 20.0)
