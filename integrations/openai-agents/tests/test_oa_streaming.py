"""Streaming a guarded agent: ``Runner.run_streamed(...).stream_events()`` hands the caller the model's token
deltas (``raw_response_event``) as the model makes them and the answer's ``message_output_created`` item as soon
as the response is parsed -- both before the SDK runs the output guardrails. When agentguard checks answers
(an output guardrail, a guardian), the adapter holds each model response until the whole answer has been
checked: a stopped answer reaches no stream event, a passed one arrives (its deltas in one burst); when
nothing checks answers, tokens stream as the model makes them."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard, UncheckedStreamWarning, violation_of
from agentguard_openai_agents.testing import ModelStep, ScriptedModel, answer, calls
from agents import (
    Agent,
    AgentUpdatedStreamEvent,
    ModelRetrySettings,
    ModelSettings,
    OutputGuardrailTripwireTriggered,
    RawResponsesStreamEvent,
    RunItemStreamEvent,
    Runner,
    StreamEvent,
)
from agents.items import TResponseStreamEvent
from agents.testing import assistant_message, function_call
from openai.types.responses import (
    Response,
    ResponseAudioTranscriptDeltaEvent,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningItem,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseTextDeltaEvent,
)
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_text_delta_event import Logprob
from pydantic import BaseModel

from agentguard import Guard, GuardianDenied, GuardrailViolation, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread

from .conftest import Shop, make_guard, make_tools

NO_PROMISES = """
default_decision: allow
rules:
  - name: no-promises
    methods: [steps/message]
    when: params.message.role == "agent" && params.message.content.exists(p, p.text.contains("guarantee"))
    decision: deny
    message: The agent may not make guarantees
"""

UNCHECKED = """
kind: openagentspec:v1/agent
name: chatty
description: The agent chats.
intent: You chat.
owner: chat@corp.com
capabilities:
  lookup-order:
