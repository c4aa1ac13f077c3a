"""Writes the fixture files in this folder (see README.md): TIFF folders and stacks as tifffile
writes them, and .npy arrays of the types and byte orders numpy saves.

Run from this folder: `python3 make_fixtures.py` (needs `pip install tifffile numpy`). The values
follow closed formulas that tests/inputs/files.rs recomputes:

    data[k]  = 100 + (37 * k) % 1000     k = flat (C-order) index into (12, 16, 16)
    flats[k] = 2000 + (13 * k) % 100     (3, 16, 16)
    darks[k] = 10 + k % 7                (2, 16, 16)
    line[k]  = sin(0.37 * k) * 3 + 1e-6 * k   (3, 4, 5), float64 (not exact in float32 or float16)

Intensities are integers below 2048, exact in every type they are saved in here (uint16, int16,
uint32, float16, float64), so every route must give the same line integrals bit for bit.
"""

import os
import shutil

import numpy as np
import tifffile

NPROJ, NFLAT, NDARK, H, W = 12, 3, 2, 16, 16


def values(kind, shape):
    k = np.arange(int(np.prod(shape)), dtype=np.int64)
    v = {
        "data": 100 + (37 * k) % 1000,
        "flats": 2000 + (13 * k) % 100,
        "darks": 10 + k % 7,
    }[kind]
    return v.reshape(shape)


def fresh(folder):
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)


def folder_of_frames(folder, prefix, frames):
    """One single-page TIFF per frame, numbered without zero padding (proj_2 before proj_10 only
    in natural order), plus files a reader must skip."""
    fresh(folder)
    for i, frame in enumerate(frames):
        tifffile.imwrite(f"{folder}/{prefix}_{i}.tif", frame)


data = values("data", (NPROJ, H, W)).astype(np.uint16)
flats = values("flats", (NFLAT, H, W)).astype(np.uint16)
darks = values("darks", (NDARK, H, W)).astype(np.uint16)

# The same frames as multi-page stacks and as folders of single-image files. (Without
# photometric="minisblack" tifffile writes a stack of 3 frames as one planar RGB image.)
for name, frames in [("proj", data), ("flats", flats), ("darks", darks)]:
    tifffile.imwrite(f"{name}_stack.tif", frames, photometric="minisblack")
folder_of_frames("proj_folder", "proj", data)
folder_of_frames("flats_folder", "flat", flats)
folder_of_frames("darks_folder", "dark", darks)
# Not images of the stack: a text file, and the AppleDouble file macOS leaves beside a copied one.
with open("proj_folder/notes.txt", "w") as f:
    f.write("written by make_fixtures.py\n")
with open("proj_folder/._proj_3.tif", "wb") as f:
    f.write(b"\x00\x05\x16\x07 not a TIFF")
with open("angles.txt", "w") as f:
    f.write("\n".join(f"{360.0 * i / NPROJ:.6f}" for i in range(NPROJ)) + "\n")

# Folders that are not one stack: a size, a sample type, a page count that differs.
fresh("mixed_sizes")
tifffile.imwrite("mixed_sizes/a_1.tif", data[0])
tifffile.imwrite("mixed_sizes/a_2.tif", data[1])
tifffile.imwrite("mixed_sizes/a_10.tif", data[2, :, :12])
fresh("mixed_types")
tifffile.imwrite("mixed_types/b_1.tif", data[0])
tifffile.imwrite("mixed_types/b_2.tif", data[1].astype(np.float32))
fresh("multipage_in_folder")
tifffile.imwrite("multipage_in_folder/c_1.tif", data[0])
tifffile.imwrite("multipage_in_folder/c_2.tif", data[1:3], photometric="minisblack")

# Intensity stacks in the types users save them in; the values are exact in each.
for name, dtype in [
    ("f64", "<f8"),
    ("f64_be", ">f8"),
    ("f16", "<f2"),
    ("f16_be", ">f2"),
    ("i16", "<i2"),
    ("u32", "<u4"),
]:
    np.save(f"proj_{name}.npy", data.astype(dtype))
np.save("proj_f64_fortran.npy", np.asfortranarray(data.astype(np.float64)))

# Line integrals in float64 and float16, with numpy's own conversion to float32 beside each.
k = np.arange(3 * 4 * 5, dtype=np.float64)
line = (np.sin(0.37 * k) * 3 + 1e-6 * k).reshape(3, 4, 5)
line[0, 0, :3] = [1e-30, -1e-42, 6e-8]  # below float32's and float16's normal ranges
np.save("line_f64.npy", line)
np.save("line_f64_be.npy", line.astype(">f8"))
np.save("line_f64_fortran.npy", np.asfortranarray(line))
np.save("line_f64_as_f32.npy", line.astype(np.float32))
np.save("line_f16.npy", line.astype(np.float16))
np.save("line_f16_be.npy", line.astype(">f2"))
np.save("line_f16_as_f32.npy", line.astype(np.float16).astype(np.float32))
