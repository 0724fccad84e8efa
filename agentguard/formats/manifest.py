"""Agent Manifests (ACP agent descriptors) as agentguard descriptors; the review gate as an ACP interrupt.

A manifest names an agent (``metadata.ref``: name, version, url), says what it does (``description``),
declares the JSON schemas of its run input, output, config and thread state and the interrupts it may raise
(``specs``), how it is deployed (``deployments``) and which sub-agents it calls (``dependencies``)::

    from agentguard.formats import load_descriptor

    descriptor = load_descriptor("mailcomposer.json")
    descriptor.agent_info.id                        # "org.agntcy.mailcomposer@0.0.1"
    descriptor.check_input({"message": 42})         # CheckResult(passed=False, "...message: expected a string...")
    descriptor.apply(guard)                         # AOS descriptor; sub-agents outside dependencies denied

What becomes what: ``name@version`` is the AOS agent id; ``specs.input``/``specs.output`` are checked by
:meth:`~agentguard.formats.Descriptor.check_input` / ``check_output``; ``dependencies`` are the only
sub-agents the agent may call -- :meth:`~agentguard.formats.Descriptor.apply` denies calls to the spec's
other agent capabilities and reports dependencies the spec does not allow; ``specs.interrupts`` become
:class:`Interrupt` objects.

Interrupts are how an ACP agent asks its caller for something mid-run. agentguard's review gate is one:
:data:`REVIEW_INTERRUPT` describes it (publish it in your own manifest with :func:`with_review_interrupt`),
and any interrupt whose resume payload carries a boolean ``approved`` -- such as the mail composer's
``mail_send_approval`` -- can answer a review: :meth:`Interrupt.reviewer` turns it into a reviewer that
raises the interrupt and validates the resume body into an :class:`~agentguard.Approval`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentguard.pipeline import AgentInfo
from agentguard.policy import Approval, CheckResult, Reviewer, ReviewRequest
from agentguard.spec import validate_name

from ._descriptor import Descriptor
from ._document import Document, FieldPath
from ._schema import JSONSchema, schema_problems

__all__ = ["REVIEW_INTERRUPT", "REVIEW_INTERRUPT_TYPE", "Interrupt", "from_document", "with_review_interrupt"]

Ask = Callable[[dict[str, Any]], "Mapping[str, Any] | Awaitable[Mapping[str, Any]]"]
"""Raise an interrupt with this payload and return the caller's resume body (sync or async)."""


@dataclass(frozen=True)
class Interrupt:
    """One ACP interrupt: its type, the payload the agent sends, the payload the caller resumes with."""

    interrupt_type: str
    interrupt_payload: JSONSchema
    resume_payload: JSONSchema

    @property
    def answers_reviews(self) -> bool:
        """Whether the resume payload carries a boolean ``approved``, so that it can answer a review."""
        properties = self.resume_payload.schema.get("properties")
        approved = properties.get("approved") if isinstance(properties, Mapping) else None
        return isinstance(approved, Mapping) and approved.get("type") == "boolean"

    def as_dict(self) -> dict[str, Any]:
        """The ACP ``specs.interrupts`` entry."""
        return {
            "interrupt_type": self.interrupt_type,
            "interrupt_payload": self.interrupt_payload.json_schema(),
            "resume_payload": self.resume_payload.json_schema(),
        }

    def check_payload(self, payload: object) -> CheckResult:
        return self.interrupt_payload.check(payload, f"the {self.interrupt_type} interrupt payload")

    def payload_for(self, request: ReviewRequest) -> dict[str, Any]:
        """The interrupt payload that asks for ``request``.

        agentguard's own interrupt carries the whole request; another interrupt gets the call's inputs it
        declares (the mail composer's ``subject``, ``body``, ``recipients`` from a ``send-email`` call).
        """
        if self.interrupt_type == REVIEW_INTERRUPT_TYPE:
            payload = {
                **request.as_dict(),
                "reviewer": request.reviewer,
                "capability": request.capability,
                "phase": request.phase.value,
                "inputs": dict(request.inputs),
            }
            if request.outputs is not None:
                payload["outputs"] = request.outputs
            return payload
        properties = self.interrupt_payload.schema.get("properties")
        names = properties if isinstance(properties, Mapping) else {}
        return {name: value for name, value in request.inputs.items() if name in names}

    def approval(self, body: object, *, approved_by: str | None = None) -> Approval:
        """The :class:`~agentguard.Approval` a resume body stands for; ``ValueError`` when it is not valid.

        ``approvedBy`` in the body wins over ``approved_by`` (who was asked).
        """
        if not self.answers_reviews:
            raise ValueError(
                f"the resume payload of the {self.interrupt_type} interrupt has no boolean 'approved': "
                "it cannot answer a review"
            )
        checked = self.resume_payload.check(body, f"the resume payload of {self.interrupt_type}")
        if not checked.passed:
            raise ValueError(checked.message)
        assert isinstance(body, Mapping)  # the resume schema has properties, so a valid body is an object
        reason, by = body.get("reason"), body.get("approvedBy")
        return Approval(
            approved=body["approved"] is True,
            reason=reason if isinstance(reason, str) else None,
            approved_by=by if isinstance(by, str) else approved_by,
        )

    def reviewer(self, ask: Ask) -> Reviewer:
        """A reviewer that raises this interrupt through ``ask`` and turns the resume body into an approval.

        A request whose payload does not match ``interrupt_payload`` is rejected without asking; a resume
        body that does not match ``resume_payload`` rejects the call, saying what is wrong with it.
        """

        def review(request: ReviewRequest) -> Approval | Awaitable[Approval]:
            payload = self.payload_for(request)
            checked = self.check_payload(payload)
            if not checked.passed:
                return Approval(
                    False, f"cannot ask through the interrupt: {checked.message}", request.reviewer
                )
            answer = ask(payload)
            if inspect.isawaitable(answer):
                return self._resume_later(answer, request.reviewer)
            return self._answered(answer, request.reviewer)

        return review

    async def _resume_later(self, answer: Awaitable[Mapping[str, Any]], reviewer: str) -> Approval:
        return self._answered(await answer, reviewer)

    def _answered(self, body: object, reviewer: str) -> Approval:
        """The approval a resume body stands for, or a rejection saying why it is none: the review's reason
        names a reviewer's exception by its type alone (its text may quote what the reviewer was shown), and
        what is wrong with the body is this module's own text about the reviewer's answer."""
        try:
            return self.approval(body, approved_by=reviewer)
        except ValueError as exc:
            return Approval(False, f"not an answer to the review: {exc}", reviewer)


