"""Python against the command line on the same scan: wall time and peak RSS, in one run.

    python benches/overhead.py [SIZE] [ITERATIONS]   (default 64 and 5)

Both run in a fresh process (the interpreter with numpy and lamino imported, against the
binary), on the same line integrals (.npy) with the same geometry, and write their volume; the
volumes are compared bit for bit. Needs the `lamino` binary of this checkout (cargo build).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import lamino
import numpy as np
import tifffile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def measured(args):
    """Wall seconds and peak RSS (MiB) of a child process."""
    start = time.monotonic()
    child = subprocess.Popen(args)
    _, status, usage = os.wait4(child.pid, 0)
    assert status == 0, f"{args[0]} failed with status {status}"
    return time.monotonic() - start, usage.ru_maxrss / 1024


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    cli = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "lamino"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        s = lamino.simulate("chip", size=size, angles=size, tilt_deg=30)
        np.save(tmp / "proj.npy", s["projections"])
        np.save(tmp / "theta.npy", s["theta"])
        geometry = {"n0": size, "n1": size, "n2": size, "deth": size, "detw": size,
                    "theta": s["theta"].tolist(), "phi": float(np.radians(90 + s["tilt"]))}
        (tmp / "geometry.json").write_text(json.dumps(geometry))
        script = (
            "import sys, numpy as np, lamino\n"
            f"p = np.load({str(tmp / 'proj.npy')!r}); t = np.load({str(tmp / 'theta.npy')!r})\n"
            f"v = lamino.reconstruct(p, t, tilt=30.0, iterations={iterations})\n"
            f"np.save({str(tmp / 'python.npy')!r}, v)\n"
        )
        py_s, py_mib = measured([sys.executable, "-c", script])
        cli_s, cli_mib = measured([
            str(cli), "reconstruct", str(tmp / "proj.npy"), "--geometry",
            str(tmp / "geometry.json"), "--iterations", str(iterations), "--format", "tiff",
            "--quiet", "--allow-software-gpu", "--out", str(tmp / "out")])
        same = np.array_equal(np.load(tmp / "python.npy"),
                              tifffile.imread(tmp / "out" / "recon.tif").astype(np.float32))
        input_mib = s["projections"].nbytes / 2**20
    print(f"{size}^3, {size} angles, {iterations} iterations; input {input_mib:.1f} MiB")
    print(f"python: {py_s:.2f} s, peak RSS {py_mib:.0f} MiB")
    print(f"cli:    {cli_s:.2f} s, peak RSS {cli_mib:.0f} MiB")
    print(f"ratio python/cli: time {py_s / cli_s:.3f}, peak RSS {py_mib / cli_mib:.3f}; "
          f"same bits: {same}")


if __name__ == "__main__":
    main()
