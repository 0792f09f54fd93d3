"""The question box (Enter queues for the next turn boundary, ctrl+s interrupts and asks now) and the
visible, editable queue of questions not yet delivered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from kstui.engine import events as ev
from kstui.views.format import SOURCE_ICONS
from kstui.widgets.messages import AskQuestion, EditQueued, RemoveQueued

if TYPE_CHECKING:
    from kstui.engine.bank import Question

PLACEHOLDER = "Ask the agent…  enter: queue for the next turn · ctrl+s: interrupt and ask now"


class QuestionBox(Input):
    BINDINGS = [Binding("ctrl+s", "ask_now", "ask now", priority=True)]

    def __init__(self, **kwargs) -> None:
        super().__init__(placeholder=PLACEHOLDER, select_on_focus=False, **kwargs)
        self.editing: int | None = None  # the id of the queued question being edited, if any
        self._source = "human"
        self._question: Question | None = None  # the bank question being edited before it is sent

    def prefill(self, question: Question, *, source: str) -> None:
        """Put a bank question in the box to edit before sending; it keeps its source, id and kind."""
        self.value, self._source, self._question = question.text, source, question
        self.border_title = f"{source} question · edit, then enter to queue or ctrl+s to ask now"
        self.focus()

    def edit(self, qid: int, position: int, text: str) -> None:
        self.editing = qid
        self.value = text
        self.border_title = f"editing queued question {position + 1} · enter saves · escape cancels"
        self.focus()

    def _finish_edit(self) -> None:
        self.editing, self._source, self._question = None, "human", None
        self.border_title = None
        self.value = ""

    def _send(self, interrupt: bool) -> None:
        text = self.value.strip()
        if not text:
            return
        if self.editing is not None and not interrupt:
            self.post_message(EditQueued(self.editing, text))
        else:
            if self.editing is not None:
                self.post_message(RemoveQueued(self.editing))
            q = self._question
            self.post_message(AskQuestion(
                text, interrupt=interrupt, source=self._source,
                question_id=q.id if q is not None else None, kind=q.kind if q is not None else None,
            ))
        self._finish_edit()

    async def action_submit(self) -> None:
        self._send(interrupt=False)

    def action_ask_now(self) -> None:
        self._send(interrupt=True)

    def cancel_edit(self) -> None:
        if self.editing is not None or self._question is not None:
            self._finish_edit()


class QueueList(OptionList):
    """Queued questions, oldest first: enter edits the selected one, delete (or x) removes it."""

    BINDINGS = [
        Binding("enter", "edit_selected", "edit"),
        Binding("delete,x", "remove_selected", "remove"),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.queue: list[dict[str, Any]] = []

    def apply_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.QueueChanged):
            self.show(event.queue)

    def show(self, queue: list[dict[str, Any]]) -> None:
        self.queue = list(queue)
        highlighted = self.highlighted
        self.clear_options()
        for i, item in enumerate(self.queue):
            icon = SOURCE_ICONS.get(str(item.get("source", "human")), "?")
            now = " ⚡" if item.get("interrupt") else ""
            self.add_option(Option(Text(f"{i + 1}. {icon}{now} {item.get('text', '')}", overflow="ellipsis", no_wrap=True)))
        self.display = bool(self.queue)
        self.border_title = f"queued questions ({len(self.queue)}) · enter edit · del remove"
        if self.queue:
            self.highlighted = min(highlighted or 0, len(self.queue) - 1)

    def action_edit_selected(self) -> None:
        if self.highlighted is not None and self.highlighted < len(self.queue):
            item = self.queue[self.highlighted]
            self.screen.query_one(QuestionBox).edit(item["id"], self.highlighted, str(item.get("text", "")))

    def action_remove_selected(self) -> None:
        if self.highlighted is not None and self.highlighted < len(self.queue):
            self.post_message(RemoveQueued(self.queue[self.highlighted]["id"]))
