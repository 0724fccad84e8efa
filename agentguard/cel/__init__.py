"""CEL engines behind one small interface: compile once at load time, evaluate on every guarded step.

Two backends implement :class:`CelBackend`:

* ``"cel-expr-python"`` (default): Google's C++ engine. Type-checks at compile time; a few µs an evaluation.
* ``"cel-python"``: the pure-Python ``celpy`` engine, for platforms without the C++ wheel
  (``pip install 'agentguard[celpy]'``). No type checker, several times slower.

``AGENTGUARD_CEL_BACKEND`` picks the backend when no name is given, so a deployment can switch engines
without code changes. Both give the same answers on JSON data (numbers compare by value: ``1.0 == 1``).

Example::

    >>> from agentguard.cel import CelCompileError, VarType, get_backend
    >>> backend = get_backend()
    >>> declarations = {"recent": VarType.DYN, "history": VarType.DYN}
    >>> program = backend.compile('recent["send-email"].inputs.to.endsWith("@corp.com")', declarations)
    >>> sorted(program.variables)  # bind only these: converting ``history`` would be wasted work
    ['recent']
    >>> program.evaluate({"recent": {"send-email": {"inputs": {"to": "bob@corp.com"}}}})
    True
    >>> try:
    ...     backend.compile('recent["send-email"].inputs.to.endsWith(', declarations)
    ... except CelCompileError as error:
    ...     print(error.line, error.column)
    1 41
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
    Reads,
    VarType,
    quick_closure,
)
from agentguard.cel._budget import EvalBudget, eval_budget, set_eval_budget

__all__ = [
    "BACKEND_ENV_VAR",
    "DEFAULT_BACKEND",
    "CelBackend",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CelProgram",
    "EvalBudget",
    "Reads",
    "VarType",
    "available_backends",
    "eval_budget",
    "get_backend",
    "quick_closure",
    "set_eval_budget",
]

DEFAULT_BACKEND = "cel-expr-python"
BACKEND_ENV_VAR = "AGENTGUARD_CEL_BACKEND"

# Backend name -> (module it imports, what to pip-install to get it).
_REQUIREMENTS = {
    "cel-expr-python": ("cel_expr_python", "cel-expr-python"),
    "cel-python": ("celpy", "agentguard[celpy]"),
}

_backends: dict[str, CelBackend] = {}
_lock = threading.Lock()


def get_backend(name: str | None = None) -> CelBackend:
    """Return the shared backend called ``name``.

    ``None`` means the value of ``AGENTGUARD_CEL_BACKEND``, or ``"cel-expr-python"`` when that is unset or
    empty. Backends are created once per process and shared, since they cache compiler environments.

    Raises :class:`ValueError` for an unknown name and :class:`ImportError`, naming the package and what to
    install, when the engine is missing.
    """
    source = "backend name"
    if name is None:
        name = os.environ.get(BACKEND_ENV_VAR, "").strip()
        source = f"${BACKEND_ENV_VAR}"
        if not name:
            name, source = DEFAULT_BACKEND, "default backend"
    with _lock:
        backend = _backends.get(name)
        if backend is None:
            backend = _backends[name] = _create(name, source)
        return backend


def available_backends() -> list[str]:
    """Names of the backends whose engine is installed, default first."""
    return [
        name for name, (module, _) in _REQUIREMENTS.items() if importlib.util.find_spec(module) is not None
    ]


def _create(name: str, source: str) -> CelBackend:
    if name not in _REQUIREMENTS:
        known = ", ".join(repr(known) for known in _REQUIREMENTS)
        raise ValueError(f"unknown CEL backend {name!r} ({source}); choose one of {known}")
    module, requirement = _REQUIREMENTS[name]
    try:
        if name == "cel-python":
            from agentguard.cel._celpy import CelpyBackend

            return CelpyBackend()
        from agentguard.cel._expr import ExprBackend

        return ExprBackend()
    except ImportError as exc:
        hint = ""
        if name == DEFAULT_BACKEND:
            fallback = "pip install 'agentguard[celpy]'"
            hint = f"; or use the pure-Python engine: {fallback} and set {BACKEND_ENV_VAR}=cel-python"
        raise ImportError(
            f"CEL backend {name!r} ({source}) needs the Python package {module!r}, which cannot be imported "
            f"({exc}); install it with: pip install '{requirement}'{hint}",
            name=module,
        ) from exc
