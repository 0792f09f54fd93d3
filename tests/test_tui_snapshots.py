"""Snapshot tests (pytest-textual-snapshot): fixed terminal size, fixed clock and recorded events, no
cursor on screen, notifications cleared, so a difference is a change in what the user sees.
Update with `pytest tests/test_tui_snapshots.py --snapshot-update` after checking the new SVGs."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_tui import history  # noqa: E402,F401  (the fixture: two accepted kernels at a fixed time)
from test_tui_events import KERNEL, recorded_run  # noqa: E402
from pilot_support import history_read  # noqa: E402

from kstui.app import KstuiApp  # noqa: E402
from kstui.engine.bank import QuestionBank  # noqa: E402
from kstui.screens.bank import BankScreen  # noqa: E402
from kstui.widgets.messages import SessionEvent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZE = (140, 40)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    path = tmp_path / "flash_fwd.cu"
    path.write_text(KERNEL.replace("speedup=1.0", "speedup=1.25"))
    return path


def fed(events):
    async def run_before(pilot) -> None:
        app = pilot.app
        goal = len(events)
        for event in events:
            app.main.post_message(SessionEvent(event))
        while app.main.events_seen < goal:
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        app.clear_notifications()
        await pilot.pause()

    return run_before


def test_main_screen_mid_run(snap_compare, kernel):
    app = KstuiApp(kernel=kernel, baseline=KERNEL, watch=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=fed(recorded_run()))


def test_main_screen_stalled(snap_compare, kernel):
    app = KstuiApp(kernel=kernel, baseline=KERNEL, watch=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=fed(recorded_run(stalled=True)))


def test_main_screen_narrow_is_tabs(snap_compare, kernel):
    app = KstuiApp(kernel=kernel, baseline=KERNEL, watch=False)
    assert snap_compare(app, terminal_size=(90, 28), run_before=fed(recorded_run()))


def test_bank_picker_for_a_stall(snap_compare, kernel):
    bank = QuestionBank.load(ROOT / "kstui" / "questions.toml")

    async def run_before(pilot) -> None:
        await fed(recorded_run(stalled=True))(pilot)
        await pilot.app.push_screen(BankScreen(bank, "stall"))
        await pilot.pause()
        pilot.app.screen.query_one("#filter").cursor_blink = False
        await pilot.pause()

    app = KstuiApp(kernel=kernel, baseline=KERNEL, watch=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_history_screen_with_a_diff(snap_compare, history):  # noqa: F811
    assert snap_compare(KstuiApp(history=history), terminal_size=SIZE, run_before=history_read)


def test_help_screen(snap_compare, kernel):
    app = KstuiApp(kernel=kernel, watch=False)
    assert snap_compare(app, terminal_size=SIZE, press=["question_mark"])
