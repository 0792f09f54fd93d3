"""What a session knows about itself, as plain data folded from its own events, and what it spent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kstui.engine.events import (
    Accepted,
    EvaluationStarted,
    Event,
    SessionStarted,
    StartingPoint,
    StatusChanged,
    ToolCallFinished,
    TurnStarted,
    Usage,
)

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")


@dataclass
class SessionState:
    session_id: str = ""
    mode: str = "agent"
    status: str = "idle"
    turn: int = 0
    evals: int = 0
    tool_calls: int = 0
    accepted: int = 0
    best_geomean: float | None = None
    best_commit: str | None = None
    paused: bool = False
    harness_ok: bool = True
    stop_reason: str | None = None  # something the session cannot go on with (its branch checked out)
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def fold(self, event: Event) -> None:
        """Take in one event the session emitted (or, on resume, one its trace holds)."""
        if isinstance(event, StatusChanged):
            self.status = event.status
        elif isinstance(event, TurnStarted):
            self.turn = max(self.turn, event.turn)
        elif isinstance(event, EvaluationStarted):
            self.evals = max(self.evals, event.eval_no)
        elif isinstance(event, ToolCallFinished):
            self.tool_calls += 1
        elif isinstance(event, Accepted):
            self.accepted += 1
            self.best_geomean, self.best_commit = event.geomean, event.commit
        elif isinstance(event, StartingPoint) and event.geomean is not None and event.commit is not None:
            # The start is what a version must beat, unless the branch already holds a better one.
            if self.best_geomean is None or event.geomean > self.best_geomean:
                self.best_geomean, self.best_commit = event.geomean, event.commit
        elif isinstance(event, Usage) and event.session_total:
            for name in USAGE_FIELDS:
                setattr(self, name, getattr(event, name))


@dataclass
class SessionSummary:
    session_id: str
    reason: str
    best_geomean: float | None
    best_commit: str | None
    accepted: int
    evals: int
    tool_calls: int
    turns: int
    cost_usd: float
    trace: Path


class UsageLedger:
    """Turns the agent's usage reports into the session's totals.

    The agent reports, per model, what its own process has spent so far. The session's totals add what
    earlier runs of a resumed session spent (the offset), so the cost limit, the panel and the trace
    all count the same money.
    """

    def __init__(self) -> None:
        self._offset = dict.fromkeys(USAGE_FIELDS, 0.0)
        self._now: dict[str, Usage] = {}

    def total(self, report: Usage) -> Usage:
        """The session-wide totals after the agent's report `report`."""
        self._now[report.model] = report
        values = {f: self._offset[f] + sum(getattr(u, f) for u in self._now.values()) for f in USAGE_FIELDS}
        return Usage(model=report.model, session_total=True,
                     **{f: (v if f == "cost_usd" else int(v)) for f, v in values.items()})  # type: ignore[arg-type]

    def replay(self, events: list[Event]) -> None:
        """The offset a resumed session starts from: everything its trace says was spent."""
        offset = dict.fromkeys(USAGE_FIELDS, 0.0)
        now: dict[str, Usage] = {}

        def settle() -> None:
            for u in now.values():
                for f in USAGE_FIELDS:
                    offset[f] += getattr(u, f)
            now.clear()

        for e in events:
            if isinstance(e, Usage) and e.session_total:
                now.clear()
                offset.update({f: float(getattr(e, f)) for f in USAGE_FIELDS})
            elif isinstance(e, Usage):
                now[e.model] = e  # a trace written before session totals: per-process figures
            elif isinstance(e, SessionStarted):
                settle()  # an earlier run of this session ended here
        settle()
        self._offset = offset
        self._now.clear()

    def offset_usage(self, model: str) -> Usage | None:
        """The replayed totals as a Usage event (None when nothing was spent), for the views at resume."""
        if not any(self._offset.values()):
            return None
        return Usage(model=model, session_total=True,
                     **{f: (v if f == "cost_usd" else int(v)) for f, v in self._offset.items()})  # type: ignore[arg-type]
