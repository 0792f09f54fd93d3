"""The Textual App: one view of a Session (or of a trace, or of a kernel's history with no session).

The Session runs on the app's own event loop, in a Textual worker; its events are forwarded to the
main screen as messages in the order they were emitted. Apart from the file watchers' observers, the one
thread is the session's import of the agent's SDK, begun once the first frame is out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer

from kstui.collector import HOLD_S, IDLE_S, IdleCollector
from kstui.engine import events as ev
from kstui.screens.main import MainScreen
from kstui.stopping import StopSignals, restore_terminal, save_terminal
from kstui.widgets.messages import SessionEvent
from kstui.widgets.transcript import WINDOW

if TYPE_CHECKING:
    from kstui.engine.history import History
    from kstui.engine.session import Session
    from kstui.screens.replay import ReplayPlayer

DELTA_FRAME_S = 1 / 30

PALETTE = (
    ("Ask a question", "Focus the question box", "focus_question"),
    ("Question bank", "Pick a question from the bank (b)", "bank"),
    ("History", "Accepted kernels, diffs and results (h)", "history"),
    ("Pause the agent", "Stop after the current step (p)", "pause"),
    ("Resume the agent", "Carry on (p)", "resume"),
    ("Interrupt the agent", "Stop the current turn now (escape)", "interrupt"),
    ("Evaluate now", "Run the harness on the kernel as it is (e)", "evaluate"),
    ("Replay: play/pause", "Pause or resume the playback (space)", "replay_toggle"),
    ("Replay: step", "Play one event (n)", "replay_step"),
    ("Help", "Keys and how questions work (?)", "help"),
    ("Quit", "Stop the session and leave (q)", "quit"),
)


class KstuiApp(App[int]):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "kstui"
    # Ctrl-C means it: no "quit?" dialog (that is `q`'s), the session stops at once; again, kstui leaves.
    BINDINGS = [Binding("ctrl+c", "interrupt_quit", "quit", show=False, priority=True)]

    def __init__(
        self,
        *,
        kernel: Path | None = None,
        session: Session | None = None,
        history: History | None = None,
        replay: ReplayPlayer | None = None,
        baseline: str | None = None,
        watch: bool = True,
        transcript_window: int = WINDOW,
        gc_held: bool = False,
    ) -> None:
        """`gc_held`: collection was turned off for start-up; the first frame turns it back on."""
        super().__init__()
        self._gc_held = gc_held
        self.session, self.history, self.replay = session, history, replay
        self.kernel = kernel
        self.main: MainScreen | None = None
        if kernel is not None:
            self.main = MainScreen(
                kernel, session=session, replay=replay, baseline=baseline, watch=watch,
                transcript_window=transcript_window,
            )
        self._stopping = False
        self.stop_signals: StopSignals | None = None  # SIGTERM (and SIGINT) while a session runs
        self._pending_delta: ev.TextDelta | ev.ThinkingDelta | None = None
        self._delta_timer: Timer | None = None
        self._first_frame = asyncio.Event()
        self.collector = IdleCollector()

    def on_mount(self) -> None:
        if self.main is None:
            from kstui.screens.history import HistoryScreen

            self.push_screen(HistoryScreen(self.history, standalone=True))
            return
        self.push_screen(self.main)
        if self.session is not None:
            self.session.subscribe(self.forward)
            self.session.shell_confirmer = self.confirm_shell
            # The session starts now (started once the first frame was out, it left that frame without
            # the status line for 60-90 ms), but its agent's SDK is imported only after the first frame:
            # on a thread, the import (about 2 s) still holds the GIL for most of it, and begun now it
            # made that frame come about half as late again.
            self.session.agent_after = self._first_frame
            self.stop_signals = StopSignals(asyncio.get_running_loop(), self.quit_after_stop,
                                            last_words=self._last_words).install()
            self.run_worker(self._run_session(), name="session", exit_on_error=False)

    def on_ready(self) -> None:
        # What exists at the first frame (modules, screens, panes) lives about as long as the app. Frozen,
        # it is left out of every full collection, which then walks only what came later: with 11,500 tool
        # calls in the transcript and text streaming (bench_tui), about 30 ms a collection instead of 90-110.
        gc.freeze()
        if self._gc_held:
            gc.enable()
        self.set_interval(IDLE_S / 2, self.collector.tick, name="idle-collector")
        self.call_after_refresh(self._first_frame_out)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            # Held for a while rather than to the next refresh: a frame already due (streamed text) would
            # end the hold before the key's own frame, which a scroll's or a screen's comes later still.
            self.collector.hold()
            self.set_timer(HOLD_S, self.collector.release)
        await super().on_event(event)

    def _first_frame_out(self) -> None:
        # Ready comes with the first layout, before that frame is painted; this runs once it has been.
        self._first_frame.set()

    def on_unmount(self) -> None:
        self._first_frame.set()  # an app that stops before its first frame leaves nothing waiting
        if self.stop_signals is not None:
            self.stop_signals.remove()
        self.collector.stop()

    async def confirm_shell(self, command: str) -> bool:
        """--confirm-shell: the agent's bash command runs only if the person says yes."""
        from kstui.screens.confirm import ConfirmScreen

        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.push_screen(
            ConfirmScreen(f"The agent wants to run:\n\n{command}\n\nRun it?", yes="Run (y)", no="Refuse (n)"),
            lambda yes: answer.done() or answer.set_result(bool(yes)),
        )
        return await answer

    def forward(self, event: ev.Event) -> None:
        """The Session's subscriber: called on this loop, it only queues the event for the screen.

        Text and thinking deltas are merged into at most one message per frame: a model streams faster
        than a terminal needs to redraw, and a backlog of deltas would delay the person's key presses.
        """
        if self.main is None:
            return
        if isinstance(event, ev.SessionStarted):
            gc.freeze()  # what the session loaded as it started (the SDK, with an agent) lives as long too
        if isinstance(event, (ev.TextDelta, ev.ThinkingDelta)):
            pending = self._pending_delta
            if pending is not None and type(pending) is type(event) and pending.turn == event.turn:
                pending.text += event.text
            else:
                self._flush_delta()
                self._pending_delta = dataclasses.replace(event)  # a copy: other subscribers share the event
            if self._delta_timer is None:
                self._delta_timer = self.set_timer(DELTA_FRAME_S, self._flush_delta)
            return
        self._flush_delta()
        self.main.post_message(SessionEvent(event))

    def _flush_delta(self) -> None:
        if self._delta_timer is not None:
            self._delta_timer.stop()
            self._delta_timer = None
        if self._pending_delta is not None and self.main is not None:
            self.main.post_message(SessionEvent(self._pending_delta))
        self._pending_delta = None

    async def _run_session(self) -> None:
        try:
            await self.session.run()
        except Exception as exc:  # the run died: say so, keep the app (and everything on screen) alive
            self.forward(ev.Error(f"the session stopped: {exc}", where="session"))

    def quit_after_stop(self) -> None:
        """Quit after the session has stopped, so that git and the trace are consistent; within
        kstui.stopping.GRACE_S, else at once (the evaluation killed, the terminal restored)."""
        if not self._stopping:
            self._stopping = True
            if self.stop_signals is not None:
                self.stop_signals.request()
            self.run_worker(self._stop_then_exit(), name="stop-then-exit", exit_on_error=False)

    async def _stop_then_exit(self) -> None:
        if self.session is not None:
            self.notify("stopping the session…")
            await self.session.stop()
        self.exit(0)

    def _last_words(self) -> None:
        """A hurried exit: the stream text buffered for the trace is written and the terminal given back."""
        if self.session is not None:
            self.session.flush_trace()
        restore_terminal()

    def action_interrupt_quit(self) -> None:
        if self._stopping and self.stop_signals is not None:
            self.stop_signals.exit_now()
        self.quit_after_stop()

    async def action_quit(self) -> None:
        if self._stopping and self.stop_signals is not None:
            self.stop_signals.exit_now()  # asked again while stopping: leave at once
        if isinstance(self.screen, MainScreen):
            self.screen.action_quit()
        else:
            self.quit_after_stop()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        main = isinstance(screen, MainScreen)
        # Textual's own "Quit" beside kstui's would be a second one (and would skip the session's stop).
        yield from (c for c in super().get_system_commands(screen) if not (main and c.callback == self.action_quit))
        if main:
            for title, help_text, action in PALETTE:
                if screen.check_action(action, ()):
                    yield SystemCommand(title, help_text, getattr(screen, f"action_{action}"))


