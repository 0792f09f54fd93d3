"""The Session: one kernel, one agent (or none, in manual mode), the harness's verdicts, git and the trace.

UI-free and asyncio-only: the TUI and the headless printer subscribe to the same typed events. Every
event goes to the trace first (so a crash loses at most the event being written), then to subscribers.
Text and thinking deltas reach subscribers one by one but are joined in the trace, a few per line.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import importlib
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.result import EvalResult
from kstui.engine.config import SessionConfig
from kstui.engine.events import (
    Accepted,
    AssistantMessage,
    ContextTrimmed,
    Error,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    ExternalEdit,
    LimitClaimed,
    Notice,
    PauseChanged,
    QuestionAsked,
    QuestionQueued,
    QuestionSource,
    QueueChanged,
    Rejected,
    Rewound,
    SessionEnded,
    SessionStarted,
    Stalled,
    StatusChanged,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
    UserMessage,
)
from kstui.engine.history import History, HistoryError
from kstui.engine.questions import QuestionBank, StallDetector, bank_paths, find_limit_claim
from kstui.engine.trace import TraceWriter, create_session, latest_session, read_trace, trace_path
from kstui.engine.watcher import FileWatcher

if TYPE_CHECKING:
    from kstui.engine.agent import Agent
    from kstui.executors.protocol import Executor
    from kstui.engine.tools import Toolbox

# Deltas are joined into one trace line per this many seconds (or characters) of stream.
_DELTA_FLUSH_S = 0.25
_DELTA_FLUSH_CHARS = 4096
_MAX_FAILURES_LISTED = 5
_KERNEL_WRITERS = frozenset({"edit_file", "write_file", "bash"})
# The longest `_make_agent` waits for `agent_after` (a view's first frame) before importing the SDK anyway.
AGENT_AFTER_MAX_WAIT_S = 5.0
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")


# --- plain data ----------------------------------------------------------------------------------


@dataclass
class QueuedQuestion:
    text: str
    source: QuestionSource = "human"
    question_id: str | None = None
    kind: str | None = None
    interrupt: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SessionState:
    session_id: str = ""
    mode: str = "agent"
    status: str = "idle"
    turn: int = 0
    evals: int = 0
    tool_calls: int = 0
    accepted: int = 0
    best_geomean: float | None = None
    best_commit: str | None = None
    latest_geomean: float | None = None
    stalled: bool = False
    paused: bool = False
    harness_ok: bool = True
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class SessionSummary:
    session_id: str
    reason: str
    best_geomean: float | None
    best_commit: str | None
    accepted: int
    evals: int
    tool_calls: int
    turns: int
    cost_usd: float
    trace: Path


# --- the acceptance rule -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    kind: Literal["accept", "reject", "borderline"]
    reason: str
    gain_pct: float | None = None
    margin_pct: float | None = None


def failure_reason(result: EvalResult) -> str | None:
    """Why a result cannot be accepted whatever its speed, in one line; None if it passed."""
    if result.error:
        return f"evaluation error: {result.error}"
    if not result.build.ok:
        if result.build.errors:
            e = result.build.errors[0]
            more = f" (+{len(result.build.errors) - 1} more)" if len(result.build.errors) > 1 else ""
            return f"build failed: {e.file}:{e.line}: {e.message}{more}"
        return "build failed"
    failed = [c for c in result.checks if not c.ok]
    if failed:
        return "check failed: " + "; ".join(f"{c.name}" + (f" ({c.detail})" if c.detail else "") for c in failed)
    if not result.scenarios:
        return "no scenarios were run"
    wrong = [s for s in result.scenarios if not s.correct]
    if wrong:
        listed = ", ".join(f"{s.id}: {s.verdict}" for s in wrong[:_MAX_FAILURES_LISTED])
        more = f" (+{len(wrong) - _MAX_FAILURES_LISTED} more)" if len(wrong) > _MAX_FAILURES_LISTED else ""
        return f"{result.correct_count}/{len(result.scenarios)} correct; {listed}{more}"
    if not result.passed:
        return "not every scenario passed"
    return None


def judge(candidate: EvalResult, best_geomean: float | None, best_noise_pct: float | None, *,
          floor_pct: float, borderline_factor: float) -> Verdict:
    """Accept, reject, or ask for an interleaved re-evaluation (borderline) of a candidate."""
    failure = failure_reason(candidate)
    if failure is not None:
        return Verdict("reject", failure)
    g = candidate.geomean_speedup
    if g is None:
        return Verdict("reject", "no geomean: no timed scenarios")
    if best_geomean is None:
        return Verdict("accept", "first passing version (baseline of this history)")
    margin = max(candidate.noise_pct or 0.0, best_noise_pct or 0.0, floor_pct)
    gain = (g / best_geomean - 1.0) * 100.0
    if gain <= 0:
        return Verdict("reject", f"not faster: {g:.4g}x vs best {best_geomean:.4g}x ({gain:+.2f}%)", gain, margin)
    if gain > borderline_factor * margin:
        return Verdict("accept", f"{gain:+.2f}% over best (noise margin {margin:.2f}%)", gain, margin)
    return Verdict("borderline", f"{gain:+.2f}% is within {borderline_factor:g}x the noise margin {margin:.2f}%",
                   gain, margin)


def summarize_result(result: EvalResult) -> str:
    """The compact text the agent gets back from `evaluate`."""
    total = len(result.scenarios)
    lines = [f"{result.correct_count}/{total} scenarios correct"
             + (f", geomean speedup {result.geomean_speedup:.4g}x" if result.geomean_speedup else "")
             + (f" (noise {result.noise_pct:.2f}%)" if result.noise_pct is not None else "")]
    b = result.build
    build = f"build {'ok' if b.ok else 'FAILED'}"
    if b.registers is not None:
        build += f", {b.registers} registers"
    build += f", {b.spills} bytes spilled" if b.spills else ""
    if b.smem_bytes is not None:
        build += f", {b.smem_bytes} B shared memory"
    lines.append(build)
    for e in b.errors[:10]:
        lines.append(f"  {e.file}:{e.line}: {e.message}")
    if not b.ok and not b.errors and b.log:
        lines.append(b.log[-2000:])
    for c in result.checks:
        if not c.ok:
            lines.append(f"check {c.name} failed" + (f": {c.detail}" if c.detail else ""))
    wrong = [s for s in result.scenarios if not s.correct]
    for s in wrong[:10]:
        lines.append(f"  {s.id}: {s.verdict}" + (f" ({s.detail})" if s.detail else ""))
    if len(wrong) > 10:
        lines.append(f"  … {len(wrong) - 10} more failing scenarios")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root (bytecode caches excluded): the harness's fingerprint."""
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out[path.relative_to(root).as_posix()] = _sha256(path.read_bytes())
    return out