"""


class TokenModel(ScriptedModel):
    """The scripted model, streaming as a hosted model does: the SDK's own event sequence for each reply, with
    every ``response.output_text.delta`` cut into one delta per word, each a separate network chunk (the model
    yields to the event loop between chunks). ``log`` records ``("model", word)`` for each delta it sends."""

    def __init__(self, steps: Any, log: list[tuple[str, str]]) -> None:
        super().__init__(steps)
        self.log = log

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        sequence = 0
        async for event in super().stream_response(*args, **kwargs):
            pieces = _words(event.delta) if isinstance(event, ResponseTextDeltaEvent) else [None]
            for piece in pieces:
                update: dict[str, Any] = {"sequence_number": sequence}
                if piece is not None:
                    update["delta"] = piece
                    self.log.append(("model", piece))
                sequence += 1
                await asyncio.sleep(0)
                yield event.model_copy(update=update)


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word if i == len(words) - 1 else word + " " for i, word in enumerate(words)]


class Run:
    """One streamed run of a guarded agent on a :class:`TokenModel`: every event, and the error it ended with."""

    def __init__(
        self,
        guard: Guard,
        script: list[Any],
        *,
        timed: bool,
        output_type: Any = None,
        retry: ModelRetrySettings | None = None,
    ) -> None:
        self.log: list[tuple[str, str]] = []
        self.model = TokenModel(script, self.log)
        self.guarded = AgentGuard(guard)
        settings = ModelSettings(timeout=30 if timed else None, retry=retry)
        agent = Agent(
            name="shop",
            model=self.model,
            tools=make_tools(Shop()),
            model_settings=settings,
            output_type=output_type,
        )
        self.agent = self.guarded.wrap(agent)
        self.events: list[StreamEvent] = []
        self.error: BaseException | None = None
        self.final_output: Any = None

    async def stream(self) -> Run:
        async with self.guarded.session(user=User(id="u1")) as session:
            self.engagement = session.engagement
            streamed = Runner.run_streamed(self.agent, "Hello", hooks=self.guarded.hooks)
            try:
                async for event in streamed.stream_events():
                    self.events.append(event)
                    if delta := _delta(event):
                        self.log.append(("caller", delta))
            except Exception as exc:
                self.error = exc
            else:
                self.final_output = streamed.final_output
        return self

    def carried(self) -> list[str]:
        """What each event hands the caller, as text (the raw event, or the run item's raw item and output)."""
        return [_carried(event) for event in self.events]

    def deltas(self) -> list[str]:
        return [d for event in self.events if (d := _delta(event))]

    def items(self, name: str) -> list[RunItemStreamEvent]:
        return [e for e in self.events if isinstance(e, RunItemStreamEvent) and e.name == name]


def _delta(event: StreamEvent) -> str | None:
    if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
        return event.data.delta
    return None


def _carried(event: StreamEvent) -> str:
    if isinstance(event, RawResponsesStreamEvent):
        return event.data.model_dump_json()
    if isinstance(event, RunItemStreamEvent):
        raw = event.item.raw_item
        text = raw.model_dump_json() if isinstance(raw, BaseModel) else json.dumps(raw, default=str)
        return text + str(getattr(event.item, "output", ""))
    assert isinstance(event, AgentUpdatedStreamEvent)
    return event.new_agent.name


PATHS = pytest.mark.parametrize("timed", [False, True], ids=["run-loop", "timed-model"])
"""The SDK pulls a model's stream in its run loop, or (``ModelSettings.timeout``) in a task of its own."""


@PATHS
async def test_an_answer_the_output_guardrail_stops_never_reaches_the_stream(timed: bool) -> None:
    run = await Run(make_guard(), [answer("That is a stupid question.")], timed=timed).stream()
    assert isinstance(run.error, OutputGuardrailTripwireTriggered)
    assert isinstance(violation_of(run.error), GuardrailViolation)
    assert len(run.model.calls) == 1  # the model did answer: the guardrail stopped it, not the model
    assert [text for text in run.carried() if "stupid" in text] == []
    assert run.deltas() == []
    assert run.items("message_output_created") == []


@pytest.mark.parametrize("by", ["guardrail", "guardian"])
async def test_a_retry_policy_does_not_ask_the_model_for_another_answer(
    guardian: RunningServer, by: str
) -> None:
    """A stopped answer ends the run, streamed or not: even a policy that retries every failed model call
    does not get the model a second chance (which would turn the stop into a silent re-roll)."""
    retry = ModelRetrySettings(max_retries=3, policy=lambda context: True)
    guard = (
        make_guard()
        if by == "guardrail"
        else Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    )
    script = [answer("I guarantee it, stupid."), answer("Sorry.")]
    run = await Run(guard, script, timed=False, retry=retry).stream()
    assert violation_of(run.error or Exception()) is not None
    assert len(run.model.calls) == 1
    assert [text for text in run.carried() if "stupid" in text or "Sorry" in text] == []


def _cut_off(text: str) -> ModelStep:
    """A reply the provider cuts off (``max_output_tokens``): deltas, then ``response.incomplete`` carrying the
    partial message. The SDK queues that terminal event, then fails the run."""
    (message,) = answer(text)
    return cut_off(text, [message], "scripted-message")


def _response(status: Any, items: list[Any], **fields: Any) -> Response:
    """A scripted response with ``status`` and ``items`` as its output."""
    return Response(
        id="resp-scripted",
        created_at=0,
        model="scripted-model",
        object="response",
        output=items,
        tool_choice="auto",
        tools=[],
        top_p=None,
        parallel_tool_calls=False,
        status=status,
        **fields,
    )


def cut_off(text: str, output: list[Any], item_id: str) -> ModelStep:
    """A response the provider cuts off after streaming ``text`` as the message ``item_id``: a delta, then
    ``response.incomplete`` carrying ``output`` (that message, and whatever else the response had)."""

    def response(status: Any, items: list[Any]) -> Response:
        details = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return _response(status, items, incomplete_details=details)

    delta = ResponseTextDeltaEvent(
        type="response.output_text.delta",
        item_id=item_id,
        output_index=0,
        content_index=0,
        delta=text,
        logprobs=[],
        sequence_number=1,
    )
    return ModelStep.stream(
        [
            ResponseCreatedEvent(
                type="response.created", response=response("in_progress", []), sequence_number=0
            ),
            delta,
            ResponseIncompleteEvent(
                type="response.incomplete", response=response("incomplete", output), sequence_number=2
            ),
        ]
    )


async def test_a_cut_off_answer_is_not_streamed_unchecked() -> None:
    """A response that never completes is never checked (the SDK fails the run on it): its partial text stays
    out of the stream, the terminal event the SDK fails on arrives without it."""
    run = await Run(make_guard(), [_cut_off("That is a stupid")], timed=False).stream()
    assert run.error is not None
    assert not isinstance(run.error, OutputGuardrailTripwireTriggered)
    assert [text for text in run.carried() if "stupid" in text] == []
    assert any("response.incomplete" in text for text in run.carried())


def _malformed(output: list[Any], *events: Any, created: tuple[Any, ...] = ()) -> ModelStep:
    """A completed response with ``output`` whose stream also carries ``events`` (numbered in order), and a
    ``response.created`` event carrying ``created`` as its output: what a malformed (or hostile) provider stream
    may send, which the SDK hands the caller as raw events."""

    first = ResponseCreatedEvent(
        type="response.created", response=_response("in_progress", list(created)), sequence_number=0
    )
    done = ResponseCompletedEvent(
        type="response.completed", response=_response("completed", output), sequence_number=0
    )
    numbered = [e.model_copy(update={"sequence_number": n}) for n, e in enumerate([first, *events, done])]
    return ModelStep.stream(numbered)


def _text_delta(text: str, index: int, item_id: str) -> ResponseTextDeltaEvent:
    return ResponseTextDeltaEvent(
        type="response.output_text.delta",
        item_id=item_id,
        output_index=index,
        content_index=0,
        delta=text,
        logprobs=[],
        sequence_number=0,
    )


_LOOKUP = function_call("lookup_order", {"order_id": "A-1"}, call_id="call-odd")
_STUPID_TEXT = "You are stupid."
_STUPID = assistant_message(_STUPID_TEXT, item_id="msg-odd")
_SAID = assistant_message("Let me look.", item_id="msg-odd")


def _no_index(kind: Any, type_: str, **fields: Any) -> Any:
    """An event of ``kind`` without its ``output_index``, as the openai client builds one from a stream's JSON
    (unvalidated) when the provider left the field out."""
    return kind.model_construct(type=type_, item_id="msg-odd", sequence_number=0, **fields)


def _arguments_delta(index: int, item_id: str) -> ResponseFunctionCallArgumentsDeltaEvent:
    return ResponseFunctionCallArgumentsDeltaEvent(
        type="response.function_call_arguments.delta",
        item_id=item_id,
        output_index=index,
        delta=_STUPID_TEXT,
        sequence_number=0,
    )


@pytest.mark.parametrize(
    "step",
    [
        pytest.param(
            _malformed([_LOOKUP], _text_delta("You are stupid.", 1, "ghost")), id="an-item-not-in-the-output"
        ),
        pytest.param(
            _malformed([_LOOKUP], _text_delta("You are stupid.", 0, "call-odd")), id="text-at-a-tool-call"
        ),
        pytest.param(
            _malformed([_LOOKUP], _text_delta("You are stupid.", 0, "msg-odd")), id="another-items-id"
        ),
        pytest.param(
            _malformed(
                [_LOOKUP],
                ResponseOutputItemDoneEvent(
                    type="response.output_item.done", item=_STUPID, output_index=0, sequence_number=0
                ),
            ),
            id="another-item-done",
        ),
        pytest.param(
            _malformed(
                [_LOOKUP],
                ResponseOutputItemAddedEvent(
                    type="response.output_item.added", item=_STUPID, output_index=0, sequence_number=0
                ),
            ),
            id="another-item-added",
        ),
        pytest.param(_malformed([_LOOKUP], created=[_STUPID]), id="output-in-the-created-event"),
        pytest.param(
            _malformed(
                [assistant_message("Let me look.", item_id="msg-odd"), _LOOKUP],
                _text_delta("You are stupid.", 0, "msg-odd"),
            ),
            id="deltas-other-than-the-checked-text",
        ),
        pytest.param(
            _malformed(
                [
                    ResponseReasoningItem(
                        id="rs-odd",
                        type="reasoning",
                        summary=[Summary(type="summary_text", text="Look A-1 up.")],
                    ),
                    _LOOKUP,
                ],
                ResponseReasoningSummaryTextDeltaEvent(
                    type="response.reasoning_summary_text.delta",
                    item_id="rs-odd",
                    output_index=0,
                    summary_index=0,
                    delta="You are stupid.",
                    sequence_number=0,
                ),
            ),
            id="a-reasoning-summary-other-than-the-checked-one",
        ),
        pytest.param(
            _malformed(
                [_LOOKUP],
                _no_index(
                    ResponseTextDeltaEvent,
                    "response.output_text.delta",
                    delta=_STUPID_TEXT,
                    content_index=0,
                    logprobs=[],
                ),
            ),
            id="a-text-delta-of-no-item",
        ),
        pytest.param(
            _malformed(
                [_SAID, _LOOKUP],
                ResponseOutputItemAddedEvent(
                    type="response.output_item.added", item=_STUPID, output_index=0, sequence_number=0
                ),
            ),
            id="an-item-added-with-its-id-and-other-text",
        ),
        pytest.param(
            _malformed([_SAID, _LOOKUP], _arguments_delta(0, "msg-odd")),
            id="argument-deltas-at-a-message",
        ),
        pytest.param(
            _malformed([_LOOKUP], _arguments_delta(0, "call-odd")), id="argument-deltas-other-than-the-calls"
        ),
        pytest.param(
            _malformed(
                [_SAID, _LOOKUP],
                ResponseTextDeltaEvent(
                    type="response.output_text.delta",
                    item_id="msg-odd",
                    output_index=0,
                    content_index=0,
                    delta="Let me look.",
                    sequence_number=0,
                    logprobs=[Logprob(token=_STUPID_TEXT, logprob=0.0, top_logprobs=[])],
                ),
            ),
            id="token-alternatives-beside-the-checked-text",
        ),
        pytest.param(
            _malformed(
                [_LOOKUP],
                ResponseAudioTranscriptDeltaEvent(
                    type="response.audio.transcript.delta", delta=_STUPID_TEXT, sequence_number=0
                ),
            ),
            id="an-audio-transcript",
        ),
        pytest.param(
            _malformed(
                [_LOOKUP], _no_index(ResponseOutputItemDoneEvent, "response.output_item.done", item=_STUPID)
            ),
            id="an-item-done-of-no-index",
        ),
        pytest.param(
            _malformed(
                [_LOOKUP],
                ResponseErrorEvent(
                    type="error", message=_STUPID_TEXT, code=None, param=None, sequence_number=0
                ),
            ),
            id="an-error-event-beside-the-completed-response",
        ),
    ],
)
async def test_a_malformed_stream_hands_the_caller_no_text_that_was_not_checked(step: ModelStep) -> None:
    """The checks read the completed response's output. Whatever else a provider's stream carries (events of an
    item the output lacks, text at a tool call, deltas that add up to other text than the message checked) would
    reach the caller unchecked: it is dropped, or the checked item's own text goes in its place."""
    run = await Run(make_guard(), [step, answer("A-1 has shipped.")], timed=False).stream()
    assert run.error is None
    assert run.final_output == "A-1 has shipped."
    assert [text for text in run.carried() if "stupid" in text] == []
    assert [getattr(e.item.raw_item, "name", None) for e in run.items("tool_called")] == ["lookup_order"]


@PATHS
async def test_a_stopped_answer_after_a_tool_call_is_held_but_the_tool_call_streams(timed: bool) -> None:
    script = [calls(("lookup_order", {"order_id": "A-1"})), answer("A-1 shipped, stupid.")]
    run = await Run(make_guard(), script, timed=timed).stream()
    assert isinstance(run.error, OutputGuardrailTripwireTriggered)
    assert [getattr(e.item.raw_item, "name", None) for e in run.items("tool_called")] == ["lookup_order"]
    assert len(run.items("tool_output")) == 1
    assert [text for text in run.carried() if "stupid" in text] == []


@PATHS
async def test_a_checked_answer_arrives_once_it_passed(timed: bool) -> None:
    text = "Your order has shipped today."
    run = await Run(make_guard(), [answer(text)], timed=timed).stream()
    assert run.error is None
    assert run.final_output == text
    assert "".join(run.deltas()) == text
    (created,) = run.items("message_output_created")
    assert text in _carried(created)
    # held: the caller saw no token before the model had sent its last one (and the answer was checked)
    first_seen = run.log.index(("caller", "Your "))
    assert run.log.index(("model", "today.")) < first_seen
    # checked once, though the adapter checked it before the SDK's output guardrail ran
    assert [s.kind for s in run.engagement.steps] == ["steps/message", "steps/message"]


class Reply(BaseModel):
    text: str


@PATHS
async def test_a_structured_answer_is_checked_as_the_guardrail_sees_it(timed: bool) -> None:
    stopped = await Run(
        make_guard(), [answer('{"text": "a stupid question"}')], timed=timed, output_type=Reply
    ).stream()
    assert isinstance(stopped.error, OutputGuardrailTripwireTriggered)
    assert [text for text in stopped.carried() if "stupid" in text] == []
    passed = await Run(make_guard(), [answer('{"text": "shipped"}')], timed=timed, output_type=Reply).stream()
    assert passed.final_output == Reply(text="shipped")
    assert [s.kind for s in passed.engagement.steps] == ["steps/message", "steps/message"]


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(NO_PROMISES))) as server:
        yield server


