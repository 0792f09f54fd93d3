"""The headless view of a Session: events as compact lines on a stream, ending with the best result."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from kstui.engine.events import (
    Accepted,
    AssistantMessage,
    ContextTrimmed,
    Error,
    EvaluationFinished,
    EvaluationProgress,
    EvaluationStarted,
    Event,
    ExternalEdit,
    LimitClaimed,
    Notice,
    QuestionAsked,
    QuestionQueued,
    Rejected,
    Retry,
    Rewound,
    SessionEnded,
    SessionStarted,
    Stalled,
    StartingPoint,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnStarted,
    Usage,
    UserMessage,
)
from kstui.engine.result_view import one_line
from kstui.stopping import StopSignals

if TYPE_CHECKING:
    from kstui.engine.session import Session

PROGRESS_LINE_S = 10.0  # a running evaluation prints where it is at least this often (and at every change of phase)

_INPUT_PREVIEW = 80
_OUTPUT_PREVIEW = 100


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _tool_args(tool_input: dict) -> str:
    parts = []
    for key, value in tool_input.items():
        shown = value if isinstance(value, (int, float, bool)) else _one_line(str(value), 40)
        parts.append(f"{key}={shown}")
    return _one_line(" ".join(parts), _INPUT_PREVIEW)


def _geo(value: float | None) -> str:
    return f"{value:.4g}x" if value is not None else "—"


def _progress_line(event: EvaluationProgress) -> str:
    count = f" {event.done}/{event.total}" if event.total else ""
    left = f", about {event.eta_s:.0f} s left" if event.eta_s is not None else ""
    return f"eval #{event.eval_no}: {event.phase}{count}{left}"


def format_event(event: Event) -> str | None:
    """One line for a (non-delta) event, or None for events the printer leaves out."""
    if isinstance(event, SessionStarted):
        model = f" model {event.model}" if event.model else ""
        resumed = " (resumed)" if event.resumed else ""
        sandbox = f"\n  agent's shell: {event.sandbox}" if event.sandbox else ""
        return f"session {event.session_id}{resumed}: {event.kernel} [{event.mode}{model}] branch {event.branch}{sandbox}"
    if isinstance(event, TurnStarted):
        return f"── turn {event.turn}"
    if isinstance(event, UserMessage):
        return "user: " + _one_line(event.text, 160)
    if isinstance(event, ToolCallStarted):
        return f"tool {event.name} {_tool_args(event.input)}".rstrip()
    if isinstance(event, ToolCallFinished):
        mark = "error" if event.is_error else "ok"
        return f"  → {mark} ({event.seconds:.1f}s): {_one_line(event.output, _OUTPUT_PREVIEW)}"
    if isinstance(event, EvaluationStarted):
        return f"eval #{event.eval_no} started ({event.scenarios}, {event.where})"
    if isinstance(event, EvaluationFinished):
        if event.error:
            return f"eval #{event.eval_no} failed: {event.error}"
        summary = one_line(event.result) if event.result is not None else "no result"
        return f"eval #{event.eval_no} finished: {summary} ({event.seconds:.1f}s)"
    if isinstance(event, StartingPoint):
        if event.geomean is None:
            # An evaluation that failed said why on its own line: not again here.
            why = "its evaluation failed" if event.reason.startswith("evaluation error") else event.reason
            return (f"start: your kernel does not pass as brought ({why}); the first version that passes becomes "
                    f"the start")
        commit = f", commit {event.commit[:8]}" if event.commit else ""
        return f"start: {_geo(event.geomean)} geomean ({event.correct}/{event.total} correct){commit}"
    if isinstance(event, EvaluationProgress):
        failed = "".join(f"\n  failed: {f.get('id')} {f.get('verdict')}" + (f" ({f['detail']})" if f.get("detail") else "")
                         for f in event.failed)
        return _progress_line(event) + failed
    if isinstance(event, Accepted):
        was = f" (was {_geo(event.previous)})" if event.previous is not None else " (baseline)"
        return f"ACCEPTED #{event.eval_no} {event.commit[:8]}: {_geo(event.geomean)}{was} — {event.message}"
    if isinstance(event, Rejected):
        return f"rejected #{event.eval_no}: {event.reason}"
    if isinstance(event, QuestionQueued):
        return f"queued [{event.source}]: {event.text}"
    if isinstance(event, QuestionAsked):
        qid = f" {event.question_id}" if event.question_id else ""
        return f"question [{event.source}{qid}]: {event.text}"
    if isinstance(event, Stalled):
        return f"stalled: {event.reason}"
    if isinstance(event, LimitClaimed):
        return f"limit claimed: “{event.sentence}”"
    if isinstance(event, ExternalEdit):
        lines = event.diff.splitlines()
        added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
        removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
        return f"external edit: {event.path} (+{added} -{removed})"
    if isinstance(event, Retry):
        return f"retry {event.attempt}: {event.reason} (waiting {event.wait_s:.1f}s)"
    if isinstance(event, ContextTrimmed):
        return f"context trimmed: {event.elided_results} tool results elided ({event.tokens_before} → {event.tokens_after} tokens)"
    if isinstance(event, Rewound):
        return f"rewound to {event.to_commit[:8]} (new commit {event.new_commit[:8]})"
    if isinstance(event, Notice):
        return f"{'warning' if event.level == 'warning' else 'note'}: {event.message}"
    if isinstance(event, Error):
        return f"error{f' ({event.where})' if event.where else ''}: {event.message}"
    if isinstance(event, SessionEnded):
        return f"session ended: {event.reason}"
    return None


class HeadlessPrinter:
    """A subscriber: prints each event as a line, joining streamed text into whole lines."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._partial = ""
        self._partial_kind: type[Event] | None = None
        self._last_cost: float | None = None
        self._last_progress: tuple[int, str, float] | None = None  # eval, phase, event time of the last line

    def __call__(self, event: Event) -> None:
        if isinstance(event, (TextDelta, ThinkingDelta)):
            self._delta(type(event), event.text)
            return
        if isinstance(event, EvaluationProgress) and not self._progress_due(event):
            return
        self._flush_partial()
        if isinstance(event, AssistantMessage):
            return  # its text was printed as it streamed
        if isinstance(event, Usage):
            self._usage(event)
            return
        line = format_event(event)
        if line is not None:
            self._print(line)

    def _progress_due(self, event: EvaluationProgress) -> bool:
        """A progress line at each phase change and failure, else every PROGRESS_LINE_S (a log, not a meter)."""
        last = self._last_progress
        due = (event.failed or last is None or last[:2] != (event.eval_no, event.phase)
               or event.ts - last[2] >= PROGRESS_LINE_S)
        if due:
            self._last_progress = (event.eval_no, event.phase, event.ts)
        return bool(due)

    def _delta(self, kind: type[Event], text: str) -> None:
        if self._partial_kind is not kind:
            self._flush_partial()
            self._partial_kind = kind
        self._partial += text
        *done, self._partial = self._partial.split("\n")
        for line in done:
            self._print_text(kind, line)

    def _flush_partial(self) -> None:
        if self._partial and self._partial_kind is not None:
            self._print_text(self._partial_kind, self._partial)
        self._partial = ""
        self._partial_kind = None

    def _print_text(self, kind: type[Event], line: str) -> None:
        if line.strip():
            self._print(("  ~ " if kind is ThinkingDelta else "  ") + line)

    def _usage(self, event: Usage) -> None:
        # Only when the cost moved by a cent: a line per model call would drown the transcript.
        if self._last_cost is None or event.cost_usd - self._last_cost >= 0.01:
            self._last_cost = event.cost_usd
            self._print(f"usage: ${event.cost_usd:.2f} ({event.input_tokens} in, {event.output_tokens} out, "
                        f"cache {event.cache_read_tokens} read / {event.cache_write_tokens} written)")

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def print_events(self, events: Iterable[Event]) -> None:
        for event in events:
            self(event)
        self._flush_partial()


