"""OS Protocol app files that configure agentguard.

An app file is YAML frontmatter (name, version, description, protocol, providers) and a markdown body. Its
``providers`` bind each interface of the ``system``, ``context``, ``actions`` and ``checks`` domains to a
vendor; the bindings whose provider is an agentguard piece configure the guard::

    ---
    name: '@corp/support-os'
    version: '1.2.0'
    protocol: '0.1.0'
    providers:
      checks:
        rules:    {provider: agentguard/rules, metadata: {severity: {restriction: warning}}}
        guardian: {provider: agentguard/guardian, metadata: {url: 'https://guardian.corp', mode: enforce}}
        audit:    {provider: agentguard/audit, metadata: {directory: audits}}
      actions:
        approval: {provider: agentguard/approval, metadata: {timeoutMs: 60000, requiredApprovals: 1}}
      system:
        sandbox:  {provider: '@vercel/sandbox'}
    ---
    # Support OS

Then ``Guard.from_file("agent.yaml", **app.guard_options())`` and ``app.apply(guard)``.

The agentguard providers (under ``checks`` or ``actions``, whatever the interface key):

``agentguard/rules``
    ``severity``: the Guard's per-rule severity (``{"restriction": "warning"}``: shadow mode);
    ``unknown_capability``: ``deny`` (default), ``allow`` or ``observe``.
``agentguard/guardian``
    an AOS guardian: ``url`` (required), ``mode`` (``enforce``/``observe``), ``on_failure``
    (``deny``/``allow``), ``timeout_ms``, and ``token_secret``: the key of its bearer token in
    ``secrets={...}`` (a token is never written in the file).
``agentguard/audit``
    an audit report per engagement (:class:`agentguard.checks.AuditObserver`): ``directory`` (relative to
    the app file), ``objectives``, ``agent_id``.
``agentguard/approval``
    the OS Protocol ``ApprovalConfig`` of reviews: ``timeoutMs``, ``autoApproveOnTimeout``,
    ``approvers``, ``requiredApprovals``; ``reviewers`` maps a reviewer id to its own such settings.

Nothing is ignored quietly: a provider that is not agentguard's is a warning (the host binds it), an
``agentguard/...`` provider this version does not know, one bound twice, one outside ``checks``/``actions``
or a metadata field it does not take is an error -- all with file, field and line. ``enabled: false``
switches a binding off.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentguard.checks import AuditObserver
from agentguard.guardian import GuardianClient
from agentguard.observers import Observer
from agentguard.policy import ApprovalConfig, SeverityMap

from ._descriptor import Descriptor, LoadOptions
from ._document import Document, FieldPath

__all__ = ["DOMAINS", "PROVIDERS", "from_document"]

DOMAINS = ("system", "context", "actions", "checks")
"""The OS Protocol provider domains."""

_GUARD_DOMAINS = ("checks", "actions")
_APP_FIELDS = frozenset({"name", "version", "description", "protocol", "providers", "metadata"})
_ENTRY_FIELDS = frozenset({"provider", "version", "enabled", "metadata"})
_APPROVAL_FIELDS = {
    "timeoutMs": "timeout_ms",
    "autoApproveOnTimeout": "auto_approve_on_timeout",
    "approvers": "approvers",
    "requiredApprovals": "required_approvals",
}


@dataclass
class _Setup:
    """What the agentguard bindings of one app contribute."""

    options: dict[str, Callable[[], Any]] = field(default_factory=dict)
    observers: list[Observer] = field(default_factory=list)


class _Metadata:
    """Typed access to one provider entry's ``metadata``; every misuse becomes a problem at its field."""

    def __init__(self, doc: Document, provider: str, data: Mapping[str, Any], path: FieldPath) -> None:
        self.doc, self.provider, self.data, self.path = doc, provider, data, path

    def check_fields(self, known: frozenset[str]) -> None:
        for key in self.data:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.doc.error((*self.path, key), f"{self.provider} takes no metadata field {key!r}{hint}")

    def text(self, key: str, *, required: bool = False, choices: tuple[str, ...] = ()) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required:
                self.doc.error((*self.path, key), f"{self.provider} needs metadata.{key}")
            return None
        if not isinstance(value, str) or (choices and value not in choices):
            expected = " or ".join(repr(c) for c in choices) if choices else "a string"
            self.doc.error((*self.path, key), f"must be {expected}, not {value!r}")
            return None
        return value

    def positive(self, key: str) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.doc.error((*self.path, key), f"must be a positive integer, not {value!r}")
            return None
        return value


