"""KernelSeek's table from a real trace file: which question preceded each accepted gain."""

from __future__ import annotations

import math

import pytest

from kstui.engine.analysis import NO_QUESTION, UNCLASSIFIED, analyse, analyse_trace, format_table, totals_by_kind
from kstui.engine.events import (
    Accepted,
    EvaluationFinished,
    EvaluationStarted,
    QuestionAsked,
    Rejected,
    Rewound,
    SessionStarted,
    TextDelta,
)
from kstui.engine.trace import TraceWriter


class Script:
    """Builds a session's event stream the way the session emits it."""

    def __init__(self) -> None:
        self.events = [SessionStarted(session_id="s", kernel="flash_fwd.cu", mode="agent")]
        self.eval_no = 0
        self.best: float | None = None

    def ask(self, text: str, kind: str | None = None, source: str = "bank", qid: str | None = None) -> None:
        self.events.append(QuestionAsked(turn=len(self.events), text=text, source=source, question_id=qid,
                                         kind=kind))

    def evaluate(self, geomean: float, accept: bool, *, asked_during: QuestionAsked | None = None) -> None:
        self.eval_no += 1
        self.events.append(EvaluationStarted(eval_no=self.eval_no, kernel_sha256="x", scenarios="full"))
        if asked_during is not None:
            self.events.append(asked_during)
        self.events.append(EvaluationFinished(eval_no=self.eval_no, result=None))
        if accept:
            self.events.append(Accepted(eval_no=self.eval_no, commit=f"c{self.eval_no:02d}".ljust(40, "0"), geomean=geomean,
                                        previous=self.best, correct=3, total=3, message="m"))
            self.best = geomean
        else:
            self.events.append(Rejected(eval_no=self.eval_no, reason="slower", geomean=geomean))


def session() -> Script:
    s = Script()
    s.evaluate(0.41, True)  # the starting kernel
    s.evaluate(0.40, False)
    s.ask("What does the SASS say your inner loop does?", "layer", qid="sass-inner-loop")
    s.evaluate(0.39, False)
    s.ask("Which number tells you that is the limit?", "limit", qid="which-number")
    s.events.append(TextDelta(turn=9, text="working"))
    s.evaluate(0.57, True)  # credited to the limit question (the last before this evaluation)
    s.evaluate(0.60, True)  # no question in this window
    late = QuestionAsked(turn=20, text="typed while it ran", source="human")
    s.evaluate(0.58, False, asked_during=late)  # asked during eval 5: belongs to the next window
    s.evaluate(0.66, True)
    s.ask("Where does each operand live at the moment it is used?", "layer", source="self",
          qid="where-operands-live")
    s.evaluate(0.99, True)
    return s


def test_each_gain_credited_to_the_last_question_in_its_window(tmp_path):
    s = session()
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        for e in s.events:
            w.append(e)
    rows = analyse_trace(path)
    assert [r.eval_no for r in rows] == [1, 4, 5, 7, 8]
    assert [r.question_id for r in rows] == [None, "which-number", None, None, "where-operands-live"]
    assert [r.kind_label for r in rows] == [NO_QUESTION, "limit", NO_QUESTION, UNCLASSIFIED, "layer"]
    assert rows[1].questions_in_window == 2  # the SASS question came first and is not credited
    assert rows[3].question == "typed while it ran" and rows[3].question_source == "human"
    assert rows[4].question_source == "self"
    assert rows[0].gain is None
    assert rows[1].previous == 0.41 and rows[1].gain == pytest.approx(0.57 / 0.41)
    assert analyse(s.events) == rows  # the file and the stream agree


def test_totals_per_kind_shares_add_up():
    rows = analyse(session().events)
    totals = {t.kind: t for t in totals_by_kind(rows)}
    assert set(totals) == {"limit", "layer", NO_QUESTION, UNCLASSIFIED}
    assert totals["limit"].gains == 1 and totals["limit"].product == pytest.approx(0.57 / 0.41)
    assert sum(t.share for t in totals.values()) == pytest.approx(1.0)
    whole = math.log(0.99 / 0.41)
    assert totals["layer"].share == pytest.approx(math.log(0.99 / 0.66) / whole)
    assert list(totals)[:2] == ["layer", "limit"]  # sorted by share: 1.50x before 1.39x


def test_rewind_clears_the_window():
    s = Script()
    s.evaluate(0.5, True)
    s.ask("asked before the rewind", "layer")
    s.events.append(Rewound(to_commit="a", new_commit="b"))
    s.evaluate(0.6, True)
    assert analyse(s.events)[1].question is None


def test_format_table():
    text = format_table(analyse(session().events))
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["eval", "commit", "geomean", "gain"]
    row = next(line for line in lines if "which-number" in line or "Which number" in line)
    assert "0.410 -> 0.570" in row and f"{0.57 / 0.41:.2f}x" in row and "limit" in row
    assert "(+1 earlier)" in row
    assert any(line.startswith("all") and f"{0.99 / 0.41:.2f}x" in line for line in lines)
    assert format_table([]) == "no accepted versions in this trace"
