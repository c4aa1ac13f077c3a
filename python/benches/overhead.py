"""Python against the command line on the same scan: wall time and peak RSS, in one run.

    python benches/overhead.py [SIZE] [ITERATIONS]   (default 64 and 5)

Both run in a fresh process (the interpreter with numpy and lamino imported, against the
binary), on the same line integrals (.npy) with the same geometry, and write their volume; the
volumes are compared bit for bit. Needs the `lamino` binary of this checkout (cargo build).

Memory is measured two ways: the peak RSS of each process, and what the reconstruction adds to
the process it runs in: for Python the peak minus the RSS just before `lamino.reconstruct` (the
interpreter, numpy, lamino and the input already loaded); for the CLI its peak minus the peak of
`lamino --version` (the binary at rest). The issue's bound: Python's added memory at most the
CLI's plus one copy of the input.
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
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    assert status == 0, f"{args[0]} failed with status {status}"
    return time.monotonic() - start, usage.ru_maxrss / 1024


# The Python side: RSS just before the call and the peak after it, in MiB, written to a file.
CHILD = """
import json, resource, sys
import numpy as np, lamino

def rss_mib():
    with open("/proc/self/status") as f:
        line = next(l for l in f if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

tmp, iterations = sys.argv[1], int(sys.argv[2])
p = np.load(f"{tmp}/proj.npy")
t = np.load(f"{tmp}/theta.npy")
before, peak_before = rss_mib(), peak_mib()
v = lamino.reconstruct(p, t, tilt=30.0, iterations=iterations)
peak = peak_mib()
np.save(f"{tmp}/python.npy", v)
with open(f"{tmp}/python.json", "w") as f:
    json.dump({"before": before, "peak_before": peak_before, "peak": peak}, f)
"""


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
        py_s, py_mib = measured([sys.executable, "-c", CHILD, str(tmp), str(iterations)])
        inside = json.loads((tmp / "python.json").read_text())
        cli_s, cli_mib = measured([
            str(cli), "reconstruct", str(tmp / "proj.npy"), "--geometry",
            str(tmp / "geometry.json"), "--iterations", str(iterations), "--format", "tiff",
            "--quiet", "--allow-software-gpu", "--out", str(tmp / "out")])
        _, cli_rest_mib = measured([str(cli), "--version"])
        same = np.array_equal(np.load(tmp / "python.npy"),
                              tifffile.imread(tmp / "out" / "recon.tif").astype(np.float32))
        input_mib = s["projections"].nbytes / 2**20
    py_added = inside["peak"] - inside["before"]
    cli_added = cli_mib - cli_rest_mib
    print(f"{size}^3, {size} angles, {iterations} iterations; input {input_mib:.1f} MiB, "
          f"volume {size**3 * 4 / 2**20:.1f} MiB")
    print(f"python: {py_s:.2f} s, peak RSS {py_mib:.0f} MiB; before the call {inside['before']:.0f}"
          f" MiB (peak so far {inside['peak_before']:.0f}), peak after it {inside['peak']:.0f} MiB:"
          f" the call added {py_added:.0f} MiB")
    print(f"cli:    {cli_s:.2f} s, peak RSS {cli_mib:.0f} MiB; at rest ({cli.name} --version) "
          f"{cli_rest_mib:.0f} MiB: the run added {cli_added:.0f} MiB")
    print(f"ratio python/cli: time {py_s / cli_s:.3f}, peak RSS {py_mib / cli_mib:.3f}; "
          f"added memory python - cli {py_added - cli_added:+.0f} MiB "
          f"(bound: one copy of the input, {input_mib:.1f} MiB); same bits: {same}")


if __name__ == "__main__":
    main()