REVIEW_INTERRUPT_TYPE = "agentguard_review"

REVIEW_INTERRUPT = Interrupt(
    REVIEW_INTERRUPT_TYPE,
    JSONSchema(
        {
            "type": "object",
            "title": "agentguard review request",
            "description": "A guarded call waits for a review (OS Protocol ApprovalRequest plus the call)",
            "properties": {
                "id": {"type": "string"},
                "message": {"type": "string"},
                "executionId": {"type": "string"},
                "createdAt": {"type": "string"},
                "expiresAt": {"type": "string"},
                "responses": {"type": "array"},
                "reviewer": {"type": "string", "description": "who is asked (require_review)"},
                "capability": {"type": "string", "description": "the tool or agent called"},
                "phase": {"enum": ["input", "output"], "description": "before the call, or on its result"},
                "inputs": {"type": "object", "description": "the call's arguments"},
                "outputs": {"description": "the call's result (output reviews only)"},
            },
            "required": ["id", "message", "executionId", "reviewer", "capability", "phase", "inputs"],
        }
    ),
    JSONSchema(
        {
            "type": "object",
            "title": "agentguard review answer",
            "description": "OS Protocol Approval",
            "properties": {
                "approved": {"type": "boolean", "description": "true approves the call, false rejects it"},
                "reason": {"type": "string"},
                "approvedBy": {"type": "string", "description": "who decided (user id, email, agent)"},
            },
            "required": ["approved"],
        }
    ),
)
"""agentguard's review gate as an ACP interrupt."""