def _kernel_of(session: Session) -> Path:
    return Path(session.config.kernel)


def _baseline_of(history: History) -> str | None:
    """The last accepted version: the source pane marks lines changed since it."""
    entries = history.entries()
    return history.content_at(entries[0].sha) if entries else None


def run_session_app(session: Session, *, gc_held: bool = False) -> int:
    app = KstuiApp(kernel=_kernel_of(session), session=session, baseline=_baseline_of(session.history),
                   gc_held=gc_held)
    save_terminal()
    return app.run() or 0


def run_log_app(kernel: Path, branch: str | None = None) -> int:
    from kstui.engine.history import History, HistoryError

    try:
        history = History(kernel, branch, create=False)
    except HistoryError as exc:
        print(f"kstui: {exc}", file=sys.stderr)
        return 2
    return KstuiApp(history=history).run() or 0


def replay_kernel(trace: Path, events: list[ev.Event]) -> Path:
    """The traced kernel: absolute, or relative to the workspace that holds .kstui/sessions/<id>/."""
    started = next((e for e in events if isinstance(e, ev.SessionStarted)), None)
    name = Path(started.kernel) if started else Path("kernel.cu")
    if name.is_absolute():
        return name
    workspace = trace.resolve().parent
    for parent in workspace.parents:
        if parent.name == ".kstui":
            return parent.parent / name
    return workspace / name


def run_replay_app(trace: Path) -> int:
    from kstui.engine.history import History, HistoryError
    from kstui.engine.trace import TraceError, read_trace

    try:
        events = list(read_trace(trace))
    except TraceError as exc:
        print(f"kstui: {exc}", file=sys.stderr)
        return 2
    kernel = replay_kernel(trace, events)
    try:
        history = History(kernel, create=False) if kernel.exists() else None
    except HistoryError:
        history = None
    from kstui.screens.replay import ReplayPlayer

    player = ReplayPlayer(events, history=history)
    return KstuiApp(kernel=kernel, replay=player, watch=False).run() or 0
