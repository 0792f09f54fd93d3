"""The history screen: every accepted kernel (a git commit), its diff against its parent or against a
marked commit, and its EvalResult per scenario; `r` restores a version as a new commit."""

from __future__ import annotations

from pathlib import Path

import time
from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from kstui.screens.confirm import ConfirmScreen
from kstui.widgets.fit import FitStatic
from kstui.views.format import SOURCE_ICONS, fmt_x, result_summary
from kstui.widgets.speedup import ScenarioTable


def entry_row(entry: Any) -> tuple[Any, ...]:
    question = entry.question or ""
    icon = SOURCE_ICONS.get(entry.question_source or "", "")
    return (
        entry.sha[:8],
        time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.time)),
        fmt_x(entry.geomean),
        f"{entry.correct}/{entry.total}",
        Text(f"{icon} {question}".strip(), overflow="ellipsis", no_wrap=True),
    )


class HistoryScreen(Screen):
    CSS_PATH = Path(__file__).with_name("history.tcss")
    BINDINGS = [
        Binding("escape,h", "back", "back"),
        Binding("c", "mark", "compare with…"),
        Binding("r", "restore", "restore"),
        Binding("q", "back", "quit", show=False),
    ]

    def __init__(self, history: Any, *, session: Any = None, standalone: bool = False) -> None:
        super().__init__()
        self.history, self.session, self.standalone = history, session, standalone
        self.entries: list[Any] = []
        self.marked: str | None = None
        self.shown: str | None = None
        self.loaded_tip: str | None = None  # the branch tip the table was read at

    def compose(self) -> ComposeResult:
        with Horizontal(id="panes"):
            yield DataTable(id="commits", cursor_type="row", zebra_stripes=True)
            with Vertical(id="detail"):
                yield FitStatic(id="head")
                with VerticalScroll(id="diff-scroll"):
                    yield FitStatic(id="diff")
                yield ScenarioTable(id="result")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#commits", DataTable)
        for name in ("sha", "time", "geomean", "correct", "question"):
            table.add_column(name, key=name)
        table.border_title = f"history · {self.history.branch}"
        self.reload()
        table.focus()

    def on_screen_resume(self) -> None:
        # Kept between visits (the main screen installs it): read git again only if the branch moved.
        tip = self.history.tip()
        if tip != self.loaded_tip:
            self.reload(tip)

    def reload(self, tip: str | None = None) -> None:
        """Read the commits again; `tip`: the branch tip, when the caller has just read it."""
        table = self.query_one("#commits", DataTable)
        self.loaded_tip = tip or self.history.tip()
        self.entries = self.history.entries()
        table.clear()
        for entry in self.entries:
            table.add_row(*entry_row(entry), key=entry.sha)
        if not self.entries:
            self.query_one("#head", FitStatic).update("No accepted kernel yet: the history fills as versions are accepted.")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "commits" and event.row_key.value:
            self.show(event.row_key.value)

    def show(self, sha: str) -> None:
        self.shown = sha
        entry = next(e for e in self.entries if e.sha == sha)
        against = self.marked if self.marked and self.marked != sha else None
        diff = self.history.diff(sha, against=against)
        versus = f"against marked {against[:8]}" if against else "against its parent"
        result = self.history.result_of(sha)
        summary = result_summary(result.to_dict()) if result is not None else "no stored EvalResult"
        head = Text.assemble(
            (f"{sha[:8]} ", "bold"), entry.message, "\n", (f"diff {versus} · ", "dim"), summary,
        )
        if entry.question:
            source = entry.question_source or "?"
            head.append(f"\npreceded by {SOURCE_ICONS.get(source, '')} {source}: {entry.question}", style="italic")
        self.query_one("#head", FitStatic).update(head)
        self.query_one("#diff", FitStatic).update(
            Syntax(diff, "diff", theme="monokai", word_wrap=False) if diff.strip() else Text("(no change)")
        )
        self.query_one(ScenarioTable).show(result.to_dict()["scenarios"] if result is not None else [])

    def action_mark(self) -> None:
        if self.shown is None:
            return
        self.marked = None if self.marked == self.shown else self.shown
        note = f"marked {self.marked[:8]}: select another commit to compare" if self.marked else "comparison cleared"
        self.notify(note)
        self.show(self.shown)

    def action_restore(self) -> None:
        if self.shown is None:
            return
        sha = self.shown
        self.app.push_screen(
            ConfirmScreen(f"Restore {sha[:8]}? The kernel file is overwritten with it and a new commit is made."),
            lambda yes: self._restore(sha) if yes else None,
        )

    @work(exclusive=True, group="restore")
    async def _restore(self, sha: str) -> None:
        try:
            if self.session is not None:
                await self.session.rewind(sha)
                new = self.history.entries()[0].sha
            else:
                new = self.history.restore(sha)
        except Exception as exc:  # a failed restore is reported; nothing is lost either way
            self.notify(f"restore failed: {exc}", severity="error")
            return
        self.notify(f"restored {sha[:8]} as {new[:8]}")
        self.reload()

    def action_back(self) -> None:
        if self.standalone:
            self.app.exit(0)
        else:
            self.dismiss()