def with_review_interrupt(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``manifest`` that publishes agentguard's review gate among its interrupts.

    Adds :data:`REVIEW_INTERRUPT` to ``specs.interrupts`` (once) and sets ``specs.capabilities.interrupts``.
    """
    specs = dict(manifest.get("specs") or {})
    interrupts = [
        i for i in specs.get("interrupts") or [] if i.get("interrupt_type") != REVIEW_INTERRUPT_TYPE
    ]
    specs["interrupts"] = [*interrupts, REVIEW_INTERRUPT.as_dict()]
    specs["capabilities"] = {**(specs.get("capabilities") or {}), "interrupts": True}
    return {**manifest, "specs": specs}


# ------------------------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def mapping(self, value: object, path: FieldPath, *, required: bool = True) -> Mapping[str, Any] | None:
        if value is None and not required:
            return None
        if not isinstance(value, Mapping):
            self.doc.error(path, "required, a mapping" if value is None else "must be a mapping")
            return None
        return value

    def text(
        self, data: Mapping[str, Any], key: str, path: FieldPath, *, required: bool = True
    ) -> str | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value:
            self.doc.error(
                (*path, key), "required, a string" if value is None else "must be a non-empty string"
            )
            return None
        return value

    def schema(self, specs: Mapping[str, Any], key: str, path: FieldPath) -> JSONSchema | None:
        value = specs.get(key)
        if value is None:
            return None
        where = (*path, key)
        if not isinstance(value, Mapping):
            self.doc.error(where, "must be a JSON schema (a mapping)")
            return None
        failed = False
        for inner, reason, level in schema_problems(value):
            failed |= level == "error"
            (self.doc.error if level == "error" else self.doc.warn)((*where, *inner), reason)
        return None if failed else JSONSchema(value)

    def interrupts(self, specs: Mapping[str, Any], path: FieldPath) -> list[Interrupt]:
        value = specs.get("interrupts")
        if value is None:
            return []
        if not isinstance(value, list):
            self.doc.error((*path, "interrupts"), "must be a list of interrupts")
            return []
        found: list[Interrupt] = []
        for index, item in enumerate(value):
            where = (*path, "interrupts", index)
            entry = self.mapping(item, where)
            if entry is None:
                continue
            kind = self.text(entry, "interrupt_type", where)
            payload = self.schema(entry, "interrupt_payload", where)
            resume = self.schema(entry, "resume_payload", where)
            for key in ("interrupt_payload", "resume_payload"):
                if entry.get(key) is None:
                    self.doc.error((*where, key), "required, a JSON schema")
            if kind is not None and any(i.interrupt_type == kind for i in found):
                self.doc.error((*where, "interrupt_type"), f"the interrupt type {kind!r} is declared twice")
            elif kind is not None and payload is not None and resume is not None:
                found.append(Interrupt(kind, payload, resume))
        capabilities = specs.get("capabilities")
        if found and isinstance(capabilities, Mapping) and capabilities.get("interrupts") is False:
            self.doc.warn(
                (*path, "capabilities", "interrupts"), "interrupts are declared but the capability is off"
            )
        return found

    def dependencies(self, data: Mapping[str, Any]) -> list[tuple[str, str | None]] | None:
        """The sub-agents, ``None`` when the manifest does not list them (then nothing is enforced)."""
        value = data.get("dependencies")
        if value is None:
            return None
        if not isinstance(value, list):
            self.doc.error(("dependencies",), "must be a list of agent references (name, version)")
            return None
        found: list[tuple[str, str | None]] = []
        for index, item in enumerate(value):
            where: FieldPath = ("dependencies", index)
            entry = self.mapping(item, where)
            if entry is None:
                continue
            name = self.text(entry, "name", where)
            version = self.text(entry, "version", where, required=False)
            if name is None:
                continue
            reason = validate_name(name)
            if reason is not None:
                self.doc.warn(
                    (*where, "name"),
                    f"{name!r} cannot be a capability name ({reason}): calls to it are denied",
                )
            found.append((name, version))
        return found

    def deployments(self, data: Mapping[str, Any]) -> list[str]:
        value = data.get("deployments")
        if value is None:
            return []
        if not isinstance(value, list):
            self.doc.error(("deployments",), "must be a list of deployment options")
            return []
        kinds: list[str] = []
        for index, item in enumerate(value):
            entry = self.mapping(item, ("deployments", index))
            kind = self.text(entry, "type", ("deployments", index)) if entry is not None else None
            if kind is not None:
                kinds.append(kind)
        return kinds


def from_document(doc: Document) -> Descriptor:
    """The descriptor of an Agent Manifest document (its problems raised together as one ``SpecError``)."""
    reader = _Reader(doc)
    data = doc.data
    assert isinstance(data, Mapping)
    metadata = reader.mapping(data.get("metadata"), ("metadata",))
    ref = reader.mapping(metadata.get("ref"), ("metadata", "ref")) if metadata is not None else None
    name = reader.text(ref, "name", ("metadata", "ref")) if ref is not None else None
    version = reader.text(ref, "version", ("metadata", "ref")) if ref is not None else None
    url = reader.text(ref, "url", ("metadata", "ref"), required=False) if ref is not None else None
    description = reader.text(metadata, "description", ("metadata",)) if metadata is not None else None
    specs = reader.mapping(data.get("specs"), ("specs",), required=False) or {}
    input_schema = reader.schema(specs, "input", ("specs",))
    output_schema = reader.schema(specs, "output", ("specs",))
    for key in ("config", "thread_state"):
        reader.schema(specs, key, ("specs",))
    interrupts = reader.interrupts(specs, ("specs",))
    dependencies = reader.dependencies(data)
    deployments = reader.deployments(data)
    doc.raise_for_problems()
    assert name is not None  # a missing name or version is a problem, raised just above
    assert version is not None
    acp: dict[str, Any] = {
        "capabilities": dict(specs.get("capabilities") or {}),
        "deployments": deployments,
        "dependencies": [f"{dep}@{ver}" if ver else dep for dep, ver in dependencies or ()],
        "interrupts": [i.interrupt_type for i in interrupts],
    }
    if url is not None:
        acp["url"] = url
    info = AgentInfo(
        name=name,
        id=f"{name}@{version}",
        version=version,
        description=description,
        metadata={"acp": acp},
    )
    return Descriptor(
        format="manifest",
        source=doc.source,
        agent_info=info,
        input_schema=input_schema,
        output_schema=output_schema,
        sub_agents=None if dependencies is None else frozenset(dep for dep, _ in dependencies),
        interrupts=tuple(interrupts),
        warnings=doc.sorted_warnings(),
    )
