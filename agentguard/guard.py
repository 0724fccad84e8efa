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

import functools
import inspect
import os
import secrets
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from agentguard._binding import Binder, Registered, default_tool_name
from agentguard.cel import CelBackend, get_backend
from agentguard.engagement import Engagement
from agentguard.errors import ConfigurationError
from agentguard.guardian import GuardianClient
from agentguard.observers import Observer, Observers
from agentguard.pipeline import (
    AgentInfo,
    Reasoning,
    Runtime,
    StepBuilder,
    answers_checked,
    arun_tool_call,
    run_tool_call,
    tool_definition,
)
from agentguard.policy._identity import CredentialResolver
from agentguard.policy._policy import Policy, UnknownCapability
from agentguard.policy._review import ApprovalConfig, Reviewer
from agentguard.policy._rules import Rules, Severity, SeverityMap
from agentguard.record import EngagementState, Journal, User, ValueLimits, to_plain
from agentguard.runs import Retry, Timeout
from agentguard.spec import AgentSpec, CompiledSpec, compile_spec, is_valid_name, load_spec, load_spec_text
from agentguard.stores import MemoryStore
from agentguard.telemetry._observer import GuardTelemetry, guard_observers

if TYPE_CHECKING:
    from agentguard.formats import Descriptor

__all__ = ["Engagement", "Guard"]

F = TypeVar("F", bound=Callable[..., Any])


