"""Reads an OME-Zarr volume lamino wrote with the Python `zarr` and `ome-zarr` packages (what
napari's reader uses) and checks it against the TIFF of the same run.

Usage: check_ome_zarr.py RECON_DIR VOXEL_SIZE_UM

RECON_DIR holds recon.zarr and recon.tif of one `lamino reconstruct --format tiff,zarr` run.
Checks: level 0 equals the TIFF exactly; every level is the 2x2x2 block mean of the one above
(blocks cut by an odd edge average the voxels they have); the multiscales metadata (axes z/y/x
of type space in micrometres, a scale of VOXEL_SIZE_UM * 2^k per level) as ome-zarr parses it.
Prints one line per check and `N passed, 0 failed`; exits non-zero at the first failure.
"""

import sys
from pathlib import Path

import numpy as np
import tifffile
import zarr
from ome_zarr.io import parse_url
from ome_zarr.reader import Multiscales, Reader


def block_means(v):
    """2x2x2 means of v, odd edges averaging what they have."""
    out_shape = tuple((n + 1) // 2 for n in v.shape)
    sums = np.zeros(out_shape)
    counts = np.zeros(out_shape)
    for dz in range(2):
        for dy in range(2):
            for dx in range(2):
                part = v[dz::2, dy::2, dx::2].astype(np.float64)
                sums[: part.shape[0], : part.shape[1], : part.shape[2]] += part
                counts[: part.shape[0], : part.shape[1], : part.shape[2]] += 1
    return sums / counts


def main():
    recon, voxel = Path(sys.argv[1]), float(sys.argv[2])
    passed = 0

    def check(ok, what):
        nonlocal passed
        if not ok:
            print(f"FAILED: {what}")
            print(f"{passed} passed, 1 failed")
            sys.exit(1)
        passed += 1
        print(f"ok: {what}")

    tif = tifffile.imread(recon / "recon.tif")
    group = zarr.open_group(str(recon / "recon.zarr"), mode="r")
    level0 = group["0"][...]
    check(level0.dtype == np.float32, "level 0 is float32")
    check(level0.shape == tif.shape and np.array_equal(level0, tif), "level 0 equals recon.tif exactly")

    ome = group.attrs["ome"]
    check(ome["version"] == "0.5", "OME-NGFF version 0.5")
    ms = ome["multiscales"][0]
    check([a["name"] for a in ms["axes"]] == ["z", "y", "x"], "axes z, y, x")
    check(all(a["type"] == "space" and a["unit"] == "micrometer" for a in ms["axes"]), "space axes in micrometres")

    expected = level0
    for k, d in enumerate(ms["datasets"]):
        scale = d["coordinateTransformations"][0]
        check(scale["type"] == "scale" and np.allclose(scale["scale"], [voxel * 2**k] * 3, rtol=1e-12),
              f"level {k} scale {scale['scale']}")
        if k > 0:
            expected = block_means(expected)
            got = group[d["path"]][...]
            check(got.shape == expected.shape and np.max(np.abs(got - expected)) <= 1e-5 * max(1.0, np.max(np.abs(expected))),
                  f"level {k} {got.shape} is the block mean of level {k - 1}")

    # The ome-zarr reader (napari's): one image node with its multiscale data and axes.
    nodes = list(Reader(parse_url(str(recon / "recon.zarr")))())
    check(len(nodes) >= 1 and any(isinstance(s, Multiscales) for s in nodes[0].specs), "ome-zarr reads a multiscale image")
    data = nodes[0].data
    check(len(data) == len(ms["datasets"]) and np.array_equal(np.asarray(data[0]), tif), "ome-zarr's level 0 equals recon.tif")
    transforms = nodes[0].metadata["coordinateTransformations"]
    check(np.allclose(transforms[0][0]["scale"], [voxel] * 3), "ome-zarr's level 0 scale is the voxel size")
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
