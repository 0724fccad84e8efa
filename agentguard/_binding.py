"""How a guarded function's arguments become the call's recorded inputs, and back.

A tool's inputs are recorded by parameter name (positional arguments bound to their names, defaults
applied), because CEL assertions read ``recent["send-email"].inputs.to`` whatever way the caller passed it.
The keywords a ``**kwargs`` parameter takes are recorded flat, beside the named parameters, as the keywords
they are: one form for each call, so that what an assertion reads is what the function receives. (Recorded
under the parameter's name and spread back out when called, an input a model named ``kwargs`` reached the
function as keywords an assertion over the top-level inputs never saw.)
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from agentguard.runs import Retry, Timeout

__all__ = ["Binder", "Registered", "default_tool_name"]


_CACHE_SIZE = 512
_CACHE: dict[object, Binder] = {}  # by code object, or (code, defaults, keyword defaults)


def _frozen(mapping: dict[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
    return None if mapping is None else tuple(mapping.items())


class Binder:
    """Binds a call's arguments to parameter names, and back, for one function.

    Most tools take plain keyword-or-positional parameters; for those the binding is a dict merge, several
    times cheaper than ``inspect.Signature.bind`` on the per-call path. Other signatures use ``bind``.
    """

    __slots__ = (
        "_count",
        "_defaults",
        "_keywords",
        "_names",
        "_required",
        "_signature",
        "_simple",
        "_spread",
        "by_keyword",
        "exact",
    )

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._signature = inspect.signature(fn)
        params = list(self._signature.parameters.values())
        self._count = len(params)  # ``Signature.parameters`` is a Python property: read once, not per call
        self._simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
        self._names = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
        self._defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self._required = frozenset(p.name for p in params if p.default is p.empty)
        self._keywords = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        """The name of the ``**`` parameter, if any: its keywords are recorded flat."""
        # ``fn(**kwargs)`` alone (a host's runner): the inputs are its keywords, passed on as they are.
        self._spread = len(params) == 1 and self._keywords is not None
        # Plain parameters without defaults: a call by keywords naming each once is bound as it is.
        self.exact = self._required if self._simple and not self._defaults else None
        """The parameter names of a call :meth:`bind` takes as it is: plain parameters without defaults, each
        named once by keyword (``None``: none is). The wrapper of a registered tool compares them itself."""
        self.by_keyword = self._simple or self._spread
        """Called with its inputs as keywords, as they are (:meth:`to_args` gives ``((), inputs)``): the
        per-call path passes them without the call."""

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Binder:
        """The binder of ``fn``; shared by functions made from the same code with the same defaults.

        A host adapter hands ``Guard.call`` a fresh closure for every tool call; reading its signature each
        time would cost more than the rest of the call's checks, and the signature of a plain function
        depends only on its code and defaults.
        """
        if (
            type(fn) is not types.FunctionType
            or "__signature__" in fn.__dict__
            or "__wrapped__" in fn.__dict__
        ):
            return cls(fn)
        # Not the annotations: binding never reads them, and a closure's are a fresh dict on every call.
        code, defaults, kwdefaults = fn.__code__, fn.__defaults__, fn.__kwdefaults__
        key = code if defaults is None and kwdefaults is None else (code, defaults, _frozen(kwdefaults))
        try:
            binder = _CACHE.get(key)
        except TypeError:  # an unhashable default value
            return cls(fn)
        if binder is None:
            binder = cls(fn)
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = binder
        return binder

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not args and kwargs.keys() == self.exact:  # the common call, in one comparison
            return kwargs  # the wrapper's own ``**kwargs``: a fresh dict nobody else holds
        if self._spread and not args:
            return kwargs  # the wrapper's own ``**kwargs``: a fresh dict nobody else holds
        if not self._simple or len(args) > len(self._names):
            return self._bound(args, kwargs)
        # Without positional arguments or defaults, the wrapper's own ``**kwargs`` is a fresh dict nobody else holds:
        # it is the inputs.
        inputs = kwargs if not args and not self._defaults else dict(self._defaults)
        if args:
            positional = dict(zip(self._names, args, strict=False))
            if kwargs.keys() & positional.keys():
                self._signature.bind(*args, **kwargs)  # raises the TypeError Python would raise
            inputs.update(positional)
        if inputs is not kwargs:
            inputs.update(kwargs)
        if not self._required <= inputs.keys() or len(inputs) > self._count:
            self._signature.bind(*args, **kwargs)  # raises the precise TypeError
        return inputs

    def _bound(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``inspect.Signature.bind``'s arguments, defaults applied, with the ``**`` parameter's keywords
        flat among them (a keyword can share a name only with a positional-only parameter: refused, as a
        record could not tell the two apart)."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        if self._keywords is None:
            return inputs
        keywords = inputs.pop(self._keywords)
        clash = keywords.keys() & inputs.keys()
        if clash:
            raise TypeError(f"keyword {min(clash)!r} has the name of a positional-only parameter")
        inputs.update(keywords)
        return inputs

    def to_args(self, inputs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.by_keyword:
            # ``fn(**inputs)`` copies the mapping into the call: no copy needed here
            return (), inputs if type(inputs) is dict else dict(inputs)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        parameters = self._signature.parameters
        for name, value in inputs.items():
            param = parameters.get(name)
            if param is None or param.kind is param.VAR_KEYWORD:
                if self._keywords is None:
                    raise TypeError(f"unexpected input {name!r}: no parameter takes it")
                kwargs[name] = value  # one of the ``**`` parameter's keywords, recorded flat
            elif param.kind is param.POSITIONAL_ONLY:
                args.append(value)
            elif param.kind is param.VAR_POSITIONAL:
                if not isinstance(value, list | tuple):
                    raise TypeError(f"input {name!r} (*{name}) must be a list, not {type(value).__name__}")
                args.extend(value)
            else:
                kwargs[name] = value
        return tuple(args), kwargs


class Registered(NamedTuple):
    """A guarded function and how it runs: one per registered tool or agent, and one per call an adapter
    makes through ``Guard.call`` with a function of its own (a tuple: built on every such call, it costs a
    third of a frozen dataclass)."""

    name: str
    kind: Literal["tool", "agent"]
    fn: Callable[..., Any]
    binder: Binder
    needs_credentials: bool
    timeout: Timeout | None = None
    retry: Retry | None = None


def default_tool_name(fn: Callable[..., Any]) -> str:
    """The spec name a function gets by default: its ``__name__`` with ``_`` turned into ``-``."""
    return getattr(fn, "__name__", type(fn).__name__).replace("_", "-")
