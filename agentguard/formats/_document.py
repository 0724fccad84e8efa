"""Read a descriptor file into plain data that remembers where every field was, and tell its format.

Every format agentguard reads reports problems the way the OpenAgentSpec loader does -- file, dotted field,
line and column -- so the YAML front end *is* the spec loader's (:func:`agentguard.spec.read_yaml`): safe
loading, duplicate keys reported, aliases bounded, a position for every field. JSON documents are decoded
by :mod:`json` (YAML 1.1 reads ``1e5`` as a string, JSON does not), and take their positions from the same
reader when it can read the text, which it can for all but tab-indented JSON.

The format is told from the content, never from the file name (``agent.json`` may hold any of them):

* YAML frontmatter between ``---`` lines followed by a body: an OS Protocol app file;
* ``kind: openagentspec:...`` (or ``capabilities``, ``intent``, ``guardrails``, ``lifespan``, ``exposes``):
  an OpenAgentSpec agent (a policy, not a descriptor);
* ``component_type``, ``agentspec_version`` or ``$referenced_components``: an Agent Spec configuration;
* ``metadata.ref`` or ``specs``: an Agent Manifest (ACP descriptor).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentguard.errors import SpecError, SpecProblem
from agentguard.spec import (
    DEFAULT_LIMITS,
    FieldPath,
    Labels,
    LoadLimits,
    Positions,
    field_problem,
    in_file_order,
    locate,
    lone_surrogate,
    read_text_file,
    read_yaml,
)

__all__ = ["SECRETS", "Document", "FieldPath", "Format", "detect_format", "read_document", "read_file"]

Format = Literal["openagentspec", "agentspec", "manifest", "osp-app"]

SECRETS = "<secrets>"
"""First element of the field path of a value supplied at load time (``secrets={...}``), not read from the file."""

FORMAT_NAMES: Mapping[Format, str] = {
    "openagentspec": "OpenAgentSpec agent",
    "agentspec": "Agent Spec configuration",
    "manifest": "Agent Manifest",
    "osp-app": "OS Protocol app",
}

# Fields only an OpenAgentSpec agent has: a policy missing its `kind` is still reported as one.
_OPENAGENTSPEC_ONLY = ("capabilities", "intent", "guardrails", "lifespan", "exposes")

# An app file: `---` on the first line, the frontmatter, a closing `---` (or `...`) line, the markdown body.
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M)


@dataclass
class Document:
    """One descriptor document: its data, where each field was, and what is wrong with it.

    ``problems`` are errors (the document cannot be used); ``warnings`` are things a reader should know but
    that do not stop it (an unknown provider, a secret inlined in the file). Both carry file, field, line.
    """

    source: str
    data: object
    positions: Positions = field(default_factory=dict)
    labels: Labels = field(default_factory=dict)
    problems: list[SpecProblem] = field(default_factory=list)
    warnings: list[SpecProblem] = field(default_factory=list)
    format: Format | None = None
    body: str = ""

    def at(self, path: FieldPath, reason: str) -> SpecProblem:
        """A problem at ``path``, placed at the field or, for a missing one, at its nearest parent.

        Paths under :data:`SECRETS` are values supplied at load time: they have no place in the file.
        """
        position = None if path[:1] == (SECRETS,) else locate(self.positions, path)
        return field_problem(self.source, path, reason, position, self.labels)

    def error(self, path: FieldPath, reason: str) -> None:
        self.problems.append(self.at(path, reason))

    def warn(self, path: FieldPath, reason: str) -> None:
        self.warnings.append(self.at(path, reason))

    def sorted_warnings(self) -> tuple[SpecProblem, ...]:
        return tuple(in_file_order(self.warnings))

    def raise_for_problems(self) -> None:
        """Raise :class:`SpecError` listing every error, in file order, when there is any."""
        if self.problems:
            raise SpecError(in_file_order(self.problems))


def read_file(path: str | os.PathLike[str], limits: LoadLimits = DEFAULT_LIMITS) -> tuple[str, str]:
    """``(text, source)`` of a descriptor file; a file that is unreadable or larger than ``limits.max_bytes``
    (checked before reading) is a :class:`SpecError` with one problem."""
    return read_text_file(path, limits, text_reader="parse_descriptor"), os.fspath(path)


def read_document(text: str, source: str = "<string>", *, limits: LoadLimits = DEFAULT_LIMITS) -> Document:
    """Read ``text`` (JSON, YAML or an app file with YAML frontmatter) and tell its format.

    The returned document's ``problems`` say why it could not be read, or that its format is unknown. A
    text past ``limits`` (:class:`~agentguard.spec.LoadLimits`) is not read: its problem names the limit.
    """
    if len(text) > limits.max_bytes:
        return _read_yaml(text, source, limits)  # refused before parsing, with the loader's reason
    match = _FRONTMATTER.match(text)
    if match is not None:
        # A blank line stands in for the opening `---`, so that positions are lines of the file.
        doc = _read_yaml("\n" + match["yaml"], source, limits)
        doc.body = text[match.end() :]
        if not doc.problems:
            doc.format = "osp-app"
        return doc
    json_like = text.lstrip()[:1] in ("{", "[")
    doc = _read_json(text, source, limits) if json_like else _read_yaml(text, source, limits)
    if not doc.problems:
        doc.format = detect_format(doc.data)
        if doc.format is None:
            doc.error(
                (),
                "cannot tell the format: expected an OpenAgentSpec agent (kind: openagentspec:v1/agent), "
                "an Agent Spec configuration (component_type), an Agent Manifest (metadata.ref, specs) or "
                "an OS Protocol app (YAML frontmatter between --- lines)",
            )
    return doc


def detect_format(data: object) -> Format | None:
    """The format of a document's data (an app file is recognised by its frontmatter, not here)."""
    if not isinstance(data, Mapping):
        return None
    kind = data.get("kind")
    if (isinstance(kind, str) and kind.startswith("openagentspec:")) or any(
        key in data for key in _OPENAGENTSPEC_ONLY
    ):
        return "openagentspec"
    if any(
        key in data
        for key in ("component_type", "agentspec_version", "air_version", "$referenced_components")
    ):
        return "agentspec"
    metadata = data.get("metadata")
    if (isinstance(metadata, Mapping) and isinstance(metadata.get("ref"), Mapping)) or isinstance(
        data.get("specs"), Mapping
    ):
        return "manifest"
    return None


