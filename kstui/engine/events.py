"""Typed events the Session emits. Plain dataclasses: the TUI, the headless printer and the trace
all consume the same stream, and none of them needs Textual to read it.

Every event serialises to one JSON object with a "type" key (the trace's line format) and back.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal

from harness.result import EvalResult

QuestionSource = Literal["human", "bank", "self"]


@dataclass
class Event:
    type: ClassVar[str] = "event"
    ts: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}

    @classmethod
    def decode(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The constructor's arguments from the JSON values (an event holding a typed field converts it)."""
        return values


_REGISTRY: dict[str, type[Event]] = {}


def _register(cls: type[Event]) -> type[Event]:
    _REGISTRY[cls.type] = cls
    return cls


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from its dict; unknown keys are ignored so newer traces stay readable."""
    cls = _REGISTRY.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown event type {data.get('type')!r}")
    names = {f.name for f in fields(cls)}
    return cls(**cls.decode({k: v for k, v in data.items() if k in names}))


@_register
@dataclass
class SessionStarted(Event):
    type: ClassVar[str] = "session_started"
    session_id: str
    kernel: str
    mode: Literal["agent", "manual", "replay"]
    model: str | None = None
    branch: str = ""
    resumed: bool = False
    sandbox: str = ""  # "bubblewrap" or a one-line notice that it is missing
    guarded: dict[str, str] = field(default_factory=dict)  # kstui.engine.guarded's fingerprints at start


@_register
@dataclass
class SessionEnded(Event):
    type: ClassVar[str] = "session_ended"
    reason: str
    best_geomean: float | None = None
    best_commit: str | None = None


@_register
@dataclass
class StatusChanged(Event):
    type: ClassVar[str] = "status_changed"
    status: Literal["idle", "thinking", "stalled", "tool", "evaluating", "paused", "stopped"]


@_register
@dataclass
class PauseChanged(Event):
    """The human asked the agent to pause (paused=True) or to carry on. The status becomes "paused" only
    once the session is held at a turn boundary: until then it says what the turn is still doing."""

    type: ClassVar[str] = "pause_changed"
    paused: bool


@_register
@dataclass
class TurnStarted(Event):
    type: ClassVar[str] = "turn_started"
    turn: int


@_register
@dataclass
class TurnFinished(Event):
    type: ClassVar[str] = "turn_finished"
    turn: int
    stop_reason: str | None = None
    interrupted: bool = False


@_register
@dataclass
class UserMessage(Event):
    """Text the session sent to the agent as the user (the opening brief, a question, an edit notice)."""

    type: ClassVar[str] = "user_message"
    turn: int
    text: str


@_register
@dataclass
class TextDelta(Event):
    type: ClassVar[str] = "text_delta"
    turn: int
    text: str


@_register
@dataclass
class ThinkingDelta(Event):
    type: ClassVar[str] = "thinking_delta"
    turn: int
    text: str


@_register
@dataclass
class AssistantMessage(Event):
    """A finished (or interrupted) assistant message: the content blocks as the API returned them."""

    type: ClassVar[str] = "assistant_message"
    turn: int
    content: list[dict[str, Any]]
    interrupted: bool = False


@_register
@dataclass
class ToolCallStarted(Event):
    type: ClassVar[str] = "tool_call_started"
    turn: int
    call_id: str
    name: str
    input: dict[str, Any]


@_register
@dataclass
class ToolCallFinished(Event):
    type: ClassVar[str] = "tool_call_finished"
    turn: int
    call_id: str
    name: str
    output: str
    is_error: bool = False
    seconds: float = 0.0


@_register
@dataclass
class EvaluationStarted(Event):
    type: ClassVar[str] = "evaluation_started"
    eval_no: int
    kernel_sha256: str
    scenarios: str
    where: str = "local"


@_register
@dataclass
class EvaluationFinished(Event):
    """The harness's verdict, typed as it came (None when no result came back: `error` says why)."""

    type: ClassVar[str] = "evaluation_finished"
    eval_no: int
    result: EvalResult | None
    error: str | None = None
    diff: str = ""  # the evaluated version against the best accepted one: rejected versions survive here
    where: str = "local"
    seconds: float = 0.0

    @classmethod
    def decode(cls, values: dict[str, Any]) -> dict[str, Any]:
        if isinstance(values.get("result"), dict):
            values = {**values, "result": EvalResult.from_dict(values["result"])}
        return values


