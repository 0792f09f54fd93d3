"""The panels a newcomer read: plot labels rounded, no rows of an earlier run after a build failure, a
status line on one line, toasts clear of the question box and the status line, the table header whole."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeExecutor
from pilot_support import until
from test_tui_events import KERNEL, recorded_run

from harness.result import EvalResult
from kstui.app import KstuiApp
from kstui.engine import events as ev
from kstui.widgets.messages import SessionEvent
from kstui.widgets.speedup import ScenarioTable, y_ticks


def test_plot_labels_are_rounded_to_what_tells_them_apart() -> None:
    _, labels = y_ticks([1.000153, 1.000161, 1.0])
    assert all(len(label.split(".")[1]) <= 4 for label in labels) and len(set(labels)) == len(labels)
    _, labels = y_ticks([1.0, 2.0])
    assert labels == ["1.00", "1.25", "1.50", "1.75", "2.00"]


async def _app(tmp_path: Path, events: list[ev.Event], size=(140, 40)):
    kernel = tmp_path / "flash_fwd.cu"
    kernel.write_text(KERNEL)
    app = KstuiApp(kernel=kernel, baseline=KERNEL, watch=False)
    return app, events


async def test_a_build_failure_empties_the_scenario_table(tmp_path: Path) -> None:
    events = recorded_run()
    failed = FakeExecutor().result_for(KERNEL + "// fake: build-error\n", "flash_fwd.cu", "0" * 64, "full")
    failed = EvalResult.from_dict(failed.to_dict())
    events += [ev.EvaluationStarted(eval_no=9, kernel_sha256="0" * 64, scenarios="full"),
               ev.EvaluationFinished(eval_no=9, result=failed)]
    app, events = await _app(tmp_path, events)
    async with app.run_test(size=(140, 40)) as pilot:
        for event in events:
            app.main.post_message(SessionEvent(event))
        await until(pilot, lambda: app.main.events_seen >= len(events))
        await pilot.pause()
        table = app.main.query_one(ScenarioTable)
        assert table.row_count == 0
        assert table.border_title == "scenarios · evaluation #9 · no scenario ran (build failed)"


async def test_status_line_stays_one_line_and_toasts_keep_clear(tmp_path: Path) -> None:
    app, events = await _app(tmp_path, recorded_run())
    async with app.run_test(size=(60, 24)) as pilot:
        main = app.main
        main.mode = "agent with a very long mode name that would not fit in sixty columns at all"
        await pilot.pause()
        status = main.query_one("#status")
        assert status.region.height == 1
        assert "…" in str(status.render_line(0).text)
        for i in range(3):
            app.notify(f"toast {i}")
        await pilot.pause(0.3)
        footer_top = main.footer.region.y
        for toast in app.screen.query("Toast"):
            assert toast.region.bottom <= footer_top - 3, "a toast covers the question box or the footer"
            assert toast.region.y >= 1, "a toast covers the status line"


async def test_the_scenario_table_header_is_whole(tmp_path: Path) -> None:
    app, events = await _app(tmp_path, recorded_run())
    async with app.run_test(size=(140, 40)) as pilot:
        for event in events:
            app.main.post_message(SessionEvent(event))
        await until(pilot, lambda: app.main.events_seen >= len(events))
        await pilot.pause()
        table = app.main.query_one(ScenarioTable)
        numbers = list(table.columns.values())[:-1]  # the id, last, may scroll; every number's header shows
        assert sum(c.get_render_width(table) for c in numbers) <= table.scrollable_content_region.width
