"""The Session: one kernel, one agent (or none, in manual mode), the harness's verdicts, git and the trace.

UI-free and asyncio-only: the TUI and the headless printer subscribe to the same typed events (the bus
writes each to the trace first). This module is the turn loop and the controls a view calls; what
happens around it has a module each: evaluation.py (verdicts and commits), conversation.py (the
messages), question_queue.py, state.py, detectors.py (stall, claimed limit), kernel_file.py.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kstui.engine.bank import QuestionBank, bank_paths
from kstui.engine.bus import EventBus
from kstui.engine.config import SessionConfig
from kstui.engine.conversation import Conversation, sendable_content, tool_result
from kstui.engine.detectors import StallDetector, find_limit_claim
from kstui.engine.evaluation import Evaluator
from kstui.engine.events import (
    AssistantMessage,
    Error,
    Event,
    ExternalEdit,
    LimitClaimed,
    Notice,
    PauseChanged,
    QuestionAsked,
    QuestionQueued,
    QuestionSource,
    QueueChanged,
    Rewound,
    SessionEnded,
    SessionStarted,
    Stalled,
    StatusChanged,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
    UserMessage,
)
from kstui.engine.guarded import capture, guarded_files
from kstui.engine.history import History, HistoryError
from kstui.engine.kernel_file import KernelFile, unified_diff
from kstui.engine.limits import limit_reached
from kstui.engine.question_queue import QuestionQueue, QueuedQuestion
from kstui.engine.reconcile import reconcile
from kstui.engine.secrets import Scrubber
from kstui.engine.state import SessionState, SessionSummary, UsageLedger
from kstui.engine.trace import TraceWriter, create_session, latest_session, read_trace, set_meta_model, trace_path
from kstui.engine.watcher import FileWatcher

if TYPE_CHECKING:
    from kstui.engine.agent import Agent
    from kstui.engine.lock import KernelLock
    from kstui.engine.tools import Toolbox
    from kstui.executors.protocol import Executor

_KERNEL_WRITERS = frozenset({"edit_file", "write_file", "bash"})
# The longest `_make_agent` waits for `agent_after` (a view's first frame) before importing the SDK anyway.
AGENT_AFTER_MAX_WAIT_S = 5.0
# How long `stop` waits for the run to end before cancelling it outright.
STOP_WAIT_S = 5.0
# A model stream silent this long is said to have stalled.
STREAM_STALL_S = 60.0


class Session:
    def __init__(self, config: SessionConfig, *, executor: Executor, agent: Agent | None,
                 toolbox: Toolbox | None = None, history: History | None = None,
                 bank: QuestionBank | None = None) -> None:
        self.config = config
        self.kernel = config.kernel
        self.workspace = config.workspace
        self.executor = executor
        self.agent = agent
        self.history = history or History(config.kernel, config.branch)
        self.bank = bank or QuestionBank.load(*bank_paths(config.workspace, config.questions))
        self.stall = StallDetector(evals_without_gain=config.stall_evals, turns_without_eval=config.stall_turns)
        self.state = SessionState()
        self.conversation = Conversation()
        self.questions = QuestionQueue()
        self.usage = UsageLedger()
        self.file = KernelFile(config.kernel)
        self._bus = EventBus(self.state.fold, Scrubber.from_environ(extra=[config.api_key or ""], inert=True))
        self.evaluator = Evaluator(config, executor, self.history, self.file, self.state, self._bus.emit,
                                   observed=self._observe_eval, last_question=lambda: self._last_question,
                                   wake=self._wake_up)
        self._sandbox_notice = ""
        self.toolbox = toolbox or self._make_toolbox()
        self.shell_confirmer: Callable[[str], Any] | None = None
        self._trace_file: Path | None = None
        self._pending_edits: list[str] = []
        self._pending_notes: list[str] = []  # told with the next message, never a reason for a turn of their own
        self._streaming = False
        self._tool_running = False
        self._stream_seen = 0.0  # when the model's stream last sent an event (monotonic)
        self._stopping = False
        self._stop_reason = "stopped"
        self._wake = asyncio.Event()
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._run_task: asyncio.Task[Any] | None = None
        self._last_question: QueuedQuestion | None = None
        self._watcher: FileWatcher | None = None
        self._resumed = False
        self._resumed_events: list[Event] = []
        self._pending_rewind: tuple[str, str, int] | None = None
        self._start_task: asyncio.Task[None] | None = None
        self._agent_pending = False  # build(): the agent is made when run() starts
        # Set by a view that draws on this loop: the SDK's import waits for it (its first frame), at most
        # AGENT_AFTER_MAX_WAIT_S. None (headless): the agent is made at once.
        self.agent_after: asyncio.Event | None = None
        self.kernel_lock: KernelLock | None = None  # held by the CLI's session: one kstui per kernel

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def build(cls, config: SessionConfig, executor: Executor, *, history: History | None = None,
              bank: QuestionBank | None = None) -> Session:
        """A session whose agent (unless manual), wired to the session's own toolbox, is made when `run`
        starts: the SDK takes seconds to import, and a view that starts the session after drawing its
        first frame should not wait for it."""
        session = cls(config, executor=executor, agent=None, history=history, bank=bank)
        session._agent_pending = not config.manual
        return session

    async def _make_agent(self) -> None:
        if self.agent_after is not None and not self.agent_after.is_set():
            # The import holds the GIL for most of its 2 s: begun with the view's first frame still to draw,
            # it would slow that frame down by about half. Waited for with a limit: a view that never sets it
            # delays the agent, never stops it.
            try:
                await asyncio.wait_for(self.agent_after.wait(), AGENT_AFTER_MAX_WAIT_S)
            except asyncio.TimeoutError:
                pass
        # On a thread, so that a view on this loop stays responsive while the SDK is imported.
        agent_module = await asyncio.to_thread(importlib.import_module, "kstui.engine.agent")
        from kstui.engine.prompts import system_prompt

        config = self.config
        agent_config = agent_module.AgentConfig(**{k: v for k, v in {
            "model": config.model, "max_tokens": config.max_tokens,
            "thinking_budget": config.thinking_budget, "base_url": config.base_url,
        }.items() if v is not None})
        prompt = system_prompt(self.display_path, str(config.workspace), shell=self.toolbox.shell_on)
        self.agent = agent_module.Agent(agent_config, prompt, self.toolbox.definitions(), api_key=config.api_key or "")
        self._agent_pending = False

    def _make_toolbox(self) -> Toolbox:
        from kstui.engine.sandbox import detect, notice
        from kstui.engine.tools import Toolbox

        sandbox = detect()
        self._sandbox_notice = notice(sandbox, unconfined=self.config.unconfined_shell)
        return Toolbox(
            self.workspace, self.kernel, evaluate=self._tool_evaluate, session_scenarios=self.config.scenarios,
            protected=[self.config.harness_dir, self.workspace / ".kstui", self.workspace / ".git",
                       *guarded_files(self.config), self.history.git_dir,
                       self.history.common_dir],
            confirm_shell=self._confirm_shell if self.config.confirm_shell else None,
            bash_timeout_s=self.config.bash_timeout_s, sandbox=sandbox,
            unconfined_shell=self.config.unconfined_shell, shell_off=self._sandbox_notice,
        )

    async def _confirm_shell(self, command: str) -> bool:
        if self.shell_confirmer is None:
            return False  # --confirm-shell with no one to ask: refuse rather than run unseen
        answer = self.shell_confirmer(command)
        return bool(await answer) if asyncio.iscoroutine(answer) else bool(answer)

    @property
    def display_path(self) -> str:
        kernel, workspace = self.config.kernel, self.config.workspace
        return str(kernel.relative_to(workspace)) if kernel.is_relative_to(workspace) else str(kernel)

    # --- what views read --------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._bus.subscribe(callback)

    @property
    def trace_file(self) -> Path | None:
        return self._trace_file

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.conversation.messages

    @property
    def queue(self) -> list[QueuedQuestion]:
        return list(self.questions)

    @property
    def evaluating(self) -> bool:
        """An evaluation is in flight (the agent's, a save's in manual mode, or an earlier request's)."""
        return self.evaluator.busy

    def _emit(self, event: Event) -> None:
        self._bus.emit(event)

    def _status(self, status: str) -> None:
        if self.state.status != status:
            self._emit(StatusChanged(status=status))  # type: ignore[arg-type]

    def _wake_up(self) -> None:
        self._wake.set()

    # --- the question queue ---------------------------------------------------------------------

    def ask(self, text: str, *, interrupt: bool = False, source: QuestionSource = "human",
            question_id: str | None = None, kind: str | None = None) -> None:
        """Queue a question for the next turn boundary; interrupt=True stops the stream in flight."""
        text = text.strip()
        if not text:
            return
        q = QueuedQuestion(text=text, source=source, question_id=question_id, kind=kind, interrupt=interrupt)
        self.questions.add(q, front=interrupt)
        self._emit(QuestionQueued(text=text, source=source, question_id=question_id, interrupt=interrupt))
        self._queue_changed()
        if interrupt:
            self.interrupt()
        self._wake.set()

    def edit_queued(self, qid: int, text: str) -> bool:
        """Change a queued question's text; False if it was delivered or removed meanwhile."""
        text = text.strip()
        done = self.questions.remove(qid) if not text else self.questions.edit(qid, text)
        if done:
            self._queue_changed()
        return done

    def remove_queued(self, qid: int) -> bool:
        done = self.questions.remove(qid)
        if done:
            self._queue_changed()
        return done

    def _queue_changed(self) -> None:
        self._emit(QueueChanged(queue=self.questions.snapshot()))

    def _self_ask(self, trigger: str) -> None:
        if not self.config.self_ask or self.agent is None:
            return
        queued = list(self.questions)
        if any(q.source == "self" for q in queued):
            return  # one self-question pending is enough
        q = self.bank.draw(trigger, exclude=[x.question_id for x in queued if x.question_id])
        self.ask(q.text, source="self", question_id=q.id, kind=q.kind)

    # --- control --------------------------------------------------------------------------------

    def pause(self) -> None:
        """Hold the agent at the next turn boundary. A turn in flight runs on (its status stays what it
        is doing); a session waiting at the boundary is woken so that it shows "paused" at once."""
        if self.state.paused:
            return
        self._unpaused.clear()
        self.state.paused = True
        self._emit(PauseChanged(paused=True))
        self._wake.set()

    def resume(self) -> None:
        if not self.state.paused:
            return
        self.state.paused = False
        self._unpaused.set()
        self._wake.set()
        self._emit(PauseChanged(paused=False))

    def interrupt(self) -> None:
        """Stop the model's stream in flight (the partial reply is kept); tools already running finish."""
        if self._streaming and self.agent is not None:
            self.agent.interrupt()

    def request_stop(self) -> None:
        """Begin ending the session, without waiting: the stream, a running tool and the evaluation are
        cancelled; `run` then closes the trace and returns. Safe to call from a signal's callback."""
        self._stopping = True
        self._stop_reason = "stopped"
        self.interrupt()
        self._wake.set()
        self._unpaused.set()
        self.evaluator.cancel()
        if self._tool_running and self._run_task is not None and not self._run_task.done():
            self._run_task.cancel()  # the tool's own cleanup (a killed process group) runs on cancellation

    def flush_trace(self) -> None:
        """Write the trace's buffered stream text now (a hurried exit's last words)."""
        self._bus.flush()

    async def stop(self) -> None:
        """End the session and wait for `run` to finish: git and the trace stay consistent."""
        self.request_stop()
        task = self._run_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=STOP_WAIT_S)
            except asyncio.TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def evaluate_now(self) -> None:
        """Evaluate the kernel as it is on disk, by the same rule (the human's request)."""
        await self.evaluator.evaluate()

    async def rewind(self, sha: str, *, truncate_context: bool = False) -> None:
        """Restore an accepted version into the workspace (a new commit); optionally forget later turns.

        Waits for an evaluation in flight. The agent's context is cut at the next turn boundary, so
        the conversation is never edited under a turn that is still running.
        """
        async with self.evaluator.lock:
            try:
                entry = self.history.entry(sha)
                new = self.history.restore(entry.sha, turn=self.state.turn)
            except HistoryError as exc:
                self._emit(Error(message=str(exc), where="rewind"))
                return
            old_text = self.file.known
            self.evaluator.last_evaluated = self.file.take_as_known()
            if (said := self.history.backup_said()) is not None:
                self._emit(Notice(message=said, level="warning"))
        if truncate_context and self.agent is not None and entry.turn in self.conversation.turn_ends:
            self._pending_rewind = (entry.sha, new, entry.turn)
        else:
            self._emit(Rewound(to_commit=entry.sha, new_commit=new))
        if self.agent is not None:
            diff = unified_diff(old_text, self.file.known, self.kernel.name)
            self._pending_edits.append(
                f"The human restored the kernel to accepted version {entry.short} "
                f"({entry.geomean or 0:.4g}x geomean). The file on disk now differs from what you last saw:\n"
                f"```diff\n{diff}```" if diff else
                f"The human restored the kernel to accepted version {entry.short}; its content is unchanged.")
        self._wake.set()

    def _apply_rewind(self) -> None:
        if self._pending_rewind is None:
            return
        to_commit, new_commit, turn = self._pending_rewind
        self._pending_rewind = None
        self.conversation.truncate_to(turn)
        self._emit(Rewound(to_commit=to_commit, new_commit=new_commit, truncated_to_turn=turn))

    # --- running ----------------------------------------------------------------------------------

    async def run(self) -> SessionSummary:
        self._run_task = asyncio.current_task()
        self._open_trace()
        reason = "stopped"
        try:
            if self._agent_pending:
                await self._make_agent()
            if self.agent is not None and self._trace_file is not None:
                set_meta_model(self._trace_file.parent, self.agent.config.model)
            self._start()
            if not self._resumed:  # a resumed session keeps the start it had
                self._start_task = asyncio.ensure_future(self._evaluate_start(self.file.known))
            if self.agent is None:
                reason = await self._run_manual()
            else:
                reason = await self._run_agent()
        except asyncio.CancelledError:
            reason = "stopped"
        except Exception as exc:  # a bug must still leave a closed, readable trace behind
            self._emit(Error(message=f"session failed: {type(exc).__name__}: {exc}", where="session"))
            reason = "error"
        finally:
            if self._watcher is not None:
                self._watcher.stop()
            if self._start_task is not None and not self._start_task.done():
                self._start_task.cancel()
                await asyncio.gather(self._start_task, return_exceptions=True)
            await self._close_collaborators()
            if self._stopping:
                reason = self._stop_reason
            self._status("stopped")
            self._emit(SessionEnded(reason=reason, best_geomean=self.state.best_geomean,
                                    best_commit=self.state.best_commit))
            self._bus.close()
        s = self.state
        return SessionSummary(session_id=s.session_id, reason=reason, best_geomean=s.best_geomean,
                              best_commit=s.best_commit, accepted=s.accepted, evals=s.evals,
                              tool_calls=s.tool_calls, turns=s.turn, cost_usd=s.cost_usd,
                              trace=self._trace_file or Path())

    async def _close_collaborators(self) -> None:
        """The session owns its agent's HTTP client and its executor: release both, whatever happened."""
        self.evaluator.close()
        for closing in (self.agent, self.executor):
            if closing is None:
                continue
            try:
                await closing.close()
            except Exception as exc:  # closing at the end must not turn a finished run into a crash
                self._emit(Error(message=f"closing {type(closing).__name__}: {exc}", where="session"))

    def _open_trace(self) -> None:
        directory: Path | None = None
        resumed_events: list[Event] = []
        if self.config.resume:
            directory = latest_session(self.workspace, self.kernel)
            if directory is not None:
                resumed_events = list(read_trace(trace_path(directory)))
        if directory is None:
            directory = create_session(self.workspace, self.kernel, self.config.model)
        ignore = self.workspace / ".kstui" / ".gitignore"
        if not ignore.exists():  # kstui's state never shows up in the user's `git status`
            ignore.write_text("*\n", encoding="utf-8")
        self.state.session_id = directory.name
        self._trace_file = trace_path(directory)
        self._bus.open(TraceWriter(self._trace_file, extra_secrets=[self.config.api_key or ""]))
        self.history.session_id = directory.name
        if resumed_events:
            self._resumed = True
            self._restore_from(resumed_events)
            self._resumed_events = resumed_events

    def _restore_from(self, events: list[Event]) -> None:
        """Rebuild the conversation, counters, queue, spending and question use from a trace."""
        self.conversation.rebuild(events)
        self.bank.replay(events)
        self.stall.replay(events)
        self.usage.replay(events)
        for e in events:
            if not isinstance(e, Usage):
                self.state.fold(e)
            if isinstance(e, QuestionAsked):
                self._last_question = QueuedQuestion(e.text, e.source, e.question_id, e.kind)
            elif isinstance(e, QueueChanged):
                self.questions.restore(e.queue)
        self.state.status, self.state.best_geomean, self.state.best_commit = "idle", None, None
        if self.conversation.ended_without_tools:
            self._pending_edits.append("The session was resumed after an interruption. Carry on.")

    def _start(self) -> None:
        self.evaluator.start()
        best = self.history.best()
        if best is not None:
            self.state.best_geomean, self.state.best_commit = best.geomean, best.sha
        self.state.mode = "manual" if self.agent is None else "agent"
        self.file.take_as_known()
        # Watching starts before SessionStarted is announced: a save right after it is never missed.
        self._watcher = FileWatcher(self.kernel, self._on_file_change)
        self._watcher.start()
        model = getattr(getattr(self.agent, "config", None), "model", None)
        self._emit(SessionStarted(
            session_id=self.state.session_id, kernel=str(self.kernel), mode=self.state.mode,  # type: ignore[arg-type]
            model=model, branch=self.history.branch, resumed=self._resumed, sandbox=self._sandbox_notice,
            guarded=capture(self.config, self.history.git_dir)))
        spent = self.usage.offset_usage(model or "")
        if spent is not None:
            self._emit(spent)  # the views count from what the resumed session had already spent
        if self._resumed:
            for event in reconcile(self.history, self._resumed_events, self.state.session_id):
                self._emit(event)
            self._resumed_events = []
        if self.history.created_repo and not self._resumed:
            self._emit(Notice(message=f"{self.history.repo.working_tree_dir} was in no git repository: kstui made "
                                      f"one there for its history (branch {self.history.branch})", level="warning"))
        if self.config.no_agent:
            self._emit(Notice(message="--no-agent: manual mode; start kstui without it (ANTHROPIC_API_KEY set) for "
                                      "the agent"))
        elif self.config.manual:
            self._emit(Notice(message="no ANTHROPIC_API_KEY: manual mode (every save is evaluated); set it and "
                                      "start kstui again for the agent", level="warning"))

    async def _evaluate_start(self, text: str) -> None:
        """The kernel as the user brought it, judged beside the agent's first turn (the text was read
        before that turn began). The agent hears the outcome with the next message it gets."""
        self.evaluator.last_evaluated = text  # manual mode: the file as it is needs no second evaluation
        start = await self.evaluator.evaluate_start(text)
        if start.geomean is not None:
            note = (f"The starting point (the kernel as the human brought it) was evaluated: {start.geomean:.4g}x "
                    f"geomean ({start.correct}/{start.total} correct). A version is accepted only if it beats "
                    f"the best so far ({self.state.best_geomean or start.geomean:.4g}x).")
        else:
            # The views say it from the StartingPoint event itself: once.
            note = (f"The kernel as the human brought it does not pass ({start.reason}): the first version "
                    f"that passes becomes the start of this history.")
        if self.agent is not None:
            self._pending_notes.append(note)

    def _limit_reached(self) -> str | None:
        if self._stopping:
            return self._stop_reason
        return limit_reached(self.config, self.state)

    async def _run_manual(self) -> str:
        self._status("idle")
        gone = False
        while self._limit_reached() is None:
            await self._wake.wait()
            self._wake.clear()
            if self._stopping:
                break
            if not self.kernel.is_file():  # deleted (or mid-rename): the watcher wakes us when it is back
                if not gone:
                    self._emit(Notice(message=f"{self.kernel.name} is gone: waiting for it to come back",
                                      level="warning"))
                gone = True
                continue
            if gone:
                gone = False
                self._emit(Notice(message=f"{self.kernel.name} is back"))
            if self.file.read() != self.evaluator.last_evaluated:
                await self.evaluator.evaluate()
        return self._limit_reached() or self._stop_reason

    async def _run_agent(self) -> str:
        assert self.agent is not None
        if not self.messages:
            self._send_user_text(self._opening_brief())
        while True:
            reason = await self._boundary()
            if reason is not None:
                return reason
            await self._turn()

    def _opening_brief(self) -> str:
        if self._resumed:
            best = (f"The best accepted version so far has a geomean speedup of {self.state.best_geomean:.4g}x."
                    if self.state.best_geomean is not None else
                    "No version has been accepted yet: the first one that passes becomes the start.")
        else:
            best = ("The kernel as it is now is being evaluated as the start of this history; you will hear its "
                    "result. A version is accepted only if it beats the start and every version accepted before.")
        return (f"Make the CUDA kernel in `{self.display_path}` faster.\n"
                f"Only the harness's verdict counts: call the `evaluate` tool. A version is accepted (and "
                f"committed) only if it is correct on every scenario, passes every check, and its geomean "
                f"speedup beats the best accepted version by more than the measured noise.\n{best}")

    async def _boundary(self) -> str | None:
        """Between turns: pause, limits, deliveries (edits, one question), context compaction."""
        while True:
            if not self._unpaused.is_set():
                self._status("paused")
                await self._unpaused.wait()
            reason = self._limit_reached()
            if reason is not None:
                return reason
            self._apply_rewind()
            parts: list[str] = []
            if self._pending_edits:
                parts.extend(self._pending_edits)
                self._pending_edits.clear()
            question = self.questions.pop()
            if question is not None:
                self._queue_changed()
                parts.append(question.text)
            if parts:
                self._send_user_text("\n\n".join(self._pending_notes + parts), question)
                self._pending_notes.clear()
            if self.conversation.awaiting_reply:
                self._compact()
                return None
            # The agent ended its turn and there is nothing to tell it.
            if self.config.self_ask:
                self._emit(Stalled(reason="the agent ended its turn", turns_without_eval=0))
                self._self_ask("stall")
                continue
            if not self.config.wait_for_human:
                return "agent finished"
            self._status("idle")
            self._wake.clear()
            await self._wake.wait()

    def _send_user_text(self, text: str, question: QueuedQuestion | None = None) -> None:
        turn = self.state.turn + 1
        if question is not None:
            if question.question_id is not None:
                self.bank.mark_used(question.question_id)
            self.stall.question_asked()
            self._last_question = question
            self._emit(QuestionAsked(turn=turn, text=question.text, source=question.source,
                                     question_id=question.question_id, kind=question.kind))
        self.conversation.add_user_text(text)
        self._emit(UserMessage(turn=turn, text=text))

    def _compact(self) -> None:
        assert self.agent is not None
        best = (f"best accepted: {self.state.best_geomean:.4g}x geomean ({self.state.best_commit})"
                if self.state.best_geomean is not None else "nothing accepted yet")
        messages, trimmed = self.agent.compact(self.messages, kernel_text=self.file.read(), best_summary=best)
        if trimmed is not None:
            self.messages[:] = messages
            self._emit(trimmed)

    async def _turn(self) -> None:
        from kstui.engine.agent import AgentError  # the SDK is slow to import: only with an agent

        assert self.agent is not None
        turn = self.state.turn + 1
        self._emit(TurnStarted(turn=turn))
        self._status("thinking")
        final: AssistantMessage | None = None
        failure: str | None = None
        self._streaming = True
        self._stream_seen = time.monotonic()
        watchdog = asyncio.ensure_future(self._watch_stream())
        try:
            # A broken stream that the agent retries yields a partial AssistantMessage first: the last wins.
            async for event in self.agent.stream_turn(self.messages, turn):
                self._stream_seen = time.monotonic()
                if self.state.status == "stalled":
                    self._status("thinking")
                if isinstance(event, AssistantMessage):
                    final = event
                self._emit(self.usage.total(event) if isinstance(event, Usage) else event)
        except AgentError as exc:
            failure = str(exc)
        finally:
            self._streaming = False
            watchdog.cancel()
        if failure is not None or final is None:
            # The model API gave up (retries exhausted, a refused request): the session ends, nothing lost.
            self._emit(Error(message=failure or "the agent returned no reply", where="agent"))
            self._emit(TurnFinished(turn=turn, stop_reason="error"))
            self._status("idle")
            if self._limit_reached() is None:
                self._stop_reason = "agent error"
                self._stopping = True
            return
        blocks = sendable_content(final.content, interrupted=final.interrupted)
        sent_input = {b.get("id"): b.get("input") for b in final.content if b.get("type") == "tool_use"}
        self.conversation.add_assistant(blocks)
        self._check_limit_claim(turn, blocks)
        results: list[dict[str, Any]] = []
        evaluated = False
        for block in blocks:
            if block.get("type") == "tool_use":
                if self._stopping:
                    results.append(tool_result(block["id"], "not run: the session was stopped", True))
                    continue
                evaluated |= block.get("name") == "evaluate"
                results.append(await self._run_tool(turn, block, sent_input.get(block["id"])))
        self.conversation.add_tool_results(results)
        self.conversation.end_turn(turn)
        stop_reason = "interrupted" if final.interrupted else self.agent.last_stop_reason
        self._emit(TurnFinished(turn=turn, stop_reason=stop_reason, interrupted=final.interrupted))
        self._stalled(self.stall.observe_turn(evaluated))
        self._status("idle")

    async def _watch_stream(self) -> None:
        """Say so when the model's stream has been silent for STREAM_STALL_S (the SDK's own read timeout
        is minutes away): the status becomes "stalled" until the next event, and the person may interrupt."""
        while True:
            await asyncio.sleep(max(0.0, self._stream_seen + STREAM_STALL_S - time.monotonic()))
            silent = time.monotonic() - self._stream_seen
            if silent >= STREAM_STALL_S and self.state.status != "stalled":
                self._emit(Notice(message=f"stream stalled: no event from the model for {silent:.0f} s "
                                          f"(interrupt it: escape in the TUI, Ctrl-C headless)", level="warning"))
                self._status("stalled")
                self._stream_seen = time.monotonic()  # said again after as long a silence

    def _check_limit_claim(self, turn: int, blocks: list[dict[str, Any]]) -> None:
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        sentence = find_limit_claim(text) if text else None
        if sentence:
            self._emit(LimitClaimed(turn=turn, sentence=sentence))
            self._self_ask("claimed_limit")

    def _observe_eval(self, accepted: bool) -> None:
        self._stalled(self.stall.observe_eval(accepted))

    def _stalled(self, event: Stalled | None) -> None:
        if event is not None:
            self._emit(event)
            self._self_ask("stall")

    async def _run_tool(self, turn: int, block: dict[str, Any], raw: Any) -> dict[str, Any]:
        """`raw`: the input as the model sent it (any JSON value; the toolbox refuses what is not an object)."""
        call_id, name = block["id"], block.get("name", "")
        self._emit(ToolCallStarted(turn=turn, call_id=call_id, name=name, input=raw if isinstance(raw, dict) else {}))
        self._status("evaluating" if name == "evaluate" else "tool")
        started = time.monotonic()
        # Only these tools can write the kernel: a change during any other one is the human's.
        self.file.tool_writing = name in _KERNEL_WRITERS
        self._tool_running = True
        try:
            outcome = await self.toolbox.run(name, raw)  # type: ignore[arg-type]  # the toolbox checks it
            text, is_error = outcome.text, outcome.is_error
        except asyncio.CancelledError:
            text, is_error = "not finished: the session was stopped", True
            if not self._stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # request_stop's own cancel, handled
        except Exception as exc:  # the toolbox promises not to raise; if it does, the agent hears why
            text, is_error = f"tool {name} failed: {type(exc).__name__}: {exc}", True
        finally:
            self._tool_running = False
            if self.file.tool_writing:
                self.file.take_as_known()  # whatever the tool did to the kernel is the agent's
            self.file.tool_writing = False
        self._check_external_edit()
        self._emit(ToolCallFinished(turn=turn, call_id=call_id, name=name, output=text, is_error=is_error,
                                    seconds=time.monotonic() - started))
        return tool_result(call_id, text, is_error)

    # --- external edits ----------------------------------------------------------------------------

    def _on_file_change(self) -> None:
        """Called on the loop after a burst of changes to the kernel file settled."""
        if self.agent is None:
            self._wake.set()  # manual mode: every save is evaluated
            return
        if not self.file.tool_writing:  # else the agent's own tool is writing: its end takes the content
            self._check_external_edit()

    def _check_external_edit(self) -> None:
        if self.agent is None:
            return
        diff = self.file.external_edit()
        if diff is None:
            return
        self._emit(ExternalEdit(path=str(self.kernel), diff=diff))
        self._pending_edits.append(
            f"The kernel file was edited outside your tools (by the human) since you last saw it:\n"
            f"```diff\n{diff}```")
        self._wake.set()

    # --- evaluation ----------------------------------------------------------------------------------

    async def _tool_evaluate(self, scenarios: str | None = None) -> str:
        if self.config.max_evals is not None and self.state.evals >= self.config.max_evals:
            return "evaluation budget exhausted: no more evaluations in this session"
        return await self.evaluator.evaluate(scenarios or self.config.scenarios)
