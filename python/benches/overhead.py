"""Python against the command line on the same scan: wall time and peak host memory, in one run.

    python python/benches/overhead.py [SIZE] [ITERATIONS] [--angles N] [--binning B]

The simulated chip scan of SIZE^3 (default 64) with SIZE angles (or N), ITERATIONS (default 5)
outer iterations. `--binning B` repeats every detector pixel B x B times and reconstructs binned
B x B (`binning=log2(B)`, tomocupy's exponent on both sides): the same SIZE^3 solve from B^2 times the input, so that a copy of the input shows
against what the solver holds (python/tests/test_memory.py runs that comparison).

Both run in a fresh process (the interpreter with numpy and lamino imported, against the
binary), on the same line integrals (.npy) with the same geometry, and write their volume; the
volumes are compared bit for bit. Needs the `lamino` binary of this checkout (cargo build).

The issue's bound: what `lamino.reconstruct` adds to the peak of the process it runs in is at
most what `lamino reconstruct` adds to the binary's, plus one copy of the input. Python's figure
is the child's own: its peak (VmHWM) after the call minus its RSS just before it (the interpreter,
numpy, lamino and the input already loaded). The CLI's is its peak minus the peak of `lamino
--version` (the binary at rest).

The CLI's peaks are `ru_maxrss` of the finished process, taken by a small spawner (below), not
by this process: Linux keeps in `ru_maxrss` the peak of the memory a process had before its
`exec`, and a child started by `subprocess` (vfork) had its parent's. Read here, `lamino
--version` would show this process's peak (41 MiB after `lamino.simulate` at 64^3, where the
binary at rest is 9 MiB).

Mesa's shader cache is off in both children: a process that finds its compiled kernels there
peaks lower than one that compiles them (25 MiB at 32^3 on lavapipe), and whichever side ran
second would find the other's.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Starts the command of argv[1:] (stdout to /dev/null), waits for it and prints its exit status,
# wall time and peak RSS (KiB) with the spawner's own peak: an interpreter without site packages
# (`-I -S`) that imports nothing else (json alone adds 1 MiB), about 8.5 MiB, so that the child's
# `ru_maxrss` is its own peak unless that is below the spawner's, which the caller checks.
SPAWN = """
import os, sys, time
null = os.open(os.devnull, os.O_WRONLY)
start = time.monotonic()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_DUP2, null, 1)])
_, status, usage = os.wait4(pid, 0)
wall = time.monotonic() - start
with open("/proc/self/status") as f:
    spawner = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
print(status, wall, usage.ru_maxrss, spawner)
"""

# The Python side: reads the scan, reconstructs `calls` times and writes the first volume; its
# RSS before the first call, its peak after each call and its RSS after the first (KiB, from
# /proc/self/status: this process's own figures) and each call's seconds go to python.json.
CHILD = """
import json, sys, time
import numpy as np, lamino

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))

tmp, options = sys.argv[1], json.loads(sys.argv[2])
calls = options.pop("calls")
p = np.load(f"{tmp}/proj.npy")
t = np.load(f"{tmp}/theta.npy")
figures = {"before": status("VmRSS"), "peaks": [], "seconds": []}
for call in range(calls):
    start = time.monotonic()
    v = lamino.reconstruct(p, t, allow_software_gpu=True, **options)
    figures["seconds"].append(time.monotonic() - start)
    figures["peaks"].append(status("VmHWM"))
    if call == 0:
        figures["after"] = status("VmRSS")
        np.save(f"{tmp}/python.npy", v)
    del v
with open(f"{tmp}/python.json", "w") as f:
    json.dump(figures, f)
"""


def scan(size, angles, binning):
    """The simulated chip scan (30 degree tilt) with every detector pixel repeated `binning` x
    `binning` times: line integrals `(angles, size * binning, size * binning)`, angles, tilt."""
    import lamino
    import numpy as np

    s = lamino.simulate("chip", size=size, angles=angles, tilt_deg=30)
    proj = np.repeat(np.repeat(s["projections"], binning, axis=1), binning, axis=2)
    return proj, s["theta"], s["tilt"]


def cli_binary():
    """The `lamino` binary of this checkout's dev profile (the profile `maturin develop` builds)."""
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "lamino"


def spawned(args, env, at_most=False):
    """Exit status, wall seconds and peak RSS (MiB) of `args`, started by the small spawner.
    `at_most`: a peak below the spawner's is given as the spawner's (a bound from above)."""
    out = subprocess.run([sys.executable, "-I", "-S", "-c", SPAWN, *map(str, args)], env=env,
                         check=True, capture_output=True, text=True).stdout
    status, wall, peak, spawner = out.split()
    assert status == "0", f"{args[0]} failed with status {status}"
    # Below the spawner's peak, ru_maxrss is the spawner's: no figure of the child's, only a
    # bound from above.
    assert at_most or int(peak) > int(spawner), (
        f"{args[0]}'s peak ({peak} KiB) is not above the spawner's ({spawner} KiB): it "
        f"cannot be told apart")
    return float(wall), max(int(peak), int(spawner) if at_most else 0) / 1024


