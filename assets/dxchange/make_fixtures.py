"""Writes the DXchange fixture files in this folder (see README.md).

Run from this folder: `python3 make_fixtures.py` (needs `pip install h5py numpy`). The values follow
closed formulas that tests/dxchange.rs recomputes, so every value read back is checked:

    data[k]  = 100 + (37 * k) % 1000     k = flat (C-order) index into (ntheta, deth, detw)
    flats[k] = 2000 + (13 * k) % 100
    darks[k] = 10 + k % 7
    theta[i] = 180 * i / ntheta          degrees, i < ntheta

Every file stores the stacks as `(frames, deth, detw)` with deth = 6, detw = 8, 3 flats and 2 darks.
"""

import h5py
import numpy as np

DETH, DETW, NFLAT, NDARK = 6, 8, 3, 2


def values(kind, shape, dtype):
    k = np.arange(int(np.prod(shape)), dtype=np.int64)
    v = {
        "data": 100 + (37 * k) % 1000,
        "flats": 2000 + (13 * k) % 100,
        "darks": 10 + k % 7,
    }[kind]
    return v.reshape(shape).astype(dtype)


def theta(n, dtype=np.float64):
    return (180.0 * np.arange(n) / n).astype(dtype)


def dxchange_attrs(f, th):
    """The metadata real DXchange writers add: string attributes (h5py writes variable-length
    UTF-8) and a string dataset that readers must skip."""
    f.attrs["implements"] = "exchange:measurement"
    f.attrs["default"] = "exchange"
    th.attrs["units"] = "degrees"
    f.create_dataset("measurement/instrument/name", data="lamino fixture")


def stacks(ntheta, dtype):
    return [
        ("data", values("data", (ntheta, DETH, DETW), dtype)),
        ("data_white", values("flats", (NFLAT, DETH, DETW), dtype)),
        ("data_dark", values("darks", (NDARK, DETH, DETW), dtype)),
    ]


def h5py_contiguous_f32():
    """h5py defaults (oldest file format: superblock 0, symbol-table groups), contiguous float32,
    the tilt as /lamino/phi_deg."""
    with h5py.File("h5py_contiguous_f32.h5", "w", libver="earliest") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(10, np.float32):
            ex.create_dataset(name, data=v)
        th = ex.create_dataset("theta", data=theta(10))
        f.create_dataset("lamino/phi_deg", data=110.0)
        dxchange_attrs(f, th)


def h5py_chunked_gzip_shuffle_u16():
    """Detector counts as uint16, chunked with edge chunks (13 angles in blocks of 2, rows in
    blocks of 4), shuffle + gzip + Fletcher-32 checksums, version-1 B-tree chunk index (oldest
    format); theta as float32."""
    with h5py.File("h5py_chunked_gzip_shuffle_u16.h5", "w", libver="earliest") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(13, np.uint16):
            ex.create_dataset(
                name, data=v, chunks=(2, 4, DETW), compression="gzip",
                compression_opts=4, shuffle=True, fletcher32=True,
            )
        th = ex.create_dataset("theta", data=theta(13, np.float32))
        dxchange_attrs(f, th)


def h5py_v110_chunk_indexes_u16():
    """The HDF5 1.10 file format (superblock 3, link messages, version-4 layouts, as SWMR writers
    produce) with each chunk index an acquisition writer produces: data growable along angles (extensible array, as
    areaDetector and SWMR writers make), flats in one chunk (single-chunk index), darks growable
    on every axis (version-2 B-tree); theta in a compact layout."""
    with h5py.File("h5py_v110_chunk_indexes_u16.h5", "w", libver=("v110", "v110")) as f:
        ex = f.create_group("exchange")
        (_, data), (_, flats), (_, darks) = stacks(11, np.uint16)
        ex.create_dataset("data", data=data, chunks=(3, DETH, DETW), maxshape=(None, DETH, DETW),
                          compression="gzip", shuffle=True)
        ex.create_dataset("data_white", data=flats, chunks=flats.shape, compression="gzip")
        ex.create_dataset("data_dark", data=darks, chunks=(1, 3, 4), maxshape=(None, None, None),
                          compression="gzip", shuffle=True)
        th = theta(11)
        space = h5py.h5s.create_simple(th.shape)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        dset = h5py.h5d.create(ex.id, b"theta", h5py.h5t.IEEE_F64LE, space, dcpl=dcpl)
        dset.write(h5py.h5s.ALL, h5py.h5s.ALL, th)
        dxchange_attrs(f, ex["theta"])


