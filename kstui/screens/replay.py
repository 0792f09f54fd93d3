"""Replay: a recorded trace played into the main screen, read-only, with pause, step and speed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.screen import Screen

from kstui.engine import events as ev
from kstui.widgets.messages import SessionEvent

if TYPE_CHECKING:
    from kstui.engine.history import History

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0)
MAX_GAP_S = 1.0  # a long pause in the recording (an evaluation, a coffee) plays as at most this


@dataclass
class ReplayPlayer:
    events: list[ev.Event]
    history: History | None = None
    speed_index: int = 2
    paused: bool = False
    position: int = 0
    _screen: Screen | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def speed(self) -> float:
        return SPEEDS[self.speed_index]

    def describe(self) -> str:
        state = "paused" if self.paused else ("done" if self.position >= len(self.events) else "playing")
        return f"replay {self.position}/{len(self.events)} · {self.speed:g}× · {state}"

    def start(self, screen: Screen) -> None:
        self._screen = screen
        screen.run_worker(self._play(), name="replay", exclusive=True)

    def _emit(self) -> None:
        assert self._screen is not None
        self._screen.post_message(SessionEvent(self.events[self.position]))
        self.position += 1

    async def _play(self) -> None:
        while self.position < len(self.events):
            if self.paused:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.position:
                gap = self.events[self.position].ts - self.events[self.position - 1].ts
                await asyncio.sleep(max(0.0, min(gap, MAX_GAP_S)) / self.speed)
            if not self.paused and self.position < len(self.events):
                self._emit()
                if self.position % 50 == 0 or self.position == len(self.events):
                    self._screen.update_status()  # type: ignore[attr-defined]

    def toggle(self) -> None:
        self.paused = not self.paused
        self._wake.set()

    def step(self) -> None:
        """One event forward; stepping pauses the playback first."""
        self.paused = True
        if self.position < len(self.events):
            self._emit()

    def faster(self) -> None:
        self.speed_index = min(len(SPEEDS) - 1, self.speed_index + 1)

    def slower(self) -> None:
        self.speed_index = max(0, self.speed_index - 1)
