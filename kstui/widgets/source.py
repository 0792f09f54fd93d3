"""The source pane: the kernel, highlighted, with the lines changed since the last accepted commit
marked in the gutter, reloaded shortly after any write (the agent's, or an editor's atomic save)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.geometry import Size
from textual.selection import Selection
from textual.strip import Strip
from textual.timer import Timer

from kstui.engine import events as ev
from kstui.engine.watcher import FileWatcher
from kstui.views.highlight import HighlightedLines
from kstui.widgets.steady import SteadyScrollbars

# Writes arrive in bursts (an editor's temp file + rename, the agent's several edits): wait this long
# after the last one before reading, well inside the half second the pane promises.
COALESCE_S = 0.12
EDIT_TOOLS = {"edit_file", "write_file", "bash"}
CHANGED_POINTER = Style(color="red")  # as rich's Syntax marks a highlighted line


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


class SourcePane(SteadyScrollbars, can_focus=True):
    """Scrollable highlighted source, drawn line by line (the Line API): a frame renders the lines on
    screen and no others, so the first frame, a scroll and a divider move cost the same for a kernel of
    any length. The scroll position survives reloads, since a reload only swaps the lines."""

    def __init__(self, path: Path, *, baseline: str | None = None, watch: bool = True, follow_disk: bool = True,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = SourceState(path.resolve(), baseline=baseline)
        self._watch = watch
        self._follow_disk = follow_disk  # False in a replay: the file on disk is not the recorded one
        self._watcher: FileWatcher | None = None
        self._timer: Timer | None = None
        self.code = HighlightedLines("")
        # Until the text or its marks change: each line's code, uncropped, and the lines as drawn at a
        # scroll offset and width (a divider move back to a width seen before draws nothing again).
        self._code_strips: dict[int, Strip] = {}
        self._strips: LRUCache[tuple[int, int, int], Strip] = LRUCache(1024)

    def on_mount(self) -> None:
        self.state.read()
        self._show_text()
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
            self._show_text()
        self._update_title()

    def set_baseline(self, text: str | None) -> None:
        self.state.set_baseline(text)
        self._show_marks()

    def show_version(self, text: str) -> None:
        """Show a given version (a replay's accepted commit) as the new baseline."""
        self.state.text = text
        self.state.set_baseline(text)
        self._show_text()

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

    def _show_text(self) -> None:
        self.code = HighlightedLines(self.state.text)
        self._code_strips.clear()
        self._show_marks()

    @property
    def _gutter(self) -> int:
        return len(str(len(self.code.lines))) + 3  # the changed-line pointer, the number, a space

    def _show_marks(self) -> None:
        self._strips.clear()
        self.virtual_size = Size(self._gutter + self.code.width, len(self.code.lines))
        self._update_title()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        if index >= len(self.code.lines):
            return Strip.blank(width, self.code.background)
        selection = self.text_selection
        key = (index, scroll_x, width)
        if selection is None and (cached := self._strips.get(key)) is not None:
            return cached
        code = self._code_strip(index, selection)
        # The gutter stays put while the code scrolls sideways under it; offsets (for a mouse
        # selection) count from the code's first column.
        code = code.crop_extend(scroll_x, scroll_x + max(0, width - self._gutter), self.code.background)
        strip = Strip.join([self._gutter_strip(index), code.apply_offsets(scroll_x, index)]).crop(0, width)
        if selection is None:
            self._strips[key] = strip
        return strip

    def _gutter_strip(self, index: int) -> Strip:
        number, changed_number = self.code.number_styles
        column = str(index + 1).rjust(self._gutter - 3) + " "
        if index + 1 in self.state.changed:
            return Strip([Segment("❱ ", CHANGED_POINTER), Segment(column, changed_number)], self._gutter)
        return Strip([Segment("  ", changed_number), Segment(column, number)], self._gutter)

    def _code_strip(self, index: int, selection: Selection | None) -> Strip:
        span = selection.get_span(index) if selection is not None else None
        if span is None:
            strip = self._code_strips.get(index)
            if strip is None:
                strip = self._code_strips[index] = Strip(self.code.line(index).render(self.app.console, end=""))
            return strip
        text = self.code.line(index).copy()
        start, end = span
        text.stylize(self.screen.get_component_rich_style("screen--selection"), start, len(text) if end == -1 else end)
        return Strip(text.render(self.app.console, end=""))

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        return selection.extract("\n".join(self.code.lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self._strips.clear()
        self.refresh()
