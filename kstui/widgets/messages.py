"""Textual messages between the widgets and the screen that owns the session (small dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from kstui.engine import events as ev


@dataclass
class SessionEvent(Message):
    """One session event, delivered on the app's loop in the order the session emitted it."""

    event: ev.Event


@dataclass
class AskQuestion(Message):
    text: str
    interrupt: bool = False
    source: str = "human"
    question_id: str | None = None
    kind: str | None = None


@dataclass
class EditQueued(Message):
    qid: int  # the queued question's own id (positions shift as the session delivers)
    text: str


@dataclass
class RemoveQueued(Message):
    qid: int
