"""The transcript pane: a window of mounted block views over TranscriptState.

Only the last blocks are widgets; older ones live on as plain data and come back a page at a time on
request, so a run of 11,500 tool calls scrolls like a run of ten. The window is bounded in widgets as
well as in blocks: a streamed reply is a Markdown widget per paragraph, and Textual lays out every
mounted widget on every frame, streamed text's included (docs/BENCHMARKS.md). Blocks that arrive while
the reader is up in the history are mounted when they come back to the end.
"""

from __future__ import annotations

import asyncio
import json

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual import events
from textual.actions import SkipAction
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Button

from harness.result import EvalResult
from kstui.engine import events as ev
from kstui.engine.result_view import fmt_x
from kstui.views.format import fmt_num
from kstui.views.transcript_state import Block, Change, TranscriptState
from kstui.widgets.block_view import BlockView
from kstui.widgets.fit import FitStatic
from kstui.widgets.relayout import relayout_now

SHOWN_CHARS = 8_000  # a tool result is kept whole in state; the view shows its head
# Blocks kept mounted: a few screens of collapsed blocks. Every mounted block is laid out again when
# the column's width changes, so this bounds what a resize costs.
WINDOW = 40
# Widgets those blocks may hold between them (a collapsed block is one; a reply, one per paragraph),
# and what one press of "show earlier" mounts at most. The last two blocks stay whatever they weigh.
WIDGET_BUDGET = 100
KEEP_LAST = 2


def clip(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}\n… {len(text) - SHOWN_CHARS:,} more characters"


