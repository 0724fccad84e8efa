"""``AgentGuardCallbackHandler``: agentguard step records for any LangChain runnable, through callbacks.

Callbacks cannot change what a runnable does, so the handler *records* by default::

    from agentguard_langchain import AgentGuardCallbackHandler

    with guard.engagement(user=user) as eng:
        chain.invoke(inputs, config={"callbacks": [AgentGuardCallbackHandler(guard)]})
    eng.steps       # user / agent messages, tool calls, retrievals, with their decisions

What it records: chat model inputs and answers as ``steps/message``; each finished tool call through the
Guard's pipeline (so the Engagement's history, restrictions and loop detection see it -- after the fact);
retriever results as ``steps/knowledgeRetrieval``. In this observe mode a failure inside agentguard, or a
rule that would have refused the step, is logged and never breaks the host.

With ``raise_error=True`` the handler enforces what a callback can: the input guardrail on new user messages
before the chat model runs and the output guardrail on its answer (a failure aborts the run with the typed
error), and a guardian's ``deny`` of a retrieval. A guardrail or guardian that *modifies* text cannot be
applied from a callback; that is logged. To enforce tool calls, use :class:`AgentGuardMiddleware`.

The engagement is the one passed in, else the one open around the run (``with guard.engagement()``), else
one the handler opens (closed by :meth:`close`). Steps the middleware already guards are not recorded twice.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from agentguard import Engagement, Guard, PolicyViolation, User, ValueLimits
from agentguard_langchain._content import is_user_message, message_text, tool_output
from agentguard_langchain._host import (
    AIMessage,
    BaseCallbackHandler,
    BaseMessage,
    ChatGeneration,
    Document,
    LLMResult,
    ToolMessage,
)
from agentguard_langchain._scope import is_guarded
from agentguard_langchain._sessions import Unreadable, checked_limits, read_text, unread

__all__ = ["AgentGuardCallbackHandler"]

log = logging.getLogger("agentguard_langchain")


class AgentGuardCallbackHandler(BaseCallbackHandler):
    """Record (or, with ``raise_error=True``, guardrail) the steps of any LangChain runnable."""

    run_inline = True  # called in the runnable's own context, where the current engagement is visible

    def __init__(
        self,
        guard: Guard,
        *,
        engagement: Engagement | None = None,
        raise_error: bool = False,
        user: User | None = None,
        tool_names: Mapping[str, str] | None = None,
        value_limits: ValueLimits | None = None,
    ) -> None:
        super().__init__()
        self.guard = guard
        self.raise_error = raise_error
        self._limits = checked_limits(value_limits)
        """How deep and large a user message may be for the input guardrail to read it whole (as the
        middleware's ``value_limits``)."""
        self._engagement = engagement
        self._user = user
        self._own: Engagement | None = None
        self._names = dict(tool_names or {})
        self._lock = threading.Lock()
        self._tools: dict[UUID, tuple[str, dict[str, Any], str | None]] = {}
        self._queries: dict[UUID, str] = {}
        self._seen: set[tuple[str, str | None, str]] = set()

    # -- which engagement -----------------------------------------------------------------------------

    @property
    def engagement(self) -> Engagement:
        """The engagement steps are recorded in (see the module docstring for which one)."""
        if self._engagement is not None:
            return self._engagement
        current = self.guard.current_engagement()
        if current is not None:
            return current
        with self._lock:
            if self._own is None:
                self._own = self.guard.engagement(user=self._user)
            return self._own

    def close(self) -> None:
        """Close the engagement the handler opened itself, if it did."""
        if self._own is not None:
            self._own.close()
            self._own = None

    def _guard(self, what: str, action: Callable[[], object]) -> None:
        """Run one agentguard action: enforce in raise mode, never break the host in observe mode."""
        try:
            action()
        except PolicyViolation as exc:
            if self.raise_error:
                raise
            log.warning("agentguard (observe): %s would be refused: %s", what, exc)
        except Exception:
            if self.raise_error:
                raise
            log.exception("agentguard (observe): recording %s failed", what)

    # -- chat models ----------------------------------------------------------------------------------

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        if is_guarded():
            return
        engagement_id = self.engagement.id
        for conversation in messages:
            for message in conversation:
                if not is_user_message(message):
                    continue
                try:  # all of it the model is sent (text nested in blocks too), read whole or not at all
                    text = read_text(message, self._limits)
                except Unreadable as exc:
                    self._unreadable(exc)
                    continue
                # A message is new once per engagement, and again when its id comes back with other text. It
                # is seen once checked: one a guardian denied (the engagement goes on) is checked again when a
                # model is next given it, and so are the messages after it, which the denial left unchecked.
                key = (engagement_id, message.id, text)
                if key in self._seen:
                    continue
                self._guard("user message", functools.partial(self._user_message, text))
                self._seen.add(key)

    def _unreadable(self, exc: Unreadable) -> None:
        """A user message the input guardrail cannot read whole: enforcing, a failed guardrail (the engagement
        cancelled with the reason, :class:`~agentguard.GuardrailViolation` raised, the model not called);
        observing, a warning (the host goes on)."""
        if not self.raise_error:
            log.warning("agentguard (observe): a user message would be refused: %s", exc.reason)
            return
        eng = self.engagement
        cancel, error = unread(eng, exc)
        eng.cancel(cancel)
        raise error from exc

    def _user_message(self, text: str) -> None:
        eng = self.engagement
        if self.raise_error:
            _unapplied(eng.check_input(text), text, "user message")
        else:
            eng.report_message("user", text)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        if is_guarded():
            return
        for generations in response.generations:
            for generation in generations:
                message = generation.message if isinstance(generation, ChatGeneration) else None
                if isinstance(message, AIMessage):
                    text = message_text(message)
                    if message.tool_calls and not text:
                        continue
                    final = not message.tool_calls
                    self._guard("agent message", functools.partial(self._agent_message, text, final))

    def _agent_message(self, text: str, final: bool) -> None:
        eng = self.engagement
        if final and self.raise_error:
            _unapplied(eng.check_output(text), text, "agent message")
        else:
            _unapplied(eng.report_message("agent", text), text, "agent message")

    # -- tools ----------------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if is_guarded():
            return
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        tool_call_id = (kwargs.get("metadata") or {}).get("tool_call_id")
        self._tools[run_id] = (
            name,
            dict(inputs) if inputs is not None else {"input": input_str},
            tool_call_id,
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._tools.pop(run_id, None)
        if started is None:
            return
        value = tool_output(output) if isinstance(output, ToolMessage) else output
        self._guard(f"tool {started[0]}", lambda: self._tool(started, lambda **_: value))

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._tools.pop(run_id, None)
        if started is None:
            return

        def failed(**_: Any) -> Any:
            raise error

        self._guard(f"tool {started[0]}", lambda: self._tool(started, failed, failing=True))

    def _tool(
        self, started: tuple[str, dict[str, Any], str | None], fn: Callable[..., Any], failing: bool = False
    ) -> None:
        name, inputs, call_id = started
        spec_name = self._names.get(name) or name.replace("_", "-")
        try:
            self.guard.call(spec_name, inputs, _keywords(fn), call_id=call_id)
        except PolicyViolation:
            raise
        except Exception:
            if not failing:  # the tool's own error is the host's business; the pipeline recorded it
                raise

    # -- retrievers -----------------------------------------------------------------------------------

    def on_retriever_start(
        self, serialized: dict[str, Any], query: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self._queries[run_id] = query

    def on_retriever_end(self, documents: Sequence[Document], *, run_id: UUID, **kwargs: Any) -> None:
        query = self._queries.pop(run_id, None)
        results = [_result(i, d) for i, d in enumerate(documents)]
        self._guard("knowledge retrieval", lambda: self.engagement.report_knowledge_retrieval(query, results))

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._queries.pop(run_id, None)


def _result(index: int, document: Document) -> dict[str, Any]:
    metadata = dict(document.metadata or {})
    identifier = document.id or metadata.get("id") or metadata.get("source") or str(index)
    out: dict[str, Any] = {"id": str(identifier), "content": document.page_content}
    if metadata:
        out["metadata"] = metadata
    return out


def _keywords(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__signature__ = inspect.Signature()  # type: ignore[attr-defined]  # pipeline: pass every input by name
    return fn


def _unapplied(new_text: str, text: str, what: str) -> None:
    if new_text != text:
        log.warning(
            "agentguard: a modified %s cannot be applied from a callback; use AgentGuardMiddleware", what
        )