def unified_diff(old: str, new: str, name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{name}", f"b/{name}"))


# --- the session ---------------------------------------------------------------------------------


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
        self._sandbox_notice = ""
        self.toolbox = toolbox or self._make_toolbox()
        self.queue: list[QueuedQuestion] = []
        self.messages: list[dict[str, Any]] = []
        self.state = SessionState()
        self.shell_confirmer: Callable[[str], Any] | None = None
        self._subscribers: list[Callable[[Event], None]] = []
        self._trace: TraceWriter | None = None
        self._trace_file: Path | None = None
        self._deltas: tuple[type[Event], int, list[str], float] | None = None
        self._delta_timer: asyncio.TimerHandle | None = None
        self._known_text = ""
        self._pending_edits: list[str] = []
        self._tool_running = False
        self._streaming = False
        self._stopping = False
        self._stop_reason = "stopped"
        self._wake = asyncio.Event()
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._eval_lock = asyncio.Lock()
        self._eval_task: asyncio.Task[Any] | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._harness_hashes: dict[str, str] = {}
        self._last_question: QueuedQuestion | None = None
        self._turn_end_len: dict[int, int] = {}
        self._watcher: FileWatcher | None = None
        self._last_evaluated: str | None = None
        self._last_eval_error = ""
        self._resumed = False
        self._pending_rewind: tuple[str, str, int] | None = None
        self._best_noise_cache: tuple[str, float | None] | None = None
        self._best_text_cache: tuple[str, str] | None = None
        self._usage_now: dict[str, Usage] = {}
        self._usage_before: dict[str, float] = {}
        self._agent_pending = False  # build(): the agent is made when run() starts
        # Set by a view that draws on this loop: the SDK's import waits for it (its first frame), at most
        # AGENT_AFTER_MAX_WAIT_S. None (headless): the agent is made at once.
        self.agent_after: asyncio.Event | None = None

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
        prompt = system_prompt(_display_path(config.kernel, config.workspace), str(config.workspace))
        self.agent = agent_module.Agent(agent_config, prompt, self.toolbox.definitions(), api_key=config.api_key or "")
        self._agent_pending = False

    def _make_toolbox(self) -> Toolbox:
        from kstui.engine.sandbox import detect, notice
        from kstui.engine.tools import Toolbox

        sandbox = detect()
        self._sandbox_notice = notice(sandbox)
        return Toolbox(
            self.workspace, self.kernel, evaluate=self._tool_evaluate,
            protected=[self.config.harness_dir, self.workspace / ".kstui", self.workspace / ".git"],
            confirm_shell=self._confirm_shell if self.config.confirm_shell else None,
            bash_timeout_s=self.config.bash_timeout_s, sandbox=sandbox,
        )

    async def _confirm_shell(self, command: str) -> bool:
        if self.shell_confirmer is None:
            return False  # --confirm-shell with no one to ask: refuse rather than run unseen
        answer = self.shell_confirmer(command)
        return bool(await answer) if asyncio.iscoroutine(answer) else bool(answer)

    # --- events ---------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._subscribers.append(callback)

    @property
    def trace_file(self) -> Path | None:
        return self._trace_file

    def _emit(self, event: Event) -> None:
        if isinstance(event, (TextDelta, ThinkingDelta)):
            self._buffer_delta(event)
        else:
            self._flush_deltas()
            self._write(event)
        self._update_state(event)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # a broken view must not end the session
                self._write(Error(message=f"subscriber failed: {type(exc).__name__}: {exc}", where="subscriber"))

    def _write(self, event: Event) -> None:
        if self._trace is not None:
            self._trace.append(event)

    def _buffer_delta(self, event: TextDelta | ThinkingDelta) -> None:
        kind = type(event)
        if self._deltas is not None and (self._deltas[0] is not kind or self._deltas[1] != event.turn):
            self._flush_deltas()
        if self._deltas is None:
            self._deltas = (kind, event.turn, [], event.ts)
            self._delta_timer = asyncio.get_running_loop().call_later(_DELTA_FLUSH_S, self._flush_deltas)
        self._deltas[2].append(event.text)
        if time.time() - self._deltas[3] > _DELTA_FLUSH_S or sum(map(len, self._deltas[2])) > _DELTA_FLUSH_CHARS:
            self._flush_deltas()

    def _flush_deltas(self) -> None:
        if self._delta_timer is not None:
            self._delta_timer.cancel()
            self._delta_timer = None
        if self._deltas is None:
            return
        kind, turn, parts, ts = self._deltas
        self._deltas = None
        self._write(kind(turn=turn, text="".join(parts), ts=ts))

    def _update_state(self, event: Event) -> None:
        s = self.state
        if isinstance(event, StatusChanged):
            s.status = event.status
        elif isinstance(event, TurnStarted):
            s.turn = event.turn
        elif isinstance(event, EvaluationStarted):
            s.evals = max(s.evals, event.eval_no)
        elif isinstance(event, ToolCallFinished):
            s.tool_calls += 1
        elif isinstance(event, Accepted):
            s.accepted += 1
            s.best_geomean, s.best_commit = event.geomean, event.commit
            s.stalled = False
        elif isinstance(event, Stalled):
            s.stalled = True
        elif isinstance(event, Usage):
            # Usage is cumulative per model and per agent process: sum the models, on top of what a
            # resumed trace had already spent.
            self._usage_now[event.model] = event
            totals = [sum(getattr(u, f) for u in self._usage_now.values()) + self._usage_before.get(f, 0)
                      for f in _USAGE_FIELDS]
            (s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, s.cost_usd) = totals

    def _status(self, status: str) -> None:
        if self.state.status != status:
            self._emit(StatusChanged(status=status))  # type: ignore[arg-type]

    # --- the question queue ---------------------------------------------------------------------

    def ask(self, text: str, *, interrupt: bool = False, source: QuestionSource = "human",
            question_id: str | None = None, kind: str | None = None) -> None:
        """Queue a question for the next turn boundary; interrupt=True stops the stream in flight."""
        text = text.strip()
        if not text:
            return
        q = QueuedQuestion(text=text, source=source, question_id=question_id, kind=kind, interrupt=interrupt)
        if interrupt:
            self.queue.insert(0, q)
        else:
            self.queue.append(q)
        self._emit(QuestionQueued(text=text, source=source, question_id=question_id, interrupt=interrupt))
        self._queue_changed()
        if interrupt:
            self.interrupt()
        self._wake.set()

    def edit_queued(self, i: int, text: str) -> None:
        self.queue[i].text = text.strip()
        self._queue_changed()

    def remove_queued(self, i: int) -> None:
        del self.queue[i]
        self._queue_changed()

    def _queue_changed(self) -> None:
        self._emit(QueueChanged(queue=[q.to_dict() for q in self.queue]))

    def _self_ask(self, trigger: str) -> None:
        if not self.config.self_ask or self.agent is None:
            return
        if any(q.source == "self" for q in self.queue):
            return  # one self-question pending is enough
        q = self.bank.draw(trigger, exclude=[x.question_id for x in self.queue if x.question_id])
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

    async def stop(self) -> None:
        """End the session: the stream and any evaluation are cancelled; git and trace stay consistent."""
        self._stopping = True
        self._stop_reason = "stopped"
        self.interrupt()
        self._wake.set()
        self._unpaused.set()
        if self._eval_task is not None and not self._eval_task.done():
            self._eval_task.cancel()
        task = self._run_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=30)
            except asyncio.TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    @property
    def evaluating(self) -> bool:
        """An evaluation is in flight (the agent's, a save's in manual mode, or an earlier request's)."""
        return self._eval_lock.locked()

    async def evaluate_now(self) -> None:
        """Evaluate the kernel as it is on disk, by the same rule (the human's request)."""
        await self._evaluate_candidate()

    async def rewind(self, sha: str, *, truncate_context: bool = False) -> None:
        """Restore an accepted version into the workspace (a new commit); optionally forget later turns.

        Waits for an evaluation in flight. The agent's context is cut at the next turn boundary, so
        the conversation is never edited under a turn that is still running.
        """
        async with self._eval_lock:
            try:
                entry = self.history.entry(sha)
                new = self.history.restore(entry.sha, turn=self.state.turn)
            except HistoryError as exc:
                self._emit(Error(message=str(exc), where="rewind"))
                return
            old_text = self._known_text
            self._known_text = self._last_evaluated = self._read_kernel()
        if truncate_context and self.agent is not None and entry.turn in self._turn_end_len:
            self._pending_rewind = (entry.sha, new, entry.turn)
        else:
            self._emit(Rewound(to_commit=entry.sha, new_commit=new))
        if self.agent is not None:
            diff = unified_diff(old_text, self._known_text, self.kernel.name)
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
        del self.messages[self._turn_end_len[turn]:]
        for later in [t for t in self._turn_end_len if t > turn]:
            del self._turn_end_len[later]
        self._emit(Rewound(to_commit=to_commit, new_commit=new_commit, truncated_to_turn=turn))

    # --- running ----------------------------------------------------------------------------------

    async def run(self) -> SessionSummary:
        self._run_task = asyncio.current_task()
        self._open_trace()
        reason = "stopped"
        try:
            if self._agent_pending:
                await self._make_agent()
            self._start()
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
            await self._close_collaborators()
            if self._stopping:
                reason = self._stop_reason
            self._status("stopped")
            self._emit(SessionEnded(reason=reason, best_geomean=self.state.best_geomean,
                                    best_commit=self.state.best_commit))
            if self._trace is not None:
                self._trace.close()
        return SessionSummary(
            session_id=self.state.session_id, reason=reason, best_geomean=self.state.best_geomean,
            best_commit=self.state.best_commit, accepted=self.state.accepted, evals=self.state.evals,
            tool_calls=self.state.tool_calls, turns=self.state.turn, cost_usd=self.state.cost_usd,
            trace=self._trace_file or Path(),
        )

    async def _close_collaborators(self) -> None:
        """The session owns its agent's HTTP client and its executor: release both, whatever happened."""
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
        self._trace = TraceWriter(self._trace_file, extra_secrets=[self.config.api_key or ""])
        if resumed_events:
            self._resumed = True
            self._restore_from(resumed_events)

    def _start(self) -> None:
        self._harness_hashes = hash_tree(self.config.harness_dir)
        best = self.history.best()
        if best is not None:
            self.state.best_geomean, self.state.best_commit = best.geomean, best.sha
        self.state.mode = "manual" if self.agent is None else "agent"
        self._known_text = self._read_kernel()
        # Watching starts before SessionStarted is announced: a save right after it is never missed.
        self._watcher = FileWatcher(self.kernel, self._on_file_change)
        self._watcher.start()
        self._emit(SessionStarted(
            session_id=self.state.session_id, kernel=str(self.kernel), mode=self.state.mode,  # type: ignore[arg-type]
            model=getattr(getattr(self.agent, "config", None), "model", None), branch=self.history.branch,
            resumed=self._resumed, sandbox=self._sandbox_notice))
        if self.config.manual and not self.config.no_agent:
            self._emit(Notice(message="no ANTHROPIC_API_KEY: manual mode (every save is evaluated)",
                              level="warning"))

    def _limit_reached(self) -> str | None:
        c, s = self.config, self.state
        if self._stopping:
            return self._stop_reason
        if not s.harness_ok:
            return "harness changed"
        if c.max_evals is not None and s.evals >= c.max_evals:
            return "max evals reached"
        if c.max_cost is not None and s.cost_usd >= c.max_cost:
            return "max cost reached"
        if c.max_turns is not None and s.turn >= c.max_turns:
            return "max turns reached"
        return None

    async def _run_manual(self) -> str:
        self._status("idle")
        while self._limit_reached() is None:
            await self._wake.wait()
            self._wake.clear()
            if self._stopping:
                break
            if self._read_kernel() != self._last_evaluated:
                await self._evaluate_candidate()
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
        rel = _display_path(self.kernel, self.workspace)
        best = (f"The best accepted version so far has a geomean speedup of {self.state.best_geomean:.4g}x."
                if self.state.best_geomean is not None else
                "No version has been accepted yet: the first one that passes becomes the baseline.")
        return (f"Make the CUDA kernel in `{rel}` faster.\n"
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
            question = self._next_question()
            if question is not None:
                parts.append(question.text)
            if parts:
                self._send_user_text("\n\n".join(parts), question)
            if self.messages and self.messages[-1]["role"] == "user":
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

    def _next_question(self) -> QueuedQuestion | None:
        if not self.queue:
            return None
        q = self.queue.pop(0)
        self._queue_changed()
        return q

    def _send_user_text(self, text: str, question: QueuedQuestion | None = None) -> None:
        turn = self.state.turn + 1
        if question is not None:
            if question.question_id is not None:
                self.bank.mark_used(question.question_id)
            self.stall.question_asked()
            self._last_question = question
            self._emit(QuestionAsked(turn=turn, text=question.text, source=question.source,
                                     question_id=question.question_id, kind=question.kind))
        append_user_text(self.messages, text)
        self._emit(UserMessage(turn=turn, text=text))

    def _compact(self) -> None:
        assert self.agent is not None
        best = (f"best accepted: {self.state.best_geomean:.4g}x geomean ({self.state.best_commit})"
                if self.state.best_geomean is not None else "nothing accepted yet")
        messages, trimmed = self.agent.compact(self.messages, kernel_text=self._read_kernel(), best_summary=best)
        if trimmed is not None:
            self.messages[:] = messages
            self._emit(trimmed)

    async def _turn(self) -> None:
        from kstui.engine.agent import AgentError, sendable_content  # the SDK is slow to import: only with an agent

        assert self.agent is not None
        turn = self.state.turn + 1
        self._emit(TurnStarted(turn=turn))
        self._status("thinking")
        final: AssistantMessage | None = None
        failure: str | None = None
        self._streaming = True
        try:
            # A broken stream that the agent retries yields a partial AssistantMessage first: the last wins.
            async for event in self.agent.stream_turn(self.messages, turn):
                if isinstance(event, AssistantMessage):
                    final = event
                self._emit(event)
        except AgentError as exc:
            failure = str(exc)
        finally:
            self._streaming = False
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
        if blocks:
            self.messages.append({"role": "assistant", "content": blocks})
        self._check_limit_claim(turn, blocks)
        results: list[dict[str, Any]] = []
        evaluated = False
        for block in blocks:
            if block.get("type") == "tool_use":
                if self._stopping:
                    results.append(_tool_result(block["id"], "not run: the session was stopped", True))
                    continue
                evaluated |= block.get("name") == "evaluate"
                results.append(await self._run_tool(turn, block))
        if results:
            self.messages.append({"role": "user", "content": results})
        self._turn_end_len[turn] = len(self.messages)
        stop_reason = "interrupted" if final.interrupted else self.agent.last_stop_reason
        self._emit(TurnFinished(turn=turn, stop_reason=stop_reason, interrupted=final.interrupted))
        self._observe_turn(evaluated)
        self._status("idle")

    def _check_limit_claim(self, turn: int, blocks: list[dict[str, Any]]) -> None:
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        sentence = find_limit_claim(text) if text else None
        if sentence:
            self._emit(LimitClaimed(turn=turn, sentence=sentence))
            self._self_ask("claimed_limit")

    def _observe_turn(self, evaluated: bool) -> None:
        self._stalled(self.stall.observe_turn(evaluated))

    def _stalled(self, event: Stalled | None) -> None:
        if event is not None:
            self._emit(event)
            self._self_ask("stall")

    async def _run_tool(self, turn: int, block: dict[str, Any]) -> dict[str, Any]:
        call_id, name = block["id"], block.get("name", "")
        tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
        self._emit(ToolCallStarted(turn=turn, call_id=call_id, name=name, input=tool_input))
        self._status("evaluating" if name == "evaluate" else "tool")
        started = time.monotonic()
        # Only these tools can write the kernel: a change during any other one is the human's.
        self._tool_running = name in _KERNEL_WRITERS
        try:
            outcome = await self.toolbox.run(name, tool_input)
            text, is_error = outcome.text, outcome.is_error
        except asyncio.CancelledError:
            text, is_error = "not finished: the session was stopped", True
        except Exception as exc:  # the toolbox promises not to raise; if it does, the agent hears why
            text, is_error = f"tool {name} failed: {type(exc).__name__}: {exc}", True
        finally:
            if self._tool_running:
                self._known_text = self._read_kernel()  # whatever the tool did to the kernel is the agent's
            self._tool_running = False
        self._check_external_edit()
        self._emit(ToolCallFinished(turn=turn, call_id=call_id, name=name, output=text, is_error=is_error,
                                    seconds=time.monotonic() - started))
        return _tool_result(call_id, text, is_error)

    # --- external edits ----------------------------------------------------------------------------

    def _on_file_change(self) -> None:
        """Called on the loop after a burst of changes to the kernel file settled."""
        if self.agent is None:
            self._wake.set()  # manual mode: every save is evaluated
            return
        if not self._tool_running:  # else the agent's own tool is writing: its end takes the content as its own
            self._check_external_edit()

    def _check_external_edit(self) -> None:
        text = self._read_kernel()
        if self.agent is None or text == self._known_text:
            return
        diff = unified_diff(self._known_text, text, self.kernel.name)
        self._known_text = text
        self._emit(ExternalEdit(path=str(self.kernel), diff=diff))
        self._pending_edits.append(
            f"The kernel file was edited outside your tools (by the human) since you last saw it:\n"
            f"```diff\n{diff}```")
        self._wake.set()

    def _read_kernel(self) -> str:
        try:
            return self.kernel.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return ""  # mid-save (an editor's rename) or deleted: treated as empty until it is back

    # --- evaluation ----------------------------------------------------------------------------------

    async def _tool_evaluate(self, scenarios: str | None = None) -> str:
        if self.config.max_evals is not None and self.state.evals >= self.config.max_evals:
            return "evaluation budget exhausted: no more evaluations in this session"
        return await self._evaluate_candidate(scenarios or self.config.scenarios)

    async def _evaluate_candidate(self, scenarios: str | None = None) -> str:
        """Evaluate the kernel on disk, decide, commit or reject. Returns the agent's summary."""
        async with self._eval_lock:
            task = asyncio.ensure_future(self._evaluate_locked(scenarios or self.config.scenarios))
            self._eval_task = task
            try:
                return await task
            finally:
                self._eval_task = None

    async def _evaluate_locked(self, scenarios: str) -> str:
        changed = self._harness_changes()
        if changed:
            return changed
        content = self._read_kernel()
        self._last_evaluated = content
        best_text = self._best_text()
        # Against the best accepted version; before there is one, against nothing: the whole text, so a
        # rejected version is never lost.
        diff = unified_diff(best_text or "", content, self.kernel.name)
        fresh_best: EvalResult | None = None
        if best_text is not None and self.executor.parallelism >= 2 and scenarios == self.config.scenarios:
            (eval_no, result), fresh_best = await self._evaluate_beside_best(best_text, scenarios, diff)
        else:
            eval_no, result = await self._run_executor(self.kernel, scenarios, diff=diff)
        if result is None:
            self._observe_eval(False)
            return f"evaluation error: {self._last_eval_error}"
        if self._read_kernel() != content:
            reason = "the kernel changed on disk while it was being evaluated; evaluate again"
            self._emit(Rejected(eval_no=eval_no, reason=reason, geomean=result.geomean_speedup))
            self._observe_eval(False)
            return summarize_result(result) + f"\nREJECTED: {reason}"
        self.state.latest_geomean = result.geomean_speedup
        if scenarios != self.config.scenarios:
            # Correct on a subset is not correct on every shape: a partial evaluation is information only.
            reason = f"evaluated on '{scenarios}': only a '{self.config.scenarios}' evaluation can be accepted"
            self._emit(Rejected(eval_no=eval_no, reason=reason, geomean=result.geomean_speedup))
            return summarize_result(result) + f"\nNOT A CANDIDATE: {reason}"
        best_geomean, best_noise = self.state.best_geomean, self._best_noise()
        if fresh_best is not None:
            best_geomean, best_noise = fresh_best.geomean_speedup, fresh_best.noise_pct
        verdict = judge(result, best_geomean, best_noise,
                        floor_pct=self.config.noise_floor_pct, borderline_factor=self.config.borderline_factor)
        if verdict.kind == "borderline":
            verdict, result = await self._recheck(content, result, scenarios)
        if verdict.kind != "accept":
            self._emit(Rejected(eval_no=eval_no, reason=verdict.reason, geomean=result.geomean_speedup))
            self._observe_eval(False)
            return summarize_result(result) + f"\nREJECTED: {verdict.reason}"
        previous = self.state.best_geomean
        q = self._last_question
        # Commit and Accepted event with no await between: a stop() cannot split them.
        try:
            sha = self.history.commit_accepted(content, result, previous=previous, turn=self.state.turn,
                                               question=q.text if q else None,
                                               question_source=q.source if q else None, eval_no=eval_no)
            message = self.history.entry(sha).message
        except HistoryError as exc:
            self._emit(Error(message=f"could not commit the accepted version: {exc}", where="git"))
            self._emit(Rejected(eval_no=eval_no, reason=f"not committed: {exc}", geomean=result.geomean_speedup))
            return summarize_result(result) + f"\nNOT COMMITTED (git failed: {exc}); evaluate again"
        geomean = result.geomean_speedup or 0.0
        self._emit(Accepted(eval_no=eval_no, commit=sha, geomean=geomean, previous=previous,
                            correct=result.correct_count, total=len(result.scenarios), message=message))
        self._observe_eval(True)
        was = f", previous best {previous:.4g}x" if previous is not None else " (the baseline)"
        return summarize_result(result) + f"\nACCEPTED as commit {sha[:8]}: {geomean:.4g}x{was}. {verdict.reason}"

    def _best_noise(self) -> float | None:
        """The best accepted result's noise, read from its git note once per commit."""
        commit = self.state.best_commit
        if commit is None:
            return None
        if self._best_noise_cache is None or self._best_noise_cache[0] != commit:
            best = self.history.result_of(commit)
            self._best_noise_cache = (commit, best.noise_pct if best else None)
        return self._best_noise_cache[1]

    def _best_text(self) -> str | None:
        commit = self.state.best_commit
        if commit is None:
            return None
        if self._best_text_cache is None or self._best_text_cache[0] != commit:
            try:
                self._best_text_cache = (commit, self.history.content_at(commit))
            except HistoryError:
                return None
        return self._best_text_cache[1]

    async def _run_executor(self, path: Path, scenarios: str, *, diff: str = "",
                            label: str = "") -> tuple[int, EvalResult | None]:
        eval_no = self.state.evals + 1
        where = self.executor.describe() + (f" ({label})" if label else "")
        self._emit(EvaluationStarted(eval_no=eval_no, kernel_sha256=_sha256(path.read_bytes()),
                                     scenarios=scenarios, where=where))
        started = time.monotonic()
        try:
            result = await self.executor.evaluate(path, scenarios=scenarios, extra_args=self.config.eval_args)
        except asyncio.CancelledError:
            self._emit(EvaluationFinished(eval_no=eval_no, result=None, error="cancelled: the session stopped",
                                          diff=diff, where=where, seconds=time.monotonic() - started))
            raise
        except Exception as exc:  # ExecutorError is the expected one; any other failure is reported alike
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self._last_eval_error = message
            self._emit(Error(message=f"evaluation {eval_no}: {message}", where="executor"))
            self._emit(EvaluationFinished(eval_no=eval_no, result=None, error=message, diff=diff, where=where,
                                          seconds=time.monotonic() - started))
            return eval_no, None
        self._emit(EvaluationFinished(eval_no=eval_no, result=result.to_dict(), diff=diff, where=where,
                                      seconds=time.monotonic() - started))
        return eval_no, result

    async def _evaluate_beside_best(self, best_text: str, scenarios: str,
                                    diff: str) -> tuple[tuple[int, EvalResult | None], EvalResult | None]:
        """The candidate and the best at once, on spare GPUs: the margin then rests on fresh numbers of
        both, taken under the same conditions. A best that fails to re-time leaves the recorded figure."""
        best_path = self._snapshot("best", best_text)
        try:
            candidate, (_, best) = await asyncio.gather(
                self._run_executor(self.kernel, scenarios, diff=diff),
                self._run_executor(best_path, scenarios, label="best, re-timed on a spare GPU"))
        finally:
            self._remove_snapshot(best_path)
        fresh = best if best is not None and failure_reason(best) is None and best.geomean_speedup else None
        return candidate, fresh

    async def _recheck(self, content: str, first: EvalResult, scenarios: str) -> tuple[Verdict, EvalResult]:
        """Re-evaluate the candidate and the best, interleaved, from snapshots; decide on the fresh numbers."""
        best_text = self._best_text()
        if best_text is None:
            return Verdict("reject", "borderline and the best version cannot be read back for a recheck"), first
        cand_path = self._snapshot("candidate", content)
        best_path = self._snapshot("best", best_text)
        cands: list[EvalResult] = []
        bests: list[EvalResult] = []
        try:
            for _ in range(max(1, self.config.recheck_rounds)):
                for path, label, sink in ((cand_path, "recheck candidate", cands), (best_path, "recheck best", bests)):
                    _, r = await self._run_executor(path, scenarios, label=label)
                    if r is None:
                        return Verdict("reject", f"borderline, and the {label} failed: {self._last_eval_error}"), first
                    failure = failure_reason(r) or (None if r.geomean_speedup else "no geomean")
                    if failure:
                        return Verdict("reject", f"borderline, and the {label} did not pass: {failure}"), first
                    sink.append(r)
        finally:
            for p in (cand_path, best_path):
                self._remove_snapshot(p)
        g_cand = _geomean([r.geomean_speedup for r in cands])  # type: ignore[misc]
        g_best = _geomean([r.geomean_speedup for r in bests])  # type: ignore[misc]
        margin = max([r.noise_pct or 0.0 for r in cands + bests] + [self.config.noise_floor_pct])
        gain = (g_cand / g_best - 1.0) * 100.0
        fresh = f"rechecked {len(cands)}x interleaved: {g_cand:.4g}x vs best {g_best:.4g}x ({gain:+.2f}%, " \
                f"noise margin {margin:.2f}%)"
        return (Verdict("accept" if gain > margin else "reject", fresh, gain, margin), cands[-1])

    def _snapshot(self, label: str, content: str) -> Path:
        """A copy of a version beside the kernel (so its includes and task file resolve the same way)."""
        path = self.kernel.with_name(f".{self.kernel.stem}.kstui-{label}{self.kernel.suffix}")
        path.write_text(content, encoding="utf-8", errors="surrogateescape")
        task = self.kernel.with_suffix(".toml")
        if task.is_file():
            shutil.copyfile(task, path.with_suffix(".toml"))
        return path

    @staticmethod
    def _remove_snapshot(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.with_suffix(".toml").unlink(missing_ok=True)

    def _observe_eval(self, accepted: bool) -> None:
        self._stalled(self.stall.observe_eval(accepted))

    def _harness_changes(self) -> str | None:
        if not self.state.harness_ok:
            return "evaluation stopped: the harness changed during this session"
        now = hash_tree(self.config.harness_dir)
        if now == self._harness_hashes:
            return None
        names = sorted(k for k in set(now) | set(self._harness_hashes) if now.get(k) != self._harness_hashes.get(k))
        self.state.harness_ok = False
        message = (f"the harness changed during the session ({', '.join(names[:5])}): evaluation stopped; "
                   f"restore the harness and start a new session")
        self._emit(Error(message=message, where="harness"))
        self._wake.set()
        return "evaluation stopped: " + message

    # --- resume ----------------------------------------------------------------------------------

    def _restore_from(self, events: list[Event]) -> None:
        """Rebuild the conversation, counters, queue and question use from a trace."""
        self.messages[:] = rebuild_messages(events, self._turn_end_len)
        self.bank.replay(events)
        self.stall.replay(events)
        for e in events:
            if isinstance(e, TurnStarted):
                self.state.turn = max(self.state.turn, e.turn)
            elif isinstance(e, EvaluationStarted):
                self.state.evals = max(self.state.evals, e.eval_no)
            elif isinstance(e, ToolCallFinished):
                self.state.tool_calls += 1
            elif isinstance(e, Accepted):
                self.state.accepted += 1
            elif isinstance(e, Usage):
                self._update_state(e)
            elif isinstance(e, SessionStarted) and self._usage_now:
                # an earlier run of this session ended here: its spending becomes the offset
                self._usage_before = {f: getattr(self.state, f) for f in _USAGE_FIELDS}
                self._usage_now.clear()
            elif isinstance(e, QuestionAsked):
                self._last_question = QueuedQuestion(e.text, e.source, e.question_id, e.kind)
            elif isinstance(e, QueueChanged):
                self.queue = [QueuedQuestion(**q) for q in e.queue]
        self._usage_before = {f: getattr(self.state, f) for f in _USAGE_FIELDS}
        self._usage_now.clear()
        if self.messages and self.messages[-1]["role"] == "assistant":
            has_tools = any(b.get("type") == "tool_use" for b in self.messages[-1]["content"])
            if not has_tools:
                self._pending_edits.append("The session was resumed after an interruption. Carry on.")


def _display_path(kernel: Path, workspace: Path) -> str:
    return str(kernel.relative_to(workspace)) if kernel.is_relative_to(workspace) else str(kernel)


def append_user_text(messages: list[dict[str, Any]], text: str) -> None:
    """Add text to the conversation as the user, joining the last user message (roles must alternate)."""
    block = {"type": "text", "text": text}
    if messages and messages[-1]["role"] == "user":
        content = messages[-1]["content"]
        if isinstance(content, str):
            messages[-1]["content"] = [{"type": "text", "text": content}, block]
        else:
            content.append(block)
    else:
        messages.append({"role": "user", "content": [block]})


def _tool_result(call_id: str, text: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}


def rebuild_messages(events: list[Event], turn_end_len: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The conversation as the session held it, from the trace's events.

    Tool calls the trace started but never finished (the process was killed) get an error result, so
    the conversation stays valid for the API.
    """
    from kstui.engine.agent import sendable_content

    messages: list[dict[str, Any]] = []
    ends: dict[int, int] = {} if turn_end_len is None else turn_end_len
    pending: dict[str, dict[str, Any]] = {}
    assistant_turn: int | None = None

    def close_pending() -> None:
        if not pending:
            return
        results = [_tool_result(cid, "not finished: the session was interrupted", True) for cid in pending]
        pending.clear()
        if messages and messages[-1]["role"] == "user" and any(
                b.get("type") == "tool_result" for b in messages[-1]["content"]):
            messages[-1]["content"].extend(results)
        else:
            messages.append({"role": "user", "content": results})

    for e in events:
        if isinstance(e, UserMessage):
            close_pending()
            append_user_text(messages, e.text)
        elif isinstance(e, TurnStarted):
            close_pending()
        elif isinstance(e, AssistantMessage):
            if assistant_turn == e.turn and messages and messages[-1]["role"] == "assistant":
                messages.pop()  # a partial reply kept before a retry: the retried reply replaces it
                pending.clear()
            assistant_turn = e.turn
            blocks = sendable_content(e.content, interrupted=e.interrupted)
            if blocks:
                messages.append({"role": "assistant", "content": blocks})
                pending.update({b["id"]: b for b in blocks if b.get("type") == "tool_use"})
        elif isinstance(e, ToolCallFinished) and e.call_id in pending:
            del pending[e.call_id]
            result = _tool_result(e.call_id, e.output, e.is_error)
            if messages[-1]["role"] == "user":
                messages[-1]["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        elif isinstance(e, TurnFinished):
            close_pending()
            ends[e.turn] = len(messages)
        elif isinstance(e, ContextTrimmed):
            continue  # compaction is redone on the rebuilt conversation by the agent
        elif isinstance(e, Rewound) and e.truncated_to_turn is not None and e.truncated_to_turn in ends:
            del messages[ends[e.truncated_to_turn]:]
            for later in [t for t in ends if t > e.truncated_to_turn]:
                del ends[later]
    close_pending()
    return messages
