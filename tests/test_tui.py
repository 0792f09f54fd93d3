"""Pilot tests of the TUI fed with recorded session events: panes, windowing, reloads, layout, replay,
the standalone history screen. The tests driving a live Session are in test_tui_session.py."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pilot_support import history_read, until  # noqa: E402
from test_tui_events import KERNEL, T0, fake_result, recorded_run  # noqa: E402

from kstui.app import KstuiApp, replay_kernel  # noqa: E402
from kstui.engine import events as ev  # noqa: E402
from kstui.engine.history import History  # noqa: E402
from kstui.screens.confirm import ConfirmScreen  # noqa: E402
from kstui.screens.help import HelpScreen  # noqa: E402
from kstui.screens.history import HistoryScreen  # noqa: E402
from kstui.screens.replay import ReplayPlayer  # noqa: E402
from kstui.widgets.messages import SessionEvent  # noqa: E402
from kstui.widgets.text import TextView  # noqa: E402
from kstui.widgets.transcript import FoldView  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    path = tmp_path / "flash_fwd.cu"
    path.write_text(KERNEL)
    return path


async def feed(app: KstuiApp, pilot, events: list[ev.Event]) -> None:
    goal = app.main.events_seen + len(events)
    for event in events:
        app.main.post_message(SessionEvent(event))
    await until(pilot, lambda: app.main.events_seen == goal)
    await pilot.pause()


async def test_recorded_run_fills_every_pane(kernel):
    app = KstuiApp(kernel=kernel, baseline=KERNEL.replace("int n) {", "int n)  {"))
    async with app.run_test(size=(140, 40)) as pilot:
        events = recorded_run()
        await feed(app, pilot, events)
        main = app.main
        blocks = main.transcript.state.blocks
        # Every block is mounted (a small run), streamed text as one Markdown view with the whole text.
        assert main.transcript.mounted_count == len(blocks)
        text_view = next(v for v in main.transcript.query(TextView))
        assert "double-buffer" in text_view.source and text_view.source.count("tiling") == 1
        folds = list(main.transcript.query(FoldView))
        assert all(f.collapsed for f in folds)  # tool calls, thinking, evaluations start closed
        speed = main.speedup.state
        accepted = next(e for e in events if isinstance(e, ev.Accepted))
        assert speed.best == accepted.geomean and speed.result_eval == 2
        table = main.speedup.query_one("#scenarios")
        assert table.row_count == len(fake_result(KERNEL).scenarios)
        # The Accepted event makes what is on disk the new baseline: no line is marked changed any more.
        assert main.source.state.changed == set()


async def test_source_marks_changed_lines_and_reloads_on_atomic_save(kernel):
    app = KstuiApp(kernel=kernel, baseline=KERNEL)
    async with app.run_test(size=(120, 40)) as pilot:
        source = app.main.source
        assert source.state.changed == set()
        long_kernel = KERNEL + "".join(f"// line {i}\n" for i in range(200))
        kernel.write_text(long_kernel)
        await until(pilot, lambda: "line 199" in source.state.text, timeout=2)
        # The pane scrolls once the layout after the reload has shown its scrollbar.
        await until(pilot, lambda: source.max_scroll_y > 120 and source.allow_vertical_scroll)
        source.scroll_to(y=120, animate=False, immediate=True)
        await pilot.pause()
        scrolled = source.scroll_y
        assert scrolled > 100
        # An editor's atomic save: write a temp file, rename it over the kernel.
        tmp = kernel.with_name(".flash_fwd.cu.swp")
        tmp.write_text(long_kernel.replace("// line 150", "// line 150 edited"))
        os.replace(tmp, kernel)
        await until(pilot, lambda: "line 150 edited" in source.state.text, timeout=2)
        await pilot.pause()
        assert source.scroll_y == scrolled
        changed_line = long_kernel.splitlines().index("// line 150") + 1
        assert changed_line in source.state.changed


async def test_source_keeps_its_line_numbers_in_view_and_a_mouse_selection_copies_code_only(kernel):
    wide = KERNEL + "".join(f"// {'x' * 150} column end {i}\n" for i in range(3))
    kernel.write_text(wide)
    app = KstuiApp(kernel=kernel, baseline=KERNEL, watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        source = app.main.source
        await pilot.pause()
        assert source.border_title == "flash_fwd.cu · 3 changed"
        assert source.render_line(6).text.startswith("❱ 7 // xxx")  # a changed line is marked
        await until(pilot, lambda: source.allow_horizontal_scroll)
        source.scroll_to(x=source.max_scroll_x, animate=False, immediate=True)
        await pilot.pause()
        line = source.render_line(6).text
        assert line.startswith("❱ 7 ") and "column end 0" in line  # scrolled sideways under the gutter
        assert source.render_line(0).text.startswith("  1 ")
        source.scroll_to(x=0, animate=False, immediate=True)
        await pilot.pause()
        # Drag over "__global__ void" on line 3: one cell of border and four of gutter to its left.
        await pilot.mouse_down(source, offset=(5, 3))
        await pilot.hover(source, offset=(19, 3))
        await pilot.mouse_up(source, offset=(19, 3))
        await pilot.pause()
        assert app.screen.get_selected_text() == "__global__ void"


async def test_a_layout_that_changes_nothing_leaves_the_scrollbars_of_the_source_and_table_alone(kernel, monkeypatch):
    from textual.scrollbar import ScrollBar

    kernel.write_text(KERNEL + "".join(f"// line {i}\n" for i in range(200)))
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        source, table = app.main.source, app.main.speedup.query_one("#scenarios")
        assert source.show_vertical_scrollbar
        refreshed: list[ScrollBar] = []
        original = ScrollBar.refresh

        def recording(self, *args, **kwargs):
            refreshed.append(self)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(ScrollBar, "refresh", recording)
        for _ in range(5):  # what a streamed paragraph does: the screen lays out again
            app.screen.refresh(layout=True)
            await pilot.pause()
        assert not [bar for bar in refreshed if bar.parent in (source, table)]
        kernel.write_text(KERNEL)  # shorter than the pane: its scrollbar goes
        source.reload()
        await pilot.pause()
        assert not source.show_vertical_scrollbar


async def test_source_burst_of_writes_is_one_reload(kernel):
    app = KstuiApp(kernel=kernel)
    async with app.run_test(size=(120, 40)) as pilot:
        source = app.main.source
        before = source.state.reloads
        for i in range(10):
            kernel.write_text(KERNEL + f"// {i}\n")
        await until(pilot, lambda: "// 9" in source.state.text, timeout=2)
        await pilot.pause(0.3)
        assert source.state.reloads - before <= 2


async def test_eleven_thousand_tool_calls_stay_windowed(kernel):
    app = KstuiApp(kernel=kernel, watch=False, transcript_window=60)
    async with app.run_test(size=(140, 40)) as pilot:
        transcript = app.main.transcript
        events: list[ev.Event] = []
        for i in range(11_500):
            events.append(ev.ToolCallStarted(1, f"c{i}", "bash", {"command": f"echo {i}"}))
            events.append(ev.ToolCallFinished(1, f"c{i}", "bash", f"{i}\n", seconds=0.01))
        await transcript.load(events)
        assert len(transcript.state.blocks) == 11_500
        assert transcript.mounted_count == 60
        # Live events keep the window size.
        app.main.post_message(SessionEvent(ev.ToolCallStarted(1, "last", "bash", {"command": "echo last"})))
        await until(pilot, lambda: len(transcript.state.blocks) == 11_501)
        await pilot.pause()
        assert transcript.mounted_count == 60
        earlier = transcript.query_one("#earlier")
        assert f"11,441 earlier entries — show {transcript.PAGE} more" in str(earlier.label)
        transcript.focus()
        await pilot.press("u")
        await until(pilot, lambda: transcript.mounted_count == 60 + transcript.PAGE)
        first = next(iter(transcript.query(FoldView)))
        assert first.title.startswith(f"bash echo {11_441 - transcript.PAGE}")


async def test_an_earlier_page_stays_while_blocks_stream_in_until_the_reader_is_back_at_the_end(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        transcript = app.main.transcript
        calls = [ev.ToolCallStarted(1, f"c{i}", "bash", {"command": f"echo {i}"}) for i in range(200)]
        await transcript.load(calls)
        await pilot.pause()
        assert transcript.mounted_count == 40
        paging = asyncio.create_task(transcript.show_earlier())
        await asyncio.sleep(0)  # the page is being mounted when the next block arrives
        await transcript.apply_event(ev.ToolCallStarted(1, "new", "bash", {"command": "echo new"}))
        await paging
        await pilot.pause()
        # The page stays; the new block waits below, as data, while the reader reads back.
        assert transcript.mounted_count == 40 + transcript.PAGE and transcript.waiting_below == 1
        assert "1 newer entries" in str(transcript.query_one("#newer").label)
        transcript.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        await transcript.apply_event(ev.ToolCallStarted(1, "while-reading", "bash", {"command": "echo"}))
        assert transcript.mounted_count == 40 + transcript.PAGE and transcript.waiting_below == 2
        transcript.scroll_end(animate=False, immediate=True)  # back at the end: caught up, the window again
        await until(pilot, lambda: transcript.waiting_below == 0)
        await pilot.pause()
        assert transcript.mounted_count == 40 and not transcript.query_one("#newer").display
        titles = [v.title for v in transcript.query(FoldView)]
        assert titles[-2:] == ["bash echo new", "bash echo"]


async def test_a_reader_up_in_the_history_does_not_grow_the_mounted_transcript(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        transcript = app.main.transcript
        await transcript.load([ev.ToolCallStarted(1, f"c{i}", "bash", {"command": f"echo {i}"}) for i in range(60)])
        await pilot.pause()
        transcript.focus()
        await pilot.press("pageup")  # reading back, by scrolling alone
        await pilot.pause(0.3)
        for i in range(300):
            await transcript.apply_event(ev.ToolCallStarted(2, f"n{i}", "bash", {"command": f"later {i}"}))
        await pilot.pause()
        assert transcript.mounted_count == 40 and transcript.waiting_below == 300
        await pilot.press("end")
        await until(pilot, lambda: transcript.waiting_below == 0)
        await pilot.pause()
        assert transcript.mounted_count == 40
        assert [v.title for v in transcript.query(FoldView)][-1] == "bash later 299"
        assert transcript.scroll_y >= transcript.max_scroll_y - 1  # following the end again


async def test_catching_up_does_not_undo_an_earlier_page_asked_for_meanwhile(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        transcript = app.main.transcript
        await transcript.load([ev.ToolCallStarted(1, f"c{i}", "bash", {"command": f"echo {i}"}) for i in range(200)])
        await pilot.pause()
        transcript.focus()
        await pilot.press("pageup")
        await pilot.pause(0.3)
        for i in range(50):  # more than a window waits below
            await transcript.apply_event(ev.ToolCallStarted(2, f"n{i}", "bash", {"command": f"later {i}"}))
        first = transcript._first
        transcript.scroll_end(animate=False, immediate=True)  # back at the end: a catch-up is on its way...
        await transcript.show_earlier()  # ...when the reader asks for earlier entries after all
        await pilot.pause(0.3)
        assert transcript._first == first - transcript.PAGE and transcript.waiting_below == 50


def mounted_widgets(transcript) -> int:
    """Blocks and what they hold (a reply's Markdown paragraphs), the "show earlier" button left out."""
    return len(transcript.query("*")) - 1


async def test_long_replies_are_windowed_by_the_widgets_they_hold(kernel):
    from kstui.widgets.transcript import WIDGET_BUDGET

    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        transcript = app.main.transcript
        paragraphs = 30
        events: list[ev.Event] = []
        for turn in range(1, 11):
            events.append(ev.TextDelta(turn, "\n\n".join(f"paragraph {turn}.{i}" for i in range(paragraphs))))
            events.append(ev.ToolCallStarted(turn, f"c{turn}", "bash", {"command": "true"}))
            events.append(ev.ToolCallFinished(turn, f"c{turn}", "bash", "", seconds=0.01))
        await transcript.load(events)
        await pilot.pause()
        assert len(transcript.state.blocks) == 20
        assert transcript.mounted_count < 20
        # Within the budget, less at most what the oldest mounted block weighs.
        assert WIDGET_BUDGET - (paragraphs + 1) < mounted_widgets(transcript) <= WIDGET_BUDGET
        # A reply streamed live: once it is whole, the window gives back what it took.
        for i in range(paragraphs):
            app.forward(ev.TextDelta(11, f"live {i}\n\n"))
        app.forward(ev.ToolCallStarted(11, "c11", "bash", {"command": "true"}))
        await until(pilot, lambda: len(transcript.state.blocks) == 22)
        await until(pilot, lambda: any(f"live {paragraphs - 1}" in str(w.source) for w in transcript.query("MarkdownParagraph")))
        await pilot.pause()
        assert mounted_widgets(transcript) <= WIDGET_BUDGET
        # An earlier page is bounded by the same budget.
        before = mounted_widgets(transcript)
        transcript.focus()
        await pilot.press("u")
        await until(pilot, lambda: mounted_widgets(transcript) > before)
        await pilot.pause()
        assert mounted_widgets(transcript) - before <= WIDGET_BUDGET


async def test_streamed_deltas_are_merged_per_frame_in_order(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        pieces = [f"w{i} " for i in range(400)]
        for i, piece in enumerate(pieces):
            app.forward(ev.TextDelta(1, piece))
            if i == 199:
                app.forward(ev.ToolCallStarted(1, "mid", "bash", {"command": "ls"}))
        await until(pilot, lambda: sum(len(b.body) for b in app.main.transcript.state.blocks) == len("".join(pieces)))
        texts = [b.body for b in app.main.transcript.state.blocks if b.kind == "text"]
        assert texts == ["".join(pieces[:200]), "".join(pieces[200:])]
        assert [b.kind for b in app.main.transcript.state.blocks] == ["text", "tool", "text"]
        assert app.main.events_seen < 100  # 401 events from the session, far fewer redraws


async def test_streamed_text_is_painted_at_a_bounded_rate_and_whole_when_the_block_closes(kernel, monkeypatch):
    from textual.widgets._markdown import MarkdownStream

    from kstui.widgets import text

    period = 0.2  # longer than any frame, so a write per frame would show
    monkeypatch.setattr(text, "STREAM_PERIOD_S", period)
    writes = []
    original = MarkdownStream.write

    async def counting_write(self, fragment):
        writes.append(fragment)
        await original(self, fragment)

    monkeypatch.setattr(MarkdownStream, "write", counting_write)
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        pieces = [f"w{i} " for i in range(60)]
        started = asyncio.get_running_loop().time()
        for piece in pieces:
            app.forward(ev.TextDelta(1, piece))
            await asyncio.sleep(0.005)
        elapsed = asyncio.get_running_loop().time() - started
        app.forward(ev.ToolCallStarted(1, "next", "bash", {"command": "ls"}))  # closes the text block
        view = app.main.transcript.query_one(TextView)
        await until(pilot, lambda: view.source == "".join(pieces))
        assert writes and "".join(pieces).endswith("".join(writes))  # the first deltas made the block
        # One write per period at most, not one per delta or per frame.
        assert len(writes) <= elapsed / period + 1  # the close flushes the last


async def test_narrow_terminal_turns_columns_into_tabs(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(90, 30)) as pilot:
        main = app.main
        assert main.has_class("-narrow") and main.query_one("#tabs").display
        visible = [c for c in ("source", "middle", "speedup") if main.query_one(f"#{c}").styles.display != "none"
                   and main.query_one(f"#{c}").has_class("-active")]
        assert visible == ["middle"]
        main.query_one("#tabs").active = "tab-speedup"
        await pilot.pause()
        assert main.query_one("#speedup").has_class("-active") and not main.query_one("#middle").has_class("-active")
        assert not any(divider.display for divider in main.query("Divider"))
        await pilot.resize_terminal(120, 32)
        await pilot.pause()
        assert not main.has_class("-narrow") and not main.query_one("#tabs").display
        assert all(divider.display for divider in main.query("Divider"))


async def test_columns_resize_with_keys_one_divider_at_a_time(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main

        def widths() -> tuple[int, int, int]:
            return tuple(main.query_one(f"#{c}").outer_size.width for c in ("source", "middle", "speedup"))

        source, middle, speedup = widths()
        assert source + middle + speedup == 138  # and a divider beside each side column
        await pilot.press("right_square_bracket", "right_square_bracket")
        await pilot.pause()
        wider = widths()
        assert wider[0] > source and wider[2] == speedup and sum(wider) == 138
        await pilot.press("left_curly_bracket")
        await pilot.pause()
        after = widths()
        assert after[2] < speedup and after[0] == wider[0] and sum(after) == 138
        # Proportions survive a terminal resize; the transcript keeps its minimum however far a key goes.
        await pilot.resize_terminal(200, 40)
        await pilot.pause()
        assert abs(widths()[0] / 198 - after[0] / 138) < 0.02
        for _ in range(40):
            await pilot.press("right_square_bracket")
        await pilot.pause()
        assert widths()[1] >= 30 and sum(widths()) == 198


def column_widths(main) -> tuple[int, int, int]:
    return tuple(main.query_one(f"#{c}").outer_size.width for c in ("source", "middle", "speedup"))


async def drag(pilot, divider: str, to_x: list[int]) -> None:
    """Press on a divider, move the pointer to each screen x in turn (a few rows down), let go."""
    start = pilot.app.main.query_one(divider).region
    await pilot.mouse_down(divider)
    for x in to_x:
        await pilot.hover(offset=(x, start.y + 5))
    await pilot.mouse_up(offset=(to_x[-1], start.y + 5))
    await pilot.pause()


async def test_dragging_the_source_divider_resizes_its_two_neighbours(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        source, middle, speedup = column_widths(main)
        divider = main.query_one("#divider-source")
        assert divider.region.x == source and divider.region.width == 1
        await drag(pilot, "#divider-source", [source + 3, source + 9])
        assert column_widths(main) == (source + 9, middle - 9, speedup)
        assert divider.region.x == source + 9 and app.mouse_captured is None
        assert not divider.has_class("-dragging")
        # Let go: moving the pointer over the transcript resizes nothing.
        await pilot.hover(offset=(source + 20, 10))
        assert column_widths(main) == (source + 9, middle - 9, speedup)


async def test_dragging_the_speedup_divider_resizes_its_two_neighbours(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        source, middle, speedup = column_widths(main)
        assert main.query_one("#divider-speedup").region.x == 140 - 1 - speedup
        await drag(pilot, "#divider-speedup", [140 - 1 - speedup - 7])
        assert column_widths(main) == (source, middle - 7, speedup + 7)
        # Keys carry on from where the drag left the divider.
        await pilot.press("left_curly_bracket")
        await pilot.pause()
        after = column_widths(main)
        assert after[0] == source and after[2] < speedup + 7 and sum(after) == 138


async def test_a_drag_past_a_limit_stops_there_and_lays_out_only_on_a_change(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        source, middle, speedup = column_widths(main)
        layouts = []
        apply_widths = main._apply_widths
        main._apply_widths = lambda width: (layouts.append(width), apply_widths(width))
        # Down the divider (x unchanged), then far past the source's minimum in three moves.
        await drag(pilot, "#divider-source", [source, source, 10, 5, 1])
        assert column_widths(main) == (20, middle + source - 20, speedup)
        assert len(layouts) == 1  # the first move reached the minimum; the others changed nothing
        await drag(pilot, "#divider-speedup", [139, 100, 40, 30])
        assert column_widths(main) == (20, 30, 138 - 50)
        await drag(pilot, "#divider-speedup", [139])
        assert column_widths(main) == (20, 138 - 52, 32)


async def test_a_divider_move_is_laid_out_and_painted_before_its_action_returns(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        await pilot.pause()
        painted = []  # the transcript's width at each frame handed to the driver
        render_update = main._compositor.render_update
        main._compositor.render_update = lambda *a, **k: (
            painted.append(main.transcript.size.width), render_update(*a, **k))[1]
        before = column_widths(main)
        main.action_resize("speedup", 1)
        # No wait for the screen's update timer: the new widths are already on screen.
        after = column_widths(main)
        assert after[0] == before[0] and after[2] > before[2] and sum(after) == 138
        assert painted == [main.transcript.size.width]
        # The widgets' own layout requests, arriving later, leave the widths as they are.
        await pilot.pause()
        assert column_widths(main) == after


async def test_a_page_of_earlier_entries_is_painted_before_its_action_returns(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        transcript = app.main.transcript
        await transcript.load([ev.ToolCallStarted(1, f"c{i}", "bash", {"command": f"echo {i}"}) for i in range(200)])
        await pilot.pause()
        painted = []  # the first block on screen at each frame handed to the driver
        render_update = app.main._compositor.render_update

        def first_on_screen() -> str:
            return next(v.title for v in transcript.query(FoldView) if v.region.height)

        app.main._compositor.render_update = lambda *a, **k: (painted.append(first_on_screen()),
                                                              render_update(*a, **k))[1]
        await transcript.action_show_earlier()
        # No wait for the screen's update timer: the page's first entry is already on screen.
        assert painted and painted[-1] == f"bash echo {200 - 40 - transcript.PAGE}"


async def test_no_full_collection_starts_between_a_key_and_its_frame(kernel):
    from kstui.collector import NO_FULL

    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        before = gc.get_threshold()
        frames = []  # (transcript width, Python's full-collection threshold) at each frame painted
        render_update = main._compositor.render_update
        main._compositor.render_update = lambda *a, **k: (
            frames.append((main.transcript.size.width, gc.get_threshold()[2])), render_update(*a, **k))[1]
        width = main.transcript.size.width
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: main.transcript.size.width != width)
        assert [held for w, held in frames if w != width][0] == NO_FULL
        await until(pilot, lambda: gc.get_threshold() == before)  # given back once that frame was out
        # Collection someone else turned off stays off, and nothing is held for it.
        gc.disable()
        try:
            width = main.transcript.size.width
            await pilot.press("left_curly_bracket")
            await until(pilot, lambda: main.transcript.size.width != width)
            await pilot.pause()
            assert not gc.isenabled() and gc.get_threshold() == before
        finally:
            gc.enable()


async def test_the_app_freezes_its_startup_objects_and_thaws_them_on_exit(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


async def test_the_app_tells_its_collector_of_input_and_thaws_on_exit(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        seen = app.collector.last_input
        await pilot.press("right_square_bracket")
        assert app.collector.last_input > seen
    assert gc.get_freeze_count() == 0


async def test_the_plot_is_drawn_again_for_new_points_and_new_sizes_only(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await feed(app, pilot, [ev.EvaluationFinished(1, fake_result(KERNEL), where="fake")])
        plot = app.main.speedup.query_one("#plot")
        await pilot.pause()
        drawn = []  # the plot's width at each figure plotext builds
        build = plot.plt.build
        plot.plt.build = lambda: (drawn.append(plot.size.width), build())[1]
        await feed(app, pilot, [ev.StatusChanged("thinking"), ev.Usage("claude-test", 10, 5, 0, 0, 0.01)])
        assert drawn == []
        width = plot.size.width
        await pilot.press("left_curly_bracket")
        await until(pilot, lambda: plot.size.width != width)
        await pilot.pause()
        narrower = plot.size.width
        assert drawn == [narrower]  # the same points, at the new width
        # Back to a width it was drawn at: that figure is shown again, not drawn again.
        await pilot.press("right_curly_bracket")
        await until(pilot, lambda: plot.size.width == width)
        await pilot.pause()
        assert drawn == [narrower]
        await feed(app, pilot, [ev.EvaluationFinished(2, fake_result(KERNEL), where="fake")])
        assert drawn == [narrower, width]
        # New points: the figure kept for the other width is drawn afresh too.
        await pilot.press("left_curly_bracket")
        await until(pilot, lambda: plot.size.width == narrower)
        await pilot.pause()
        assert drawn == [narrower, width, narrower]


async def test_the_footer_rebuilds_its_keys_only_when_they_change(kernel):
    from kstui.widgets.footer import AlertFooter

    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        footer = app.main.query_one(AlertFooter)
        await until(pilot, lambda: footer.rebuilds > 0)
        await pilot.pause()
        built = footer.rebuilds
        for status in ("thinking", "tool", "evaluating"):  # each refreshes the bindings; the keys stay
            app.main.post_message(SessionEvent(ev.StatusChanged(status=status)))
        await pilot.pause(0.2)
        assert footer.rebuilds == built
        # Earlier entries to show: the transcript's `u` joins the footer, which is rebuilt for it.
        await app.main.transcript.load(
            [ev.ToolCallStarted(1, f"c{i}", "bash", {"command": f"echo {i}"}) for i in range(100)])
        await until(pilot, lambda: footer.rebuilds > built)
        await pilot.pause()
        assert "u" in [key.key for key in footer.query("FooterKey")]


async def test_help_lists_the_keys_and_closes(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        assert keys["q"] == "quit" and keys["?"] == "help" and "mouse: drag a divider" in keys
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main


async def test_quit_without_a_session_exits(kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0


async def test_replay_plays_pauses_steps_and_changes_speed(kernel):
    events = recorded_run()
    player = ReplayPlayer(events, paused=True)
    app = KstuiApp(kernel=kernel, replay=player, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        assert not main.box.display  # read-only: no question box
        await pilot.press("n", "n", "n")
        await until(pilot, lambda: player.position == 3)
        assert "replay 3/" in str(main.query_one("#status").render())
        await pilot.press("plus", "plus", "plus", "plus", "plus", "plus")
        assert player.speed == 256.0
        await pilot.press("space")
        await until(pilot, lambda: player.position == len(events), timeout=10)
        await pilot.pause(0.2)
        assert main.speedup.state.best == 1.25
        # Keys that would drive a session do nothing in a replay.
        await pilot.press("p", "e", "b")
        assert app.screen is main


def test_replay_finds_the_kernel_beside_the_sessions_folder(tmp_path):
    trace = tmp_path / "ws" / ".kstui" / "sessions" / "s1" / "trace.jsonl"
    events = [ev.SessionStarted("s1", "kernels/k.cu", "agent")]
    assert replay_kernel(trace, events) == tmp_path / "ws" / "kernels" / "k.cu"


@pytest.fixture
def history(tmp_path: Path, monkeypatch) -> History:
    monkeypatch.setenv("GIT_AUTHOR_DATE", f"@{int(T0)} +0000")
    monkeypatch.setenv("GIT_COMMITTER_DATE", f"@{int(T0)} +0000")
    for role in ("AUTHOR", "COMMITTER"):  # a fixed identity: the shas (and the snapshots) are stable
        monkeypatch.setenv(f"GIT_{role}_NAME", "kstui test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@kstui.invalid")
    kernel = tmp_path / "flash_fwd.cu"
    kernel.write_text(KERNEL)
    hist = History(kernel)
    v1 = KERNEL.replace("speedup=1.0", "speedup=1.1")
    hist.commit_accepted(v1, fake_result(v1), previous=None, turn=1,
                         question=None, question_source=None, eval_no=1)
    v2 = v1.replace("speedup=1.1", "speedup=1.3").replace("int i =", "const int i =")
    hist.commit_accepted(v2, fake_result(v2), previous=1.1, turn=3,
                         question="What does the SASS say about the loads?", question_source="human", eval_no=2)
    kernel.write_text(v2)
    return hist


async def test_log_history_shows_diff_result_compare_and_restores(history):
    app = KstuiApp(history=history)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        entries = history.entries()
        await history_read(pilot)
        assert screen.query_one("#commits").row_count == 2
        assert screen.shown == entries[0].sha
        head = str(screen.query_one("#head").render())
        assert "SASS" in head and "4/4 correct" in head
        assert "const int i" in history.diff(entries[0].sha)
        assert screen.query_one("#result").row_count == 4
        # Compare: mark the newest, move to the older one: the diff is between the two.
        await pilot.press("c", "down")
        await until(pilot, lambda: "against marked" in str(screen.query_one("#head").render()))
        assert screen.shown == entries[1].sha and screen.marked == entries[0].sha
        # Restore the older one: confirm first, then a NEW commit (never a rewrite).
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: len(history.entries()) == 3)
        assert history.kernel.read_text() == history.content_at(entries[1].sha)
        assert [e.sha for e in history.entries()[1:]] == [e.sha for e in entries]
        await pilot.press("escape")
        await pilot.pause()
    assert app.return_value == 0


async def test_history_restore_can_be_declined(history):
    app = KstuiApp(history=history)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen) and len(history.entries()) == 2


def test_replay_of_a_broken_trace_is_one_line_and_exit_2(tmp_path, capsys):
    from kstui.app import run_replay_app

    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"type": "session_started"\nnot json\n')
    assert run_replay_app(trace) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trace.jsonl:1" in err
