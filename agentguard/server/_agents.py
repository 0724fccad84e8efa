"""The agents a server serves: each one's Guard, its definition as written, and its optional input schema.

A spec directory holds one OpenAgentSpec agent file per agent (``*.yaml`` / ``*.yml``, not recursive).
Beside ``billing.yaml`` an optional ``billing.input_schema.json`` is a JSON Schema the input of every
engagement with that agent must satisfy. :func:`load_agents` checks everything at once -- every spec, every
schema, names unique, no schema without its agent -- and raises one :class:`~agentguard.SpecError` listing
every problem, so a server never starts with half its agents.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agentguard.cel import get_backend
from agentguard.errors import SpecError, SpecProblem
from agentguard.guard import Guard
from agentguard.spec import load_spec_text

__all__ = ["SCHEMA_SUFFIX", "ServedAgent", "load_agents"]

SCHEMA_SUFFIX = ".input_schema.json"
"""``<stem>.input_schema.json`` beside ``<stem>.yaml`` is that agent's input schema."""

_SPEC_SUFFIXES = (".yaml", ".yml")


class ServedAgent:
    """One agent as the server offers it.

    ``document`` is the YAML served at ``GET /agents/{name}`` (the file as written, when loaded from one);
    ``input_schema`` the JSON Schema its input must satisfy, if any. Raises :class:`~agentguard.SpecError`
    when the schema is not a valid JSON Schema, or when ``jsonschema`` (needed to check one) is missing.
    """

    def __init__(
        self,
        guard: Guard,
        document: bytes,
        input_schema: Mapping[str, Any] | None = None,
        *,
        schema_source: str = "<input schema>",
    ) -> None:
        self.guard = guard
        self.document = document
        self.etag = '"' + hashlib.sha256(document).hexdigest()[:32] + '"'
        self.input_schema = input_schema
        self._validator = _validator(input_schema, schema_source) if input_schema is not None else None

    @classmethod
    def from_guard(cls, guard: Guard, *, input_schema: Mapping[str, Any] | None = None) -> ServedAgent:
        """Serve a guard built in code; its definition is its spec rendered as YAML."""
        data = guard.spec.model_dump(mode="json", exclude_unset=True)
        return cls(guard, yaml.safe_dump(data, sort_keys=False).encode(), input_schema)

    @property
    def name(self) -> str:
        return self.guard.name

    @property
    def description(self) -> str:
        return self.guard.spec.description

    def input_problems(self, value: Any, limit: int = 10) -> list[str]:
        """Why ``value`` does not satisfy the input schema (at most ``limit`` reasons; none when it does)."""
        if self._validator is None:
            return []
        problems = []
        for error in self._validator.iter_errors(value):
            where = "/".join(str(part) for part in error.absolute_path)
            problems.append(f"{where or '<input>'}: {error.message}")
            if len(problems) == limit:
                break
        return problems

    def __repr__(self) -> str:
        return f"<ServedAgent {self.name!r}>"


def _validator(schema: Mapping[str, Any], source: str) -> Any:
    try:
        # Imported by name: jsonschema ships no type hints, and it is needed only when a schema exists.
        jsonschema: Any = importlib.import_module("jsonschema")
    except ImportError as exc:
        problem = SpecProblem(source, "", "checking an input schema needs jsonschema: pip install jsonschema")
        raise SpecError([problem]) from exc
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = ".".join(str(part) for part in exc.absolute_path)
        raise SpecError([SpecProblem(source, where, f"not a valid JSON Schema: {exc.message}")]) from exc
    return cls(schema)


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpecError([SpecProblem(str(path), "", f"cannot read the input schema: {exc}")]) from exc
    if not isinstance(value, dict):
        raise SpecError([SpecProblem(str(path), "", "an input schema must be a JSON object")])
    return value


def load_agents(spec_dir: str | os.PathLike[str], **guard_options: Any) -> list[ServedAgent]:
    """Load every agent of ``spec_dir``, each as a :class:`Guard` built with ``guard_options``.

    Raises one :class:`~agentguard.SpecError` listing every problem of every file.
    """
    directory = Path(spec_dir)
    if not directory.is_dir():
        raise SpecError([SpecProblem(str(directory), "", "not a directory")])
    backend_option = guard_options.pop("cel_backend", None)
    backend = (
        get_backend(backend_option)
        if backend_option is None or isinstance(backend_option, str)
        else backend_option
    )
    files = sorted(p for p in directory.iterdir() if p.suffix in _SPEC_SUFFIXES and p.is_file())
    orphans = set(directory.glob("*" + SCHEMA_SUFFIX))
    problems: list[SpecProblem] = []
    if not files:
        problems.append(SpecProblem(str(directory), "", "no agent files (*.yaml, *.yml) in the directory"))
    agents: list[ServedAgent] = []
    defined: dict[str, Path] = {}
    for path in files:
        schema_path = path.with_name(path.stem + SCHEMA_SUFFIX)
        orphans.discard(schema_path)
        try:
            document = path.read_bytes()
            compiled = load_spec_text(document.decode("utf-8-sig"), backend=backend, source=str(path))
            name = compiled.spec.name
            if name in defined:
                reason = f"agent {name!r} is already defined in {defined[name]}"
                raise SpecError([SpecProblem(str(path), "name", reason)])
            defined[name] = path
            schema = _read_schema(schema_path) if schema_path.is_file() else None
            guard = Guard(compiled, cel_backend=backend, **guard_options)
            agents.append(ServedAgent(guard, document, schema, schema_source=str(schema_path)))
        except SpecError as error:
            problems.extend(error.problems)
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(SpecProblem(str(path), "", f"cannot read the file: {exc}"))
    for orphan in sorted(orphans):
        problems.append(SpecProblem(str(orphan), "", "an input schema without an agent file beside it"))
    if problems:
        raise SpecError(problems)
    return agents
