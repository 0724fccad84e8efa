"""The reference guardian's rules: which AOS steps to allow, deny or modify, written as CEL over the request.

A rules file (YAML)::

    default_decision: allow              # allow | deny; what happens when no rule matches (default: allow)
    default_message: No rule matched     # the message sent with the default decision
    on_rule_error: deny                  # deny | allow; when a non-deny rule errors (default: deny)
    rules:                               # tried in order; the first that matches decides
      - name: no-external-email
        methods: [steps/toolCallRequest] # method names or globs (steps/*); absent: every method
        when: >-
          params.toolCallRequest.toolId == "send-email" &&
          params.toolCallRequest.inputs.exists(i, i.name == "to" && !i.value.endsWith("@corp.example"))
        decision: deny
        message: E-mail to an external recipient
        reason_codes: [external-recipient]
      - name: redact-body
        methods: [steps/toolCallRequest]
        when: params.toolCallRequest.toolId == "send-email"
        decision: modify
        message: Body redacted
        set:                             # dotted path under params -> CEL expression giving its new value
          params.toolCallRequest.inputs: >-
            params.toolCallRequest.inputs.map(i,
              i.name == "body" ? {"name": "body", "value": "[redacted]"} : i)

``when`` is a CEL expression over two variables: ``method`` (a string) and ``params`` (the request's
``params`` as wire JSON, camelCase, in the specification text's shape whichever shape the agent sent);
absent, the rule matches every request of its methods. A ``modify`` rule says how with ``set:`` (each path
replaced by its expression's value; a path may index a list, ``params.toolCallRequest.inputs.0.value``) or
with ``modify: {cel: <expression>}`` whose value, a map, replaces the members of ``params`` it names and
keeps the others: it may give the whole new ``params`` or only the members that change (``context`` need
not be repeated). Every expression sees the request as it arrived. The answer's ``modifiedRequest`` is
the complete request with the change applied (same ``id``, full ``params``), validated like any request.

Failures, and why they are handled so:

- A file with any problem (YAML, a duplicate key, unknown or missing fields, a method name AOS does not
  have, a CEL expression that does not compile) is refused at load with every problem listed, by file,
  line, rule and field: a broken policy must never start serving. YAML is read by the spec loader's reader
  (:func:`agentguard.spec.read_yaml`), so aliases cannot expand without bound.
- A ``when`` that fails at run time (a missing key, a type error such as a list where a string was
  expected, an exhausted evaluation budget, any error of the engine) or is not a boolean *fails closed*: a
  ``deny`` rule whose condition errors denies (reason codes: its own and ``rule-failed``), since a request
  shaped to make a deny condition error must not slip past it; any other rule's error is answered with
  ``on_rule_error`` (``deny`` by default, reason code ``rule-failed``). ``on_rule_error: allow`` is the
  opt-out: the failing rule is then treated as not matching and the later rules and the default decide --
  an erroring rule never allows by itself. Either way the answer's ``data.ruleErrors`` names each failing
  rule and field (``{"rule": ..., "field": "when", "error": ...}``); the reason never quotes the request's
  values (an engine's message may, so it goes to the debug log only).
- A ``modify`` whose change cannot be computed or yields an invalid request is answered with ``deny``
  (reason code ``modify-failed``): the rule did match, and letting the unmodified step through would do
  exactly what it was written to prevent (the Agent Control Standard treats an unappliable modify so).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentguard.aos import (
    METHODS,
    AOSRequest,
    AOSRequestError,
    AOSSuccessResult,
    Decision,
    JSONObject,
    dump,
    parse_request,
)
from agentguard.cel import CelBackend, CelCompileError, CelProgram, VarType, get_backend
from agentguard.errors import SpecError, SpecProblem
from agentguard.guardian._logged import logged
from agentguard.guardian._observe import RateLimitedLog
from agentguard.spec import YamlDocument, dotted, in_file_order, locate, read_yaml, validation_reason

from ._json import encode_json
from ._quoted import bounded


def _unchecked(variables: Mapping[str, Any], *, representable: Iterable[str] = ()) -> Mapping[str, Any]:
    return variables


UNESCAPED_JSON: ContextVar[object] = ContextVar("agentguard_guardian_unescaped_json", default=None)
"""Set by the server, while it decides, to the request it decoded from JSON text without a ``\\u`` escape
(``json.loads(text.decode("utf-8"))``): the strings of that object, and of no other, hold no NUL and no lone
surrogate (the characters the C++ CEL engine misreads), so they are not walked for them. A context variable,
not a parameter, so that :meth:`GuardianRules.decide` keeps its signature for subclasses (an override that
changes that object in place before deciding must reset it to ``None``)."""

_bind: Callable[..., Mapping[str, Any]]
try:
    from agentguard.cel._expr import Scanned as _bind
except ImportError:  # pragma: no cover - no cel-expr-python wheel for this platform: nothing to check once
    _bind = _unchecked

__all__ = [
    "DECLARATIONS",
    "MODIFY_FAILED",
    "RULE_FAILED",
    "GuardianRules",
    "Rule",
    "load_rules",
    "parse_rules",
]

logger = logging.getLogger("agentguard.guardian.server")

DECLARATIONS: Mapping[str, VarType] = {"method": VarType.STRING, "params": VarType.DYN}
"""The variables a rule's CEL expressions see."""

