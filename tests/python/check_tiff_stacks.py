"""lamino's TIFF stacks as the field reads them (issue #59).

tifffile (napari's and scikit-image's reader) reads an ImageJ hyperstack with `imread` as one
contiguous block from the first page's first strip, as Fiji does, and page by page through each
page's own strip offsets: the two must give the values lamino wrote, for one, two and three pages
and for pages of one strip and of several (640 x 640 float32: 2 strips).

The stacks are `flatfield apply`'s `corrected.tif` (the corrected stack of a TIFF input), whose
values are checked against `corrected.npy`, the same correction written for the `.npy` input.

Usage: check_tiff_stacks.py LAMINO WORKDIR
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import tifffile

# (pages, height, width): one strip per page, then pages of several strips.
SHAPES = [(1, 5, 7), (2, 3, 4), (3, 9, 11), (2, 640, 640), (3, 520, 700)]


def lamino(binary, *args):
    subprocess.run(
        [binary, "--allow-software-gpu", *map(str, args)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def check(binary, work, shape):
    n, h, w = shape
    d = work / f"{n}x{h}x{w}"
    d.mkdir(parents=True)
    stack = (np.random.default_rng(n * h * w).random(shape) * 1000 + 100).astype(np.float32)
    np.save(d / "in.npy", stack)
    tifffile.imwrite(d / "in.tif", stack, photometric="minisblack")
    fields = d / "fields"
    lamino(binary, "flatfield", "fit", d / "in.npy", "--out", fields, "--no-darkfield",
           "--max-reweight-iterations", 1, "--working-size", 16)
    lamino(binary, "flatfield", "apply", d / "in.npy", "--fields", fields, "--out", d / "npy")
    lamino(binary, "flatfield", "apply", d / "in.tif", "--fields", fields, "--out", d / "tif")
    written = np.load(d / "npy" / "corrected.npy")
    assert written.shape == shape, (shape, written.shape)
    assert np.isfinite(written).all() and written.max() > 0, shape

    path = d / "tif" / "corrected.tif"
    whole = tifffile.imread(path)
    assert whole.dtype == np.float32, (shape, whole.dtype)
    assert np.array_equal(whole.reshape(shape), written), f"{shape}: imread differs from the values written"
    with tifffile.TiffFile(path) as tif:
        assert tif.is_imagej, shape
        assert len(tif.pages) == n, (shape, len(tif.pages))
        pages = np.stack([page.asarray() for page in tif.pages])
        strips = len(tif.pages[0].dataoffsets)
    assert np.array_equal(pages, written), f"{shape}: page-by-page reading differs from the values written"
    print(f"{n} x {h} x {w}: imread and page by page read the values written ({strips} strip(s) a page)")


def main():
    binary, work = sys.argv[1], Path(sys.argv[2])
    for shape in SHAPES:
        check(binary, work, shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
