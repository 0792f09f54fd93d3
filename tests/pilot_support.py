"""Waiting on a pilot-driven app: conditions polled between frames, screens that are ready to query."""

from __future__ import annotations

import time


async def until(pilot, condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.02)


async def history_read(pilot) -> None:
    """The history screen on top has its rows and the highlighted commit's detail (read on a worker thread)."""
    await until(pilot, lambda: getattr(pilot.app.screen, "shown", None) is not None
                and "diff against" in str(pilot.app.screen.query_one("#head").render()))


def showing(app, screen_type: type) -> bool:
    """The screen is on top and composed: pushing it returns before its children exist."""
    return isinstance(app.screen, screen_type) and app.screen.is_mounted
