"""KernelSeek's central table for one session: each accepted gain and the question that preceded it.

A gain's window runs from the previous accepted commit (or the session's start) to the evaluation that
was accepted; the question credited is the last one delivered to the agent inside that window, before
that evaluation started. Totals per question kind weigh gains in log space, so shares add up whatever
the order of the gains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from kstui.engine.events import Accepted, EvaluationStarted, Event, QuestionAsked, Rewound
from kstui.engine.trace import read_trace

NO_QUESTION = "(none)"
UNCLASSIFIED = "(typed)"  # a question with no bank kind: typed by the human, or self-posed


@dataclass
class GainRow:
    eval_no: int
    commit: str
    previous: float | None  # None for the first accepted version: there is no gain to credit
    geomean: float
    question: str | None
    question_kind: str | None
    question_source: str | None
    question_id: str | None
    questions_in_window: int  # how many questions were asked in the window (only the last is credited)

    @property
    def gain(self) -> float | None:
        return self.geomean / self.previous if self.previous else None

    @property
    def kind_label(self) -> str:
        if self.question is None:
            return NO_QUESTION
        return self.question_kind or UNCLASSIFIED


@dataclass
class KindTotal:
    kind: str
    gains: int
    product: float  # all of this kind's gains multiplied together
    share: float  # of the session's total log-gain, 0..1 (negative only if a gain was a loss)
    largest: float


def analyse(events: Iterable[Event]) -> list[GainRow]:
    """One row per Accepted event, in order."""
    rows: list[GainRow] = []
    window: list[tuple[int, QuestionAsked]] = []  # (position, question) since the last accepted commit
    eval_starts: dict[int, int] = {}  # eval_no -> position of its latest EvaluationStarted
    for pos, event in enumerate(events):
        if isinstance(event, QuestionAsked):
            window.append((pos, event))
        elif isinstance(event, EvaluationStarted):
            eval_starts[event.eval_no] = pos
        elif isinstance(event, Accepted):
            start = eval_starts.get(event.eval_no, pos)
            before = [q for p, q in window if p < start]
            credited = before[-1] if before else None
            rows.append(
                GainRow(
                    eval_no=event.eval_no,
                    commit=event.commit,
                    previous=event.previous,
                    geomean=event.geomean,
                    question=credited.text if credited else None,
                    question_kind=credited.kind if credited else None,
                    question_source=credited.source if credited else None,
                    question_id=credited.question_id if credited else None,
                    questions_in_window=len(before),
                )
            )
            window = [(p, q) for p, q in window if p >= start]  # asked during the evaluation: next window
        elif isinstance(event, Rewound):
            window = []  # a rewind starts the search over from an older version
    return rows


def analyse_trace(path: Path) -> list[GainRow]:
    return analyse(read_trace(path))


def totals_by_kind(rows: Iterable[GainRow]) -> list[KindTotal]:
    """Per question kind: number of gains, their product, and their share of the session's log-gain."""
    scored = [r for r in rows if r.gain is not None and r.gain > 0]
    total_log = sum(math.log(r.gain) for r in scored if r.gain)
    by_kind: dict[str, list[float]] = {}
    for r in scored:
        by_kind.setdefault(r.kind_label, []).append(r.gain or 1.0)
    out = []
    for kind, gains in by_kind.items():
        log = sum(math.log(g) for g in gains)
        out.append(KindTotal(kind=kind, gains=len(gains), product=math.exp(log),
                             share=log / total_log if total_log else 0.0, largest=max(gains)))
    return sorted(out, key=lambda t: -t.share)


def format_table(rows: list[GainRow]) -> str:
    """The gains table and the per-kind totals, as plain text for the terminal."""
    if not rows:
        return "no accepted versions in this trace"
    lines = [f"{'eval':>5}  {'commit':<8}  {'geomean':>17}  {'gain':>6}  {'kind':<10}  {'source':<6}  question"]
    for r in rows:
        change = f"{r.previous:.3f} -> {r.geomean:.3f}" if r.previous is not None else f"{'start':>8} {r.geomean:.3f}"
        gain = f"{r.gain:.2f}x" if r.gain is not None else "-"
        question = _clip(r.question, 60) if r.question else ""
        if r.questions_in_window > 1:
            question += f"  (+{r.questions_in_window - 1} earlier)"
        lines.append(f"{r.eval_no:>5}  {r.commit[:8]:<8}  {change:>17}  {gain:>6}  {r.kind_label:<10}  "
                     f"{r.question_source or '':<6}  {question}")
    totals = totals_by_kind(rows)
    if totals:
        lines += ["", f"{'kind':<10}  {'gains':>5}  {'product':>8}  {'largest':>8}  {'share':>6}"]
        for t in totals:
            lines.append(f"{t.kind:<10}  {t.gains:>5}  {t.product:>7.2f}x  {t.largest:>7.2f}x  {t.share:>6.0%}")
        product = math.prod(t.product for t in totals)
        best = max(r.geomean for r in rows)
        lines.append(f"{'all':<10}  {sum(t.gains for t in totals):>5}  {product:>7.2f}x  {'':>8}  {1:>6.0%}"
                     f"   best {best:.3f}")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