def _read_yaml(text: str, source: str, limits: LoadLimits) -> Document:
    """YAML text to data and positions through the spec layer's reader (safe, positions, no duplicates)."""
    doc = read_yaml(text, source, limits=limits)
    return Document(source, doc.data, doc.positions, doc.labels, doc.problems)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: Sequence[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _read_json(text: str, source: str, limits: LoadLimits) -> Document:
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return Document(
            source,
            None,
            problems=[SpecProblem(source, "", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno)],
        )
    except _DuplicateKey as exc:
        return Document(
            source, None, problems=[SpecProblem(source, "", f"invalid JSON: duplicate key {exc.args[0]!r}")]
        )
    except (ValueError, RecursionError) as exc:
        return Document(source, None, problems=[SpecProblem(source, "", f"invalid JSON: {exc}")])
    if not isinstance(data, dict):
        return Document(
            source, None, problems=[SpecProblem(source, "", "the document must be a JSON object", 1, 1)]
        )
    read = read_yaml(text, source, limits=limits)
    if read.over_limit:  # a JSON document is held to the same bounds as a YAML one
        return Document(source, None, problems=read.problems)
    doc = Document(source, data, read.positions if read.readable and not read.findings else {})
    _refuse_lone_surrogates(doc)
    return doc


def _refuse_lone_surrogates(doc: Document) -> None:
    """Report every key and string of a JSON document that is not valid Unicode, as ``read_yaml`` does.

    JSON may escape half a character (``"\\ud800"``) and :mod:`json` decodes it; kept, it would make every
    later UTF-8 encoding of the descriptor (a guardian request, an audit report) fail at run time.
    Iterative: the decoder's nesting limit is deeper than this function's recursion would be allowed.
    """
    pending: list[tuple[FieldPath, object]] = [((), doc.data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            reason = lone_surrogate(value)
            if reason is not None:
                doc.error(path, reason)
        elif isinstance(value, dict):
            for key, item in value.items():
                reason = lone_surrogate(key)
                if reason is not None:
                    doc.error((*path, key), reason)
                pending.append(((*path, key), item))
        elif isinstance(value, list):
            pending.extend(((*path, index), item) for index, item in enumerate(value))
