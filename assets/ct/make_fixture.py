"""Writes ct_2rows_31cols.h5, a measured-like plain-CT scan (see README.md).

Run from this folder: `python3 make_fixture.py` (needs `pip install h5py numpy`). The scan is what
a CT beamline with a detector cropped to 2 rows writes: uint16 counts with flats and darks in the
DXchange layout, Poisson noise, the rotation axis off the detector's centre column.

    detector   2 rows x 31 columns; 90 angles equispaced over [0, 180) degrees (units attribute)
    tilt       /lamino/phi_deg = 90 (plain CT)
    axis       column 17.3 (the centre column is 15); pixel w is centred at w
    object     disks (values per voxel), the same in both rows but one small disk in row 1 only
    beam       I0(v, w) = 20000 (1 + 0.1 (w / 30 - 0.5)) (1 + 0.02 v); 10 flats, Poisson
    dark       100 + 3 (w mod 5) counts plus Gaussian read noise (sigma 2); 5 darks
    data       Poisson(I0 exp(-P)) + dark, P the exact line integrals of the disks
    truth      /truth/volume (2, 31, 31) float32: the disks sampled at voxel centres, voxel
               (z, y, x) at (x - 15, y - 15) from the rotation axis
"""

import h5py
import numpy as np

ROWS, COLS, ANGLES, AXIS, CENTRE = 2, 31, 90, 17.3, 15
# (x, y, radius, value per voxel, rows it is in)
DISKS = [
    (0.0, 0.0, 11.0, 0.02, (0, 1)),
    (4.0, 2.0, 4.0, 0.03, (0, 1)),
    (-5.0, -3.0, 3.0, -0.01, (0, 1)),
    (0.0, -6.0, 2.0, 0.04, (1,)),
]


def line_integrals(theta):
    """P[angle, row, column]: the chord of each disk times its value."""
    w = np.arange(COLS)
    p = np.zeros((len(theta), ROWS, COLS))
    for i, t in enumerate(theta):
        for x, y, r, mu, rows in DISKS:
            s = w - AXIS - (x * np.cos(t) + y * np.sin(t))
            chord = 2.0 * mu * np.sqrt(np.maximum(r * r - s * s, 0.0))
            for v in rows:
                p[i, v] += chord
    return p


def truth():
    y, x = np.mgrid[0:COLS, 0:COLS] - CENTRE
    vol = np.zeros((ROWS, COLS, COLS), np.float32)
    for cx, cy, r, mu, rows in DISKS:
        inside = (x - cx) ** 2 + (y - cy) ** 2 <= r * r
        for v in rows:
            vol[v][inside] += mu
    return vol


def main():
    rng = np.random.default_rng(28)
    degrees = 180.0 * np.arange(ANGLES) / ANGLES
    w = np.arange(COLS)
    v = np.arange(ROWS)[:, None]
    beam = 20000.0 * (1 + 0.1 * (w / 30 - 0.5)) * (1 + 0.02 * v)
    dark = 100.0 + 3.0 * (w % 5) + 0.0 * v

    def counts(mean, frames):
        signal = rng.poisson(np.broadcast_to(mean, (frames, ROWS, COLS)))
        read = rng.normal(dark, 2.0, (frames, ROWS, COLS))
        return np.clip(np.rint(signal + read), 0, 65535).astype(np.uint16)

    data = counts(beam * np.exp(-line_integrals(np.radians(degrees))), ANGLES)
    flats = counts(beam, 10)
    darks = counts(np.zeros((ROWS, COLS)), 5)
    with h5py.File("ct_2rows_31cols.h5", "w") as f:
        f.attrs["implements"] = "exchange:measurement"
        ex = f.create_group("exchange")
        ex.create_dataset("data", data=data, chunks=(10, ROWS, COLS), compression="gzip")
        ex.create_dataset("data_white", data=flats)
        ex.create_dataset("data_dark", data=darks)
        th = ex.create_dataset("theta", data=degrees)
        th.attrs["units"] = "degrees"
        f.create_dataset("lamino/phi_deg", data=90.0)
        f.create_dataset("truth/volume", data=truth())


if __name__ == "__main__":
    main()
