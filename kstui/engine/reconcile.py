"""On resume, git and the trace agree again: a kill between a commit and its record is made good.

A commit's note is written before the branch moves (history.py), but the event that records a commit
(Accepted, StartingPoint, Rewound) follows it: a kill in between leaves a version on kstui's branch
that the trace does not know. On resume the session's own commits (trailer Kstui-Session) are read
back; each one the trace lacks gets its event now, and one without a note (made by an older kstui)
gets the result its evaluation recorded in the trace.
"""

from __future__ import annotations

from harness.result import EvalResult
from kstui.engine.events import Accepted, EvaluationFinished, Event, Notice, Rewound, StartingPoint
from kstui.engine.history import History


def reconcile(history: History, events: list[Event], session_id: str) -> list[Event]:
    """The events the trace should hold for this session's commits and does not, oldest first, with a
    notice saying so; notes added where missing. Empty when they agree."""
    recorded: set[str] = set()
    results: dict[int, EvalResult] = {}
    for e in events:
        if isinstance(e, Accepted):
            recorded.add(e.commit)
        elif isinstance(e, StartingPoint) and e.commit:
            recorded.add(e.commit)
        elif isinstance(e, Rewound):
            recorded.add(e.new_commit)
        elif isinstance(e, EvaluationFinished) and e.result is not None:
            results[e.eval_no] = e.result
    entries = history.entries()  # newest first
    out: list[Event] = []
    noted = 0
    for i in range(len(entries) - 1, -1, -1):
        entry = entries[i]
        if entry.session != session_id:
            continue
        if (entry.restores is None and entry.eval_no in results and not history.has_note(entry.sha)):
            history.add_note(entry.sha, results[entry.eval_no])
            noted += 1
        if entry.sha in recorded:
            continue
        if entry.start:
            out.append(StartingPoint(eval_no=entry.eval_no, geomean=entry.geomean, correct=entry.correct,
                                     total=entry.total, commit=entry.sha))
        elif entry.restores is not None:
            out.append(Rewound(to_commit=entry.restores, new_commit=entry.sha))
        else:
            older = [e.geomean for e in entries[i + 1:] if e.geomean is not None]
            out.append(Accepted(eval_no=entry.eval_no or 0, commit=entry.sha, geomean=entry.geomean or 0.0,
                                previous=max(older) if older else None, correct=entry.correct, total=entry.total,
                                message=entry.message))
    said = []
    if out:
        said.append(f"{len(out)} commit(s) on {history.branch} had no record in the trace (kstui ended between "
                    f"the commit and its record): recorded now")
    if noted:
        said.append(f"{noted} commit(s) lacked their result note: added from the trace")
    if said:
        out.append(Notice(message="; ".join(said), level="warning"))
    return out