def best_line(session: Session) -> str:
    best = session.history.best()
    if best is None:
        return f"best: nothing accepted ({_evaluations(session.state.evals)})"
    return (f"best: {_geo(best.geomean)} geomean ({best.correct}/{best.total} correct), commit {best.short} "
            f"on {session.history.branch} — {session.state.accepted} accepted in this session, "
            f"{_evaluations(session.state.evals)}, ${session.state.cost_usd:.2f}")


def _evaluations(count: int) -> str:
    return f"{count} evaluation{'' if count == 1 else 's'}"


async def _confirm_on_stdin(command: str) -> bool:
    try:
        answer = await asyncio.to_thread(input, f"run shell command {command!r}? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def run_headless(session: Session, out: TextIO | None = None) -> int:
    """Run the session printing its events; 0 if anything was accepted in it, 1 if not. Ctrl-C or SIGTERM
    stops it within kstui.stopping.GRACE_S; a second one ends it at once."""
    out = out or sys.stdout
    printer = HeadlessPrinter(out)
    session.subscribe(printer)
    if session.config.confirm_shell:
        session.shell_confirmer = _confirm_on_stdin
    # The run is a task of its own: a signal's stop never waits on the coroutine that waits for the run
    # (that wait, the other way round, was a deadlock that only a SIGKILL ended).
    run = asyncio.ensure_future(session.run())
    signals = StopSignals(asyncio.get_running_loop(), session.request_stop,
                          last_words=lambda: (session.flush_trace(), printer.print_events([]))).install()
    try:
        summary = await run
    finally:
        signals.remove()
    printer.print_events([])
    out.write(best_line(session) + "\n")
    out.flush()
    return 0 if summary.accepted else 1