def scenario_table(result: EvalResult) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
    for name, justify in (("scenario", "left"), ("verdict", "left"), ("µs", "right"), ("base µs", "right"),
                          ("speedup", "right"), ("TFLOP/s", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in result.scenarios:
        verdict = Text(s.verdict, style="green" if s.correct else "bold red")
        table.add_row(s.id, verdict, fmt_num(s.time_us), fmt_num(s.baseline_us), fmt_x(s.speedup), fmt_num(s.tflops))
    return table


STATUS_STYLES = {
    "running": "yellow", "error": "bold red", "rejected": "red", "accepted": "bold green", "done": "",
    "ok": "",
}


class FoldView(FitStatic, BlockView, can_focus=True):
    """Thinking, tool calls, evaluations, edits and long messages: one line that opens (enter or click).

    One widget per block, rendering its own title and body: a Collapsible is five widgets, and
    restyling thousands of them is what makes a long transcript slow.
    """

    BINDINGS = [Binding("enter,space", "toggle_fold", "open/close", show=False)]

    def __init__(self, block: Block) -> None:
        super().__init__(classes=f"block fold {block.kind}")
        self._block = block
        self.collapsed = True
        self.show(block)

    @property
    def title(self) -> str:
        return self._block.title

    def show(self, block: Block) -> None:
        self._block = block
        style = "italic dim" if block.kind == "thinking" else STATUS_STYLES.get(block.status, "")
        head = Text.assemble(("▶ " if self.collapsed else "▼ ", "dim"), (block.title, style))
        if block.kind == "thinking" and block.body:
            head.append(f" · {len(block.body):,} chars", style="dim")
        if self.collapsed:
            self.update(head)
            return
        parts: list[RenderableType] = [head]
        if block.kind == "eval" and block.result is not None:
            parts.append(scenario_table(block.result))
            if block.detail:
                parts.append(Syntax(clip(block.detail), "diff", theme="monokai"))
        elif block.kind == "edit":
            parts.append(Syntax(clip(block.detail), "diff", theme="monokai"))
        else:
            if block.tool_input is not None:
                parts.append(Text(clip(json.dumps(block.tool_input, indent=2, ensure_ascii=False)), style="dim"))
            if block.body:
                parts.append(Text(clip(block.body)))
            if block.detail:
                parts.append(Text(clip(block.detail), style="red" if block.status == "error" else ""))
        self.update(Group(*parts))

    async def stream(self, text: str) -> None:
        self.show(self._block)

    def action_toggle_fold(self) -> None:
        self.collapsed = not self.collapsed
        self.show(self._block)

    def on_click(self) -> None:
        self.action_toggle_fold()


class LineView(FitStatic, BlockView):
    """Questions, notices and errors: always visible, styled by kind, source and level."""

    def __init__(self, block: Block) -> None:
        super().__init__(classes=f"block {block.kind}")
        self.show(block)

    def show(self, block: Block) -> None:
        if block.source:
            self.add_class(f"-{block.source}")
        if block.status:
            self.add_class(f"-{block.status}")
        if block.kind == "question":
            self.update(Text.assemble((block.title, "bold"), "\n", block.body))
        else:
            self.update(Text(block.title))


def make_view(block: Block) -> Widget:
    if block.kind == "text":
        # Markdown (markdown-it and Textual's Markdown widgets) is imported with the first text block,
        # not before the app's first frame, which never shows one.
        from kstui.widgets.text import TextView

        return TextView(block)
    if block.kind in ("question", "notice", "error") or (block.kind == "user" and block.body.count("\n") < 3):
        if block.kind == "user":
            return LineView(Block("notice", f"→ {block.body}", status="user"))
        return LineView(block)
    return FoldView(block)


def _weight(view: Widget) -> int:
    """Widgets a block view is laid out as: itself and, for a reply, its Markdown blocks."""
    return 1 + len(view.children)


class Transcript(VerticalScroll, can_focus=True):
    """The transcript. While the reader follows the end, at most `window` blocks and `budget` widgets
    stay mounted; earlier ones come back a page (at most PAGE blocks, `budget` widgets) at a time; blocks
    that arrive while the reader is elsewhere wait as data below, until the reader comes back to the end,
    so a reader who stays up in the history never makes every frame lay out a growing transcript."""

    PAGE = 25
    BINDINGS = [Binding("u", "show_earlier", "earlier entries")]

    def __init__(self, *, window: int = WINDOW, budget: int = WIDGET_BUDGET, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = TranscriptState()
        self.window = window
        self.budget = budget
        self._views: dict[int, Widget] = {}  # block index -> view: a run of blocks from _first on
        self._first = 0
        self._reading_back = False  # earlier pages were asked for and the reader has not come back to the end
        self._earlier = Button("", id="earlier", variant="default", compact=True)
        self._newer = Button("", id="newer", variant="default", compact=True)
        # Session events and catching up both mount views: one at a time, each with the state as it was.
        self._lock = asyncio.Lock()

    def compose(self):
        yield self._earlier
        yield self._newer

    def on_mount(self) -> None:
        self._earlier.display = False
        self._newer.display = False
        self.anchor()

    # A focus change restyles the transcript alone. Textual restyles a widget and all of its descendants
    # when its focus (or a `:focus-within` rule's) changes, in case a rule styles them by it; no rule
    # styles the blocks by the transcript's focus, and a long streamed reply puts hundreds of Markdown
    # paragraphs under it, so each `a` or escape spent most of its frame restyling them
    # (bench/bench_keys.py, docs/BENCHMARKS.md). The border follows `-focus-within` (main.tcss).

    def watch_has_focus(self, _has_focus: bool) -> None:
        self._restyle_focus()

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        self._restyle_focus()

    def on_descendant_blur(self, _event: events.DescendantBlur) -> None:
        self._restyle_focus()

    def _restyle_focus(self) -> None:
        self.set_class(self.has_focus_within, "-focus-within", update=False)
        self.app.stylesheet.update_nodes([self], animate=True)

    @property
    def mounted_count(self) -> int:
        return len(self._views)

    @property
    def waiting_below(self) -> int:
        """Blocks that arrived while the reader was away from the end, not mounted yet."""
        return len(self.state.blocks) - (self._first + len(self._views))

    async def apply_event(self, event: ev.Event) -> None:
        async with self._lock:
            changes = self.state.apply(event)
            if not self.is_attached:  # the app is closing: the state still records the event
                return
            for change in changes:
                await self._realise(change)

    async def load(self, events: list[ev.Event]) -> None:
        """Fold many events (a resumed or replayed run) and mount only the last window."""
        async with self._lock:
            for event in events:
                self.state.apply(event)
            await self._rebuild()

    async def _rebuild(self) -> None:
        await self.remove_children(list(self._views.values()))
        self._views.clear()
        self._reading_back = False
        self._first = self._page_start(len(self.state.blocks), self.window)
        views = [self._view(i) for i in range(self._first, len(self.state.blocks))]
        if views:
            await self.mount_all(views, before=self._newer)
        self._update_ends()
        self.scroll_end(animate=False, immediate=True)

    def _page_start(self, end: int, most: int) -> int:
        """Where a page of blocks ending before `end` starts: at most `most` blocks and, past the first
        one, the widget budget (a text block's widgets estimated from its paragraphs)."""
        start, weight = end, 0
        while start > 0 and end - start < most:
            block = self.state.blocks[start - 1]
            weight += block.body.count("\n\n") + 2 if block.kind == "text" else 1
            if weight > self.budget and start < end:
                break
            start -= 1
        return start

    def _view(self, index: int) -> Widget:
        view = make_view(self.state.blocks[index])
        self._views[index] = view
        return view

    def _at_end(self, scroll_y: float | None = None) -> bool:
        # All of it fits (before the first layout Textual's anchor leaves scroll_y below zero), or the
        # reader is on the last line.
        y = self.scroll_y if scroll_y is None else scroll_y
        return self.max_scroll_y <= 0 or y >= self.max_scroll_y - 1

    def _following(self) -> bool:
        return not self._reading_back and self._at_end()

    async def _realise(self, change: Change) -> None:
        if change.op == "append":
            if self._following():
                await self._mount_waiting()
            self._update_ends()
            return
        view = self._views.get(change.index)
        if not isinstance(view, BlockView):
            return  # not mounted: its view is made from the state when it is
        if change.op == "update":
            view.show(self.state.blocks[change.index])
        elif change.op == "stream":
            await view.stream(change.text)
        elif change.op == "close":
            await view.close()
            self._prune()  # the reply has all its paragraphs now

    def _prune(self) -> None:
        """Unmount the oldest blocks past the window, unless the reader has scrolled away from the end
        or asked for earlier pages (those stay until the reader is back at the end)."""
        if not self._following():
            return
        weight = sum(_weight(view) for view in self._views.values())
        while len(self._views) > KEEP_LAST and (len(self._views) > self.window or weight > self.budget):
            view = self._views.pop(self._first, None)
            self._first += 1
            if view is not None:
                weight -= _weight(view)
                view.remove()
        self._update_ends()

    def _update_ends(self) -> None:
        if self._earlier.display != (self._first > 0):
            self.refresh_bindings()  # the footer offers `u` only when there is something earlier
        self._earlier.display = self._first > 0
        if self._first:
            more = self._first - self._page_start(self._first, self.PAGE)
            self._earlier.label = f"▲ {self._first:,} earlier entries — show {more} more"
        waiting = self.waiting_below
        self._newer.display = waiting > 0
        if waiting:
            self._newer.label = f"▼ {waiting:,} newer entries — end to follow"

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._at_end(new_value):
            self._reading_back = False
            if self.waiting_below:
                self.run_worker(self._catch_up(), group="catch-up")

    async def _catch_up(self) -> None:
        """The reader is back at the end: mount what arrived meanwhile, and follow the end again."""
        async with self._lock:
            # Still there (it may have waited behind an earlier page that the reader asked for since).
            if self.waiting_below and self._following():
                await self._mount_waiting()
                self.scroll_end(animate=False)

    async def _mount_waiting(self) -> None:
        """Mount the blocks not mounted yet (the last window of them, if more wait) and prune."""
        total, end = len(self.state.blocks), self._first + len(self._views)
        if total - end > self.window:
            await self._rebuild()
            return
        views = [self._view(i) for i in range(end, total)]
        if views:
            await self.mount_all(views, before=self._newer)
        self._prune()
        self._update_ends()

    async def show_earlier(self) -> None:
        # Before anything yields: a block streamed in meanwhile must not prune the page being mounted.
        self._reading_back = True
        async with self._lock:
            start = self._page_start(self._first, self.PAGE)
            views = [self._view(i) for i in range(start, self._first)]
            self._first = start
            if views:
                await self.mount_all(views, after=self._earlier)
            self._update_ends()

    # A page at a time, at once: Textual animates a page scroll over many frames, each laying out and
    # painting the transcript while text streams into it, and the last of them came 100-200 ms after
    # the key in one press in ten (bench/bench_keys.py).

    def action_page_up(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.scroll_page_up(animate=False)

    def action_page_down(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.scroll_page_down(animate=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "show_earlier":
            return self._first > 0
        return True

    async def action_show_earlier(self) -> None:
        await self.show_earlier()
        self.scroll_home(animate=False)
        # The page is painted now rather than on the screen's next update tick, as a divider move is.
        relayout_now(self.screen, self)

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button is self._earlier:
            event.stop()
            await self.show_earlier()
        elif event.button is self._newer:
            event.stop()
            self.scroll_end(animate=False)
