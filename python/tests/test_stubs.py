"""The type stubs (python/lamino/__init__.pyi) cover every public name of the module, and only those."""

import ast
import pathlib

import lamino

STUBS = pathlib.Path(__file__).resolve().parents[1] / "lamino" / "__init__.pyi"
# Names the stubs define for typing only (dict shapes and aliases), not module attributes.
TYPING_ONLY = {"Adapter", "Device", "Backend", "Limits", "ArrayLike", "Volume", "Defaults",
               "IterationReport", "SimulatedScan", "Score"}


def stub_names():
    names = set()
    for node in ast.parse(STUBS.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_public_name_has_a_stub():
    # __all__: what the extension module exports (maturin's package adds the submodule itself).
    public = set(lamino.__all__) | {"__version__"}
    stubs = stub_names() - TYPING_ONLY
    assert public - stubs == set(), "names without a stub"
    assert stubs - public == set(), "stubs of names the module lacks"
