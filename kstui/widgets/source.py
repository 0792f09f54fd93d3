"""The source pane: the kernel, highlighted, with the lines changed since the last accepted commit
marked in the gutter, reloaded shortly after any write (the agent's, or an editor's atomic save)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment, Segments
from rich.syntax import Syntax
from rich.text import Text
from textual.containers import ScrollableContainer
from textual.timer import Timer

from kstui import events as ev
from kstui.watcher import FileWatcher
from kstui.widgets.fit import FitStatic

# Writes arrive in bursts (an editor's temp file + rename, the agent's several edits): wait this long
# after the last one before reading, well inside the half second the pane promises.
COALESCE_S = 0.12
EDIT_TOOLS = {"edit_file", "write_file", "bash"}


def changed_lines(baseline: str | None, text: str) -> set[int]:
    """1-based numbers of the lines in text that differ from baseline (inserted or replaced)."""
    if baseline is None:
        return set()
    matcher = difflib.SequenceMatcher(None, baseline.splitlines(), text.splitlines(), autojunk=False)
    lines: set[int] = set()
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines


@dataclass
class SourceState:
    path: Path
    text: str = ""
    baseline: str | None = None
    changed: set[int] = field(default_factory=set)
    error: str | None = None
    reloads: int = 0

    def read(self) -> bool:
        """Read the file; True when its text changed. A vanished or unreadable file keeps the old text."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            self.error = f"cannot read {self.path.name}: {exc.strerror or exc}"
            return False
        self.error = None
        if text == self.text and self.reloads:
            return False
        self.text = text
        self.reloads += 1
        self.changed = changed_lines(self.baseline, text)
        return True

    def set_baseline(self, text: str | None) -> None:
        self.baseline = text
        self.changed = changed_lines(text, self.text)


class HighlightedCode(Syntax):
    """A Syntax that lexes its code once and keeps what it rendered at each width.

    Textual renders a widget's Rich renderable once to find its height and again to paint it, and lays
    the screen out more than once before the first frame: a plain Syntax lexed and rendered the kernel
    each time, three times before kstui's first frame (a 300-line kernel: about 40 ms to lex, 30 more to
    render, on the 2-core development container)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._highlighted: dict[tuple[str, tuple[int | None, int | None] | None], Text] = {}
        self._rendered: dict[tuple, list[Segment]] = {}

    def highlight(self, code: str, line_range: tuple[int | None, int | None] | None = None) -> Text:
        key = (code, line_range)
        text = self._highlighted.get(key)
        if text is None:
            text = self._highlighted[key] = super().highlight(code, line_range)
        return text.copy()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # What Syntax's output depends on, other than itself (which never changes: a new text is a new object).
        key = (options.max_width, options.no_wrap, options.legacy_windows, options.ascii_only,
               console.color_system)
        segments = self._rendered.get(key)
        if segments is None:
            segments = [segment for renderable in super().__rich_console__(console, options)
                        for segment in console.render(renderable, options)]
            if len(self._rendered) >= 8:
                self._rendered.clear()
            self._rendered[key] = segments
        yield Segments(segments)


class SourcePane(ScrollableContainer, can_focus=True):
    """Scrollable highlighted source; scroll position survives reloads because the code widget is updated
    in place rather than replaced."""

    def __init__(self, path: Path, *, baseline: str | None = None, watch: bool = True, follow_disk: bool = True,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = SourceState(path.resolve(), baseline=baseline)
        self._watch = watch
        self._follow_disk = follow_disk  # False in a replay: the file on disk is not the recorded one
        self._watcher: FileWatcher | None = None
        self._timer: Timer | None = None
        self._code = FitStatic(id="code")

    def compose(self):
        yield self._code

    def on_mount(self) -> None:
        self.state.read()
        self._render_code()
        if self._watch:
            self._watcher = FileWatcher(self.state.path, self.reload, settle_s=COALESCE_S)
            self._watcher.start()

    def on_unmount(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def poke(self) -> None:
        """Something may have written the file: reload once the burst is over."""
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(COALESCE_S, self.reload)

    def reload(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.state.read():
            self._render_code()
        self._update_title()

    def set_baseline(self, text: str | None) -> None:
        self.state.set_baseline(text)
        self._render_code()

    def show_version(self, text: str) -> None:
        """Show a given version (a replay's accepted commit) as the new baseline."""
        self.state.text = text
        self.set_baseline(text)

    def apply_event(self, event: ev.Event) -> None:
        if not self._follow_disk:
            return
        if isinstance(event, ev.ExternalEdit) or (
            isinstance(event, ev.ToolCallFinished) and event.name in EDIT_TOOLS
        ):
            self.poke()
        elif isinstance(event, (ev.Accepted, ev.Rewound)):
            # The accepted version is what is on disk now: its lines stop being "changed".
            self.state.read()
            self.set_baseline(self.state.text)

    def _update_title(self) -> None:
        changed = len(self.state.changed)
        note = f" · {changed} changed" if changed else ""
        self.border_title = f"{self.state.path.name}{note}"
        self.border_subtitle = self.state.error or ""

    def _render_code(self) -> None:
        self._code.update(
            HighlightedCode(
                self.state.text,
                "cuda",
                line_numbers=True,
                highlight_lines=self.state.changed,
                theme="monokai",
                word_wrap=False,
                indent_guides=False,
            )
        )
        self._update_title()