def _rules(meta: _Metadata, setup: _Setup, options: LoadOptions, app_dir: Path) -> None:
    meta.check_fields(frozenset({"severity", "unknown_capability"}))
    severity = meta.data.get("severity")
    if severity is not None:
        if not isinstance(severity, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in severity.items()
        ):
            meta.doc.error((*meta.path, "severity"), "must map rule kinds to error, warning or info")
        else:
            try:
                SeverityMap(severity)  # refuses unknown kinds and levels, as the Guard would
            except ValueError as exc:
                meta.doc.error((*meta.path, "severity"), str(exc))
            else:
                settings = dict(severity)
                setup.options["severity"] = lambda: dict(settings)
    unknown = meta.text("unknown_capability", choices=("deny", "allow", "observe"))
    if unknown is not None:
        setup.options["unknown_capability"] = lambda: unknown


def _guardian(meta: _Metadata, setup: _Setup, options: LoadOptions, app_dir: Path) -> None:
    meta.check_fields(frozenset({"url", "mode", "on_failure", "timeout_ms", "token_secret"}))
    url = meta.text("url", required=True)
    if url is not None and not url.startswith(("http://", "https://")):
        meta.doc.error((*meta.path, "url"), f"must be an http:// or https:// URL, not {url!r}")
        url = None
    mode = meta.text("mode", choices=("enforce", "observe")) or "enforce"
    on_failure = meta.text("on_failure", choices=("deny", "allow")) or "deny"
    timeout_ms = meta.positive("timeout_ms") or 5000
    secret = meta.text("token_secret")
    token = options.secrets.get(secret) if secret is not None else None
    if secret is not None and not isinstance(token, str):
        report = meta.doc.error if options.secrets_known else meta.doc.warn
        report((*meta.path, "token_secret"), f"the secret {secret!r} is not supplied (secrets={{...}})")
    if url is None:
        return
    target = url

    def client() -> GuardianClient:
        return GuardianClient(
            target,
            mode="observe" if mode == "observe" else "enforce",
            timeout=timeout_ms / 1000,
            on_failure="allow" if on_failure == "allow" else "deny",
            token=token if isinstance(token, str) else None,
        )

    setup.options["guardian"] = client


def _audit(meta: _Metadata, setup: _Setup, options: LoadOptions, app_dir: Path) -> None:
    meta.check_fields(frozenset({"directory", "objectives", "agent_id"}))
    directory = meta.text("directory", required=True)
    objectives, agent_id = meta.text("objectives"), meta.text("agent_id")
    if directory is not None:
        setup.observers.append(AuditObserver(app_dir / directory, agent_id=agent_id, objectives=objectives))


def _approval(meta: _Metadata, setup: _Setup, options: LoadOptions, app_dir: Path) -> None:
    meta.check_fields(frozenset({*_APPROVAL_FIELDS, "reviewers"}))
    default = _approval_config(meta)
    if default is not None and any(key in meta.data for key in _APPROVAL_FIELDS):
        setup.options["approval"] = lambda: default
    reviewers = meta.data.get("reviewers")
    if reviewers is None:
        return
    if not isinstance(reviewers, Mapping):
        meta.doc.error((*meta.path, "reviewers"), "must map reviewer ids to approval settings")
        return
    configs: dict[str, ApprovalConfig] = {}
    for reviewer, settings in reviewers.items():
        where = (*meta.path, "reviewers", reviewer)
        if not isinstance(settings, Mapping):
            meta.doc.error(where, "must be a mapping of approval settings")
            continue
        inner = _Metadata(meta.doc, meta.provider, settings, where)
        inner.check_fields(frozenset(_APPROVAL_FIELDS))
        config = _approval_config(inner)
        if config is not None:
            configs[str(reviewer)] = config
    if configs:
        setup.options["approvals"] = lambda: dict(configs)


