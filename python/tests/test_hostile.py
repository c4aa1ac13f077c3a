"""Every numeric argument of every public call, at the extremes a typo or a fuzzer gives (0, 1, -1,
2^32, 2^63, 2^64-1, NaN, +-inf, 1e+-300), ends within seconds in a lamino error, an error of the
argument's conversion (TypeError, OverflowError, ValueError) or a correct result: never a
panic, an abort, a hang or an allocation beyond the plan (issue #59).

The calls run in a worker process that reports each outcome on a line of its own; the test
watches it with a deadline per call, so that a hang or a crash is caught, named and the rest
still run. Inputs are tiny (8^3 scans): a value that is accepted runs the real call on them, and
a reconstruction that would only be long (an iteration count of 2^63) is stopped by its
`progress` callable after its first iteration, which is the run ending as it should.
"""

import ast
import json
import math
import os
import pathlib
import select
import subprocess
import sys
import tempfile
import time

import pytest

STUBS = pathlib.Path(__file__).resolve().parents[1] / "lamino" / "__init__.pyi"
EXTREMES = [0, 1, -1, 2**32, 2**63, 2**64 - 1, math.nan, math.inf, -math.inf, 1e300, 1e-300]
# Seconds one call may take once the worker has opened the device and compiled the kernels of
# each kind of call (tens of seconds on lavapipe on a loaded machine: WARM_UP_S).
CALL_S = 30.0
WARM_UP_S = 240.0
# Numeric arguments that are arrays of numbers rather than numbers: each extreme as a
# one-element array.
ARRAYS = {("find_rotation_axis", "centers"), ("find_rotation_axis", "tilts")}
# The exceptions argument conversion raises; everything else must be a lamino error.
CONVERSION = ("TypeError", "OverflowError", "ValueError")


class StopRun(Exception):
    """Raised by `progress` after the first iteration: the run was accepted and is stopping."""


