"""Waiting on a pilot-driven app: conditions polled between frames, screens that are ready to query."""

from __future__ import annotations

import time


async def until(pilot, condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.02)


def showing(app, screen_type: type) -> bool:
    """The screen is on top and composed: pushing it returns before its children exist."""
    return isinstance(app.screen, screen_type) and app.screen.is_mounted