def _backend(backend: str | CelBackend | None) -> CelBackend:
    """A CEL backend object from a ``cel_backend`` option: a name, a backend, or ``None`` (the default)."""
    return backend if backend is not None and not isinstance(backend, str) else get_backend(backend)


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
    ``credential_sets``
        the names of the credential sets this deployment provides. When given, every ``static_identity`` of
        the spec must be one of them, or no engagement starts (a typo would otherwise surface as a tool
        running with credentials nobody issued). ``None`` (default): not checked.
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
    ``value_limits``
        how deep a tool's inputs and outputs may nest and how many values they may hold
        (:class:`~agentguard.record.ValueLimits`: 100 levels, 1,000,000 values by default); a call beyond
        them is denied, an output withheld, both recorded.
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
        credential_sets: Collection[str] | None = None,
        unknown_capability: UnknownCapability = "deny",
        auto_engagement: bool = False,
        guardian: GuardianClient | None = None,
        agent: AgentInfo | None = None,
        short_circuit_max_block: int = 100,
        value_limits: ValueLimits | None = None,
        observers: Iterable[Observer] = (),
        severity: Mapping[str, Severity] | None = None,
        source: str | None = None,
        telemetry: bool | GuardTelemetry = True,
        capture_content: bool | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        store: MemoryStore | Journal | None = None,
    ) -> None:
        if store is not None and not isinstance(store, MemoryStore | Journal):
            raise ConfigurationError(
                f"store must be a MemoryStore or a Journal (RedisStore, ...), not {type(store).__name__}"
            )
        self.store: MemoryStore | Journal = store if store is not None else MemoryStore()
        """Where engagements are kept: this process's memory (default), or a store shared by processes."""
        if value_limits is not None and not isinstance(value_limits, ValueLimits):
            raise ConfigurationError(f"value_limits must be a ValueLimits, not {type(value_limits).__name__}")
        if unknown_capability not in ("deny", "allow", "observe"):
            raise ConfigurationError(
                f"unknown_capability must be deny, allow or observe, not {unknown_capability!r}"
            )
        compiled = (
            spec
            if isinstance(spec, CompiledSpec)
            else compile_spec(spec, _backend(cel_backend), source=source)
        )
        self.compiled = compiled
        self.policy = Policy(compiled)
        self._agent_info = agent or AgentInfo()
        self.auto_engagement = auto_engagement
        self._registry: dict[str, Registered] = {}
        self._agents: dict[str, Registered] = {}
        self._reviewers: dict[str, Reviewer] = dict(reviewers or {})
        self._approvals: dict[str, ApprovalConfig] = dict(approvals or {})
        self._agent_descriptor: dict[str, Any] | None = None
        self._missing: tuple[str, ...] | None = None  # see missing_configuration(); None: not computed yet
        self._credential_sets = frozenset(credential_sets) if credential_sets is not None else None
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
        self._runtime = Runtime(
            policy=self.policy,
            steps=StepBuilder(self.agent_descriptor),
            unknown_capability=unknown_capability,
            short_circuit_max_block=short_circuit_max_block,
            value_limits=value_limits or ValueLimits(),
            reviewers=self._reviewers,
            approval=approval or ApprovalConfig(),
            approvals=self._approvals,
            credential_resolver=credential_resolver,
            guardian=guardian,
            tools=self._registry,
            observers=Observers([*telemetry_observers, *observers]),
            severity=SeverityMap(severity),
            store=self.store,
        )
        self.rules: Rules = self._runtime.rules
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
        backend = _backend(options.pop("cel_backend", None))
        compiled = load_spec(path, backend=backend)
        if descriptor is None:
            return cls(compiled, cel_backend=backend, **options)
        from agentguard.formats import Descriptor, load_descriptor  # layer 7, loaded only when asked for

        loaded = descriptor if isinstance(descriptor, Descriptor) else load_descriptor(descriptor)
        guard = cls(compiled, cel_backend=backend, **{**loaded.guard_options(), **options})
        loaded.apply(guard)
        return guard

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<string>", **options: Any) -> Guard:
        """Like :meth:`from_file`, from YAML text."""
        backend = _backend(options.pop("cel_backend", None))
        return cls(load_spec_text(text, backend=backend, source=source), cel_backend=backend, **options)

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
    def guardian(self) -> GuardianClient | None:
        """The guardian asked about every step, if any.

        Settable: a guardian set (or removed) after the guard was built is asked (or not) from the next step
        on. A plain attribute here would let ``guard.guardian = client`` look configured and ask nobody.
        """
        return self._runtime.guardian

    @guardian.setter
    def guardian(self, client: GuardianClient | None) -> None:
        self._runtime.guardian = client

    @property
    def checks_answers(self) -> bool:
        """Whether :meth:`Engagement.check_output` may withhold or replace a model answer (an output
        guardrail, a guardian). A host that streams answers to the user holds each one until that check has
        let it out; when nothing checks answers, streaming them as they are made loses nothing."""
        return answers_checked(self._runtime)

    @property
    def spec(self) -> AgentSpec:
        return self.compiled.spec

    @property
    def name(self) -> str:
        return self.compiled.spec.name

    @property
    def unknown_capability(self) -> UnknownCapability:
        """What this guard does with a call that is neither a capability nor a guardrail tool."""
        return self._runtime.unknown_capability

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
        """Register ``fn`` under a spec name without wrapping it (adapters, guardrail tools).

        ``timeout`` / ``retry``: OS Protocol run control (:mod:`agentguard.runs`) for each call, and for each
        run of a guardrail tool, whose timeout fails its guardrail (a late answer is never judged).
        """
        if not is_valid_name(name):
            raise ConfigurationError(
                f"{kind} name {name!r} is not a valid OpenAgentSpec name (RFC 1123: lowercase letters, digits, "
                "'-' and '.', alphanumeric at both ends); pass name=... to choose one"
            )
        table = self._registry if kind == "tool" else self._agents
        existing = table.get(name)
        if existing is not None and existing.fn is not fn:
            raise ConfigurationError(f"a {kind} named {name!r} is already registered with this guard")
        table[name] = Registered(name, kind, fn, Binder.of(fn), needs_credentials, timeout, retry)
        self._agent_descriptor = None
        self._missing = None

    def _wrap(self, fn: F, name: str, kind: Literal["tool", "agent"]) -> F:
        reg = (self._registry if kind == "tool" else self._agents)[name]
        guard = self

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await guard._acall_registered(reg, reg.binder.bind(args, kwargs), None, None)

            async_wrapper.__agentguard__ = reg  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        runtime, bind, exact = self._runtime, reg.binder.bind, reg.binder.exact
        current = runtime.current

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # bind's common call (keywords naming each parameter once: its own fresh dict is the inputs)
            inputs = kwargs if not args and kwargs.keys() == exact else bind(args, kwargs)
            eng: Engagement | None = current.get()  # _call_registered, written out: a frame less per call
            if eng is not None:
                return run_tool_call(runtime, eng.state, reg, inputs)
            return guard._call_own(reg, inputs, None, None)

        wrapper.__agentguard__ = reg  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    def add_reviewer(
        self, reviewer_id: str, reviewer: Reviewer, *, config: ApprovalConfig | None = None
    ) -> None:
        """Register who answers ``require_review: <reviewer_id>`` (and how, with ``config``)."""
        self._reviewers[reviewer_id] = reviewer
        self._missing = None
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
        return self._reviewers.get(reviewer_id), self._approvals.get(reviewer_id, self._runtime.approval)

    def required_reviewers(self) -> frozenset[str]:
        """Every reviewer id the spec's ``require_review`` fields and the added review gates name."""
        named = {
            r.require_review
            for cap in self.spec.capabilities.values()
            if cap is not None
            for r in (cap.input_restriction, cap.output_restriction)
            if r is not None and r.require_review
        }
        return frozenset(named | set(self._runtime.review_gates.values()))

    def add_review_gate(self, capability: str, reviewer_id: str) -> None:
        """Ask ``reviewer_id`` before every call of ``capability`` (when the spec names no input reviewer).

        For review gates that another description of the agent implies, e.g. an Agent Spec tool with
        ``requires_confirmation: true``.
        """
        self._runtime.add_review_gate(capability, reviewer_id)
        self._missing = None

    def add_passthrough_exceptions(self, *types: type[BaseException]) -> None:
        """Exceptions that are a host's control flow (e.g. LangGraph's interrupt), not reviewer or tool errors.

        They travel through the pipeline untouched: a pending call is rolled back, nothing is denied.
        """
        self._runtime.passthrough = tuple(dict.fromkeys((*self._runtime.passthrough, *types)))

    def add_observer(self, observer: Observer) -> None:
        """Add an observer of every turn, step and decision (see :mod:`agentguard.observers`)."""
        self._runtime.observers.add(observer)

    @property
    def observers(self) -> tuple[Observer, ...]:
        """This guard's observers, in the order they are called (its telemetry first, when it has one)."""
        return self._runtime.observers.items

    def missing_configuration(self) -> tuple[str, ...]:
        """What the spec needs that this guard was not given, one sentence each (empty when complete).

        A guardrail tool or reviewer the spec (or a review gate) names but nobody registered would fail every
        step that needs it. That is a setup mistake, not a policy decision, so :meth:`engagement` refuses to
        start with all of them listed instead of letting them surface one by one as violations mid-run.
        Computed once, and again only after a tool, reviewer or review gate is added.
        """
        if self._missing is None:
            guardrails = [
                f"guardrail tool {name!r} (guardrails.{phase}.tool_name): register it with "
                f"@guard.tool(name={name!r}) or guard.register({name!r}, fn)"
                for phase, rule in (
                    ("input", self.policy.input_guardrail),
                    ("output", self.policy.output_guardrail),
                )
                if rule is not None
                for name in (rule.tool_name,)
                if name not in self._registry
            ]
            reviewers = [
                f"reviewer {rid!r} (named by require_review or a review gate): pass reviewers={{{rid!r}: ...}} "
                f"or call guard.add_reviewer({rid!r}, ...)"
                for rid in sorted(self.required_reviewers() - self._reviewers.keys())
            ]
            known = self._credential_sets
            credentials = [
                f"credential set {cap.static_identity!r} (capabilities.{key}.static_identity): not one of the "
                f"guard's credential_sets {sorted(known)}"
                for key, cap in self.spec.capabilities.items()
                if known is not None and cap.static_identity is not None and cap.static_identity not in known
            ]
            self._missing = (*guardrails, *reviewers, *credentials)
        return self._missing

    def _check_configuration(self) -> None:
        missing = self.missing_configuration()
        if missing:
            listed = "".join(f"\n  - {piece}" for piece in missing)
            raise ConfigurationError(
                f"guard {self.name!r} cannot start an engagement; its spec needs what was not registered:{listed}"
            )

    # -- engagements ----------------------------------------------------------------------------------

    def engagement(
        self,
        user: User | None = None,
        *,
        engagement_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Engagement:
        """Open an engagement, or continue the one of ``engagement_id``. Use as ``with`` / ``async with``.

        With the default :class:`~agentguard.stores.MemoryStore` an id continues the engagement of that id
        that is open in this process; with a shared store (:class:`~agentguard.stores.RedisStore`) the one
        any process opened (one round trip: use :meth:`aengagement` under asyncio). ``user`` and
        ``metadata`` are kept when the engagement is created; continuing someone else's engagement raises.

        ``engagement_id`` may not be empty (``""`` raises :class:`~agentguard.ConfigurationError`: it is not
        "no id", which is ``None``).

        Raises :class:`~agentguard.ConfigurationError` listing every :meth:`missing_configuration` piece,
        :class:`~agentguard.StoreUnavailable` when a shared store cannot answer, or its record of the
        engagement is malformed.
        """
        state, store = self._new_state(user, engagement_id, metadata)
        if isinstance(store, MemoryStore):
            return self._held(store, state, user, engagement_id)
        snapshot = store.open(state.id, state.meta())
        return self._continued(
            EngagementState.shared(state.id, snapshot, store, loop_window=self._window), user
        )

    async def aengagement(
        self,
        user: User | None = None,
        *,
        engagement_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Engagement:
        """Async twin of :meth:`engagement` (a shared store is asked without blocking the event loop)."""
        state, store = self._new_state(user, engagement_id, metadata)
        if isinstance(store, MemoryStore):
            return self._held(store, state, user, engagement_id)
        snapshot = await store.aopen(state.id, state.meta())
        return self._continued(
            EngagementState.shared(state.id, snapshot, store, loop_window=self._window), user
        )

    @property
    def _window(self) -> int:
        return (self.policy.short_circuit or 1) * self._runtime.short_circuit_max_block

    def _new_state(
        self, user: User | None, engagement_id: str | None, metadata: Mapping[str, Any] | None
    ) -> tuple[EngagementState, MemoryStore | Journal]:
        self._check_configuration()
        if engagement_id is not None and (not isinstance(engagement_id, str) or not engagement_id):
            # "" is not "no id": each open of it would be a fresh engagement (loop count, history gone), as
            # when a host's missing conversation id defaults to "". None asks for a new id.
            raise ConfigurationError(
                f"engagement_id must be a non-empty string or None (a new engagement), not {engagement_id!r:.80}"
            )
        store = self.store
        if engagement_id is None and not isinstance(store, MemoryStore):
            engagement_id = secrets.token_hex(16)  # unique across processes, not only in this one
        state = EngagementState(
            user=user, engagement_id=engagement_id, metadata=metadata, loop_window=self._window
        )
        return state, store

    def _held(
        self, store: MemoryStore, state: EngagementState, user: User | None, engagement_id: str | None
    ) -> Engagement:
        """Only engagements opened by id are held: nobody can ask for one by an id it was not given."""
        if engagement_id is None:
            return Engagement(self._runtime, state, self)
        held = store.resume(engagement_id)
        if held is not None:
            return self._continued(held, user)
        store.hold(state)
        return Engagement(self._runtime, state, self)

    def _continued(self, state: EngagementState, user: User | None) -> Engagement:
        """An existing engagement acts for the user it was opened for; another one may not take it over."""
        if user is not None and (state.user is None or state.user.id != user.id):
            owner = "no user" if state.user is None else f"user {state.user.id!r}"
            raise ConfigurationError(
                f"engagement {state.id!r} was opened for {owner}, not for user {user.id!r}: "
                "an engagement cannot change hands"
            )
        return Engagement(self._runtime, state, self)

    def current_engagement(self) -> Engagement | None:
        """The engagement open in this thread or asyncio task, if any."""
        current: Engagement | None = self._runtime.current.get()
        return current

    def _own_engagement(self, name: str) -> Engagement:
        """The engagement a call made outside any opens for itself (``auto_engagement``), else the error."""
        if self.auto_engagement:
            return self.engagement()
        raise ConfigurationError(
            f"guarded {name!r} was called outside an engagement: wrap the agent run in "
            "`with guard.engagement(user=...):` (or build the Guard with auto_engagement=True)"
        )

    # -- calls ----------------------------------------------------------------------------------------

    def _call_registered(
        self, reg: Registered, inputs: dict[str, Any], call_id: str | None, reasoning: Reasoning
    ) -> Any:
        eng: Engagement | None = self._runtime.current.get()
        if eng is not None:
            return run_tool_call(self._runtime, eng.state, reg, inputs, call_id, reasoning)
        return self._call_own(reg, inputs, call_id, reasoning)

    def _call_own(
        self, reg: Registered, inputs: dict[str, Any], call_id: str | None, reasoning: Reasoning
    ) -> Any:
        """A call outside any open engagement, in one of its own."""
        eng = self._own_engagement(reg.name)
        try:
            return run_tool_call(self._runtime, eng.state, reg, inputs, call_id, reasoning)
        finally:
            eng.close()

    def _acall_registered(
        self, reg: Registered, inputs: dict[str, Any], call_id: str | None, reasoning: Reasoning
    ) -> Coroutine[Any, Any, Any]:
        """What to await for the call: in an open engagement, the pipeline's own coroutine (not one more
        wrapped around it, on every call of an async tool or adapter)."""
        eng: Engagement | None = self._runtime.current.get()
        if eng is not None:
            return arun_tool_call(self._runtime, eng.state, reg, inputs, call_id, reasoning)
        return self._acall_own(reg, inputs, call_id, reasoning)

    async def _acall_own(
        self, reg: Registered, inputs: dict[str, Any], call_id: str | None, reasoning: Reasoning
    ) -> Any:
        eng = self._own_engagement(reg.name)
        try:
            return await arun_tool_call(self._runtime, eng.state, reg, inputs, call_id, reasoning)
        finally:
            eng.close()

    def _adhoc(
        self,
        name: str,
        fn: Callable[..., Any] | None,
        kind: Literal["tool", "agent"],
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> Registered:
        table = self._registry if kind == "tool" else self._agents
        reg = table.get(name)
        marked = getattr(fn, "__agentguard__", None)
        if reg is not None and (fn is None or reg.fn is fn or marked is reg):
            pass
        elif fn is None:
            raise ConfigurationError(f"no {kind} named {name!r} is registered with this guard")
        elif isinstance(marked, Registered):  # a @guard.tool function: use the undecorated function
            reg = marked
        elif reg is not None:  # a host's runner for a registered tool: its settings stay, the host runs it
            # (built directly, not with ``_replace``: this runs on every call of an adapter)
            reg = Registered(
                reg.name, reg.kind, fn, Binder.of(fn), reg.needs_credentials, reg.timeout, reg.retry
            )
        else:
            reg = Registered(name, kind, fn, Binder.of(fn), False)
        if timeout is not None or retry is not None:
            reg = reg._replace(timeout=timeout or reg.timeout, retry=retry or reg.retry)
        return reg

    def call(
        self,
        name: str,
        inputs: Mapping[str, Any],
        fn: Callable[..., Any] | None = None,
        *,
        kind: Literal["tool", "agent"] = "tool",
        call_id: str | None = None,
        reasoning: Reasoning = None,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
    ) -> Any:
        """Run one tool or sub-agent call through the pipeline (for adapters).

        ``fn`` is called with ``inputs`` as keyword arguments (or the registered function of that name when
        ``fn`` is omitted). A ``@guard.tool`` function passed here is checked once, not twice. ``call_id`` is
        the host's id for the call: a host that re-runs a call after a paused review gets the reviewed
        result without the tool running again. ``reasoning`` is the model's text that asked for the call,
        sent to a guardian with it; only a guardian reads it, so a host that must search its conversation
        for it may pass a function instead (sync or async), called only when a guardian is asked. A function
        that fails or answers anything but text denies the call (``GuardianDenied``, recorded): its tool does
        not run. ``timeout`` / ``retry`` override the registered ones.
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
        reasoning: Reasoning = None,
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

    def _iter_registered(self) -> Iterable[Registered]:
        yield from self._registry.values()
        yield from self._agents.values()

    def __repr__(self) -> str:
        return f"<Guard {self.name!r} tools={sorted(self._registry)} agents={sorted(self._agents)}>"
