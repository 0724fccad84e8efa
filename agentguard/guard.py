"""``Guard``: the one facade of agentguard.

A Guard holds one agent's compiled OpenAgentSpec policy and everything needed to enforce it: the registered
tools and sub-agents, reviewers, the credential resolver and, optionally, a guardian client. Users decorate
their tools with it and run their agent inside an engagement::

    from agentguard import Guard, User

    guard = Guard.from_file("examples/support-agent/agent.yaml")

    @guard.tool
    def lookup_order(order_id: str) -> dict:
        '''Look an order up by its id.'''
        return {"order_id": order_id, "status": "shipped"}

    with guard.engagement(user=User(id="u1", email="ann@corp.com")) as eng:
        lookup_order("A-1")        # checked: capability, short-circuit, restrictions, review, identity
        eng.view()["history"]["_total"]    # 1

Adapters for agent frameworks call :meth:`Guard.call` / :meth:`Guard.acall` with a tool name and inputs
instead of decorating functions; both paths run the same pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from agentguard._drivers import run_async, run_sync
from agentguard._steps import AgentInfo, StepBuilder, new_step, tool_definition
from agentguard.cel import CelBackend, get_backend
from agentguard.engagement import (
    Decision,
    EngagementState,
    EngagementStatus,
    Outcome,
    StepRecord,
    User,
    to_plain,
)
from agentguard.errors import ConfigurationError, Phase, Rule
from agentguard.guardian import GuardianClient
from agentguard.observers import Observer, Observers
from agentguard.policy._flow import (
    Flow,
    FlowContext,
    ToolCall,
    guardrail_flow,
    message_text,
    record_flow,
    report_flow,
    tool_call_flow,
)
from agentguard.policy._identity import CredentialResolver
from agentguard.policy._policy import Policy, UnknownCapability
from agentguard.policy._review import ApprovalConfig, Reviewer
from agentguard.policy._rules import Rules, Severity, SeverityMap
from agentguard.runs import Cancel, Retry, Timeout
from agentguard.spec import AgentSpec, CompiledSpec, compile_spec, is_valid_name, load_spec, load_spec_text
from agentguard.steps import MCP, KnowledgeRetrieval, Message, Step
from agentguard.telemetry._observer import GuardTelemetry, guard_observers

if TYPE_CHECKING:
    from agentguard.formats import Descriptor

__all__ = ["Engagement", "Guard"]

F = TypeVar("F", bound=Callable[..., Any])


class _Binder:
    """Binds a call's arguments to parameter names, and back, for one function.

    Most tools take plain keyword-or-positional parameters; for those the binding is a dict merge, several
    times cheaper than ``inspect.Signature.bind`` on the per-call path. Other signatures use ``bind``.
    """

    __slots__ = ("_defaults", "_names", "_required", "_signature", "_simple")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._signature = inspect.signature(fn)
        params = list(self._signature.parameters.values())
        self._simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
        self._names = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
        self._defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self._required = frozenset(p.name for p in params if p.default is p.empty)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not self._simple or len(args) > len(self._names):
            bound = self._signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)
        inputs = dict(self._defaults)
        if args:
            positional = dict(zip(self._names, args, strict=False))
            if kwargs.keys() & positional.keys():
                self._signature.bind(*args, **kwargs)  # raises the TypeError Python would raise
            inputs.update(positional)
        inputs.update(kwargs)
        if not self._required <= inputs.keys() or len(inputs) > len(self._signature.parameters):
            self._signature.bind(*args, **kwargs)  # raises the precise TypeError
        return inputs

    def to_args(self, inputs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self._simple:
            return (), dict(inputs)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        var_keyword = False
        for param in self._signature.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                var_keyword = True
            if param.name not in inputs:
                continue
            value = inputs[param.name]
            if param.kind is param.POSITIONAL_ONLY:
                args.append(value)
            elif param.kind is param.VAR_POSITIONAL:
                args.extend(value)
            elif param.kind is param.VAR_KEYWORD and isinstance(value, Mapping):
                kwargs.update(value)  # as recorded by bind(): {"extra": {...}}
            else:
                kwargs[param.name] = value
        if var_keyword:  # flat inputs from a host (``fn(**kwargs)``): names no parameter takes go to **kwargs
            for name, value in inputs.items():
                if name not in self._signature.parameters:
                    kwargs[name] = value
        return tuple(args), kwargs


@dataclass(frozen=True)
class _Registered:
    name: str
    kind: Literal["tool", "agent"]
    fn: Callable[..., Any]
    binder: _Binder
    needs_credentials: bool
    timeout: Timeout | None = None
    retry: Retry | None = None


def default_tool_name(fn: Callable[..., Any]) -> str:
    """The spec name a function gets by default: its ``__name__`` with ``_`` turned into ``-``."""
    return getattr(fn, "__name__", type(fn).__name__).replace("_", "-")


class Engagement:
    """One conversation of one user with the guarded agent: the Engagement record plus what acts on it.

    Use it as a context manager (``with`` or ``async with``): inside, guarded tools called from this thread or
    asyncio task are recorded in it. Engagements are isolated per thread and per task (``contextvars``).
    """

    def __init__(self, guard: Guard, state: EngagementState) -> None:
        self.guard = guard
        self.state = state
        self._lock = threading.Lock()
        self._depth = 0  # how many `with eng:` blocks are open, in any thread or task
        self._turn: list[Any] | None = None  # the observers' tokens of the current turn
        self._closed = False

    # -- identity and record --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def user(self) -> User | None:
        return self.state.user

    @property
    def status(self) -> EngagementStatus:
        return self.state.status

    @property
    def steps(self) -> list[StepRecord]:
        """Every step taken in this engagement, with its decisions and AOS records (guardian or not)."""
        return self.state.steps

    @property
    def decisions(self) -> list[Decision]:
        return [d for step in self.state.steps for d in step.decisions]

    def view(self) -> dict[str, Any]:
        """The Engagement exactly as CEL assertions see it: ``started_at``, ``user``, ``recent``, ``history``."""
        return self.state.view()

    def exposed(self) -> dict[str, Any]:
        """The ``exposes`` selections evaluated now (``None`` for a selection that cannot be evaluated)."""
        return {
            key: assertion.select(self.state.bindings(assertion.plan))
            for key, assertion in self.guard.policy.exposes.items()
        }

    # -- guardrails -----------------------------------------------------------------------------------

    def check_input(self, text: str) -> str:
        """Run the input guardrail on user input before any model sees it; return the text to pass on."""
        return run_sync(guardrail_flow(self.guard._flow, self.state, Phase.INPUT, text))

    async def acheck_input(self, text: str) -> str:
        return await run_async(guardrail_flow(self.guard._flow, self.state, Phase.INPUT, text))

    def check_output(self, text: str) -> str:
        """Run the output guardrail on a model answer before the user sees it; return the text to pass on."""
        return run_sync(guardrail_flow(self.guard._flow, self.state, Phase.OUTPUT, text))

    async def acheck_output(self, text: str) -> str:
        return await run_async(guardrail_flow(self.guard._flow, self.state, Phase.OUTPUT, text))

    # -- other steps ----------------------------------------------------------------------------------

    def _report_flow(self, step: Step) -> Flow[dict[str, Any] | None]:
        ctx, state = self.guard._flow, self.state
        builder = ctx.steps
        if isinstance(step, Message):
            message = step

            def build(record: StepRecord) -> dict[str, Any]:
                record.payload["role"] = message.role
                return builder.message(
                    state,
                    record,
                    message.role,
                    message.text,
                    citation=message.citation,
                    reasoning=message.reasoning,
                )

        elif isinstance(step, MCP):
            params = step.params()

            def build(record: StepRecord) -> dict[str, Any]:
                return builder.passthrough(step.method, params)

        else:
            params = step.params()

            def build(record: StepRecord) -> dict[str, Any]:
                return builder.generic(state, record, step.method, params)

        phase = Phase.INPUT if getattr(step, "role", "user") == "user" else Phase.OUTPUT
        return report_flow(ctx, state, step.method, build, name=getattr(step, "role", None), phase=phase)

    def record_call(
        self,
        name: str,
        inputs: Mapping[str, Any],
        outputs: Any = None,
        *,
        error: BaseException | str | None = None,
        call_id: str | None = None,
        kind: Literal["tool", "agent"] = "tool",
    ) -> StepRecord:
        """Record a call that already happened, outside the pipeline (observe-only hosts, e.g. callbacks).

        Nothing is checked or reviewed (it is too late for that); the call enters ``recent``/``history`` and
        the step records, and an observe-mode guardian is told. A call that raised is recorded with
        ``outputs: null``. Use :meth:`Guard.call` to *guard* a call.
        """
        return record_flow(self.guard._flow, self.state, name, dict(inputs), outputs, error, call_id, kind)

    def report(self, step: Step) -> dict[str, Any] | None:
        """Record a step (see :mod:`agentguard.steps`) and put it to the guardian when one is configured.

        Returns the params of the guardian's replacement request on ``modify``, else ``None``; raises
        :class:`~agentguard.GuardianDenied` on ``deny`` -- then the step must not be carried out.
        """
        return run_sync(self._report_flow(step))

    async def areport(self, step: Step) -> dict[str, Any] | None:
        return await run_async(self._report_flow(step))

    def report_message(
        self,
        role: Literal["user", "agent", "system"],
        text: str,
        *,
        citation: Sequence[Mapping[str, Any]] = (),
        reasoning: str | None = None,
    ) -> str:
        """Record a ``steps/message`` without running a guardrail; returns the text to use (guardian-modified)."""
        params = self.report(Message(role, text, citation, reasoning))
        return (message_text(params) or text) if params is not None else text

    async def areport_message(
        self,
        role: Literal["user", "agent", "system"],
        text: str,
        *,
        citation: Sequence[Mapping[str, Any]] = (),
        reasoning: str | None = None,
    ) -> str:
        params = await self.areport(Message(role, text, citation, reasoning))
        return (message_text(params) or text) if params is not None else text

    def report_knowledge_retrieval(
        self, query: str | None, results: Sequence[Mapping[str, Any]], keywords: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        """Shorthand for ``report(KnowledgeRetrieval(...))``."""
        return self.report(KnowledgeRetrieval(results=results, query=query, keywords=keywords))

    async def areport_knowledge_retrieval(
        self, query: str | None, results: Sequence[Mapping[str, Any]], keywords: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        return await self.areport(KnowledgeRetrieval(results=results, query=query, keywords=keywords))

    # -- lifecycle ------------------------------------------------------------------------------------

    def new_turn(self) -> str:
        """Start a new turn (one user input and what the agent does about it); returns the AOS ``turnId``."""
        self._end_turn()
        turn_id = self.state.new_turn()
        self._start_turn()
        return turn_id

    def start_turn(self) -> str:
        """Start a turn unless one is open; returns the AOS ``turnId`` (for hosts that run turn by turn)."""
        if self._turn is None:
            return self.new_turn()
        return self.state.turn_id

    def end_turn(self) -> None:
        """End the open turn without starting another (a host's run is over until the next one)."""
        self._end_turn()

    def _start_turn(self) -> None:
        observers = self.guard._flow.observers
        self._turn = observers.turn_started(self.state) if observers else []

    def _end_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn:
            self.guard._flow.observers.turn_ended(self.state, turn)

    def _finish(self) -> bool:
        """Mark the engagement closed; ``True`` if an observe-mode guardian must now be flushed."""
        self._end_turn()
        was_open = self._closed is False
        self._closed = True
        self.state.stop(EngagementStatus.CLOSED, "engagement closed")
        if was_open and self.guard._flow.observers:
            self.guard._flow.observers.engagement_ended(self.state)
        guardian = self.guard.guardian
        return guardian is not None and guardian.mode == "observe"

    def close(self) -> None:
        """End the engagement: later steps are refused; an observe-mode guardian is flushed."""
        if self._finish() and self.guard.guardian is not None:
            self.guard.guardian.flush()

    async def aclose(self) -> None:
        if self._finish() and self.guard.guardian is not None:
            await self.guard.guardian.aflush()

    def _begin_cancel(self, cancel: Cancel, before: object) -> bool:
        """Apply a cancellation once ``before_cancel`` answered ``before``; ``False`` when it refused."""
        step = new_step(self.state, "agentguard/cancel", name="engagement")
        flow = self.guard._flow
        if before is False:
            reason = f"cancellation refused by before_cancel: {cancel.reason}"
            flow.decide(self.state, step, Decision(Rule.ENGAGEMENT, Outcome.ALLOW, None, reason))
            return False
        self.state.cancel_graceful = cancel.graceful
        self.state.stop(EngagementStatus.CANCELLED, cancel.reason)
        reason = f"cancelled ({'graceful' if cancel.graceful else 'immediate'}): {cancel.reason}"
        flow.decide(self.state, step, Decision(Rule.ENGAGEMENT, Outcome.DENY, None, reason))
        return True

    def _end_cancel(self, cancel: Cancel, drained: bool) -> None:
        if not drained:
            step = self.state.steps[-1]
            reason = f"{self.state.in_flight} call(s) still running after {cancel.graceful_timeout_ms} ms"
            self.guard._flow.decide(self.state, step, Decision(Rule.ENGAGEMENT, Outcome.WARN, None, reason))
        if cancel.after_cancel is not None:
            cancel.after_cancel()

    def cancel(self, cancel: str | Cancel = "cancelled") -> bool:
        """Cancel the engagement (OS Protocol ``Cancel``): it refuses every later step.

        Returns ``False`` when ``before_cancel`` refused. ``graceful`` (default) waits up to
        ``graceful_timeout_ms`` for calls in flight, whose results are then delivered; otherwise their
        results are withheld when they finish.
        """
        cancel = Cancel(cancel) if isinstance(cancel, str) else cancel
        before = cancel.before_cancel() if cancel.before_cancel is not None else True
        if inspect.isawaitable(before):
            if inspect.iscoroutine(before):
                before.close()
            raise ConfigurationError("before_cancel is async: use `await eng.acancel(...)`")
        if not self._begin_cancel(cancel, before):
            return False
        drained = True
        if cancel.graceful:
            timeout = None if cancel.graceful_timeout_ms is None else cancel.graceful_timeout_ms / 1000
            drained = self.state.wait_idle(timeout)
        self._end_cancel(cancel, drained)
        return True

    async def acancel(self, cancel: str | Cancel = "cancelled") -> bool:
        """Async twin of :meth:`cancel` (``before_cancel`` may be async)."""
        cancel = Cancel(cancel) if isinstance(cancel, str) else cancel
        before = cancel.before_cancel() if cancel.before_cancel is not None else True
        if inspect.isawaitable(before):
            before = await before
        if not self._begin_cancel(cancel, before):
            return False
        drained = True
        if cancel.graceful:
            timeout = None if cancel.graceful_timeout_ms is None else cancel.graceful_timeout_ms / 1000
            drained = await asyncio.to_thread(self.state.wait_idle, timeout)
        self._end_cancel(cancel, drained)
        return True

    @contextlib.contextmanager
    def activate(self) -> Iterator[Engagement]:
        """Make this the current engagement for a block, without starting or ending it.

        For hosts that run one engagement's tool calls in worker threads or across several invocations:
        ``with eng.activate(): guard.call(...)``. (``with eng:`` is the engagement's whole life: it starts the
        first turn and closes the engagement when the outermost ``with`` ends.)
        """
        token = self.guard._current.set(self)
        try:
            yield self
        finally:
            self.guard._current.reset(token)

    def _enter(self) -> None:
        guard = self.guard
        guard._tokens.set((*guard._tokens.get(), guard._current.set(self)))
        with self._lock:
            self._depth += 1
            outermost = self._depth == 1
        if outermost and self.state.active and self._turn is None:
            self._start_turn()

    def _leave(self) -> bool:
        """Undo one ``_enter`` in this context; ``True`` when the outermost ``with`` has ended."""
        guard = self.guard
        tokens = guard._tokens.get()
        guard._current.reset(tokens[-1])
        guard._tokens.set(tokens[:-1])
        with self._lock:
            self._depth -= 1
            return self._depth == 0

    def __enter__(self) -> Engagement:
        self._enter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._leave():
            self.close()

    async def __aenter__(self) -> Engagement:
        self._enter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._leave():
            await self.aclose()

    def __repr__(self) -> str:
        return f"<Engagement {self.id} {self.status.value} calls={self.state.total}>"


class Guard:
    """Enforces one agent's OpenAgentSpec around its tools, in process.

    Options:

    ``reviewers``
        reviewer id (as named by ``require_review``) → callable taking a :class:`~agentguard.ReviewRequest`
        and returning an :class:`~agentguard.Approval` or ``bool``.
    ``approval`` / ``approvals``
        the default :class:`~agentguard.ApprovalConfig`, and per-reviewer overrides.
    ``credential_resolver``
        turns a user or static identity into credentials for a tool (see :mod:`agentguard.policy`).
    ``unknown_capability``
        what to do with a call that is neither a capability nor a guardrail tool: ``"deny"`` (default),
        ``"allow"``, or ``"observe"`` (allow and record a warning).
    ``auto_engagement``
        when true, a guarded tool called outside an engagement opens a one-call engagement instead of
        refusing to run. Off by default: a loop cannot be detected across separate engagements.
    ``guardian``
        a :class:`~agentguard.guardian.GuardianClient` asked about every step (enforce or observe mode).
    ``agent``
        :class:`AgentInfo` fields of the AOS agent descriptor that the spec does not carry.
    ``short_circuit_max_block``
        the longest repeated block of calls the short-circuit detector looks for (default 100).
    ``cel_backend``
        ``"cel-expr-python"`` (default), ``"cel-python"``, or a backend object.
    ``observers``
        :class:`~agentguard.observers.Observer` objects told about every turn, step and decision.
    ``severity``
        per-rule severity, ``error`` (blocks), ``warning`` or ``info`` (record only: shadow mode); keys like
        ``"restriction"``, ``"restriction:refund"``, ``"rule:<name>"`` (see :mod:`agentguard.policy._rules`).
    ``telemetry``
        OpenTelemetry spans, decision events and metrics of every turn, step and decision (see
        :mod:`agentguard.telemetry`): ``True`` (default; nothing is exported until an SDK is configured),
        ``False``, or a :class:`~agentguard.telemetry.GuardTelemetry` of one's own.
    ``capture_content``
        record tool arguments and results and message text on spans (opt-in; ``None`` reads
        ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``). A withheld output is never recorded.
    ``tracer_provider`` / ``meter_provider``
        where the default telemetry records (default: the global OpenTelemetry providers).
    """

    def __init__(
        self,
        spec: AgentSpec | CompiledSpec,
        *,
        cel_backend: str | CelBackend | None = None,
        reviewers: Mapping[str, Reviewer] | None = None,
        approval: ApprovalConfig | None = None,
        approvals: Mapping[str, ApprovalConfig] | None = None,
        credential_resolver: CredentialResolver | None = None,
        unknown_capability: UnknownCapability = "deny",
        auto_engagement: bool = False,
        guardian: GuardianClient | None = None,
        agent: AgentInfo | None = None,
        short_circuit_max_block: int = 100,
        observers: Iterable[Observer] = (),
        severity: Mapping[str, Severity] | None = None,
        source: str | None = None,
        telemetry: bool | GuardTelemetry = True,
        capture_content: bool | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        if unknown_capability not in ("deny", "allow", "observe"):
            raise ConfigurationError(
                f"unknown_capability must be deny, allow or observe, not {unknown_capability!r}"
            )
        backend = (
            cel_backend
            if cel_backend is None or not isinstance(cel_backend, str)
            else get_backend(cel_backend)
        )
        if isinstance(spec, CompiledSpec):
            compiled = spec
        else:
            compiled = compile_spec(spec, backend or get_backend(), source=source)
        self.compiled = compiled
        self.policy = Policy(compiled)
        self.guardian = guardian
        self._agent_info = agent or AgentInfo()
        self.auto_engagement = auto_engagement
        self._registry: dict[str, _Registered] = {}
        self._agents: dict[str, _Registered] = {}
        self._reviewers: dict[str, Reviewer] = dict(reviewers or {})
        self._approvals: dict[str, ApprovalConfig] = dict(approvals or {})
        self._agent_descriptor: dict[str, Any] | None = None
        self._current: contextvars.ContextVar[Engagement | None] = contextvars.ContextVar(
            f"agentguard_engagement_{id(self)}", default=None
        )
        # The tokens of the `with eng:` blocks open in each context, innermost last, so that every block
        # resets the value it set in its own thread or task.
        self._tokens: contextvars.ContextVar[tuple[contextvars.Token[Engagement | None], ...]] = (
            contextvars.ContextVar(f"agentguard_tokens_{id(self)}", default=())
        )
        telemetry_observers = guard_observers(
            telemetry,
            agent_name=self._agent_info.name or compiled.spec.name,
            agent_id=self._agent_info.id or compiled.spec.name,
            guardian=guardian,
            capture_content=capture_content,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        self._own_telemetry = telemetry is True
        self.telemetry: GuardTelemetry | None = next(
            (o for o in telemetry_observers if isinstance(o, GuardTelemetry)), None
        )
        """This guard's OpenTelemetry observer (``None`` with ``telemetry=False``); adapters use its
        :meth:`~agentguard.telemetry.GuardTelemetry.chat_span` around the model calls they see."""
        self._flow = FlowContext(
            policy=self.policy,
            steps=StepBuilder(self.agent_descriptor),
            tool_names=self._registry,
            unknown_capability=unknown_capability,
            short_circuit_max_block=short_circuit_max_block,
            reviewers=self._reviewers,
            approval=approval or ApprovalConfig(),
            approvals=self._approvals,
            credential_resolver=credential_resolver,
            guardian=guardian,
            tools={name: reg.fn for name, reg in self._registry.items()},
            observers=Observers([*telemetry_observers, *observers]),
            severity=SeverityMap(severity),
        )
        self.rules: Rules = self._flow.rules
        """Python rules beside the spec's CEL ones: ``@guard.rules.rule("name", phase=..., capabilities=...)``."""

    # -- construction ---------------------------------------------------------------------------------

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        descriptor: str | os.PathLike[str] | Descriptor | None = None,
        **options: Any,
    ) -> Guard:
        """Load, validate and compile an OpenAgentSpec file (a :class:`~agentguard.SpecError` lists every problem).

        ``descriptor``: an Agent Spec, Agent Manifest or OS Protocol app file (or a loaded
        :class:`~agentguard.formats.Descriptor`) that describes the agent to guardians and adds the checks it
        implies (review gates, schema checks, guardian and audit settings); see :mod:`agentguard.formats`.
        Options given here win over the descriptor's.
        """
        backend = options.pop("cel_backend", None)
        backend_obj = get_backend(backend) if isinstance(backend, str) or backend is None else backend
        if descriptor is None:
            return cls(load_spec(path, backend=backend_obj), cel_backend=backend_obj, **options)
        from agentguard.formats import Descriptor, load_descriptor  # layer 7, loaded only when asked for

        loaded = descriptor if isinstance(descriptor, Descriptor) else load_descriptor(descriptor)
        guard = cls(
            load_spec(path, backend=backend_obj),
            cel_backend=backend_obj,
            **{**loaded.guard_options(), **options},
        )
        loaded.apply(guard)
        return guard

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<string>", **options: Any) -> Guard:
        """Like :meth:`from_file`, from YAML text."""
        backend = options.pop("cel_backend", None)
        backend_obj = get_backend(backend) if isinstance(backend, str) or backend is None else backend
        return cls(
            load_spec_text(text, backend=backend_obj, source=source), cel_backend=backend_obj, **options
        )

    @property
    def agent_info(self) -> AgentInfo:
        """The AOS ``Agent`` descriptor fields the spec does not carry (name, version, provider, model, ...)."""
        return self._agent_info

    @agent_info.setter
    def agent_info(self, info: AgentInfo) -> None:
        self._agent_info = info
        self._agent_descriptor = None  # rebuilt on next use
        if self.telemetry is not None and self._own_telemetry:  # spans name the agent as guardians see it
            self.telemetry.agent_name = info.name or self.compiled.spec.name
            self.telemetry.agent_id = info.id or self.compiled.spec.name

    @property
    def spec(self) -> AgentSpec:
        return self.compiled.spec

    @property
    def name(self) -> str:
        return self.compiled.spec.name

    @property
    def retain_memory(self) -> bool:
        """``lifespan.retain_memory``: may a host carry model context from one engagement to the next?"""
        return self.policy.retain_memory

    # -- registration ---------------------------------------------------------------------------------

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        needs_credentials: bool = False,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        needs_credentials: bool = False,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> F | Callable[[F], F]:
        """Guard a tool function. The wrapper keeps the signature, docstring and type hints; sync or async.

        The spec name defaults to the function name with ``_`` turned into ``-`` (``send_email`` →
        ``send-email``). ``needs_credentials=True``: the tool is not called without resolved credentials.
        ``timeout`` / ``retry``: OS Protocol run control for each call (see :mod:`agentguard.runs`).
        """

        def decorate(func: F) -> F:
            self.register(
                name or default_tool_name(func),
                func,
                needs_credentials=needs_credentials,
                timeout=timeout,
                retry=retry,
            )
            return self._wrap(func, name or default_tool_name(func), "tool")

        return decorate(fn) if fn is not None else decorate

    @overload
    def agent(self, fn: F, /) -> F: ...

    @overload
    def agent(self, fn: None = None, /, *, name: str | None = None) -> Callable[[F], F]: ...

    def agent(self, fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
        """Guard a callable that runs a sub-agent. It is a capability like a tool and recorded the same way."""

        def decorate(func: F) -> F:
            self.register(name or default_tool_name(func), func, kind="agent")
            return self._wrap(func, name or default_tool_name(func), "agent")

        return decorate(fn) if fn is not None else decorate

    def register(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        kind: Literal["tool", "agent"] = "tool",
        needs_credentials: bool = False,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> None:
        """Register ``fn`` under a spec name without wrapping it (adapters, guardrail tools)."""
        if not is_valid_name(name):
            raise ConfigurationError(
                f"{kind} name {name!r} is not a valid OpenAgentSpec name (RFC 1123: lowercase letters, digits, "
                "'-' and '.', alphanumeric at both ends); pass name=... to choose one"
            )
        table = self._registry if kind == "tool" else self._agents
        existing = table.get(name)
        if existing is not None and existing.fn is not fn:
            raise ConfigurationError(f"a {kind} named {name!r} is already registered with this guard")
        table[name] = _Registered(name, kind, fn, _Binder(fn), needs_credentials, timeout, retry)
        if kind == "tool":
            self._flow.tools = {n: r.fn for n, r in self._registry.items()}
        self._agent_descriptor = None

    def _wrap(self, fn: F, name: str, kind: Literal["tool", "agent"]) -> F:
        reg = (self._registry if kind == "tool" else self._agents)[name]
        guard = self

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await guard._acall_registered(reg, reg.binder.bind(args, kwargs), None, None)

            async_wrapper.__agentguard__ = reg  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return guard._call_registered(reg, reg.binder.bind(args, kwargs), None, None)

        wrapper.__agentguard__ = reg  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    def add_reviewer(
        self, reviewer_id: str, reviewer: Reviewer, *, config: ApprovalConfig | None = None
    ) -> None:
        """Register who answers ``require_review: <reviewer_id>`` (and how, with ``config``)."""
        self._reviewers[reviewer_id] = reviewer
        if config is not None:
            self._approvals[reviewer_id] = config

    def reviewer(self, reviewer_id: str, *, config: ApprovalConfig | None = None) -> Callable[[F], F]:
        """Decorator form of :meth:`add_reviewer`."""

        def decorate(fn: F) -> F:
            self.add_reviewer(reviewer_id, fn, config=config)
            return fn

        return decorate

    @property
    def reviewer_ids(self) -> frozenset[str]:
        """Ids of the reviewers registered with this guard."""
        return frozenset(self._reviewers)

    def reviewer_for(self, reviewer_id: str) -> tuple[Reviewer | None, ApprovalConfig]:
        """The reviewer registered as ``reviewer_id`` (``None`` if none) and the approval config it runs under."""
        return self._reviewers.get(reviewer_id), self._approvals.get(reviewer_id, self._flow.approval)

    def required_reviewers(self) -> frozenset[str]:
        """Every reviewer id the spec's ``require_review`` fields and the added review gates name."""
        named = {
            r.require_review
            for cap in self.spec.capabilities.values()
            if cap is not None
            for r in (cap.input_restriction, cap.output_restriction)
            if r is not None and r.require_review
        }
        return frozenset(named | set(self._flow.review_gates.values()))

    def add_review_gate(self, capability: str, reviewer_id: str) -> None:
        """Ask ``reviewer_id`` before every call of ``capability`` (when the spec names no input reviewer).

        For review gates that another description of the agent implies, e.g. an Agent Spec tool with
        ``requires_confirmation: true``.
        """
        self._flow.review_gates[capability] = reviewer_id

    def add_passthrough_exceptions(self, *types: type[BaseException]) -> None:
        """Exceptions that are a host's control flow (e.g. LangGraph's interrupt), not reviewer or tool errors.

        They travel through the pipeline untouched: a pending call is rolled back, nothing is denied.
        """
        self._flow.passthrough = tuple(dict.fromkeys((*self._flow.passthrough, *types)))

    def add_observer(self, observer: Observer) -> None:
        """Add an observer of every turn, step and decision (see :mod:`agentguard.observers`)."""
        self._flow.observers.add(observer)

    # -- engagements ----------------------------------------------------------------------------------

    def engagement(
        self,
        user: User | None = None,
        *,
        engagement_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Engagement:
        """Open a new engagement (a fresh Engagement record). Use as ``with`` / ``async with``."""
        window = (self.policy.short_circuit or 1) * self._flow.short_circuit_max_block
        state = EngagementState(user=user, engagement_id=engagement_id, metadata=metadata, loop_window=window)
        return Engagement(self, state)

    def current_engagement(self) -> Engagement | None:
        """The engagement open in this thread or asyncio task, if any."""
        return self._current.get()

    def _engagement_for_call(self, name: str) -> tuple[Engagement, bool]:
        eng = self._current.get()
        if eng is not None:
            return eng, False
        if self.auto_engagement:
            return self.engagement(), True
        raise ConfigurationError(
            f"guarded {name!r} was called outside an engagement: wrap the agent run in "
            "`with guard.engagement(user=...):` (or build the Guard with auto_engagement=True)"
        )

    # -- calls ----------------------------------------------------------------------------------------

    def _tool_call(
        self, reg: _Registered, inputs: dict[str, Any], call_id: str | None, reasoning: str | None
    ) -> ToolCall:
        return ToolCall(
            reg.name,
            reg.kind,
            inputs,
            reg.fn,
            reg.binder.to_args,
            call_id,
            reg.needs_credentials,
            reasoning,
            reg.timeout,
            reg.retry,
        )

    def _call_registered(
        self, reg: _Registered, inputs: dict[str, Any], call_id: str | None, reasoning: str | None
    ) -> Any:
        eng, own = self._engagement_for_call(reg.name)
        try:
            return run_sync(
                tool_call_flow(self._flow, eng.state, self._tool_call(reg, inputs, call_id, reasoning))
            )
        finally:
            if own:
                eng.close()

    async def _acall_registered(
        self, reg: _Registered, inputs: dict[str, Any], call_id: str | None, reasoning: str | None
    ) -> Any:
        eng, own = self._engagement_for_call(reg.name)
        try:
            flow = tool_call_flow(self._flow, eng.state, self._tool_call(reg, inputs, call_id, reasoning))
            return await run_async(flow)
        finally:
            if own:
                eng.close()

    def _adhoc(
        self,
        name: str,
        fn: Callable[..., Any] | None,
        kind: Literal["tool", "agent"],
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> _Registered:
        table = self._registry if kind == "tool" else self._agents
        reg = table.get(name)
        marked = getattr(fn, "__agentguard__", None)
        if reg is not None and (fn is None or reg.fn is fn or marked is reg):
            pass
        elif fn is None:
            raise ConfigurationError(f"no {kind} named {name!r} is registered with this guard")
        elif isinstance(marked, _Registered):  # a @guard.tool function: use the undecorated function
            reg = marked
        elif reg is not None:  # a host's runner for a registered tool: its settings stay, the host runs it
            reg = dataclasses.replace(reg, fn=fn, binder=_Binder(fn))
        else:
            reg = _Registered(name, kind, fn, _Binder(fn), False)
        if timeout is not None or retry is not None:
            reg = dataclasses.replace(reg, timeout=timeout or reg.timeout, retry=retry or reg.retry)
        return reg

    def call(
        self,
        name: str,
        inputs: Mapping[str, Any],
        fn: Callable[..., Any] | None = None,
        *,
        kind: Literal["tool", "agent"] = "tool",
        call_id: str | None = None,
        reasoning: str | None = None,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> Any:
        """Run one tool or sub-agent call through the pipeline (for adapters).

        ``fn`` is called with ``inputs`` as keyword arguments (or the registered function of that name when
        ``fn`` is omitted). A ``@guard.tool`` function passed here is checked once, not twice. ``call_id`` is
        the host's id for the call: a host that re-runs a call after a paused review gets the reviewed
        result without the tool running again. ``timeout`` / ``retry`` override the registered ones.
        """
        reg = self._adhoc(name, fn, kind, timeout, retry)
        return self._call_registered(reg, dict(inputs), call_id, reasoning)

    async def acall(
        self,
        name: str,
        inputs: Mapping[str, Any],
        fn: Callable[..., Any] | None = None,
        *,
        kind: Literal["tool", "agent"] = "tool",
        call_id: str | None = None,
        reasoning: str | None = None,
        timeout: Timeout | None = None,  # noqa: ASYNC109 - an OS Protocol Timeout for the tool, not for acall
        retry: Retry | None = None,
    ) -> Any:
        """Async twin of :meth:`call`; ``fn`` may be sync or async."""
        reg = self._adhoc(name, fn, kind, timeout, retry)
        return await self._acall_registered(reg, dict(inputs), call_id, reasoning)

    # -- AOS descriptor -------------------------------------------------------------------------------

    def agent_descriptor(self) -> dict[str, Any]:
        """The AOS ``Agent`` object describing this agent to guardians (cached; rebuilt on registration)."""
        if self._agent_descriptor is None:
            spec, info = self.compiled.spec, self.agent_info
            descriptor: dict[str, Any] = {
                "name": info.name or spec.name,
                "id": info.id or spec.name,
                "description": info.description or spec.description,
                "instructions": info.instructions or spec.intent,
                "version": info.version,
                "provider": {"name": info.provider_name or spec.owner, "url": info.provider_url},
                "tools": self._tool_definitions(info),
            }
            if info.model:
                descriptor["model"] = to_plain(info.model)
            if info.mcp_servers:
                descriptor["mcpServers"] = [to_plain(m) for m in info.mcp_servers]
            if info.resources:
                descriptor["resources"] = [to_plain(r) for r in info.resources]
            if info.organization:
                descriptor["organization"] = to_plain(info.organization)
            if info.metadata:
                descriptor["metadata"] = to_plain(info.metadata)
            self._agent_descriptor = descriptor
        return self._agent_descriptor

    def _tool_definitions(self, info: AgentInfo) -> list[dict[str, Any]]:
        """Declared tool definitions (from a descriptor) win over those read from Python signatures."""
        declared = {str(t["id"]): to_plain(t) for t in info.tools}
        derived = [
            tool_definition(r.name, r.fn, kind=r.kind)
            for r in self._iter_registered()
            if r.name not in declared
        ]
        return [*declared.values(), *derived]

    def _iter_registered(self) -> Iterable[_Registered]:
        yield from self._registry.values()
        yield from self._agents.values()

    def __repr__(self) -> str:
        return f"<Guard {self.name!r} tools={sorted(self._registry)} agents={sorted(self._agents)}>"
