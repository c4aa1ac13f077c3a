"""lamino: GPU reconstruction of X-ray laminography data, numpy in and numpy out (docs/python.md).

Every call is the extension's (``lamino._lamino``, the Rust library the command line runs). This
file only re-exports them, giving the callables whose defaults are computed in Rust a signature
that shows the values: PyO3 writes such a default as ``...`` in the text signature that
``help()`` and ``inspect.signature`` read. The values come from the extension
(``AdmmParams::default()`` and the other Rust definitions), never typed here.
"""

import functools
import inspect

from . import _lamino
from ._lamino import *  # noqa: F401,F403 (every public name of the extension)

__all__ = list(_lamino.__all__)
__version__ = _lamino.__version__


def _signature_with_defaults(obj, defaults):
    """The signature of `obj` with every `...` default replaced by its value in `defaults`
    (None when no parameter shows `...`); a `...` without a value is an error at import, so that
    no placeholder reaches `help()`."""
    try:
        signature = inspect.signature(obj)
    except ValueError:  # no text signature (a type without a constructor of its own)
        return None
    placeholders = [p.name for p in signature.parameters.values() if p.default is ...]
    if not placeholders:
        return None
    missing = [name for name in placeholders if name not in defaults]
    if missing:
        raise ImportError(
            f"lamino.{obj.__name__}: the extension gives no default for {missing} "
            "(lamino._lamino._ARGUMENT_DEFAULTS)")
    return signature.replace(parameters=[
        p.replace(default=defaults[p.name]) if p.default is ... else p
        for p in signature.parameters.values()
    ])


def _complete_signatures(namespace, defaults):
    """Puts the completed signature on each public callable of `namespace` that needs one: a
    function is wrapped (a builtin's signature cannot be set); a class takes `__signature__`."""
    for name in __all__:
        obj = namespace[name]
        if not callable(obj):
            continue
        signature = _signature_with_defaults(obj, defaults)
        if signature is None:
            continue
        if isinstance(obj, type):
            obj.__signature__ = signature
        else:
            namespace[name] = _wrapped(obj, signature)


def _wrapped(function, signature):
    """`function` itself under `signature` (one more Python call, nothing else)."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        return function(*args, **kwargs)

    call.__signature__ = signature
    # Found where it is published (pickle, help's module line): lamino, not lamino._lamino.
    call.__module__ = __name__
    return call


_complete_signatures(globals(), _lamino._ARGUMENT_DEFAULTS)
