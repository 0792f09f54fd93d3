"""Widgets keep the size of their latest content even when the screen lays out between two updates
(the Textual box-model cache kstui.widgets.fit works around; it once hid "ACCEPTED" in CI)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_tui_events import KERNEL, fake_result  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402
from textual.containers import VerticalScroll  # noqa: E402

from kstui.app import KstuiApp  # noqa: E402
from kstui.engine import events as ev  # noqa: E402
from kstui.widgets.fit import FitStatic  # noqa: E402
from kstui.widgets.transcript import FoldView  # noqa: E402


def content_height(widget) -> int:
    return widget._render().get_height(widget.styles, widget.content_region.width)


class OneStatic(App):
    CSS = "FitStatic { height: auto; }"

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield FitStatic("x", id="s")


async def test_a_second_update_after_an_intervening_layout_resizes_the_widget():
    app = OneStatic()
    async with app.run_test(size=(40, 20)) as pilot:
        widget = app.query_one("#s", FitStatic)
        widget.update("one two three " * 3)
        # A layout the screen ran for another widget, before this widget's idle handler: forced here
        # so the order is certain rather than a matter of load.
        app.screen._refresh_layout()
        assert widget.size.height == 2
        widget.update("one two three " * 12)
        await pilot.pause()
        await pilot.pause()
        assert widget.size.height == content_height(widget) == 5


async def test_an_evaluation_line_grows_to_show_its_verdict(tmp_path):
    kernel = tmp_path / "flash_fwd.cu"
    kernel.write_text(KERNEL)
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        main = app.main
        where = "/a/rather/long/path/to/python /another/long/path/to/an/evaluation/command.py {file}"

        transcript = main.transcript
        await transcript.apply_event(ev.EvaluationStarted(1, "0" * 64, "full", where=where))
        await pilot.pause()
        # Two updates of the line, and between them (before the line's idle handler) a layout of the
        # transcript, as a block mounted meanwhile would cause.
        await transcript.apply_event(ev.EvaluationFinished(1, fake_result(KERNEL), where=where, seconds=0.1))
        transcript._clear_arrangement_cache()
        app.screen._refresh_layout()
        await transcript.apply_event(ev.Accepted(1, "abcdef0123456789", 1.25, None, 4, 4, "accepted"))
        await pilot.pause()
        await pilot.pause()
        view = next(v for v in main.transcript.query(FoldView) if "ACCEPTED" in v.title)
        assert view.size.height == content_height(view) >= 3
