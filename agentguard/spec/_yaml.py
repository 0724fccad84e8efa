"""Read YAML text into plain data that remembers where every field was, and report what is wrong with it.

Every YAML document agentguard reads -- agent specs, descriptors, guardian rules -- goes through
:func:`read_yaml`, so that all of them are read the same way:

* safely: only plain data (mappings, lists, strings, numbers, booleans, null, timestamps), no other tags;
* with a position (1-based line and column) for every field, for problems to point at;
* with duplicate keys reported rather than the later one silently winning;
* bounded (:class:`LoadLimits`): a text over ``max_bytes`` is refused before parsing, parsing stops past
  ``max_nodes`` nodes, and aliases may not expand the document past ``max_nodes`` nodes or
  ``max_expanded_chars`` characters of values ("billion laughs"); nesting too deep for the parser is a
  problem, not a crash; control characters are reported with their position.

A problem is reported, never raised: the caller decides what to make of it (a spec refuses the document, a
format reader collects more problems first). :func:`locate` places a field that is not in the file (a
missing one) at its nearest parent, and :func:`dotted` names a field path the way problems show it.
"""

from __future__ import annotations

import datetime
import os
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agentguard.errors import SpecError, SpecProblem

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_NODES",
    "NO_LABELS",
    "FieldPath",
    "Finding",
    "Labels",
    "LoadLimits",
    "Position",
    "Positions",
    "YamlDocument",
    "describe_value",
    "dotted",
    "field_problem",
    "in_file_order",
    "locate",
    "lone_surrogate",
    "read_text_file",
    "read_yaml",
]

FieldPath = tuple[object, ...]
"""Where a field is in a document: mapping keys and list indexes from the root (``("rules", 0, "when")``)."""
Position = tuple[int, int]
"""A 1-based ``(line, column)`` in the text."""
Positions = dict[FieldPath, Position]
Labels = Mapping[FieldPath, str]
"""How a non-string key was written (``yes``, ``12``), keyed by its path: pydantic reports True as 1."""
NO_LABELS: Labels = types.MappingProxyType({})

MAX_NODES = 100_000
"""Nodes a document may have once aliases are expanded: a real document has at most a few thousand, and a
few lines of aliases can expand into billions ("billion laughs"). Past this, reading stops."""


@dataclass(frozen=True)
class LoadLimits:
    """How much work reading one document may cost; past a limit the document is refused with the reason.

    Why: a spec, a descriptor or a remote agent's definition may come from someone else, and PyYAML,
    pydantic and the CEL compiler all spend time and memory in proportion to what they are given. Reading
    50 MB took up to 120 s and 3 GB; 140 KB of aliases repeating one assertion 4,000 times took 122 s.
    The defaults are far above any real document (a large real spec is a few hundred KiB).

    ``max_bytes``
        size of a file (bytes) or text (characters), checked before parsing. Default 4 MiB.
    ``max_nodes``
        YAML nodes, counted while parsing and again as aliases are expanded. Default 100,000.
    ``max_expanded_chars``
        characters of keys and values once aliases are expanded: repeating a long value through aliases
        multiplies it. Default 8 MiB.
    ``max_cel_chars``
        characters of CEL source compiled for one spec, each distinct expression counted once (an
        expression repeated through aliases is compiled once). Default 256 KiB.
    """

    max_bytes: int = 4 * 1024 * 1024
    max_nodes: int = MAX_NODES
    max_expanded_chars: int = 8 * 1024 * 1024
    max_cel_chars: int = 256 * 1024

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_nodes", "max_expanded_chars", "max_cel_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"LoadLimits.{name} must be at least 1, got {getattr(self, name)!r}")


