"""The session's event bus: each event goes to the trace, then to the state fold, then to the subscribers.

Every event is scrubbed of secrets (kstui.engine.secrets) before anyone sees it: what a view shows
is what the trace holds. The trace comes first, so a crash loses at most the event being written. Text and thinking deltas
reach subscribers one by one but are joined in the trace, a few per line. A subscriber that raises is
recorded in the trace and never ends the session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kstui.engine.events import Error, Event, TextDelta, ThinkingDelta
from kstui.engine.secrets import Scrubber
from kstui.engine.trace import TraceWriter

# Deltas are joined into one trace line per this many seconds (or characters) of stream.
DELTA_FLUSH_S = 0.25
DELTA_FLUSH_CHARS = 4096


class EventBus:
    def __init__(self, fold: Callable[[Event], None], scrubber: Scrubber | None = None) -> None:
        self._fold = fold
        self._scrubber = scrubber
        self._subscribers: list[Callable[[Event], None]] = []
        self._trace: TraceWriter | None = None
        self._deltas: tuple[type[Event], int, list[str], float] | None = None
        self._delta_timer: asyncio.TimerHandle | None = None

    def open(self, trace: TraceWriter) -> None:
        self._trace = trace

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._subscribers.append(callback)

    def emit(self, event: Event) -> None:
        if self._scrubber is not None:
            if isinstance(event, (TextDelta, ThinkingDelta)):
                event = self._scrubber.stitch(event)
            else:
                event = self._scrubber.event(event)
        if isinstance(event, (TextDelta, ThinkingDelta)):
            self._buffer_delta(event)
        else:
            self.flush()
            self._write(event)
        self._fold(event)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # a broken view must not end the session
                self._write(Error(message=f"subscriber failed: {type(exc).__name__}: {exc}", where="subscriber"))

    def close(self) -> None:
        """Write what is buffered and close the trace (fsynced)."""
        self.flush()
        if self._trace is not None:
            self._trace.close()

    def _write(self, event: Event) -> None:
        if self._trace is not None:
            self._trace.append(event)

    def _buffer_delta(self, event: TextDelta | ThinkingDelta) -> None:
        kind = type(event)
        if self._deltas is not None and (self._deltas[0] is not kind or self._deltas[1] != event.turn):
            self.flush()
        if self._deltas is None:
            self._deltas = (kind, event.turn, [], event.ts)
            self._delta_timer = asyncio.get_running_loop().call_later(DELTA_FLUSH_S, self.flush)
        self._deltas[2].append(event.text)
        if time.time() - self._deltas[3] > DELTA_FLUSH_S or sum(map(len, self._deltas[2])) > DELTA_FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        """Write the deltas gathered so far as one trace line."""
        if self._delta_timer is not None:
            self._delta_timer.cancel()
            self._delta_timer = None
        if self._deltas is None:
            return
        kind, turn, parts, ts = self._deltas
        self._deltas = None
        self._write(kind(turn=turn, text="".join(parts), ts=ts))  # type: ignore[call-arg]
