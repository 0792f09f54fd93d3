"""The help screen: every key of the screen underneath, and how questions work."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

INTRO = """\
# kstui

The agent edits the kernel; the harness judges every version: a version is **accepted** (and
committed to git) only when it is correct on every scenario and its geomean beats the best accepted one
by more than the measured noise.

**Questions** move a run. Type one in the box (`a` focuses it): *enter* queues it for the next turn
boundary, *ctrl+s* interrupts the agent and asks now. When the run stalls, the speedup panel says so
and `b` lights up in the footer: the bank has questions for exactly that moment. In the box, *escape*
leaves the box; a second *escape* interrupts the agent. In the queue, *enter* edits and *delete*
removes a question.

| key | action |
|-----|--------|
"""


class HelpScreen(ModalScreen[None]):
    CSS_PATH = Path(__file__).with_name("help.tcss")
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def __init__(self, active_bindings: dict) -> None:
        super().__init__()
        rows = []
        for key, (_node, binding, enabled, _tooltip) in active_bindings.items():
            if not enabled or not binding.description:
                continue
            rows.append(f"| `{self.app_key_display(key)}` | {binding.description} |")
        rows += [
            "| `tab` / `shift+tab` | move focus between panes |",
            "| `s` / `r` (scenario table) | sort by the next column / reverse |",
            "| mouse: drag a divider | move the edge between two columns, as `[` `]` `{` `}` do |",
        ]
        self.text = INTRO + "\n".join(rows) + "\n"

    @staticmethod
    def app_key_display(key: str) -> str:
        names = {"question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]",
                 "left_curly_bracket": "{", "right_curly_bracket": "}", "equals_sign": "=", "plus": "+",
                 "minus": "-"}
        return names.get(key, key)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(self.text)