MODIFY_FAILED = "modify-failed"
"""Reason code of the ``deny`` sent when a matching ``modify`` rule's change cannot be applied."""

RULE_FAILED = "rule-failed"
"""Reason code of the ``deny`` sent when a rule's condition cannot be evaluated on a request."""

# ``ping`` is answered by the guardian itself with its status, never with a decision.
_DECIDED_METHODS = tuple(name for name in METHODS if name != "ping")


@dataclass(frozen=True)
class Rule:
    """One compiled rule. ``methods`` holds the concrete method names it applies to (``None``: all)."""

    name: str
    decision: Decision
    message: str
    methods: frozenset[str] | None = None
    when: CelProgram | None = None
    reason_codes: tuple[str, ...] = ()
    modify: CelProgram | None = None
    set: tuple[tuple[str, CelProgram], ...] = ()

    def applies_to(self, method: str) -> bool:
        """Whether requests for ``method`` are this rule's business at all."""
        return self.methods is None or method in self.methods


class _RuleError(Exception):
    """A rule failed at run time; ``field`` says which of its expressions."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


class _Settled:
    """An answer that is the same whenever it is given: a rule that does not modify matched and no rule failed
    before it, or no rule matched and none failed. The server sends one on nearly every request, so its JSON
    text is made once; :meth:`result` builds a new model for each caller of ``decide`` (models are mutable)."""

    __slots__ = ("decision", "json", "message", "reason_codes", "rule")

    def __init__(
        self, decision: Decision, message: str, reason_codes: tuple[str, ...] = (), rule: str | None = None
    ) -> None:
        self.decision = decision
        self.message = message
        self.reason_codes = reason_codes
        self.rule = rule
        self.json = encode_json(dump(self.result()))

    def result(self) -> AOSSuccessResult:
        return AOSSuccessResult(
            decision=self.decision,
            message=self.message,
            reason_code=list(self.reason_codes) or None,
            data=None if self.rule is None else {"rule": self.rule},
        )


@dataclass(frozen=True)
class GuardianRules:
    """An ordered list of rules and the decision taken when none matches. Immutable and thread-safe.

    :meth:`decide` is the whole policy, free of I/O: the server only parses requests and sends answers.
    ``on_rule_error`` is what a failing non-deny rule's condition decides: ``DENY`` (the default) or
    ``ALLOW``, which only skips the failing rule (see the module docstring).
    """

    rules: tuple[Rule, ...] = ()
    default_decision: Decision = Decision.ALLOW
    default_message: str = "No rule matched"
    source: str = field(default="<rules>", compare=False)
    on_rule_error: Decision = Decision.DENY
    # A request crafted to make a rule fail can be sent thousands of times a second: one warning per
    # interval, counting the others, keeps the log readable and cheap.
    _failures: RateLimitedLog = field(
        default_factory=lambda: RateLimitedLog(logger), init=False, compare=False, repr=False
    )
    # The settled answer of each rule (in the order of ``rules``; None for a modify) and of the default.
    _settled: tuple[_Settled | None, ...] = field(init=False, compare=False, repr=False)
    _default: _Settled = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if Decision.MODIFY in (self.default_decision, self.on_rule_error):
            raise ValueError(
                "the default decision and on_rule_error are 'allow' or 'deny': there is nothing to modify"
            )
        settled = tuple(
            None
            if rule.decision is Decision.MODIFY
            else _Settled(rule.decision, rule.message, rule.reason_codes, rule.name)
            for rule in self.rules
        )
        object.__setattr__(self, "_settled", settled)
        object.__setattr__(self, "_default", _Settled(self.default_decision, self.default_message))

    def decide(self, request: AOSRequest, wire: JSONObject | None = None) -> AOSSuccessResult:
        """The decision on ``request``: the first matching rule's, a failing rule's, or the default.

        ``wire`` is ``request`` as JSON in the text's shape when the caller has it already (the server: the
        normalized body it validated ``request`` from), which saves dumping the model again.
        """
        outcome = self._outcome(request, wire)
        return outcome.result() if isinstance(outcome, _Settled) else outcome

    def decide_json(self, request: AOSRequest, wire: JSONObject | None = None) -> bytes:
        """:meth:`decide`'s answer as the JSON text the server sends (compact, ASCII).

        The common answers -- a rule matched and nothing failed, or no rule matched -- never vary, so their
        text is made once, when the rules are. A subclass that overrides :meth:`decide` is asked through it.
        """
        if type(self).decide is not GuardianRules.decide:
            return encode_json(dump(self.decide(request, wire)))
        outcome = self._outcome(request, wire)
        return outcome.json if isinstance(outcome, _Settled) else encode_json(dump(outcome))

    def _outcome(self, request: AOSRequest, wire: JSONObject | None) -> AOSSuccessResult | _Settled:
        outcome = self._decide(request, dump(request) if wire is None else wire)
        failed = (
            outcome.data.get("ruleErrors") if isinstance(outcome, AOSSuccessResult) and outcome.data else None
        )
        if failed:
            # An error's text may carry the request's member names (an invalid modified request's path).
            self._failures.warning(
                "guardian rules failed on a %s request: %s", request.method, logged(failed)
            )
        return outcome

    def _decide(self, request: AOSRequest, wire: JSONObject) -> AOSSuccessResult | _Settled:
        # Every rule reads the same values: checked for the engine once per request, not once per rule, and
        # not at all when the server vouches for this very request.
        variables = _bind(
            {"method": request.method, "params": wire["params"]},
            representable=("params",) if UNESCAPED_JSON.get() is wire else (),
        )
        errors: list[JSONObject] = []
        for rule, settled in zip(self.rules, self._settled, strict=True):
            if not rule.applies_to(request.method):
                continue
            try:
                matched = _matches(rule, variables)
            except _RuleError as error:
                errors.append(_record(rule, error))
                if rule.decision is Decision.DENY or self.on_rule_error is Decision.DENY:
                    return _failed(rule, errors)
                continue
            if matched:
                return (
                    settled if settled is not None and not errors else _apply(rule, wire, variables, errors)
                )
        if not errors:
            return self._default
        data: JSONObject = {"ruleErrors": list(errors)}
        return AOSSuccessResult(decision=self.default_decision, message=self.default_message, data=data)


def _record(rule: Rule, error: _RuleError) -> JSONObject:
    return {"rule": rule.name, "field": error.field, "error": error.reason}


def _failed(rule: Rule, errors: list[JSONObject]) -> AOSSuccessResult:
    """The ``deny`` answered when ``rule``'s condition could not be evaluated (fail closed)."""
    if rule.decision is Decision.DENY:
        message = f"{rule.message} (denied: the rule's condition could not be evaluated)"
        reason_codes = [*rule.reason_codes, RULE_FAILED]
    else:
        message = f"Denied: the condition of rule {rule.name!r} could not be evaluated"
        reason_codes = [RULE_FAILED]
    return AOSSuccessResult(
        decision=Decision.DENY,
        message=message,
        reason_code=reason_codes,
        data={"rule": rule.name, "ruleErrors": list(errors)},
    )


