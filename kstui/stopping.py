"""Ctrl-C and SIGTERM: the first stops the session and leaves within GRACE_S; a second leaves at once.

Schedulers (Slurm's time limit, `docker stop`, systemd) send SIGTERM and expect an exit within
seconds. The first signal asks the session to stop (the stream and the evaluation are cancelled, the
trace is closed) and arms a deadline on a thread of its own, so a loop that is stuck cannot hold the
exit back; at the deadline, or at a second signal, whatever evaluation is still running is killed, the
trace's buffered lines are written and the process ends.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from kstui.executors import lifeline

GRACE_S = 1.5
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Installed for a session's run; `on_stop` is called on `loop` at the first signal (and from the
    thread that called `request`); `last_words` runs just before a hurried exit (on any thread)."""

    def __init__(self, loop: Any, on_stop: Callable[[], None], *, last_words: Callable[[], None] = lambda: None,
                 grace_s: float = GRACE_S) -> None:
        self._loop = loop
        self._on_stop = on_stop
        self._last_words = last_words
        self._grace_s = grace_s
        self._signal: int | None = None
        self._deadline: threading.Timer | None = None
        self._previous: dict[int, Any] = {}
        self._exiting = threading.Lock()

    def install(self) -> StopSignals:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def remove(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if self._deadline is not None:
            self._deadline.cancel()

    @property
    def stopping(self) -> bool:
        return self._signal is not None

    def _handle(self, sig: int, _frame: FrameType | None) -> None:
        if self._signal is not None:
            self.exit_now()  # the second signal: no more waiting
        self.request(sig)
        self._loop.call_soon_threadsafe(self._on_stop)

    def request(self, sig: int = signal.SIGINT) -> None:
        """The first stop (a signal, or a view's own quit key): the deadline starts now."""
        if self._signal is not None:
            return
        self._signal = sig
        self._deadline = threading.Timer(self._grace_s, self.exit_now)
        self._deadline.daemon = True
        self._deadline.start()

    def exit_now(self) -> None:
        """Kill what evaluations still run, write what is buffered, and end the process."""
        if not self._exiting.acquire(blocking=False):
            return
        try:
            lifeline.kill_all()
            self._last_words()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(128 + (self._signal or signal.SIGINT))


# What Textual turns on (the alternate screen, mouse reports, bracketed paste, a hidden cursor) turned off.
_TERMINAL_RESET = "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?2004l\x1b[?1049l\x1b[?25h"
_saved_tty: tuple[int, list[Any]] | None = None


def save_terminal() -> None:
    """Keep the terminal's settings as they are before a full-screen app changes them."""
    global _saved_tty
    try:
        import termios

        fd = sys.__stdin__.fileno() if sys.__stdin__ is not None else 0
        _saved_tty = (fd, termios.tcgetattr(fd))
    except (OSError, ValueError, ImportError):
        _saved_tty = None


def restore_terminal() -> None:
    """Give the terminal back as it was (a hurried exit skips the app's own tidy-up)."""
    try:
        out = sys.__stdout__
        if out is not None and out.isatty():
            out.write(_TERMINAL_RESET)
            out.flush()
        if _saved_tty is not None:
            import termios

            termios.tcsetattr(_saved_tty[0], termios.TCSANOW, _saved_tty[1])
    except (OSError, ValueError, ImportError):
        pass
