"""The transcript as plain data: session events fold into a list of blocks.

Kept apart from the widget so that every block survives pruning (only a window of them is mounted)
and so that the folding is testable without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from harness.result import EvalResult
from kstui.engine import events as ev
from kstui.engine.result_view import fmt_x, one_line
from kstui.views.format import SOURCE_ICONS, SOURCE_LABELS

BlockKind = Literal["text", "thinking", "tool", "eval", "question", "user", "notice", "error", "edit"]


@dataclass
class Block:
    kind: BlockKind
    title: str
    body: str = ""
    detail: str = ""  # a tool's result, an evaluation's diff, an edit's diff
    status: str = ""  # running | ok | error | accepted | rejected
    source: str | None = None  # who asked, for questions
    turn: int | None = None
    result: EvalResult | None = None
    tool_input: dict[str, Any] | None = None  # formatted only when a reader opens the block


@dataclass
class Change:
    op: Literal["append", "update", "stream", "close"]
    index: int
    text: str = ""


# Why the session is manual (no key, or --no-agent) comes from the session's own notice.
MANUAL_MODE_HELP = (
    "Manual mode: no agent is running. Save the kernel in any editor and it is evaluated; "
    "accepted versions are committed."
)


def tool_title(name: str, tool_input: dict[str, Any]) -> str:
    """The tool's name and the one argument a reader scans for."""
    for key in ("path", "command", "scenarios", "pattern"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            first = value.strip().splitlines()[0] if value.strip() else value
            more = len(first) > 70 or len(value.strip().splitlines()) > 1
            return f"{name} {first[:70]}{'…' if more else ''}"
    return name


@dataclass
class TranscriptState:
    blocks: list[Block] = field(default_factory=list)
    _text: int | None = None  # index of the assistant text block being streamed
    _thinking: int | None = None
    _tools: dict[str, int] = field(default_factory=dict)
    _evals: dict[int, int] = field(default_factory=dict)
    _streamed_turns: set[int] = field(default_factory=set)
    _last_question: str | None = None

    def _append(self, block: Block) -> list[Change]:
        changes = self._close()
        self.blocks.append(block)
        return changes + [Change("append", len(self.blocks) - 1)]

    def _close(self) -> list[Change]:
        changes = [Change("close", i) for i in (self._text, self._thinking) if i is not None]
        self._text = self._thinking = None
        return changes

    def _update(self, index: int | None, **values: Any) -> list[Change]:
        if index is None:
            return []
        block = self.blocks[index]
        for key, value in values.items():
            setattr(block, key, value)
        return [Change("update", index)]

    def apply(self, event: ev.Event) -> list[Change]:
        handler = getattr(self, f"_on_{event.type}", None)
        return handler(event) if handler else []

    def _on_session_started(self, e: ev.SessionStarted) -> list[Change]:
        text = f"session {e.session_id} · {e.kernel} · branch {e.branch or '—'}"
        if e.model:
            text += f" · {e.model}"
        if e.resumed:
            text += " · resumed"
        changes = self._append(Block("notice", text))
        if e.sandbox and e.sandbox != "bubblewrap":
            changes += self._append(Block("notice", e.sandbox, status="warning"))
        if e.mode == "manual":
            changes += self._append(Block("notice", MANUAL_MODE_HELP, status="manual"))
        return changes

    def _on_session_ended(self, e: ev.SessionEnded) -> list[Change]:
        best = f" · best {fmt_x(e.best_geomean)}" if e.best_geomean is not None else ""
        return self._append(Block("notice", f"session ended: {e.reason}{best}"))

    def _on_text_delta(self, e: ev.TextDelta) -> list[Change]:
        self._streamed_turns.add(e.turn)
        if self._text is None:
            # A new block is mounted with its body: the first delta must not be streamed twice.
            changes = self._append(Block("text", "", body=e.text, turn=e.turn))
            self._text = len(self.blocks) - 1
            return changes
        self.blocks[self._text].body += e.text
        return [Change("stream", self._text, e.text)]

    def _on_thinking_delta(self, e: ev.ThinkingDelta) -> list[Change]:
        if self._thinking is None:
            changes = self._append(Block("thinking", "thinking", body=e.text, turn=e.turn))
            self._thinking = len(self.blocks) - 1
            return changes
        self.blocks[self._thinking].body += e.text
        return [Change("stream", self._thinking, e.text)]

    def _on_assistant_message(self, e: ev.AssistantMessage) -> list[Change]:
        changes = self._close()
        if e.turn not in self._streamed_turns:
            # A trace or a non-streaming reply: show the finished text blocks instead.
            for part in e.content:
                if part.get("type") == "text" and part.get("text"):
                    changes += self._append(Block("text", "", body=part["text"], turn=e.turn))
        if e.interrupted:
            changes += self._append(Block("notice", "interrupted: the partial reply is kept", status="warning"))
        return changes

    def _on_user_message(self, e: ev.UserMessage) -> list[Change]:
        if self._last_question is not None and e.text.strip() == self._last_question.strip():
            return self._close()
        return self._append(Block("user", "to the agent", body=e.text, turn=e.turn))

    def _on_question_asked(self, e: ev.QuestionAsked) -> list[Change]:
        self._last_question = e.text
        label = SOURCE_LABELS.get(e.source, e.source)
        kind = f" ({e.kind})" if e.kind else ""
        return self._append(
            Block("question", f"{SOURCE_ICONS.get(e.source, '?')} {label}{kind}", body=e.text, source=e.source, turn=e.turn)
        )

    def _on_tool_call_started(self, e: ev.ToolCallStarted) -> list[Change]:
        changes = self._append(
            Block("tool", tool_title(e.name, e.input), tool_input=e.input, status="running", turn=e.turn)
        )
        self._tools[e.call_id] = len(self.blocks) - 1
        return changes

    def _on_tool_call_finished(self, e: ev.ToolCallFinished) -> list[Change]:
        index = self._tools.pop(e.call_id, None)
        if index is None:
            return self._append(Block("tool", e.name, detail=e.output, status="error" if e.is_error else "ok"))
        block = self.blocks[index]
        return self._update(
            index, detail=e.output, status="error" if e.is_error else "ok", title=f"{block.title} · {e.seconds:.1f}s"
        )

    def _on_evaluation_started(self, e: ev.EvaluationStarted) -> list[Change]:
        changes = self._append(Block("eval", f"evaluation #{e.eval_no} · {e.scenarios} · on {e.where}", status="running"))
        self._evals[e.eval_no] = len(self.blocks) - 1
        return changes

    def _eval_index(self, eval_no: int, where: str = "local") -> tuple[int, list[Change]]:
        if eval_no in self._evals:
            return self._evals[eval_no], []
        changes = self._append(Block("eval", f"evaluation #{eval_no} · on {where}", status="running"))
        self._evals[eval_no] = len(self.blocks) - 1
        return self._evals[eval_no], changes

    def _on_evaluation_finished(self, e: ev.EvaluationFinished) -> list[Change]:
        index, changes = self._eval_index(e.eval_no, e.where)
        head = f"evaluation #{e.eval_no} · on {e.where} · {e.seconds:.1f}s"
        if e.result is None:
            return changes + self._update(index, title=f"{head} · failed: {e.error or 'no result'}", status="error")
        return changes + self._update(
            index, title=f"{head} · {one_line(e.result)}", result=e.result, detail=e.diff, status="done"
        )

    def _on_accepted(self, e: ev.Accepted) -> list[Change]:
        index, changes = self._eval_index(e.eval_no)
        prev = fmt_x(e.previous) if e.previous is not None else "first"
        title = f"{self.blocks[index].title} · ACCEPTED {e.commit[:7]} ({prev} → {fmt_x(e.geomean)})"
        return changes + self._update(index, title=title, status="accepted")

    def _on_starting_point(self, e: ev.StartingPoint) -> list[Change]:
        if e.eval_no is None:
            return []
        index, changes = self._eval_index(e.eval_no)
        if e.geomean is None:
            title = f"{self.blocks[index].title} · your kernel does not pass as brought: the first version that passes becomes the start"
            return changes + self._update(index, title=title, status="rejected")
        commit = f" {e.commit[:7]}" if e.commit else ""
        title = f"{self.blocks[index].title} · START{commit}: every version must beat {fmt_x(e.geomean)}"
        return changes + self._update(index, title=title, status="accepted")

    def _on_evaluation_progress(self, e: ev.EvaluationProgress) -> list[Change]:
        # Each failure shows the moment the worker reports it, under its evaluation.
        changes: list[Change] = []
        for f in e.failed:
            detail = f" ({f['detail']})" if f.get("detail") else ""
            changes += self._append(Block("error", f"evaluation #{e.eval_no}: {f.get('id')} {f.get('verdict')}{detail}"))
        return changes

    def _on_rejected(self, e: ev.Rejected) -> list[Change]:
        index, changes = self._eval_index(e.eval_no)
        return changes + self._update(index, title=f"{self.blocks[index].title} · rejected: {e.reason}", status="rejected")

    def _on_turn_finished(self, e: ev.TurnFinished) -> list[Change]:
        changes = self._close()
        if e.interrupted:
            changes += self._append(Block("notice", f"turn {e.turn} interrupted", status="warning"))
        return changes

    def _on_stalled(self, e: ev.Stalled) -> list[Change]:
        return self._append(Block("notice", f"stalled: {e.reason} — press b for the question bank", status="stalled"))

    def _on_limit_claimed(self, e: ev.LimitClaimed) -> list[Change]:
        return self._append(
            Block("notice", f"the agent claims a limit: “{e.sentence}” — press b to question it", status="stalled")
        )

    def _on_external_edit(self, e: ev.ExternalEdit) -> list[Change]:
        return self._append(Block("edit", f"✎ edited outside the agent: {e.path}", detail=e.diff))

    def _on_retry(self, e: ev.Retry) -> list[Change]:
        wait = f", retrying in {e.wait_s:.1f}s" if e.wait_s else ""
        return self._append(Block("notice", f"retry {e.attempt}: {e.reason}{wait}", status="warning"))

    def _on_context_trimmed(self, e: ev.ContextTrimmed) -> list[Change]:
        text = (
            f"context trimmed: {e.elided_results} old tool results elided "
            f"({e.tokens_before:,} → {e.tokens_after:,} tokens)"
        )
        return self._append(Block("notice", text))

    def _on_rewound(self, e: ev.Rewound) -> list[Change]:
        to = f", context truncated to turn {e.truncated_to_turn}" if e.truncated_to_turn is not None else ""
        return self._append(Block("notice", f"restored {e.to_commit[:7]} as new commit {e.new_commit[:7]}{to}"))

    def _on_notice(self, e: ev.Notice) -> list[Change]:
        return self._append(Block("notice", e.message, status=e.level))

    def _on_error(self, e: ev.Error) -> list[Change]:
        where = f"{e.where}: " if e.where else ""
        return self._append(Block("error", f"{where}{e.message}", status="error"))
