"""CEL engines behind one small interface: compile once at load time, evaluate on every guarded step.

Two backends implement :class:`CelBackend`:

* ``"cel-expr-python"`` (default): Google's C++ engine; type-checks at compile time, ~2-5 µs an evaluation.
* ``"cel-python"``: the pure-Python ``celpy`` engine, for platforms without the C++ wheel
  (``pip install 'agentguard[celpy]'``).

The environment variable ``AGENTGUARD_CEL_BACKEND`` picks the backend when no name is given, so a
deployment can switch engines without code changes.

Example::

    >>> from agentguard.cel import VarType, get_backend
    >>> backend = get_backend()
    >>> program = backend.compile(
    ...     'recent["send-email"].inputs.to.endsWith("@corp.com")', {"recent": VarType.DYN, "history": VarType.DYN}
    ... )
    >>> sorted(program.variables)     # bind only these
    ['recent']
    >>> program.evaluate({"recent": {"send-email": {"inputs": {"to": "bob@corp.com"}}}})
    True
    >>> backend.compile("recent[", {"recent": VarType.DYN})
    Traceback (most recent call last):
    ...
    agentguard.cel._base.CelCompileError: CEL compile error at 1:8: Syntax error: ...
"""

from __future__ import annotations

import importlib.util
import os
import threading

from agentguard.cel._base import (
    CelBackend,
    CelCompileError,
    CelError,
    CelEvaluationError,
    CelProgram,
    VarType,
)

__all__ = [
    "BACKEND_ENV_VAR",
    "DEFAULT_BACKEND",
    "CelBackend",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CelProgram",
    "VarType",
    "available_backends",
    "get_backend",
]

DEFAULT_BACKEND = "cel-expr-python"
BACKEND_ENV_VAR = "AGENTGUARD_CEL_BACKEND"

# Backend name -> (module that must be importable, pip requirement that provides it).
_REQUIREMENTS = {
    "cel-expr-python": ("cel_expr_python", "agentguard (cel-expr-python is a core dependency on Linux and macOS)"),
    "cel-python": ("celpy", "agentguard[celpy]"),
}

_backends: dict[str, CelBackend] = {}
_lock = threading.Lock()


def get_backend(name: str | None = None) -> CelBackend:
    """Return the shared backend called ``name``.

    ``None`` means the value of ``AGENTGUARD_CEL_BACKEND``, or ``"cel-expr-python"`` when that is unset or
    empty. Backends are created once per process and shared, because each caches compiled environments.

    Raises :class:`ValueError` for an unknown name and :class:`ImportError` (naming the package and the
    pip requirement to install) when the engine is not installed.
    """
    if name is None:
        name = os.environ.get(BACKEND_ENV_VAR, "").strip() or DEFAULT_BACKEND
    with _lock:
        backend = _backends.get(name)
        if backend is None:
            backend = _backends[name] = _create(name)
        return backend


def available_backends() -> list[str]:
    """Names of the backends whose engine is installed, default first."""
    return [name for name, (module, _) in _REQUIREMENTS.items() if importlib.util.find_spec(module) is not None]


def _create(name: str) -> CelBackend:
    if name not in _REQUIREMENTS:
        known = ", ".join(repr(known) for known in _REQUIREMENTS)
        source = f" (from ${BACKEND_ENV_VAR})" if os.environ.get(BACKEND_ENV_VAR, "").strip() == name else ""
        raise ValueError(f"unknown CEL backend {name!r}{source}; choose one of {known}")
    module, requirement = _REQUIREMENTS[name]
    try:
        if name == "cel-python":
            from agentguard.cel._celpy import CelpyBackend

            return CelpyBackend()
        from agentguard.cel._expr import ExprBackend

        return ExprBackend()
    except ImportError as exc:
        raise ImportError(
            f"CEL backend {name!r} needs the Python package {module!r}, which is not importable "
            f"({exc}); install it with: pip install '{requirement}'",
            name=module,
        ) from exc
