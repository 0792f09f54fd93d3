"""The help screen: every key of the screen underneath, and how questions work.

One Static of Rich renderables rather than a Markdown document: Textual's Markdown makes a widget per
paragraph and per table cell, and building them made `?` the slowest key of the app (about 110 ms
while text streamed, against 20 ms for a one-Static dialog; bench/bench_keys.py).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Group
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

INTRO = """\
The agent edits the kernel; the harness judges every version: a version is **accepted** (and
committed to git) only when it is correct on every scenario and its geomean beats the best accepted one
by more than the measured noise.

**Questions** move a run. Type one in the box (`a` focuses it): *enter* queues it for the next turn
boundary, *ctrl+s* interrupts the agent and asks now. When the run stalls, the speedup panel says so
and `b` lights up in the footer: the bank has questions for exactly that moment. In the box, *escape*
leaves the box; a second *escape* interrupts the agent. In the queue, *enter* edits and *delete*
removes a question.
"""

MORE_KEYS = (
    ("tab / shift+tab", "move focus between panes"),
    ("s / r (scenario table)", "sort by the next column / reverse"),
    ("mouse: drag a divider", "move the edge between two columns, as [ ] { } do"),
    ("1 / 2 / 3 (narrow terminal)", "show the source, transcript or speedup tab"),
    ("ctrl+p", "command palette"),
)


class HelpScreen(ModalScreen[None]):
    CSS_PATH = Path(__file__).with_name("help.tcss")
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def __init__(self, active_bindings: dict) -> None:
        super().__init__()
        shown = [(node, key, binding) for key, (node, binding, enabled, _tooltip) in active_bindings.items()
                 if enabled and binding.description]
        # The screen's own keys (kstui's) first; the focused pane's scrolling keys after them.
        shown.sort(key=lambda row: not isinstance(row[0], Screen))
        self.keys: list[tuple[str, str]] = [(self.app_key_display(key), binding.description)
                                            for _node, key, binding in shown]
        self.keys += MORE_KEYS

    @staticmethod
    def app_key_display(key: str) -> str:
        names = {"question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]",
                 "left_curly_bracket": "{", "right_curly_bracket": "}", "equals_sign": "=", "plus": "+",
                 "minus": "-"}
        return names.get(key, key)

    def compose(self) -> ComposeResult:
        table = Table("key", "action", box=None, header_style="bold", pad_edge=False, expand=True)
        for key, action in self.keys:
            table.add_row(Text(key, style="bold"), action)
        with VerticalScroll(id="help"):
            yield Static(Group(Text("kstui", style="bold"), Text(), Markdown(INTRO), Text(), table), id="help-text")