def h5py_fixed_array_f64():
    """float64 stacks chunked with gzip in the HDF5 1.10 format with fixed dimensions (fixed-array
    chunk index)."""
    with h5py.File("h5py_fixed_array_f64.h5", "w", libver=("v110", "v110")) as f:
        ex = f.create_group("exchange")
        for name, v in stacks(9, np.float64):
            ex.create_dataset(name, data=v / 7.0, chunks=(2, DETH, DETW), compression="gzip")
        th = ex.create_dataset("theta", data=theta(9))
        dxchange_attrs(f, th)


def h5py_hdf5_2_format_f32():
    """The newest format of the HDF5 2.0 library h5py bundles (libver="latest": version-5
    layouts, which libhdf5 1.x cannot read), chunked with shuffle + gzip."""
    with h5py.File("h5py_hdf5_2_format_f32.h5", "w", libver="latest") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(6, np.float32):
            ex.create_dataset(name, data=v, chunks=(1, DETH, DETW), compression="gzip",
                              shuffle=True)
        th = ex.create_dataset("theta", data=theta(6))
        dxchange_attrs(f, th)


def h5py_big_endian_f32():
    """Big-endian float32 stacks and big-endian float64 angles, contiguous."""
    with h5py.File("h5py_big_endian_f32.h5", "w") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(7, ">f4"):
            ex.create_dataset(name, data=v)
        th = ex.create_dataset("theta", data=theta(7, ">f8"))
        dxchange_attrs(f, th)


def h5py_scaleoffset_u16():
    """A filter libhdf5 has built in but pure-Rust readers may not: scale-offset (lossless for
    integers). The default build must name the cargo feature that reads it."""
    with h5py.File("h5py_scaleoffset_u16.h5", "w") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(5, np.uint16):
            ex.create_dataset(name, data=v, chunks=(1, DETH, DETW), scaleoffset=0)
        th = ex.create_dataset("theta", data=theta(5))
        dxchange_attrs(f, th)


def h5py_lzf_f32():
    """A plugin filter (LZF, id 32000, shipped by h5py, not by libhdf5)."""
    with h5py.File("h5py_lzf_f32.h5", "w") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(5, np.float32):
            ex.create_dataset(name, data=v, chunks=(1, DETH, DETW), compression="lzf")
        th = ex.create_dataset("theta", data=theta(5))
        dxchange_attrs(f, th)


def h5py_theta_radians_f32():
    """The scan of h5py_contiguous_f32.h5 with its angles in radians and no `units` attribute (as
    scripts that write `theta = np.linspace(0, np.pi, n)` leave them), no tilt: lamino must refuse
    to guess, and read them with --theta-units rad."""
    with h5py.File("h5py_theta_radians_f32.h5", "w", libver="earliest") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(10, np.float32):
            ex.create_dataset(name, data=v)
        ex.create_dataset("theta", data=np.deg2rad(theta(10)))


def h5py_rotation_no_dark_u16():
    """No /exchange/theta and no dark field: the angles as APS writers record the rotation,
    /process/acquisition/rotation/{rotation_start, rotation_step, num_angles} (one-element
    arrays, degrees, the fallback of dxchange's read_aps_32id), the same angles as theta(12)."""
    with h5py.File("h5py_rotation_no_dark_u16.h5", "w") as f:
        ex = f.create_group("exchange")
        (_, data), (_, flats), _ = stacks(12, np.uint16)
        ex.create_dataset("data", data=data, chunks=(4, DETH, DETW), compression="gzip")
        ex.create_dataset("data_white", data=flats)
        rot = f.create_group("process/acquisition/rotation")
        rot.create_dataset("rotation_start", data=[0.0])
        rot.create_dataset("rotation_step", data=[180.0 / 12])
        rot.create_dataset("num_angles", data=[12])
        f.attrs["implements"] = "exchange:measurement"


