"""Importing by name: names a package exports but imports only on first use (the web server pieces, behind an
extra), and the ``module:attribute`` objects the command line is told to use (a runner, a setup, a guard)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["import_object", "lazy_attributes"]


def lazy_attributes(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``modules[name]`` (relative to ``package``)."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__


def import_object(spec: str, option: str, shape: str = "MODULE:CALLABLE") -> object:
    """The object ``module:attribute`` names (``attribute`` may be dotted), imported as ``python -m`` would:
    with the current directory on ``sys.path``, where the user's own modules are.

    Raises ``ValueError`` naming ``option`` and the expected ``shape`` for a malformed spec; the import's own
    errors (``ImportError``, ``AttributeError``, whatever the module raises while it loads) are the caller's.
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(
            f"{option} must be MODULE:{'NAME' if option == '--guard' else 'CALLABLE'}, not {spec!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target