def _evaluate(program: CelProgram, variables: Mapping[str, Any], field: str) -> Any:
    # Any exception counts: an engine may raise more than CelError on odd input (a RecursionError on deep
    # nesting, a MemoryError), and a rule that cannot be evaluated must fail closed, not escape as a 500.
    # The engine's own message may quote the request's values: it goes to the debug log only.
    try:
        return program.evaluate(variables)
    except Exception as error:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("guardian rule expression %s raised %s", field, logged(str(error)))
        raise _RuleError(field, f"evaluation error ({type(error).__name__})") from None


def _matches(rule: Rule, variables: Mapping[str, Any]) -> bool:
    if rule.when is None:
        return True
    value = _evaluate(rule.when, variables, "when")
    if not isinstance(value, bool):
        raise _RuleError("when", f"yielded {type(value).__name__}, not a boolean")
    return value


def _apply(
    rule: Rule, wire: JSONObject, variables: Mapping[str, Any], errors: list[JSONObject]
) -> AOSSuccessResult:
    decision, message, reason_codes = rule.decision, rule.message, list(rule.reason_codes) or None
    modified: AOSRequest | None = None
    if rule.decision is Decision.MODIFY:
        try:
            modified = _modified_request(rule, wire, variables)
        except _RuleError as error:
            errors.append(_record(rule, error))
            decision, reason_codes = Decision.DENY, [MODIFY_FAILED]
            message = f"{rule.message} (denied: the modification could not be applied)"
    data: JSONObject = {"rule": rule.name}
    if errors:
        data["ruleErrors"] = list(errors)
    return AOSSuccessResult(
        decision=decision, message=message, reason_code=reason_codes, data=data, modified_request=modified
    )