@PATHS
async def test_a_guardian_alone_keeps_the_answer_out_of_the_stream_too(
    guardian: RunningServer, timed: bool
) -> None:
    """No output guardrail, but a real guardian on 127.0.0.1 that denies the answer: nothing of it streams."""
    guard = Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    run = await Run(guard, [answer("I guarantee delivery by noon.")], timed=timed).stream()
    assert isinstance(violation_of(run.error or Exception()), GuardianDenied)
    assert len(run.model.calls) == 1
    assert [text for text in run.carried() if "guarantee" in text or "noon" in text] == []


@PATHS
async def test_an_answer_nothing_checks_still_streams_token_by_token(timed: bool) -> None:
    guard = Guard.from_yaml(UNCHECKED)
    assert not guard.checks_answers
    run = await Run(guard, [answer("Nothing here is checked.")], timed=timed).stream()
    assert run.error is None
    assert run.deltas() == ["Nothing ", "here ", "is ", "checked."]
    # streamed: the caller had the first token before the model sent the last one
    assert run.log.index(("caller", "Nothing ")) < run.log.index(("model", "checked."))


async def test_a_guardian_set_after_wrapping_holds_the_next_answer(guardian: RunningServer) -> None:
    """``guard.guardian`` is settable: whether answers are held is asked per model call, not at ``wrap``."""
    guard = Guard.from_yaml(UNCHECKED)
    run = Run(guard, [answer("I guarantee delivery by noon.")], timed=False)
    guard.guardian = GuardianClient(guardian.url)
    await run.stream()
    assert isinstance(violation_of(run.error or Exception()), GuardianDenied)
    assert [text for text in run.carried() if "guarantee" in text] == []


@pytest.mark.parametrize("model", ["gpt-4.1", None])
def test_wrapping_an_agent_whose_model_is_a_name_says_its_streamed_answers_are_unchecked(
    model: str | None,
) -> None:
    """The adapter cannot reach a model the run's provider resolves from a name: rather than leave streamed
    runs of such an agent silently unchecked, ``wrap`` says so (non-streamed runs are checked as always)."""
    guarded = AgentGuard(make_guard())
    with pytest.warns(UncheckedStreamWarning, match="run_streamed hands out its answers' tokens"):
        guarded.wrap(Agent(name="named", model=model))


def test_wrapping_a_model_object_or_an_unchecked_spec_says_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AgentGuard(make_guard()).wrap(Agent(name="held", model=ScriptedModel([])))
        AgentGuard(Guard.from_yaml(UNCHECKED)).wrap(Agent(name="named", model="gpt-4.1"))