def _approval_config(meta: _Metadata) -> ApprovalConfig | None:
    """An ``ApprovalConfig`` from OS Protocol (camelCase) settings; ``None`` when they are invalid."""
    values: dict[str, Any] = {}
    for wire, name in _APPROVAL_FIELDS.items():
        value = meta.data.get(wire)
        if value is None:
            continue
        valid = {
            "timeoutMs": isinstance(value, int) and not isinstance(value, bool),
            "autoApproveOnTimeout": isinstance(value, bool),
            "approvers": isinstance(value, list) and all(isinstance(v, str) for v in value),
            "requiredApprovals": isinstance(value, int) and not isinstance(value, bool),
        }[wire]
        if not valid:
            meta.doc.error((*meta.path, wire), f"invalid {wire}: {value!r}")
            return None
        values[name] = tuple(value) if wire == "approvers" else value
    try:
        return ApprovalConfig(**values)
    except ValueError as exc:
        meta.doc.error(meta.path, str(exc))
        return None


_Handler = Callable[[_Metadata, _Setup, LoadOptions, Path], None]

PROVIDERS: Mapping[str, _Handler] = {
    "agentguard/rules": _rules,
    "agentguard/guardian": _guardian,
    "agentguard/audit": _audit,
    "agentguard/approval": _approval,
}
"""The provider names that configure agentguard, and what reads their metadata."""


def from_document(doc: Document, options: LoadOptions) -> Descriptor:
    """The descriptor of an OS Protocol app document (its problems raised together as one ``SpecError``)."""
    data = doc.data
    assert isinstance(data, Mapping)
    for key in ("name", "version"):
        if not isinstance(data.get(key), str) or not data[key]:
            doc.error((key,), f"an app needs a {key} (a string)")
    for key in data:
        if key not in _APP_FIELDS:
            doc.warn((key,), f"{key!r} is not a field of an OS Protocol app")
    setup = _Setup()
    providers = data.get("providers")
    if providers is not None and not isinstance(providers, Mapping):
        doc.error(("providers",), "must map domains (system, context, actions, checks) to provider bindings")
    elif providers is not None:
        app_dir = Path(doc.source).parent
        bound: dict[str, FieldPath] = {}
        for domain, bindings in providers.items():
            _read_domain(doc, str(domain), bindings, setup, options, app_dir, bound)
    doc.raise_for_problems()
    return Descriptor(
        format="osp-app",
        source=doc.source,
        observers=tuple(setup.observers),
        option_factories=setup.options,
        warnings=doc.sorted_warnings(),
    )


def _read_domain(
    doc: Document,
    domain: str,
    bindings: object,
    setup: _Setup,
    options: LoadOptions,
    app_dir: Path,
    bound: dict[str, FieldPath],
) -> None:
    path: FieldPath = ("providers", domain)
    if domain not in DOMAINS:
        doc.warn(path, f"{domain!r} is not an OS Protocol domain ({', '.join(DOMAINS)})")
    if not isinstance(bindings, Mapping):
        doc.error(path, "must map interface names to provider entries")
        return
    for interface, entry in bindings.items():
        where = (*path, interface)
        if not isinstance(entry, Mapping) or not isinstance(entry.get("provider"), str):
            doc.error(where, "a provider entry is a mapping with a provider name (provider: <name>)")
            continue
        for key in entry:
            if key not in _ENTRY_FIELDS:
                doc.warn((*where, key), f"{key!r} is not a field of a provider entry")
        enabled = entry.get("enabled", True)
        if not isinstance(enabled, bool):
            doc.error((*where, "enabled"), f"must be true or false, not {enabled!r}")
            continue
        provider = entry["provider"]
        if not provider.startswith("agentguard/"):
            doc.warn((*where, "provider"), f"{provider!r} is not an agentguard provider: the host binds it")
            continue
        handler = PROVIDERS.get(provider)
        if handler is None:
            close = difflib.get_close_matches(provider, PROVIDERS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(PROVIDERS)})"
            doc.error((*where, "provider"), f"unknown agentguard provider {provider!r}{hint}")
            continue
        if domain not in _GUARD_DOMAINS:
            doc.error((*where, "provider"), f"{provider} configures checks or actions, not {domain}")
            continue
        if provider in bound:
            first = ".".join(map(str, bound[provider]))
            doc.error((*where, "provider"), f"{provider} is bound twice (also at {first})")
            continue
        bound[provider] = where
        if not enabled:
            continue
        metadata = entry.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            doc.error((*where, "metadata"), "must be a mapping")
            continue
        handler(_Metadata(doc, provider, metadata, (*where, "metadata")), setup, options, app_dir)