def compare(tmp, proj, theta, tilt, iterations, binning=1, calls=1, cli=None):
    """Reconstructs `proj` (float32 line integrals) through Python and through the CLI, each in a
    fresh process, in `tmp`; returns the figures (seconds, MiB) and whether the bits are the
    same. `binning` is the factor (a power of two), `calls` how often the Python side calls
    `reconstruct` (a second call shows what the first left for the next)."""
    import numpy as np
    import tifffile

    tmp = pathlib.Path(tmp)
    cli = pathlib.Path(cli) if cli else cli_binary()
    ntheta, deth, detw = proj.shape
    np.save(tmp / "proj.npy", proj)
    np.save(tmp / "theta.npy", theta)
    geometry = {"n0": deth, "n1": detw, "n2": detw, "deth": deth, "detw": detw,
                "theta": [float(a) for a in theta], "phi": float(np.radians(90 + tilt))}
    (tmp / "geometry.json").write_text(json.dumps(geometry))
    env = dict(os.environ, MESA_SHADER_CACHE_DISABLE="true")
    # Both sides take tomocupy's exponent.
    exponent = binning.bit_length() - 1
    options = {"tilt": tilt, "iterations": iterations, "binning": exponent, "calls": calls}
    py_s, py_process_peak = spawned(
        [sys.executable, "-c", CHILD, tmp, json.dumps(options)], env)
    py = json.loads((tmp / "python.json").read_text())
    cli_s, cli_peak = spawned([
        cli, "reconstruct", tmp / "proj.npy", "--geometry", tmp / "geometry.json",
        "--iterations", iterations, "--binning", exponent, "--format", "tiff",
        "--quiet", "--allow-software-gpu", "--out", tmp / "out"], env)
    # The binary at rest may peak below the spawner (8.4 against 8.7 MiB): then the spawner's
    # peak stands for it, which can only lower what the CLI's run is said to add.
    _, cli_rest = spawned([cli, "--version"], env, at_most=True)
    volume = np.load(tmp / "python.npy")
    cli_volume = tifffile.imread(tmp / "out" / "recon.tif").astype(np.float32)
    same = np.array_equal(volume.view(np.uint32), cli_volume.view(np.uint32))
    mib = [k / 1024 for k in py["peaks"]]
    return {
        "input_mib": proj.nbytes / 2**20,
        "volume_mib": volume.nbytes / 2**20,
        # The process's time without the calls after the first: the CLI's work.
        "python_s": py_s - sum(py["seconds"][1:]), "python_seconds": py["seconds"],
        "python_peak": mib[0], "python_before": py["before"] / 1024,
        "python_after": py["after"] / 1024, "python_peaks": mib,
        "python_process_peak": py_process_peak,
        "python_added": mib[0] - py["before"] / 1024,
        "cli_s": cli_s, "cli_peak": cli_peak, "cli_rest": cli_rest,
        "cli_added": cli_peak - cli_rest,
        "same_bits": same,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("size", type=int, nargs="?", default=64)
    parser.add_argument("iterations", type=int, nargs="?", default=5)
    parser.add_argument("--angles", type=int)
    parser.add_argument("--binning", type=int, default=1, choices=[1, 2, 4, 8])
    a = parser.parse_args()
    size, iterations, angles = a.size, a.iterations, a.angles or a.size
    proj, theta, tilt = scan(size, angles, a.binning)
    with tempfile.TemporaryDirectory() as tmp:
        f = compare(tmp, proj, theta, tilt, iterations, binning=a.binning, calls=2)
    if a.binning > 1:
        print(f"line integrals {proj.shape} binned {a.binning} x {a.binning}:")
    print(f"{size}^3, {angles} angles, {iterations} iterations; input {f['input_mib']:.1f} MiB, "
          f"volume {f['volume_mib']:.1f} MiB; Mesa's shader cache off on both sides")
    print(f"python: {f['python_s']:.2f} s, peak RSS {f['python_peak']:.1f} MiB; "
          f"before the call {f['python_before']:.1f} MiB: the call added "
          f"{f['python_added']:.1f} MiB; {f['python_after']:.1f} MiB after it (the device kept "
          f"for the next call); a second call: {f['python_seconds'][1]:.2f} s, peak "
          f"{f['python_peaks'][1]:.1f} MiB")
    print(f"cli:    {f['cli_s']:.2f} s, peak RSS {f['cli_peak']:.1f} MiB; at rest (lamino "
          f"--version) {f['cli_rest']:.1f} MiB: the run added {f['cli_added']:.1f} MiB")
    print(f"ratio python/cli: time {f['python_s'] / f['cli_s']:.3f}, peak RSS "
          f"{f['python_peak'] / f['cli_peak']:.3f}; added memory python - cli "
          f"{f['python_added'] - f['cli_added']:+.1f} MiB (bound: one copy of the input, "
          f"{f['input_mib']:.1f} MiB); same bits: {f['same_bits']}")


if __name__ == "__main__":
    main()