def _modified_request(rule: Rule, wire: JSONObject, variables: Mapping[str, Any]) -> AOSRequest:
    request = copy.deepcopy(wire)
    params = cast(dict[str, Any], request["params"])  # every AOS method's params is an object
    if rule.modify is not None:
        patch = _evaluate(rule.modify, variables, "modify.cel")
        if not isinstance(patch, dict):
            raise _RuleError("modify.cel", f"yielded {type(patch).__name__}, not a map")
        params.update(patch)
    for path, program in rule.set:
        _assign(params, path, _evaluate(program, variables, f"set.{path}"))
    try:
        return parse_request(request)
    except AOSRequestError as error:
        # The answer quotes the reason, whose path may hold a member name the rule took from the request.
        raise _RuleError("modify", f"the modified request is invalid: {bounded(error).message}") from None


def _assign(params: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")[1:]
    container: Any = params
    for key in parents:
        if isinstance(container, dict):
            container = container.setdefault(key, {})
        elif _is_index(container, key):
            container = container[int(key)]
        else:
            raise _RuleError(f"set.{path}", f"cannot follow {key!r}: no such map key or list index")
    if isinstance(container, dict):
        container[last] = value
    elif _is_index(container, last):
        container[int(last)] = value
    else:
        raise _RuleError(f"set.{path}", f"cannot set {last!r}: no such map key or list index")


def _is_index(container: Any, key: str) -> bool:
    # ASCII digits only: ``"²".isdigit()`` is true and ``int("²")`` raises, which escaped as an internal
    # error (no decision: the client's on_failure, not the rule, decided whether the step went on unmodified).
    return isinstance(container, list) and key.isascii() and key.isdigit() and int(key) < len(container)


# --------------------------------------------------------------------------------------------- loading


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _ModifyDoc(_Document):
    cel: str = Field(min_length=1)


class _RuleDoc(_Document):
    name: str = Field(min_length=1)
    methods: list[str] | None = Field(default=None, min_length=1)
    when: str | None = Field(default=None, min_length=1)
    decision: Decision = Field(strict=False)
    message: str
    reason_codes: list[str] | None = None
    modify: _ModifyDoc | None = None
    set: dict[str, str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _how_to_modify(self) -> _RuleDoc:
        given = [key for key in ("modify", "set") if getattr(self, key) is not None]
        if self.decision is Decision.MODIFY and len(given) != 1:
            raise ValueError(
                "a 'modify' rule needs exactly one of 'modify' (a CEL map) and 'set' (path -> CEL)"
            )
        if self.decision is not Decision.MODIFY and given:
            raise ValueError(f"'{given[0]}' only goes with 'decision: modify'")
        return self


class _RulesDoc(_Document):
    default_decision: Literal["allow", "deny"] = "allow"
    on_rule_error: Literal["allow", "deny"] = "deny"
    default_message: str = "No rule matched"
    rules: list[_RuleDoc] = Field(default_factory=list)


_Path = tuple[str | int, ...]


class _Problems:
    """Collects every problem of one rules file, each placed at the line of the field it is about."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc
        self.names = _rule_names(doc.data)
        self.found: list[SpecProblem] = []

    def add(
        self,
        path: Sequence[object],
        reason: str,
        cel: CelCompileError | None = None,
        *,
        position: tuple[int, int] | None = None,
    ) -> None:
        """Record a problem at ``path``, placed at ``position`` or else at the field (or its nearest parent)."""
        position = position or locate(self.doc.positions, path)
        if len(path) >= 2 and path[0] == "rules" and isinstance(path[1], int) and path[1] in self.names:
            reason = f"rule {self.names[path[1]]!r}: {reason}"
        self.found.append(
            SpecProblem(
                source=self.doc.source,
                field=dotted(path, self.doc.labels, indexed=True),
                reason=reason,
                line=position[0] if position else None,
                column=position[1] if position else None,
                expression_line=cel.line if cel else None,
                expression_column=cel.column if cel else None,
            )
        )


def _rule_names(data: object) -> dict[int, str]:
    rules = data.get("rules") if isinstance(data, dict) else None
    if not isinstance(rules, list):
        return {}
    return {
        index: rule["name"]
        for index, rule in enumerate(rules)
        if isinstance(rule, dict) and isinstance(rule.get("name"), str)
    }


def _compile(
    backend: CelBackend, expression: str | None, path: _Path, problems: _Problems
) -> CelProgram | None:
    if expression is None:
        return None
    try:
        return backend.compile(expression, DECLARATIONS)
    except CelCompileError as error:
        problems.add(path, f"CEL does not compile: {error.message}", error)
        return None


def _resolve_methods(patterns: list[str] | None, path: _Path, problems: _Problems) -> frozenset[str] | None:
    if patterns is None:
        return None
    resolved: set[str] = set()
    for index, pattern in enumerate(patterns):
        matched = {name for name in _DECIDED_METHODS if fnmatchcase(name, pattern)}
        if pattern == "ping":
            problems.add((*path, index), "'ping' is answered by the guardian itself, never by a rule")
        elif not matched:
            problems.add((*path, index), f"{pattern!r} is no AOS method and matches none")
        resolved |= matched
    return frozenset(resolved)


def _check_set_path(path: str, at: _Path, problems: _Problems) -> None:
    head, *rest = path.split(".")
    if head != "params" or not rest or not all(rest):
        problems.add(at, f"{path!r} is not a path under params (write e.g. params.toolCallRequest.inputs)")


def _compile_rule(doc: _RuleDoc, at: _Path, backend: CelBackend, problems: _Problems) -> Rule:
    set_programs: list[tuple[str, CelProgram]] = []
    for path, expression in (doc.set or {}).items():
        _check_set_path(path, (*at, "set", path), problems)
        program = _compile(backend, expression, (*at, "set", path), problems)
        if program is not None:
            set_programs.append((path, program))
    return Rule(
        name=doc.name,
        decision=doc.decision,
        message=doc.message,
        methods=_resolve_methods(doc.methods, (*at, "methods"), problems),
        when=_compile(backend, doc.when, (*at, "when"), problems),
        reason_codes=tuple(doc.reason_codes or ()),
        modify=_compile(backend, doc.modify.cel if doc.modify else None, (*at, "modify", "cel"), problems),
        set=tuple(set_programs),
    )


def _valid_rules(data: object, backend: CelBackend, problems: _Problems) -> list[tuple[int, _RuleDoc]]:
    """The rules of a document that failed validation which are valid on their own (with their index).

    So that every problem of the file is reported in one go: the valid rules are compiled as usual, and of
    an invalid rule (its problems are among the document's) the expressions that are text are compiled.
    """
    rules = data.get("rules") if isinstance(data, dict) else None
    valid: list[tuple[int, _RuleDoc]] = []
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        try:
            valid.append((index, _RuleDoc.model_validate(rule)))
        except ValidationError:
            for path, expression in _expressions(rule):
                _compile(backend, expression, ("rules", index, *path), problems)
    return valid


def _expressions(rule: object) -> list[tuple[_Path, str]]:
    """The CEL expressions written as text in a rule given as plain data, by their path in the rule."""
    if not isinstance(rule, dict):
        return []
    modify, set_ = rule.get("modify"), rule.get("set")
    found: list[tuple[_Path, object]] = [(("when",), rule.get("when"))]
    found += [(("modify", "cel"), modify.get("cel"))] if isinstance(modify, dict) else []
    found += [(("set", key), value) for key, value in set_.items()] if isinstance(set_, dict) else []
    return [(path, value) for path, value in found if isinstance(value, str) and value]


def parse_rules(text: str, *, source: str = "<string>", backend: CelBackend | None = None) -> GuardianRules:
    """Read and compile a rules document (YAML text).

    Raises :class:`~agentguard.errors.SpecError` ("3 problems in guardian rules file rules.yaml") listing
    every problem in file order, each with ``source``, line, column, field (``rules[2].when``), the rule's
    name and the reason, worded as spec problems are (an unknown field with "did you mean"); a CEL compile
    error also carries its position inside the expression. A rule with a schema problem is not compiled;
    the expressions of every other rule are.
    """
    read = read_yaml(text, source, empty=None, mapping=False)
    problems = _Problems(read)
    for finding in read.findings:
        problems.add(finding.path, finding.reason, position=finding.position)
    document = f"guardian rules file {source}"
    if not read.readable:
        raise SpecError(problems.found, document=document)
    doc: _RulesDoc | None = None
    try:
        doc = _RulesDoc.model_validate({} if read.data is None else read.data)
    except ValidationError as error:
        for detail in error.errors(include_url=False):
            if not read.covers(detail["loc"]):
                problems.add(*validation_reason(detail, _RulesDoc))
    backend = backend or get_backend()
    rules: list[Rule] = []
    first_index: dict[str, int] = {}
    checked = enumerate(doc.rules) if doc is not None else _valid_rules(read.data, backend, problems)
    for index, rule_doc in checked:
        at: _Path = ("rules", index)
        if rule_doc.name in first_index:
            problems.add((*at, "name"), f"the name is already used by rules[{first_index[rule_doc.name]}]")
        first_index.setdefault(rule_doc.name, index)
        rules.append(_compile_rule(rule_doc, at, backend, problems))
    if doc is None or problems.found:
        raise SpecError(in_file_order(problems.found), document=document)
    return GuardianRules(
        rules=tuple(rules),
        default_decision=Decision(doc.default_decision),
        default_message=doc.default_message,
        source=source,
        on_rule_error=Decision(doc.on_rule_error),
    )


def load_rules(path: str | os.PathLike[str], *, backend: CelBackend | None = None) -> GuardianRules:
    """Read and compile a rules file; see :func:`parse_rules`. ``OSError`` when it cannot be read."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    return parse_rules(text, source=os.fspath(path), backend=backend)