def numeric_arguments():
    """(call, argument) for every argument of a public function or class whose stub type is a
    number, a tuple of numbers or a device index, plus the numeric arrays of ARRAYS."""
    found = set(ARRAYS)
    for node in ast.parse(STUBS.read_text()).body:
        functions = [node] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            functions = [f for f in node.body
                         if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
        for f in functions:
            for a in f.args.args + f.args.kwonlyargs:
                text = ast.unparse(a.annotation) if a.annotation else ""
                if any(word in text for word in ("int", "float", "Device")):
                    found.add((node.name, a.arg))
    return found


def calls(lamino, np):
    """(call, argument, value, thunk) for every numeric argument and extreme value: the thunk
    makes the call with that value and every other argument at a tiny working value."""
    scan = lamino.simulate("chip", size=8, angles=8, tilt_deg=30.0)
    proj, theta = scan["projections"], scan["theta"]
    images = np.random.default_rng(0).uniform(50, 100, (4, 8, 8)).astype(np.float32)

    def stop(report):
        raise StopRun(report["iteration"])

    def reconstruct(**kw):
        args = {"tilt": 30.0, "iterations": 1, "progress": stop}
        args.update(kw)
        return lamino.reconstruct(proj, theta, **args)

    def operator(**kw):
        args = {"volume_shape": (8, 8, 8), "tilt": 30.0}
        args.update(kw)
        op = lamino.Operator(args.pop("volume_shape"), theta, args.pop("tilt"), **args)
        return op.forward(np.ones(op.volume_shape, np.float32))

    def find_axis(**kw):
        args = {"tilt": 30.0, "centers": [4.0]}
        args.update(kw)
        return lamino.find_rotation_axis(proj, theta, args.pop("tilt"), **args)

    def basic(**kw):
        # Short solves: an extreme value still meets a real fit, in a fraction of a second.
        args = {"working_size": 8, "max_iterations": 20, "max_reweight_iterations": 2}
        args.update(kw)
        return lamino.BaSiC(**args).fit_transform(images)

    def shape(n, at, value):
        return tuple(value if i == at else 8 for i in range(n))

    table = {
        ("simulate", "size"): lambda v: lamino.simulate(size=v, angles=8),
        ("simulate", "angles"): lambda v: lamino.simulate(size=8, angles=v),
        ("simulate", "tilt_deg"): lambda v: lamino.simulate(size=8, angles=8, tilt_deg=v),
        ("simulate", "photons"): lambda v: lamino.simulate(size=8, angles=8, photons=v),
        ("simulate", "seed"): lambda v: lamino.simulate(size=8, angles=8, photons=1e3, seed=v),
        ("reconstruct", "tilt"): lambda v: reconstruct(tilt=v),
        ("reconstruct", "center"): lambda v: reconstruct(center=v),
        ("reconstruct", "alpha"): lambda v: reconstruct(alpha=v),
        ("reconstruct", "max_iterations"): lambda v: reconstruct(iterations=None,
                                                                 max_iterations=v),
        ("reconstruct", "iterations"): lambda v: reconstruct(iterations=v),
        ("reconstruct", "binning"): lambda v: reconstruct(binning=v),
        ("reconstruct", "device"): lambda v: reconstruct(device=v),
        ("Operator", "tilt"): lambda v: operator(tilt=v),
        ("Operator", "center"): lambda v: operator(center=v),
        ("Operator", "eps"): lambda v: operator(eps=v),
        ("Operator", "device"): lambda v: operator(device=v),
        ("remove_stripe", "level"): lambda v: lamino.remove_stripe(proj, "fw", level=v),
        ("remove_stripe", "sigma"): lambda v: lamino.remove_stripe(proj, "fw", sigma=v),
        ("remove_stripe", "size"): lambda v: lamino.remove_stripe(proj, "sort", size=v),
        ("find_rotation_axis", "tilt"): lambda v: find_axis(tilt=v),
        ("find_rotation_axis", "centers"): lambda v: find_axis(centers=[v]),
        ("find_rotation_axis", "tilts"): lambda v: find_axis(tilts=[v]),
        ("find_rotation_axis", "slab_slices"): lambda v: find_axis(slab_slices=v),
        ("find_rotation_axis", "slab_z"): lambda v: find_axis(slab_z=v),
        ("find_rotation_axis", "device"): lambda v: find_axis(device=v),
        ("BaSiC", "device"): lambda v: basic(device=v),
    }
    for at in range(3):
        table[("reconstruct", "volume_shape", at)] = (
            lambda v, at=at: reconstruct(volume_shape=shape(3, at, v)))
        table[("Operator", "volume_shape", at)] = (
            lambda v, at=at: operator(volume_shape=shape(3, at, v)))
    for at in range(2):
        table[("Operator", "detector_shape", at)] = (
            lambda v, at=at: operator(detector_shape=shape(2, at, v)))
    for name in ("smoothness_flatfield", "smoothness_darkfield", "max_iterations",
                 "optimization_tol", "max_reweight_iterations", "reweighting_tol",
                 "working_size", "epsilon", "darkfield_ratio", "flat_min"):
        table[("BaSiC", name)] = lambda v, name=name: basic(**{name: v})
    warm_up = [reconstruct, operator, find_axis, basic]
    return warm_up, [(key, value, thunk) for key, thunk in table.items() for value in EXTREMES]


def work(start):
    """The worker: runs the calls from index `start`, one JSON line per outcome."""
    import numpy as np

    import lamino

    warm_up, cases = calls(lamino, np)
    for call in warm_up:
        try:
            call()
        except StopRun:
            pass
    print(json.dumps({"warm": True}), flush=True)
    for i, (_, value, thunk) in enumerate(cases):
        if i < start:
            continue
        print(json.dumps({"index": i, "started": True}), flush=True)
        try:
            thunk(value)
            outcome = {"type": None, "message": ""}
        except StopRun:
            outcome = {"type": "StopRun", "message": ""}
        except BaseException as e:  # noqa: BLE001 - a PanicException is a BaseException
            outcome = {"type": type(e).__name__, "message": str(e),
                       "lamino": isinstance(e, lamino.LaminoError)}
        print(json.dumps({"index": i, **outcome}), flush=True)


def run_all():
    """Every call's outcome, by index: a dict from the worker, or "hang"/"crash" with what the
    worker said last. A worker that hangs is killed and a new one goes on after that call."""
    env = dict(os.environ, LAMINO_ALLOW_SOFTWARE_GPU="1")
    outcomes, start = {}, 0
    while True:
        # stderr to a file: a pipe nobody reads would fill and stop the worker.
        errors = tempfile.TemporaryFile()
        worker = subprocess.Popen([sys.executable, __file__, str(start)], env=env,
                                  stdout=subprocess.PIPE, stderr=errors)
        current, buffered, ended = -1, b"", False
        deadline = time.monotonic() + WARM_UP_S
        while not ended:
            chunk = b""
            if select.select([worker.stdout], [], [], 0.05)[0]:
                chunk = os.read(worker.stdout.fileno(), 1 << 16)
                ended = chunk == b""
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                record = json.loads(line)
                if record.get("warm"):
                    current = None
                elif record.get("started"):
                    current = record["index"]
                    deadline = time.monotonic() + CALL_S
                else:
                    outcomes[record["index"]] = record
                    current = None
            if current is not None and time.monotonic() > deadline:
                worker.kill()
                break
        worker.wait()
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
        errors.close()
        if current is None:
            return outcomes
        kind = "hang" if worker.returncode == -9 else f"crash (exit {worker.returncode})"
        if current < 0:
            pytest.fail(f"the worker's warm-up ended in a {kind}: {stderr[-2000:]}")
        outcomes[current] = {"type": kind, "message": stderr[-2000:]}
        start = current + 1


@pytest.fixture(scope="module")
def outcomes():
    return run_all()


def test_every_numeric_argument_is_covered():
    import numpy as np

    import lamino

    covered = {key[:2] for key, _, _ in calls(lamino, np)[1]}
    assert numeric_arguments() - covered == set(), "numeric arguments without extreme values"


def test_extreme_values_end_in_a_typed_error_or_a_result(outcomes):
    import numpy as np

    import lamino

    cases = calls(lamino, np)[1]
    bad = []
    for i, (key, value, _) in enumerate(cases):
        o = outcomes.get(i, {"type": "never reported", "message": ""})
        typed = o["type"] in (None, "StopRun") or o.get("lamino") or o["type"] in CONVERSION
        # Advice names Python's arguments, not the command line's options.
        cli_terms = o.get("lamino") and " --" in o["message"]
        if not typed or cli_terms:
            bad.append(f"{key}={value!r}: {o['type']}: {o['message'][:300]}")
    assert bad == [], "\n".join(bad)


if __name__ == "__main__":
    work(int(sys.argv[1]))
