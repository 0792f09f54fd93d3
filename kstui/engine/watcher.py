"""Watch one file for changes on disk and report them, coalesced, on an asyncio loop.

watchdog's observer runs in its own thread; every matching filesystem event is handed to the loop with
call_soon_threadsafe, and a burst (an editor's write + chmod + rename) becomes one callback after
`settle_s` of quiet. Editors' atomic saves arrive as moved/created events on the directory, which is
why the directory is watched and not the file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


class _Handler(FileSystemEventHandler):
    def __init__(self, target: str, notify: Callable[[], None]) -> None:
        self._target = target
        self._notify = notify

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(p and os.path.realpath(os.fsdecode(p)) == self._target for p in paths):
            self._notify()


class FileWatcher:
    """Calls `on_change()` on `loop` once per burst of changes to `path` (content not compared here)."""

    def __init__(self, path: Path, on_change: Callable[[], None], *,
                 loop: asyncio.AbstractEventLoop | None = None, settle_s: float = 0.15) -> None:
        self.path = Path(os.path.realpath(path))
        self._on_change = on_change
        self._loop = loop or asyncio.get_running_loop()
        self._settle_s = settle_s
        self._timer: asyncio.TimerHandle | None = None
        self._observer: Observer | None = None

    def start(self) -> None:
        handler = _Handler(str(self.path), self._from_thread)
        self._observer = Observer()
        self._observer.schedule(handler, str(self.path.parent), recursive=False)
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def _from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._arm)
        except RuntimeError:  # the loop closed while the observer was stopping
            pass

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(self._settle_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._on_change()