@_register
@dataclass
class EvaluationProgress(Event):
    """How far an evaluation in flight has come, as its worker reports it: the phase (build, checks,
    correctness, timing), scenarios done of total, an estimate of the time left, and the scenarios that
    failed since the last report (each shown the moment it fails)."""

    type: ClassVar[str] = "evaluation_progress"
    eval_no: int
    phase: str
    done: int = 0
    total: int = 0
    eta_s: float | None = None
    failed: list[dict[str, str]] = field(default_factory=list)  # {"id", "verdict", "detail"}


@_register
@dataclass
class StartingPoint(Event):
    """The kernel as the user brought it, evaluated at session start: the start of the history.

    geomean is None when it did not pass (reason says why): then the first version that passes becomes
    the start. commit is the commit the start sits on (kstui's start commit, or the branch tip when the
    kernel is already what the tip holds)."""

    type: ClassVar[str] = "starting_point"
    eval_no: int | None
    geomean: float | None
    correct: int = 0
    total: int = 0
    commit: str | None = None
    reason: str = ""


@_register
@dataclass
class Accepted(Event):
    type: ClassVar[str] = "accepted"
    eval_no: int
    commit: str
    geomean: float
    previous: float | None
    correct: int
    total: int
    message: str


@_register
@dataclass
class Rejected(Event):
    type: ClassVar[str] = "rejected"
    eval_no: int
    reason: str
    geomean: float | None = None


@_register
@dataclass
class QuestionQueued(Event):
    type: ClassVar[str] = "question_queued"
    text: str
    source: QuestionSource
    question_id: str | None = None
    interrupt: bool = False


@_register
@dataclass
class QueueChanged(Event):
    """The question queue as it now stands (after an edit, a removal or a delivery); each entry keeps
    the stable `id` its edits and removals name."""

    type: ClassVar[str] = "queue_changed"
    queue: list[dict[str, Any]]


@_register
@dataclass
class QuestionAsked(Event):
    """A question delivered to the agent."""

    type: ClassVar[str] = "question_asked"
    turn: int
    text: str
    source: QuestionSource
    question_id: str | None = None
    kind: str | None = None


@_register
@dataclass
class Stalled(Event):
    type: ClassVar[str] = "stalled"
    reason: str
    evals_without_gain: int = 0
    turns_without_eval: int = 0


@_register
@dataclass
class LimitClaimed(Event):
    type: ClassVar[str] = "limit_claimed"
    turn: int
    sentence: str


@_register
@dataclass
class ExternalEdit(Event):
    type: ClassVar[str] = "external_edit"
    path: str
    diff: str


@_register
@dataclass
class Usage(Event):
    """Cumulative token counts and cost after a model call.

    The agent reports its own process's totals for one model; the session emits (and the trace and the
    views read) the whole session's totals over every model and every resumed run: session_total=True.
    """

    type: ClassVar[str] = "usage"
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    session_total: bool = False


@_register
@dataclass
class Retry(Event):
    type: ClassVar[str] = "retry"
    attempt: int
    reason: str
    wait_s: float = 0.0


@_register
@dataclass
class ContextTrimmed(Event):
    type: ClassVar[str] = "context_trimmed"
    turn: int
    elided_results: int
    tokens_before: int
    tokens_after: int


@_register
@dataclass
class Rewound(Event):
    type: ClassVar[str] = "rewound"
    to_commit: str
    new_commit: str
    truncated_to_turn: int | None = None


@_register
@dataclass
class Notice(Event):
    type: ClassVar[str] = "notice"
    message: str
    level: Literal["info", "warning"] = "info"


@_register
@dataclass
class Error(Event):
    type: ClassVar[str] = "error"
    message: str
    where: str = ""
