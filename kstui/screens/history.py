"""The history screen: every accepted kernel (a git commit), its diff against its parent or against a
marked commit, and its EvalResult per scenario; `r` restores a version as a new commit.

Git is read on a worker thread, through a History of the screen's own (gitpython's object readers are
not shared between threads), and the answers come back as messages: a row highlighted while keys
repeat never waits for `git diff` and `git notes show`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from harness.result import EvalResult
from kstui.engine.history import History, HistoryEntry
from kstui.engine.result_view import fmt_x, one_line
from kstui.screens.confirm import ConfirmScreen
from kstui.views.format import SOURCE_ICONS
from kstui.widgets.fit import FitStatic
from kstui.widgets.speedup import ScenarioTable

if TYPE_CHECKING:
    from kstui.engine.session import Session


def entry_row(entry: HistoryEntry) -> tuple[Any, ...]:
    question = "◆ start: the kernel as you brought it" if entry.start else entry.question or ""
    icon = SOURCE_ICONS.get(entry.question_source or "", "")
    return (
        entry.sha[:8],
        time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.time)),
        fmt_x(entry.geomean),
        f"{entry.correct}/{entry.total}",
        Text(f"{icon} {question}".strip(), overflow="ellipsis", no_wrap=True),
    )


@dataclass
class EntriesRead(Message):
    tip: str | None
    entries: list[HistoryEntry]


@dataclass
class DetailRead(Message):
    sha: str
    against: str | None
    diff: str
    result: EvalResult | None


class HistoryScreen(Screen):
    CSS_PATH = Path(__file__).with_name("history.tcss")
    BINDINGS = [
        Binding("escape,h", "back", "back"),
        Binding("c", "mark", "compare with…"),
        Binding("r", "restore", "restore"),
        Binding("q", "back", "quit", show=False),
    ]

    def __init__(self, history: History, *, session: Session | None = None, standalone: bool = False) -> None:
        super().__init__()
        self.history, self.session, self.standalone = history, session, standalone
        self.entries: list[HistoryEntry] = []
        self.marked: str | None = None
        self.shown: str | None = None
        self.loaded_tip: str | None = None  # the branch tip the table was read at
        self._reader: History | None = None  # the worker threads' own view of the repository
        self._reading = threading.Lock()  # one reader at a time: gitpython's object reader is one process

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

    def on_unmount(self) -> None:
        with self._reading:
            if self._reader is not None:
                self._reader.close()

    def on_screen_resume(self) -> None:
        # Kept between visits (the main screen installs it): read git again only if the branch moved.
        self.reload(only_if_moved=True)

    def _git(self) -> History:
        if self._reader is None:
            self._reader = History(self.history.kernel, self.history.branch)
        return self._reader

    @work(thread=True, exclusive=True, group="entries")
    def reload(self, only_if_moved: bool = False) -> None:
        """Read the commits again (on a thread); with only_if_moved, only when the branch tip moved."""
        with self._reading:
            git = self._git()
            tip = git.tip()
            if only_if_moved and tip == self.loaded_tip:
                return
            entries = git.entries()
        self.post_message(EntriesRead(tip, entries))

    def on_entries_read(self, message: EntriesRead) -> None:
        table = self.query_one("#commits", DataTable)
        self.loaded_tip, self.entries = message.tip, message.entries
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
        self._read_detail(sha, self.marked if self.marked and self.marked != sha else None)

    @work(thread=True, exclusive=True, group="detail")
    def _read_detail(self, sha: str, against: str | None) -> None:
        with self._reading:
            git = self._git()
            diff, result = git.diff(sha, against=against), git.result_of(sha)
        self.post_message(DetailRead(sha, against, diff, result))

    def on_detail_read(self, message: DetailRead) -> None:
        if message.sha != self.shown:
            return  # the reader has moved on to another row
        sha, against, diff, result = message.sha, message.against, message.diff, message.result
        entry = next(e for e in self.entries if e.sha == sha)
        versus = f"against marked {against[:8]}" if against else "against its parent"
        summary = one_line(result) if result is not None else "no stored EvalResult"
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
        self.query_one(ScenarioTable).show(result.scenarios if result is not None else [])

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
                if (said := self.history.backup_said()) is not None:
                    self.notify(said, severity="warning", timeout=15)
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