def nxtomo_f32():
    """The scan of h5py_contiguous_f32.h5 as the `nxtomo` package writes it (NXtomo): every frame
    in /entry0000/instrument/detector/data in acquisition order (a dark, two flats, the first
    half of the projections, an alignment frame (image_key_control -1), the other half, the
    third flat, the second dark), rotation angles in degrees, pixel size 6.5e-6 m."""
    import pint
    from nxtomo import NXtomo
    from nxtomo.nxobject.nxdetector import ImageKey

    ureg = pint.get_application_registry()
    (_, data), (_, flats), (_, darks) = stacks(10, np.float32)
    th = theta(10)
    frames = [darks[:1], flats[:2], data[:5], data[:1], data[5:], flats[2:], darks[1:]]
    keys = (
        [ImageKey.DARK_FIELD] + [ImageKey.FLAT_FIELD] * 2 + [ImageKey.PROJECTION] * 5
        + [ImageKey.ALIGNMENT] + [ImageKey.PROJECTION] * 5 + [ImageKey.FLAT_FIELD]
        + [ImageKey.DARK_FIELD]
    )
    angles = [0.0] * 3 + list(th[:5]) + [0.0] + list(th[5:]) + [180.0, 180.0]
    nx = NXtomo()
    nx.instrument.detector.data = np.concatenate(frames)
    nx.instrument.detector.image_key_control = keys
    nx.sample.rotation_angle = np.array(angles) * ureg.degree
    nx.instrument.detector.x_pixel_size = 6.5e-6 * ureg.meter
    nx.instrument.detector.y_pixel_size = 6.5e-6 * ureg.meter
    nx.save("nxtomo_f32.nx", data_path="entry0000", overwrite=True)


def h5py_tilt_theta_paths_u16():
    """A beamline's own layout: the scan of h5py_rotation_no_dark_u16.h5 (uint16, no darks) with
    no /exchange/theta and no rotation metadata, the angles in radians in
    /measurement/sample/rotation_rad (units "rad") and the tilt T = 20 degrees in radians in
    /measurement/sample/lamino_tilt (units "rad", a one-element array as EPICS writers store
    scalars): read with --theta-path and --tilt-path."""
    with h5py.File("h5py_tilt_theta_paths_u16.h5", "w") as f:
        ex = f.create_group("exchange")
        (_, data), (_, flats), _ = stacks(12, np.uint16)
        ex.create_dataset("data", data=data)
        ex.create_dataset("data_white", data=flats)
        sample = f.create_group("measurement/sample")
        rot = sample.create_dataset("rotation_rad", data=np.deg2rad(theta(12, np.float64) * 2))
        rot.attrs["units"] = "rad"
        tilt = sample.create_dataset("lamino_tilt", data=[np.deg2rad(20.0)])
        tilt.attrs["units"] = "rad"
        f.attrs["implements"] = "exchange:measurement"


def nxtomo_tilted_f32():
    """nxtomo_f32.nx's scan with its rotation axis tilted 25 degrees towards the beam, the NeXus
    way: nxtomo (3.1.1) writes the entry, then h5py adds NXtransformations' attributes to
    sample/rotation_angle: transformation_type "rotation" and the axis `vector`
    (0, cos 25, sin 25) in the McStas frame (z along the beam, y up), which nxtomo itself does not
    write for the sample."""
    nxtomo_f32()
    import shutil

    shutil.copy("nxtomo_f32.nx", "nxtomo_tilted_f32.nx")
    t = np.deg2rad(25.0)
    with h5py.File("nxtomo_tilted_f32.nx", "a") as f:
        rot = f["entry0000/sample/rotation_angle"]
        rot.attrs["transformation_type"] = "rotation"
        rot.attrs["vector"] = np.array([0.0, np.cos(t), np.sin(t)])


def h5py_blosc_f32():
    """A plugin filter no build of lamino decodes without libhdf5's plugins: Blosc (id 32001,
    written through hdf5plugin), so the error must name it."""
    import hdf5plugin

    with h5py.File("h5py_blosc_f32.h5", "w") as f:
        ex = f.create_group("exchange")
        for name, v in stacks(5, np.float32):
            ex.create_dataset(name, data=v, chunks=(1, DETH, DETW), **hdf5plugin.Blosc())
        th = ex.create_dataset("theta", data=theta(5))
        dxchange_attrs(f, th)


FIXTURES = [
    h5py_contiguous_f32,
    h5py_chunked_gzip_shuffle_u16,
    h5py_v110_chunk_indexes_u16,
    h5py_fixed_array_f64,
    h5py_hdf5_2_format_f32,
    h5py_big_endian_f32,
    h5py_scaleoffset_u16,
    h5py_lzf_f32,
    h5py_theta_radians_f32,
    h5py_rotation_no_dark_u16,
    nxtomo_f32,
    h5py_blosc_f32,
    h5py_tilt_theta_paths_u16,
    nxtomo_tilted_f32,
]

if __name__ == "__main__":
    # `python3 make_fixtures.py NAME...` writes only those (the others keep their bytes).
    import sys

    wanted = set(sys.argv[1:])
    for make in FIXTURES:
        if not wanted or make.__name__ in wanted:
            make()
