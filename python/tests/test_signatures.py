"""help() and inspect.signature show the real defaults, taken from the extension (the Rust
parameter definitions), where PyO3 alone shows `...`."""

import inspect
import pydoc

import lamino


def test_reconstruct_signature_has_the_solver_defaults():
    params = inspect.signature(lamino.reconstruct).parameters
    assert params["alpha"].default == lamino.DEFAULTS["alpha"]
    assert params["max_iterations"].default == lamino.DEFAULTS["max_iterations"]
    assert params["memo"].default == lamino.DEFAULTS["memo"]
    assert params["device"].default == "best"
    assert params["tilt"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["tilt"].default is inspect.Parameter.empty


def test_help_shows_the_values():
    text = pydoc.render_doc(lamino.reconstruct, renderer=pydoc.plaintext)
    assert f"alpha={lamino.DEFAULTS['alpha']!r}" in text
    assert f"max_iterations={lamino.DEFAULTS['max_iterations']!r}" in text
    assert "device='best'" in text
    assert "=..." not in text
    # The docstring is the extension's.
    assert "Reconstruct a volume from laminography projections" in text


def test_no_public_callable_shows_a_placeholder_default():
    placeholders = {}
    for name in lamino.__all__:
        obj = getattr(lamino, name)
        if not callable(obj):
            continue
        try:
            signature = inspect.signature(obj)
        except ValueError:
            continue
        shown = [p.name for p in signature.parameters.values() if p.default is ...]
        if shown:
            placeholders[name] = shown
    assert placeholders == {}


def test_the_wrapper_is_the_extension_call():
    """The package's reconstruct is the extension's, under the completed signature."""
    assert lamino.reconstruct.__wrapped__ is lamino._lamino.reconstruct
    assert lamino.reconstruct.__doc__ == lamino._lamino.reconstruct.__doc__
