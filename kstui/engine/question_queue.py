"""Questions waiting for the next turn boundary, each with an id that stays its own.

The session delivers from the front while the human edits and removes entries, possibly during a
delivery: an edit or removal names its question by id, never by position, so it reaches the question
the human saw or nothing at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

from kstui.engine.events import QuestionSource


@dataclass
class QueuedQuestion:
    text: str
    source: QuestionSource = "human"
    question_id: str | None = None  # the bank question's id, when it came from the bank
    kind: str | None = None
    interrupt: bool = False
    id: int = 0  # this entry's own id in the queue

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class QuestionQueue:
    def __init__(self) -> None:
        self._items: list[QueuedQuestion] = []
        self._ids = itertools.count(1)

    def __iter__(self) -> Iterator[QueuedQuestion]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def add(self, question: QueuedQuestion, *, front: bool = False) -> QueuedQuestion:
        question.id = next(self._ids)
        self._items.insert(0 if front else len(self._items), question)
        return question

    def pop(self) -> QueuedQuestion | None:
        return self._items.pop(0) if self._items else None

    def edit(self, qid: int, text: str) -> bool:
        """False when no queued question has this id (it was delivered or removed meanwhile)."""
        for q in self._items:
            if q.id == qid:
                q.text = text
                return True
        return False

    def remove(self, qid: int) -> bool:
        before = len(self._items)
        self._items = [q for q in self._items if q.id != qid]
        return len(self._items) != before

    def snapshot(self) -> list[dict[str, Any]]:
        return [q.to_dict() for q in self._items]

    def restore(self, entries: list[dict[str, Any]]) -> None:
        """The queue a trace recorded; entries written before ids existed get new ones."""
        known = {f.name for f in fields(QueuedQuestion)} - {"id"}
        self._items = []
        highest = max((e.get("id") or 0 for e in entries if isinstance(e.get("id"), int)), default=0)
        self._ids = itertools.count(highest + 1)
        for e in entries:
            q = QueuedQuestion(**{k: v for k, v in e.items() if k in known})
            q.id = e["id"] if isinstance(e.get("id"), int) and e["id"] > 0 else next(self._ids)
            self._items.append(q)
