"""The bank picker: questions grouped by kind, those matching the current trigger first; type to
filter, enter sends, ctrl+e (or e in the list) puts the question in the box to edit first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

if TYPE_CHECKING:
    from kstui.engine.bank import Question, QuestionBank

TRIGGER_TITLES = {"stall": "for a stalled run", "claimed_limit": "for a claimed limit"}


@dataclass
class BankChoice:
    question: Question
    edit: bool = False


def grouped(questions: list[Question], trigger: str | None, needle: str) -> list[tuple[str, list[Question]]]:
    """(heading, questions) in display order: the trigger's own questions first, then by kind."""
    needle = needle.lower().strip()
    shown = [q for q in questions if not needle or needle in f"{q.text} {q.kind} {q.id}".lower()]
    groups: list[tuple[str, list[Question]]] = []
    if trigger:
        first = [q for q in shown if q.when == trigger]
        if first:
            groups.append((TRIGGER_TITLES.get(trigger, trigger), first))
        shown = [q for q in shown if q.when != trigger]
    kinds: dict[str, list[Question]] = {}
    for q in shown:
        kinds.setdefault(q.kind, []).append(q)
    groups += sorted(kinds.items())
    return groups


class BankList(OptionList):
    BINDINGS = [Binding("e", "screen.send(True)", "edit first")]


class BankScreen(ModalScreen[BankChoice | None]):
    CSS_PATH = Path(__file__).with_name("bank.tcss")
    BINDINGS = [
        Binding("escape", "dismiss_none", "close"),
        Binding("enter", "send(False)", "send", priority=True),
        Binding("ctrl+e", "send(True)", "edit first", priority=True),
        Binding("down", "move(1)", "next", show=False),
        Binding("up", "move(-1)", "previous", show=False),
    ]

    def __init__(self, bank: QuestionBank, trigger: str | None) -> None:
        super().__init__()
        self.bank, self.trigger = bank, trigger
        self._by_option: dict[str, Question] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="bank"):
            title = "question bank" + (f" · {TRIGGER_TITLES.get(self.trigger, self.trigger)}" if self.trigger else "")
            yield Static(title, id="bank-title", markup=False)
            yield Input(placeholder="type to filter", id="filter")
            yield BankList(id="questions")
            yield Static("enter send · ctrl+e edit first · ↑↓ choose · escape close", id="bank-help")

    def on_mount(self) -> None:
        self._fill("")
        self.query_one("#filter", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill(event.value)

    def _fill(self, needle: str) -> None:
        options = self.query_one(BankList)
        options.clear_options()
        self._by_option.clear()
        for heading, questions in grouped(list(self.bank.questions), self.trigger, needle):
            options.add_option(Option(Text(heading, style="bold"), disabled=True))
            for q in questions:
                option_id = f"q-{len(self._by_option)}"
                self._by_option[option_id] = q
                options.add_option(Option(Text.assemble("  ", q.text, (f"  [{q.id}]", "dim")), id=option_id))
        first = next((i for i in range(options.option_count) if not options.get_option_at_index(i).disabled), None)
        options.highlighted = first

    def selected(self) -> Question | None:
        options = self.query_one(BankList)
        if options.highlighted is None:
            return None
        option = options.get_option_at_index(options.highlighted)
        return self._by_option.get(option.id or "")

    def action_move(self, delta: int) -> None:
        options = self.query_one(BankList)
        if delta > 0:
            options.action_cursor_down()
        else:
            options.action_cursor_up()

    def action_send(self, edit: bool) -> None:
        question = self.selected()
        if question is not None:
            self.dismiss(BankChoice(question, edit=edit))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        question = self._by_option.get(event.option.id or "")
        if question is not None:
            self.dismiss(BankChoice(question))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
