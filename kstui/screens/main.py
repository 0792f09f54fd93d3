"""The main screen: source, transcript and speedup side by side, the question box below.

It is a view of a Session (or of a replayed trace): session events arrive as SessionEvent messages and
fold into each pane's own state; keys call the Session's methods. No logic lives here that the
headless mode lacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Static, Tab, Tabs

from kstui.engine import events as ev
from kstui.views.columns import ColumnSplit
from kstui.widgets.divider import Divider
from kstui.widgets.footer import AlertFooter
from kstui.widgets.messages import AskQuestion, EditQueued, RemoveQueued, SessionEvent
from kstui.widgets.question_box import QuestionBox, QueueList
from kstui.widgets.relayout import relayout_now
from kstui.widgets.source import SourcePane
from kstui.widgets.speedup import SpeedupPanel
from kstui.widgets.transcript import WINDOW, Transcript

if TYPE_CHECKING:
    from kstui.engine.history import History
    from kstui.engine.session import Session
    from kstui.screens.bank import BankChoice
    from kstui.screens.replay import ReplayPlayer

# Below this the three columns do not fit side by side: they become tabs.
MIN_WIDTH, MIN_HEIGHT = 100, 30
WORKING = {"thinking", "stalled", "tool", "evaluating"}
SESSION_ACTIONS = {"bank", "pause", "resume", "interrupt", "evaluate", "focus_question"}
REPLAY_ACTIONS = {"replay_toggle", "replay_step", "replay_faster", "replay_slower"}
COLUMNS = ("source", "middle", "speedup")
DIVIDERS = 2  # cells between the columns, one beside each side column


class MiddleColumn(Vertical):
    """The transcript, the queue and the question box, stacked. It has no border or padding and its
    children cover it, so its own lines are blank: Textual makes them without rendering each one, which
    a divider move, resizing this column, would otherwise pay for (about 1 ms a frame)."""

    BLANK = True


class MainScreen(Screen):
    CSS_PATH = Path(__file__).with_name("main.tcss")

    # What the status line shows, from the session's events; each change redraws it and the footer's keys.
    status: var[str] = var("idle", init=False)
    pause_requested: var[bool] = var(False, init=False)  # the agent stops at the next turn boundary
    mode: var[str] = var("view", init=False)
    turn: var[int | None] = var(None, init=False)

    BINDINGS = [
        Binding("a", "focus_question", "ask"),
        Binding("b", "bank", "bank"),
        Binding("h", "history", "history"),
        Binding("p", "pause", "pause"),
        Binding("p", "resume", "resume"),
        Binding("escape", "interrupt", "interrupt"),
        Binding("e", "evaluate", "evaluate"),
        Binding("space", "replay_toggle", "play/pause"),
        Binding("n", "replay_step", "step"),
        Binding("plus,equals_sign", "replay_faster", "faster"),
        Binding("minus", "replay_slower", "slower"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
        Binding("left_square_bracket", "resize('source', -1)", "narrower source", show=False),
        Binding("right_square_bracket", "resize('source', 1)", "wider source", show=False),
        Binding("left_curly_bracket", "resize('speedup', -1)", "narrower speedup", show=False),
        Binding("right_curly_bracket", "resize('speedup', 1)", "wider speedup", show=False),
        # A terminal too small for three columns shows one at a time, as tabs.
        Binding("1", "show_tab('source')", "source tab", show=False),
        Binding("2", "show_tab('middle')", "transcript tab", show=False),
        Binding("3", "show_tab('speedup')", "speedup tab", show=False),
    ]

    def __init__(
        self,
        kernel: Path,
        *,
        session: Session | None = None,
        replay: ReplayPlayer | None = None,
        baseline: str | None = None,
        watch: bool = True,
        transcript_window: int = WINDOW,
    ) -> None:
        super().__init__()
        self.session = session
        self.replay = replay
        self.kernel = kernel
        self.set_reactive(MainScreen.mode, "replay" if replay is not None else ("agent" if session is not None else "view"))
        self.events_seen = 0  # events fully applied to the panes (tests and the benchmark wait on it)
        self.split = ColumnSplit()
        self.source = SourcePane(
            kernel, baseline=baseline, watch=watch and replay is None, follow_disk=replay is None,
            id="source", classes="column",
        )
        self.transcript = Transcript(window=transcript_window, id="transcript")
        self.speedup = SpeedupPanel(id="speedup", classes="column")
        self.queue = QueueList(id="queue")
        self.box = QuestionBox(id="question")
        # The palette (ctrl+p, in the help) leaves the footer's room to kstui's keys: at 80 columns
        # they all fit, `q quit` last.
        self.footer = AlertFooter(show_command_palette=False)

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Tabs(
            Tab("Source", id="tab-source"), Tab("Transcript", id="tab-middle"), Tab("Speedup", id="tab-speedup"),
            id="tabs", active="tab-middle",
        )
        with Horizontal(id="columns"):
            yield self.source
            yield Divider("source", id="divider-source")
            with MiddleColumn(id="middle", classes="column"):
                yield self.transcript
                yield self.queue
                yield self.box
            yield Divider("speedup", id="divider-speedup")
            yield self.speedup
        yield self.footer

    def on_mount(self) -> None:
        self.transcript.border_title = "transcript"
        self.speedup.border_title = "speedup"
        self.queue.display = False
        self.box.display = self.session is not None
        self._layout_for(self.size.width, self.size.height)
        self.update_status()
        self.transcript.focus()
        if self.replay is not None:
            self.replay.start(self)

    # --- session events ----------------------------------------------------------------------

    async def on_session_event(self, message: SessionEvent) -> None:
        event = message.event
        self.source.apply_event(event)
        await self.transcript.apply_event(event)
        if self.speedup.apply_event(event):
            self._stall_changed()
        self.queue.apply_event(event)
        if isinstance(event, ev.StatusChanged):
            self.status = event.status
        elif isinstance(event, ev.PauseChanged):
            self.pause_requested = event.paused
        elif isinstance(event, ev.TurnStarted):
            self.turn = event.turn
        elif isinstance(event, ev.SessionStarted):
            self.mode = "replay" if self.replay is not None else event.mode
            self.box.display = self.session is not None and self.mode == "agent"
        elif isinstance(event, ev.Accepted) and self.replay is not None and self.replay.history is not None:
            # A replay shows each accepted version as it was committed, not today's file.
            self.source.show_version(self.replay.history.content_at(event.commit))
        elif isinstance(event, ev.Error):
            self.notify(event.message, title=event.where or "error", severity="error")
        elif isinstance(event, ev.Notice) and event.level == "warning":
            self.notify(event.message, severity="warning")
        elif isinstance(event, ev.EvaluationFinished) and event.error:
            self.notify(f"evaluation #{event.eval_no} failed: {event.error}", severity="error")
        elif isinstance(event, ev.Accepted):
            self.notify(f"accepted {event.commit[:7]}: geomean {event.geomean:.3f}×")
        self.events_seen += 1

    def _status_changed(self) -> None:
        self.refresh_bindings()
        self.update_status()

    watch_status = watch_pause_requested = watch_mode = _status_changed

    def watch_turn(self) -> None:
        self.update_status()

    def _stall_changed(self) -> None:
        trigger = self.speedup.state.trigger
        self.set_class(trigger is not None, "-stalled")
        self.footer.set_alert(frozenset({"b"}) if trigger else frozenset())
        if trigger == "stall":
            self.notify(f"stalled: {self.speedup.state.stalled} — press b for a question", severity="warning")

    def update_status(self) -> None:
        parts = [f"kstui · {self.kernel.name}", self.mode]
        if self.replay is not None:
            parts.append(self.replay.describe())
        else:
            parts.append(self.status)
            if self.pause_requested and self.status != "paused":
                parts.append("pausing after this step")
        if self.turn is not None:
            parts.append(f"turn {self.turn}")
        self.query_one("#status", Static).update(Text(" · ".join(parts)))

    # --- questions ---------------------------------------------------------------------------

    def on_ask_question(self, message: AskQuestion) -> None:
        if self.session is None:
            return
        self.session.ask(
            message.text, interrupt=message.interrupt, source=message.source,
            question_id=message.question_id, kind=message.kind,
        )
        when = "now (interrupting)" if message.interrupt else "at the next turn boundary"
        self.notify(f"question queued: asked {when}")

    def on_edit_queued(self, message: EditQueued) -> None:
        if self.session is not None and not self.session.edit_queued(message.qid, message.text):
            self.notify("that question was already delivered: the edit was not made", severity="warning")

    def on_remove_queued(self, message: RemoveQueued) -> None:
        if self.session is not None:
            self.session.remove_queued(message.qid)

    # --- keys --------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in SESSION_ACTIONS and (self.session is None or self.mode == "manual" and action != "evaluate"):
            return False
        if action in REPLAY_ACTIONS and self.replay is None:
            return False
        if action == "pause":
            return not self.pause_requested
        if action == "resume":
            return self.pause_requested
        if action == "history" and self._history() is None:
            return False
        if action in ("resize", "show_tab"):  # columns are resized when side by side; tabs exist when narrow
            return self.has_class("-narrow") == (action == "show_tab")
        return True

    def _history(self) -> History | None:
        if self.session is not None:
            return self.session.history
        return self.replay.history if self.replay is not None else None

    def action_focus_question(self) -> None:
        self.box.focus()

    # The screens a key opens are imported when it is pressed: none of them is in the first frame.

    def action_bank(self) -> None:
        from kstui.screens.bank import BankScreen

        self.app.push_screen(BankScreen(self.session.bank, self.speedup.state.trigger), self._bank_chosen)

    def _bank_chosen(self, choice: BankChoice | None) -> None:
        if choice is None:
            return
        if choice.edit:
            self.box.prefill(choice.question, source="bank")
        else:
            q = choice.question
            self.post_message(AskQuestion(q.text, source="bank", question_id=q.id, kind=q.kind))

    def action_history(self) -> None:
        from kstui.screens.history import HistoryScreen

        # One history screen, kept between visits: its tables keep the rows they have drawn (drawing them
        # again was most of `h`'s frame) and it reads git again only when the branch has moved.
        if not self.app.is_screen_installed("history"):
            self.app.install_screen(HistoryScreen(self._history(), session=self.session), "history")
        self.app.push_screen("history")

    def action_pause(self) -> None:
        self.session.pause()

    def action_resume(self) -> None:
        self.session.resume()

    def action_interrupt(self) -> None:
        if self.box.has_focus:
            # Escape first leaves the question box (cancelling an edit); a second one interrupts.
            self.box.cancel_edit()
            self.transcript.focus()
            return
        self.session.interrupt()
        self.notify("interrupting the agent")

    def action_evaluate(self) -> None:
        if self.session.evaluating:
            # It waits for the one in flight: say so now rather than show nothing until then.
            self.notify("an evaluation is running: this one starts when it ends")
        self.run_worker(self.session.evaluate_now(), name="evaluate-now", exit_on_error=False)

    def action_help(self) -> None:
        from kstui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self.active_bindings))

    def action_quit(self) -> None:
        if self.session is not None and self.status in WORKING:
            from kstui.screens.confirm import ConfirmScreen

            self.app.push_screen(
                ConfirmScreen("The agent is working. Quit? The turn is interrupted; git and the trace stay consistent."),
                lambda yes: self.app.quit_after_stop() if yes else None,
            )
        else:
            self.app.quit_after_stop()

    def action_show_tab(self, column: str) -> None:
        self.query_one("#tabs", Tabs).active = f"tab-{column}"
        # Focus follows the tab: a focus left in a hidden pane (the question box) would take the next keys.
        target = {"source": self.source, "middle": self.transcript, "speedup": self.speedup}[column]
        if target.focusable:
            target.focus()
        else:
            self.set_focus(None)

    def action_resize(self, column: str, delta: int) -> None:
        if self.split.move(column, delta, self.size.width - DIVIDERS):
            self._move_divider()

    def on_divider_dragged(self, message: Divider.Dragged) -> None:
        # The side column reaches up to the divider: the source from the left edge, the speedup from the right.
        columns = self.query_one("#columns").region
        column = message.divider.column
        cells = message.screen_x - columns.x if column == "source" else columns.right - 1 - message.screen_x
        # Layout runs only when a width changed: not for a drag along the divider or past a limit.
        if self.split.place(column, cells, self.size.width - DIVIDERS):
            self._move_divider()

    def action_replay_toggle(self) -> None:
        self.replay.toggle()
        self.update_status()

    def action_replay_step(self) -> None:
        self.replay.step()
        self.update_status()

    def action_replay_faster(self) -> None:
        self.replay.faster()
        self.update_status()

    def action_replay_slower(self) -> None:
        self.replay.slower()
        self.update_status()

    # --- layout ------------------------------------------------------------------------------

    def _move_divider(self) -> None:
        # The frame that shows the new widths starts now rather than on the screen's next update tick.
        self._apply_widths(self.size.width)
        relayout_now(self, self.query_one("#columns"))

    def _apply_widths(self, width: int) -> None:
        # Narrow: one column at a time, as wide as the screen (main.tcss sizes it).
        widths = None if self.has_class("-narrow") else self.split.widths(width - DIVIDERS)
        for name in ("source", "speedup"):
            self.query_one(f"#{name}").styles.width = widths[name] if widths else None

    def on_resize(self, event: events.Resize) -> None:
        self._layout_for(event.size.width, event.size.height)

    def _layout_for(self, width: int, height: int) -> None:
        narrow = width < MIN_WIDTH or height < MIN_HEIGHT
        if narrow != self.has_class("-narrow"):
            self.refresh_bindings()  # the tab keys and [ ] { } swap places
        self.set_class(narrow, "-narrow")
        self._apply_widths(width)
        self.query_one("#tabs", Tabs).display = narrow
        if narrow:
            active = self.query_one("#tabs", Tabs).active or "tab-middle"
            self._show_column(active.removeprefix("tab-"))

    @on(Tabs.TabActivated, "#tabs")
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        self._show_column(event.tab.id.removeprefix("tab-") if event.tab and event.tab.id else "middle")

    def _show_column(self, name: str) -> None:
        for column in COLUMNS:
            self.query_one(f"#{column}").set_class(column == name, "-active")