DEFAULT_LIMITS = LoadLimits()
"""The limits used when none are given."""

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"
_NULL_SPELLING = re.compile("|~|null|Null|NULL")
"""How YAML writes null; under an explicit ``!!null`` tag any other text would be dropped unread."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class Finding:
    """One problem found while reading, not yet named after a file: the field, the reason, the position."""

    path: FieldPath
    reason: str
    position: Position | None


@dataclass
class YamlDocument:
    """What :func:`read_yaml` made of a text.

    ``readable`` is false when the text could not be read at all (invalid YAML, empty where that is not
    allowed, ...): ``data`` is then ``None``, ``positions`` empty and ``findings`` says why. A readable
    document may still have findings about single fields (a duplicate key, a value of an unknown tag); the
    paths of values that could not be built are in ``failed``, so that a validator's complaints at or below
    them (:meth:`covers`) need not be reported a second time. ``over_limit`` says the text was refused
    for passing one of its :class:`LoadLimits` (not for being invalid).
    """

    source: str
    data: object = None
    positions: Positions = field(default_factory=dict)
    labels: dict[FieldPath, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    failed: list[FieldPath] = field(default_factory=list)
    readable: bool = False
    over_limit: bool = False

    @property
    def problems(self) -> list[SpecProblem]:
        """The findings as problems of ``source``, fields named by :func:`dotted`, in the order found."""
        return [
            field_problem(self.source, found.path, found.reason, found.position, self.labels)
            for found in self.findings
        ]

    def covers(self, path: Sequence[object]) -> bool:
        """Whether ``path`` is at or below a value that could not be built (its problem is already found)."""
        return any(tuple(path[: len(failed)]) == failed for failed in self.failed)


def read_text_file(
    path: str | os.PathLike[str], limits: LoadLimits = DEFAULT_LIMITS, *, text_reader: str = "load_spec_text"
) -> str:
    """The text of a spec or descriptor file (UTF-8, a BOM dropped), refused unread past ``max_bytes``.

    Raises :class:`SpecError` with one problem naming the file: it cannot be read, is not UTF-8, or is too
    large -- the size is checked before reading, and the read stops one byte past the limit (a device or a
    file still growing cannot make it read more). A "path" holding a newline is taken for text passed by
    mistake, and the problem points at ``text_reader``, the function meant for text.
    """
    source = os.fspath(path)
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size > limits.max_bytes:
                raise SpecError([SpecProblem(source, "", _too_long(limits, "bytes"))])
            data = file.read(limits.max_bytes + 1)
        if len(data) > limits.max_bytes:
            raise SpecError([SpecProblem(source, "", _too_long(limits, "bytes"))])
        return data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = f"cannot read the file: {(exc.strerror if isinstance(exc, OSError) else None) or exc}"
        if "\n" in source:
            reason += f" (this looks like YAML text: use {text_reader} for that)"
        raise SpecError([SpecProblem(source=source, field="", reason=reason)]) from exc


def _too_long(limits: LoadLimits, unit: str) -> str:
    return f"the document is larger than the limit of {limits.max_bytes} {unit} (LoadLimits.max_bytes)"


def read_yaml(
    text: str,
    source: str,
    *,
    empty: str | None = "the document is empty",
    mapping: bool = True,
    limits: LoadLimits = DEFAULT_LIMITS,
) -> YamlDocument:
    """Read one YAML document safely, with the position of every field; never raises for a bad text.

    ``empty`` is the reason given for a document with no content, or ``None`` when that is fine (its data
    is then ``None``). With ``mapping`` (the default) the document must be a mapping of fields; without, any
    root is read and left to the caller's validation. A document past one of ``limits`` is unreadable, the
    finding naming the limit.
    """
    if len(text) > limits.max_bytes:
        return _over_limit(source, _too_long(limits, "characters"))
    loader: _CountingLoader | None = None
    try:
        loader = _CountingLoader(text, limits.max_nodes)
        root = loader.get_single_node()
        if root is None:
            if empty is None:
                return YamlDocument(source, readable=True)
            return _unreadable(source, (), empty, (1, 1))
        if mapping and not isinstance(root, MappingNode):
            what = "a list" if isinstance(root, SequenceNode) else "a single value"
            return _unreadable(
                source, (), f"the document must be a mapping of fields, not {what}", _mark(root)
            )
        builder = _Builder(loader, limits)
        builder.positions[()] = _mark(root)
        data = builder.build(root, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = (mark.line + 1, mark.column + 1) if mark is not None else None
        return _unreadable(source, (), f"invalid YAML: {_yaml_reason(exc)}", position)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return _unreadable(source, (), f"invalid YAML: {exc.reason} (U+{exc.character:04X})", (line, column))
    except _TooLarge as exc:
        return _over_limit(source, exc.reason)
    except RecursionError:
        return _unreadable(source, (), "the document is nested too deeply", (1, 1))
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(
        source, data, builder.positions, builder.labels, builder.findings, builder.failed, readable=True
    )


def locate(positions: Mapping[FieldPath, Position], path: Sequence[object]) -> Position | None:
    """Position of ``path``, or of its nearest ancestor present in the file (for a missing field)."""
    for length in range(len(path), -1, -1):
        position = positions.get(tuple(path[:length]))
        if position is not None:
            return position
    return None


def dotted(path: Sequence[object], labels: Labels = NO_LABELS, *, indexed: bool = False) -> str:
    """The name of a field path as problems show it, each key as written (``labels``).

    Plain: ``capabilities.send-email.input_restriction``, ``tools.0.name``. ``indexed``: list indexes and
    keys holding a dot in brackets, ``rules[1].set['params.toolCallRequest.inputs']``.
    """
    parts = [labels.get(tuple(path[: index + 1]), part) for index, part in enumerate(path)]
    if not indexed:
        return ".".join(str(part) for part in parts)
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif "." in str(part):
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def field_problem(
    source: str, path: Sequence[object], reason: str, position: Position | None, labels: Labels = NO_LABELS
) -> SpecProblem:
    """A problem of ``source`` about the field at ``path`` (named by :func:`dotted`), at ``position``."""
    line, column = position if position is not None else (None, None)
    return SpecProblem(source=source, field=dotted(path, labels), reason=reason, line=line, column=column)


def in_file_order(problems: Sequence[SpecProblem]) -> list[SpecProblem]:
    """``problems`` sorted by position; those without one first, the order otherwise kept."""
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


def _unreadable(source: str, path: FieldPath, reason: str, position: Position | None) -> YamlDocument:
    return YamlDocument(source, findings=[Finding(path, reason, position)])


def _over_limit(source: str, reason: str) -> YamlDocument:
    return YamlDocument(source, findings=[Finding((), reason, (1, 1))], over_limit=True)


class _TooLarge(Exception):
    """The document is past one of its :class:`LoadLimits`; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _CountingLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stopping once it has composed ``max_nodes`` nodes.

    The builder counts nodes again as aliases expand, but only after the whole tree is composed -- and a
    one-line flow list of 2 M items took 80 s to compose. Counting here stops such a file early.
    """

    def __init__(self, text: str, max_nodes: int) -> None:
        super().__init__(text)
        self._max_nodes = max_nodes
        self._composed = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._composed += 1
        if self._composed > self._max_nodes:
            raise _TooLarge(f"the document has more than {self._max_nodes} YAML nodes (LoadLimits.max_nodes)")
        return super().compose_node(parent, index)


# Stands in for a value that could not be built; its finding is already recorded.
_INVALID = object()


class _Builder:
    """Turns a composed YAML node tree into plain Python data, recording where each field came from.

    Building from nodes (rather than calling ``yaml.safe_load``) is what gives every field its line and
    column, and lets duplicate keys be reported instead of the later one silently winning.
    """

    def __init__(self, loader: yaml.SafeLoader, limits: LoadLimits) -> None:
        self._loader = loader
        self._limits = limits
        self._nodes = 0
        self._chars = 0
        self._active: set[int] = set()
        self.positions: Positions = {}
        self.labels: dict[FieldPath, str] = {}
        self.findings: list[Finding] = []
        self.failed: list[FieldPath] = []

    def build(self, node: Node, path: FieldPath) -> object:
        self._nodes += 1
        if self._nodes > self._limits.max_nodes:
            raise _TooLarge(
                f"the document expands to more than {self._limits.max_nodes} YAML nodes (through aliases?)"
            )
        if id(node) in self._active:
            reason = "an alias refers to a node that contains it (recursive alias)"
            return self._fail(node, path, reason, self.positions.get(path))
        self._active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return self._sequence(node, path)
            return self._scalar(node, path)
        finally:
            self._active.discard(id(node))

    def _fail(self, node: Node, path: FieldPath, reason: str, position: Position | None = None) -> object:
        """Record a finding at ``path``; validation errors at or below it are then not reported again."""
        self.findings.append(Finding(path, reason, position or _mark(node)))
        self.failed.append(path)
        return _INVALID

    def _scalar(self, node: Node, path: FieldPath) -> object:
        self._chars += len(node.value)
        if self._chars > self._limits.max_expanded_chars:
            raise _TooLarge(
                f"the document expands to more than {self._limits.max_expanded_chars} characters of keys "
                "and values (through aliases?) (LoadLimits.max_expanded_chars)"
            )
        surrogate = lone_surrogate(node.value)
        if surrogate is not None:
            return self._fail(node, path, surrogate)
        if node.tag == _NULL_TAG and not _NULL_SPELLING.fullmatch(node.value):
            # `assertion: !!null "recent..."` shows an assertion and would load none.
            return self._fail(node, path, f"the tag {node.tag!r} would discard the value {node.value!r}")
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            return self._fail(node, path, _yaml_reason(exc))
        except (ValueError, OverflowError) as exc:  # e.g. the timestamp 2024-02-30
            return self._fail(node, path, f"invalid value {node.value!r}: {exc}")
        except (LookupError, AttributeError, TypeError):
            # PyYAML's constructors fail so on an explicit tag they cannot read: `!!bool maybe` (KeyError),
            # `!!timestamp x` (AttributeError), `!!int ''` (IndexError).
            return self._fail(node, path, f"invalid value {node.value!r} for the tag {node.tag!r}")

    def _sequence(self, node: SequenceNode, path: FieldPath) -> object:
        if node.tag != _SEQ_TAG:
            return self._fail(node, path, f"the tag {node.tag!r} is not allowed in a spec file")
        items = []
        for index, child in enumerate(node.value):
            self.positions[(*path, index)] = _mark(child)
            items.append(self.build(child, (*path, index)))
        return items

    def _mapping(self, node: MappingNode, path: FieldPath) -> object:
        if node.tag != _MAP_TAG:
            return self._fail(node, path, f"the tag {node.tag!r} is not allowed in a spec file")
        result: dict[object, object] = {}
        first_seen: dict[object, int] = {}
        merges: list[Node] = []
        first_merge = 0
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                if merges:  # a second `<<` would silently lose to the first, whatever a reader expects
                    reason = f"duplicate key '<<' (first defined on line {first_merge})"
                    self.findings.append(Finding((*path, "<<"), reason, _mark(key_node)))
                    continue
                first_merge = key_node.start_mark.line + 1
                merges.append(value_node)
                continue
            if not isinstance(key_node, ScalarNode):
                self._fail(key_node, path, "a mapping key must be a plain value, not a list or mapping")
                continue
            key = self._scalar(key_node, (*path, key_node.value))
            if key is _INVALID:
                continue
            child = (*path, key)
            if key in first_seen:
                reason = f"duplicate key {key!r} (first defined on line {first_seen[key]})"
                self.findings.append(Finding(child, reason, _mark(key_node)))
                continue
            if not isinstance(key, str):
                self.labels[child] = key_node.value
            first_seen[key] = key_node.start_mark.line + 1
            self.positions[child] = _mark(key_node)
            result[key] = self.build(value_node, child)
        for merged in merges:
            self._merge(merged, path, result)
        return result

    def _merge(self, node: Node, path: FieldPath, result: dict[object, object]) -> None:
        """Apply a YAML merge key (``<<: *defaults``): keys already present win, earlier sources win."""
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, MappingNode):
                self._fail(source, (*path, "<<"), "a merge key (<<) needs a mapping or a list of mappings")
                continue
            outer = self.positions
            self.positions = {}
            try:
                built = self.build(source, path)
                merged_positions = self.positions
            finally:
                self.positions = outer
            if not isinstance(built, dict):
                continue
            for key, value in built.items():
                if key in result:
                    continue
                result[key] = value
                depth = len(path)
                for where, mark in merged_positions.items():
                    if len(where) > depth and where[depth] == key:
                        self.positions[where] = mark


def lone_surrogate(text: str) -> str | None:
    """Why ``text`` is not valid Unicode (a ``\\uD800`` escape is half a character), or ``None``.

    Such a string cannot be encoded as UTF-8: a CEL engine, a JSON encoder or a guardian would fail on it
    later, at run time, rather than here with the field named.
    """
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return f"U+{ord(found.group()):04X} at character {found.start() + 1} is a lone surrogate, not a character"


def _mark(node: Node) -> Position:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    reason = exc.problem or "invalid YAML"
    if exc.context:
        reason = f"{reason} ({exc.context})"
    return reason


def describe_value(value: object, *, json_terms: bool = False) -> str:
    """How a problem names a value it refuses ("expected a string, got the number 3").

    Spec problems speak YAML (mappings, lists); JSON Schema problems speak JSON (objects, arrays) and
    shorten long strings, since the value is someone's data rather than a field the reader wrote.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value[:37] + "..." if json_terms and len(value) > 40 else value
        return f"the string {shown!r}"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, Mapping):
        return "an object" if json_terms else "a mapping"
    if isinstance(value, list | tuple):
        return "an array" if json_terms else "a list"
    if isinstance(value, bytes):
        return "binary data"
    return f"a {type(value).__name__}"
