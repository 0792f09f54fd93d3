"""Recorded event streams for the TUI tests, and tests of the panes' plain state (no terminal)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fakes import FakeExecutor  # noqa: E402

from harness.result import BuildReport, EvalResult  # noqa: E402
from kstui.engine import events as ev  # noqa: E402
from kstui.views.speedup_state import SpeedupState  # noqa: E402
from kstui.views.transcript_state import TranscriptState  # noqa: E402
from kstui.widgets.source import SourceState, changed_lines  # noqa: E402

T0 = 1_780_000_000.0  # a fixed clock: snapshots and replays must not depend on when they ran
KERNEL = """#include <cuda_runtime.h>
// fake: speedup=1.0
__global__ void attn(const float* q, float* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = q[i];
}
"""


def fake_result(text: str, name: str = "flash_fwd.cu") -> EvalResult:
    """A real-schema EvalResult (validated by EvalResult.from_dict) for this kernel text."""
    executor = FakeExecutor()
    return EvalResult.from_dict(executor.result_for(text, name, "0" * 64, "full").to_dict())


def recorded_run(kernel_text: str = KERNEL, *, tool_calls: int = 2, stalled: bool = False) -> list[ev.Event]:
    """The events of a small session: a streamed reply, tool calls, an accepted and a rejected version."""
    better = kernel_text.replace("speedup=1.0", "speedup=1.25")
    worse = kernel_text.replace("speedup=1.0", "speedup=1.1")
    events: list[ev.Event] = [
        ev.SessionStarted("20260101-000000-abcd", "flash_fwd.cu", "agent", model="claude-test", branch="kstui/flash_fwd",
                          sandbox="bubblewrap"),
        ev.StatusChanged("thinking"),
        ev.TurnStarted(1),
        ev.UserMessage(1, "Make the CUDA kernel in `flash_fwd.cu` faster."),
        ev.ThinkingDelta(1, "The loads are not coalesced; "),
        ev.ThinkingDelta(1, "tile them through shared memory."),
        ev.TextDelta(1, "I'll start by **tiling** "),
        ev.TextDelta(1, "the loads.\n\n- stage K/V in smem\n"),
        ev.TextDelta(1, "- double-buffer with `cp.async`\n"),
    ]
    for i in range(tool_calls):
        events += [
            ev.ToolCallStarted(1, f"call-{i}", "read_file", {"path": "flash_fwd.cu"}),
            ev.ToolCallFinished(1, f"call-{i}", "read_file", kernel_text, seconds=0.01),
        ]
    events += [
        ev.ToolCallStarted(1, "edit-1", "edit_file", {"path": "flash_fwd.cu", "old_string": "speedup=1.0",
                                                      "new_string": "speedup=1.25"}),
        ev.ToolCallFinished(1, "edit-1", "edit_file", "edited flash_fwd.cu (1 replacement)", seconds=0.02),
        ev.StatusChanged("evaluating"),
        ev.EvaluationStarted(1, "0" * 64, "full", where="fake"),
        ev.EvaluationFinished(1, fake_result(better), where="fake", seconds=3.5),
        ev.Accepted(1, "a1b2c3d4e5f6a7b8", 1.25, None, 4, 4, "flash_fwd: 1.250x"),
        ev.Usage("claude-test", 12_000, 1_500, 8_000, 0, 0.0825),
        ev.TurnFinished(1, "tool_use"),
        ev.QuestionAsked(2, "Which layer have you not looked at yet?", "human"),
        ev.UserMessage(2, "Which layer have you not looked at yet?"),
        ev.TurnStarted(2),
        ev.TextDelta(2, "Trying a larger tile."),
        ev.EvaluationStarted(2, "1" * 64, "full", where="fake"),
        ev.EvaluationFinished(2, fake_result(worse), where="fake", seconds=3.4),
        ev.Rejected(2, "geomean 1.100x does not beat 1.250x", 1.1),
        ev.Retry(1, "overloaded (529)", wait_s=0.5),
        ev.Error("GPU 0 fell off the bus", where="executor"),
    ]
    if stalled:
        events.append(ev.Stalled("5 evaluations without a gain", evals_without_gain=5))
    for i, event in enumerate(events):
        event.ts = T0 + i
    return events


def test_transcript_folds_a_run_into_blocks():
    state = TranscriptState()
    for event in recorded_run():
        state.apply(event)
    kinds = [b.kind for b in state.blocks]
    assert kinds.count("tool") == 3 and kinds.count("eval") == 2
    text = next(b for b in state.blocks if b.kind == "text")
    assert text.body == "I'll start by **tiling** the loads.\n\n- stage K/V in smem\n- double-buffer with `cp.async`\n"
    thinking = next(b for b in state.blocks if b.kind == "thinking")
    assert thinking.body == "The loads are not coalesced; tile them through shared memory."
    evals = [b for b in state.blocks if b.kind == "eval"]
    assert evals[0].status == "accepted" and "a1b2c3d" in evals[0].title and "4/4 correct" in evals[0].title
    assert evals[1].status == "rejected" and "does not beat" in evals[1].title
    question = next(b for b in state.blocks if b.kind == "question")
    assert question.source == "human"
    # The question is not shown twice (as a question and again as the user message carrying it).
    assert sum("Which layer" in b.body for b in state.blocks) == 1
    assert any(b.kind == "error" and "fell off" in b.title for b in state.blocks)
    assert any("retry 1" in b.title for b in state.blocks)


def test_streamed_text_is_not_duplicated_in_changes():
    state = TranscriptState()
    first = state.apply(ev.TextDelta(1, "ab"))
    second = state.apply(ev.TextDelta(1, "cd"))
    assert [c.op for c in first] == ["append"] and [(c.op, c.text) for c in second] == [("stream", "cd")]
    assert state.blocks[0].body == "abcd"


def test_unstreamed_assistant_message_still_shows_its_text():
    state = TranscriptState()
    state.apply(ev.AssistantMessage(3, [{"type": "text", "text": "from a trace"}], interrupted=True))
    assert [b.kind for b in state.blocks] == ["text", "notice"] and state.blocks[0].body == "from a trace"


def test_speedup_state_tracks_best_latest_and_stall():
    state = SpeedupState()
    for event in recorded_run(stalled=True):
        state.apply(event)
    accepted = next(e for e in recorded_run() if isinstance(e, ev.Accepted))
    assert state.best == accepted.geomean and state.baseline == "fa3"
    assert [p.accepted for p in state.points] == [True, False]
    assert state.latest is not None and state.latest.correct == state.latest.total == 4
    assert state.stalled and state.trigger == "stall"
    state.apply(ev.LimitClaimed(3, "This is at the memory-bandwidth limit."))
    assert state.trigger == "claimed_limit"
    state.apply(ev.QuestionAsked(3, "Is it?", "bank"))
    assert state.trigger is None
    assert state.cost_usd == 0.0825


def test_failed_evaluation_has_no_geomean():
    state = SpeedupState()
    state.apply(ev.EvaluationFinished(1, None, error="ssh: connection refused"))
    assert state.latest is not None and state.latest.geomean is None and state.last_error == "ssh: connection refused"


def test_changed_lines_marks_inserted_and_replaced_lines(tmp_path):
    assert changed_lines("a\nb\nc\n", "a\nB\nc\nd\n") == {2, 4}
    assert changed_lines(None, "a\n") == set()
    path = tmp_path / "k.cu"
    path.write_text("a\nb\n")
    source = SourceState(path, baseline="a\n")
    assert source.read() and source.changed == {2}
    assert not source.read()  # unchanged text: no redraw
    path.unlink()
    assert not source.read() and source.error and source.text == "a\nb\n"  # a vanished file loses nothing


def test_speedup_state_says_where_the_last_evaluation_ran():
    from kstui.views.speedup_state import SpeedupState, describe_device

    def on(device: dict) -> EvalResult:
        return EvalResult(task="attention", kernel="k.cu", kernel_sha256="0" * 64, scenario_set="full",
                          build=BuildReport(ok=True), device=device)

    device = {"host": "gpu1", "index": 0, "name": "NVIDIA H200", "queue_wait_s": 1.25}
    assert describe_device(on(device)) == "gpu1 · GPU 0 NVIDIA H200 · queued 1.2 s"
    two = {"host": "gpu1", "name": "NVIDIA H200", "index": 0,
           "gpus": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}]}
    assert describe_device(on(two)) == "gpu1 · GPU 0,1 NVIDIA H200"
    assert describe_device(on({})) is None
    state = SpeedupState()
    state.apply(ev.EvaluationFinished(eval_no=1, result=on(device), where="ssh://gpu1"))
    assert state.where == "ssh://gpu1" and state.device.startswith("gpu1 · GPU 0")
