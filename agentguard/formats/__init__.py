"""Describe a guarded agent with the files it already has: Agent Spec, Agent Manifest, OS Protocol app.

One entry point reads any of the three, telling the format from the content, and returns a
:class:`Descriptor`: the AOS ``Agent`` fields, the tool definitions, the review gates and schema checks the
file implies, and the guard settings an app file binds. ``apply`` installs it on a Guard::

    from agentguard import Guard
    from agentguard.formats import load_descriptor

    descriptor = load_descriptor("support.agentspec.json", secrets={"llm.api_key": api_key})
    guard = Guard.from_file("agent.yaml", **descriptor.guard_options())
    descriptor.apply(guard)     # agent descriptor, review gates, argument/result schema checks

A file that cannot be used raises one :class:`~agentguard.SpecError` listing every problem with file,
field and line (``agentguard validate`` prints them); what the reader merely noticed is in
``descriptor.warnings``. The formats, and what becomes what, are described in
:mod:`agentguard.formats.agentspec`, :mod:`agentguard.formats.manifest`, :mod:`agentguard.formats.osp` and
``docs/formats.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agentguard.errors import SpecError
from agentguard.spec import DEFAULT_LIMITS, LoadLimits

from . import agentspec, manifest, osp
from ._descriptor import Descriptor, LoadOptions
from ._document import FORMAT_NAMES, Document, Format, detect_format, read_document, read_file
from ._schema import ArgumentsSchema, JSONSchema, OutputsSchema, Schema, SchemaRule
from .manifest import REVIEW_INTERRUPT, REVIEW_INTERRUPT_TYPE, Interrupt, with_review_interrupt

__all__ = [
    "REVIEW_INTERRUPT",
    "REVIEW_INTERRUPT_TYPE",
    "ArgumentsSchema",
    "Descriptor",
    "Document",
    "Format",
    "Interrupt",
    "JSONSchema",
    "LoadOptions",
    "OutputsSchema",
    "Schema",
    "SchemaRule",
    "descriptor_of",
    "detect_format",
    "load_descriptor",
    "parse_descriptor",
    "read_document",
    "read_file",
    "with_review_interrupt",
]


def load_descriptor(
    path: str | os.PathLike[str],
    *,
    secrets: Mapping[str, object] | None = None,
    strict: bool = False,
    reviewer: str = "user",
    autonomous_reviewer: str | None = None,
    names: Mapping[str, str] | None = None,
    limits: LoadLimits = DEFAULT_LIMITS,
) -> Descriptor:
    """Read an Agent Spec configuration, an Agent Manifest or an OS Protocol app file.

    ``secrets``
        values for ``$component_ref`` ids (Agent Spec's components registry: API keys, sensitive headers,
        disaggregated components), and the guardian token of an app file; never copied into the descriptor.
    ``strict``
        also validate an Agent Spec configuration with pyagentspec (``agentguard[agentspec]``).
    ``reviewer`` / ``autonomous_reviewer``
        who confirms Agent Spec ``requires_confirmation`` tools: ``reviewer`` (default ``"user"``), or,
        when the agent has no human in the loop, ``autonomous_reviewer`` -- without one, such calls are
        denied.
    ``names``
        Agent Spec tool name → capability name, for tools whose name with ``_`` turned into ``-`` is not
        the capability's.
    ``limits``
        what reading the file may cost (:class:`~agentguard.spec.LoadLimits`: size, checked before
        reading; YAML nodes; alias expansion); a file past one is refused with a problem naming it.

    An OpenAgentSpec file is a policy, not a descriptor: load it with ``Guard.from_file``.
    """
    text, source = read_file(path, limits)
    return parse_descriptor(
        text,
        source=source,
        secrets=secrets,
        strict=strict,
        reviewer=reviewer,
        autonomous_reviewer=autonomous_reviewer,
        names=names,
        limits=limits,
    )


def parse_descriptor(
    text: str,
    *,
    source: str = "<string>",
    secrets: Mapping[str, object] | None = None,
    strict: bool = False,
    reviewer: str = "user",
    autonomous_reviewer: str | None = None,
    names: Mapping[str, str] | None = None,
    limits: LoadLimits = DEFAULT_LIMITS,
) -> Descriptor:
    """Like :func:`load_descriptor`, from the text of the file (``source`` names it in problems)."""
    options = LoadOptions(
        secrets=dict(secrets or {}),
        strict=strict,
        reviewer=reviewer,
        autonomous_reviewer=autonomous_reviewer,
        names=dict(names or {}),
    )
    return descriptor_of(read_document(text, source, limits=limits), options)


def descriptor_of(doc: Document, options: LoadOptions) -> Descriptor:
    """The descriptor of a document already read (``agentguard validate`` reads each file once)."""
    doc.raise_for_problems()
    if doc.format == "agentspec":
        return agentspec.from_document(doc, options)
    if doc.format == "manifest":
        return manifest.from_document(doc)
    if doc.format == "osp-app":
        return osp.from_document(doc, options)
    raise SpecError(
        [doc.at((), f"this is an {FORMAT_NAMES['openagentspec']}, a policy: load it with Guard.from_file")]
    )
