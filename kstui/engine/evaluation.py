"""Evaluations of the kernel and what follows from each: the verdict, a re-check, the commit, the events.

One evaluation at a time (a new request waits for the one in flight). Every executor call is an
evaluation with its own number. The kernel's text is read once, before the executor runs; a file that
changed meanwhile is rejected, so what is committed is exactly what was judged. An evaluation on a
scenario set other than the session's own is information for the agent, never a candidate.

The first evaluation of a session is its start: the kernel as the user brought it, from a copy taken
before the agent's first turn. A start that passes is committed (or found at the branch tip) and
every later version must beat it; one that does not pass leaves the first passing version as the start.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from harness.result import EvalResult
from kstui.engine.acceptance import Verdict, decide, decide_recheck, failure_reason
from kstui.engine.config import SessionConfig
from kstui.engine.events import (
    Accepted,
    Error,
    EvaluationFinished,
    EvaluationProgress,
    EvaluationStarted,
    Event,
    Rejected,
    StartingPoint,
)
from kstui.engine.history import BranchCheckedOut, History, HistoryError
from kstui.engine.integrity import JudgeFingerprint
from kstui.engine.kernel_file import KernelFile, unified_diff
from kstui.engine.question_queue import QueuedQuestion
from kstui.engine.result_view import agent_summary
from kstui.engine.secrets import kernel_secret
from kstui.engine.snapshots import Snapshots
from kstui.engine.state import SessionState

if TYPE_CHECKING:
    from pathlib import Path

    from kstui.executors.protocol import Executor

_T = TypeVar("_T")
# Progress reports become events at most this often (plus every phase change and every failure).
PROGRESS_PERIOD_S = 0.5


class ProgressReporter:
    """The executor's progress reports for one evaluation, as EvaluationProgress events on the session's loop.

    Reports may arrive from another thread; a report that changes nothing a reader sees (the same
    phase, no failure) within PROGRESS_PERIOD_S of the last one is dropped, so a minutes-long
    evaluation adds a few hundred lines to the trace, not thousands.
    """

    def __init__(self, eval_no: int, emit: Callable[[Event], None]) -> None:
        self.eval_no = eval_no
        self._emit = emit
        self._loop = asyncio.get_running_loop()
        self._last: tuple[str, float] | None = None
        self._closed = False

    def __call__(self, report: dict[str, Any]) -> None:
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._deliver(report)
        else:
            self._loop.call_soon_threadsafe(self._deliver, report)

    def close(self) -> None:
        """The evaluation has its result: a report still on its way describes nothing any more."""
        self._closed = True

    def _deliver(self, report: dict[str, Any]) -> None:
        if self._closed:
            return
        phase = str(report.get("phase", ""))
        failed = [f for f in report.get("failed") or [] if isinstance(f, dict)]
        now = time.monotonic()
        if self._last is not None and self._last[0] == phase and not failed and now - self._last[1] < PROGRESS_PERIOD_S:
            return
        self._last = (phase, now)
        eta = report.get("eta_s")
        self._emit(EvaluationProgress(
            eval_no=self.eval_no, phase=phase, done=_count(report.get("done")), total=_count(report.get("total")),
            eta_s=float(eta) if isinstance(eta, (int, float)) and not isinstance(eta, bool) else None,
            failed=[{k: str(f.get(k, "")) for k in ("id", "verdict", "detail")} for f in failed]))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class Evaluator:
    def __init__(self, config: SessionConfig, executor: Executor, history: History, kernel: KernelFile,
                 state: SessionState, emit: Callable[[Event], None], *,
                 observed: Callable[[bool], None], last_question: Callable[[], QueuedQuestion | None],
                 wake: Callable[[], None]) -> None:
        self.config, self.executor, self.history, self.kernel, self.state = config, executor, history, kernel, state
        self._emit = emit
        self._observed = observed  # told whether each candidate was accepted (the stall detector)
        self._last_question = last_question
        self._wake = wake
        self.lock = asyncio.Lock()
        self._task: asyncio.Task[Any] | None = None
        self._stopped = False
        self._fingerprint: JudgeFingerprint | None = None
        self._snapshots = Snapshots(config.kernel)
        self._told_task_change: list[str] = []  # the judge files last said to have changed
        self.last_evaluated: str | None = None  # the text the last evaluation judged
        self._last_error = ""
        self._best_noise_cache: tuple[str, float | None] | None = None
        self._best_text_cache: tuple[str, str] | None = None

    def start(self) -> None:
        """Fingerprint the judge as it is now: the harness (a change later stops every evaluation) and the
        task's judge files (every evaluation judges them as recorded here and is refused while they differ)."""
        self._fingerprint = JudgeFingerprint(self.config.harness_dir, self.config.kernel)
        self._snapshots.judge = self._fingerprint.task

    def close(self) -> None:
        self._snapshots.close()

    @property
    def busy(self) -> bool:
        return self.lock.locked()

    def cancel(self) -> None:
        """The session is stopping: the evaluation in flight is cancelled and none starts after it."""
        self._stopped = True
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def evaluate(self, scenarios: str | None = None) -> str:
        """Evaluate the kernel on disk, decide, commit or reject. Returns the agent's summary."""
        return await self._exclusive(self._evaluate_locked(scenarios or self.config.scenarios))

    async def evaluate_start(self, text: str) -> StartingPoint:
        """Evaluate the kernel as the user brought it (`text`, read before the agent could change it) on
        the session's own scenario set, and make it the start of the history if it passes."""
        return await self._exclusive(self._start_locked(text))

    async def _exclusive(self, work: Coroutine[Any, Any, _T]) -> _T:
        try:
            await self.lock.acquire()
        except asyncio.CancelledError:
            work.close()  # cancelled while waiting for the lock: the work never starts
            raise
        try:
            if self._stopped:  # waited for the lock while the session stopped
                work.close()
                raise asyncio.CancelledError
            self._task = asyncio.ensure_future(work)
            try:
                return await self._task
            finally:
                self._task = None
                self._wake()  # a budget it used up ends a session waiting for the next save
        finally:
            self.lock.release()

    async def _start_locked(self, text: str) -> StartingPoint:
        path = self._snapshots.write("start", text)
        try:
            eval_no, result = await self._run(path, self.config.scenarios, diff=unified_diff(
                self._best_text() or "", text, self.kernel.path.name), label="the kernel as you brought it")
        finally:
            self._snapshots.remove(path)
        if result is None:
            start = StartingPoint(eval_no=eval_no, geomean=None, reason=f"evaluation error: {self._last_error}")
        elif (failure := failure_reason(result) or (None if result.geomean_speedup else "no geomean")) is not None:
            start = StartingPoint(eval_no=eval_no, geomean=None, correct=result.correct_count,
                                  total=len(result.scenarios), reason=failure)
        else:
            start = self._record_start(eval_no, text, result)
        self._emit(start)
        return start

    def _record_start(self, eval_no: int, text: str, result: EvalResult) -> StartingPoint:
        tip = self.history.tip()
        commit: str | None = tip
        try:
            if tip is None or self.history.content_at(tip) != text:
                commit = self.history.commit_start(text, result, eval_no=eval_no).sha
        except BranchCheckedOut as exc:
            self._stop_for(str(exc))
            commit = None
        except HistoryError as exc:
            self._emit(Error(message=f"could not commit the start: {exc}", where="git"))
            commit = None
        return StartingPoint(eval_no=eval_no, geomean=result.geomean_speedup, correct=result.correct_count,
                             total=len(result.scenarios), commit=commit)

    async def _evaluate_locked(self, scenarios: str) -> str:
        changed = self._judge_changed()
        if changed:
            return changed
        if not os.path.lexists(self.kernel.path):  # a link, FIFO or device in its place is refused below
            self._emit(Error(message=f"{self.kernel.path.name} is missing: nothing to evaluate", where="executor"))
            return f"not evaluated: {self.kernel.path.name} is missing"
        content = self.kernel.read()
        self.last_evaluated = content
        refused = self._refused(content)
        if refused is not None:
            return refused
        best_text = self._best_text()
        # Against the best accepted version; before there is one, against nothing: the whole text, so a
        # rejected version is never lost.
        diff = unified_diff(best_text or "", content, self.kernel.path.name)
        fresh_best: EvalResult | None = None
        path = self._snapshots.write("candidate", content)
        try:
            if (best_text is not None and self.executor.parallelism >= 2 and scenarios == self.config.scenarios
                    and self._evals_left(2)):
                (eval_no, result), fresh_best = await self._beside_best(path, best_text, scenarios, diff)
            else:
                eval_no, result = await self._run(path, scenarios, diff=diff)
        finally:
            self._snapshots.remove(path)
        if result is None:
            self._observed(False)
            return f"evaluation error: {self._last_error}"
        if self.kernel.read() != content:
            return self._reject(eval_no, result, "the kernel changed on disk while it was being evaluated; "
                                                 "evaluate again")
        if scenarios != self.config.scenarios:
            # Correct on a subset is not correct on every shape: a partial evaluation is information only.
            reason = (f"evaluated on '{scenarios}' for information only: only the session's set "
                      f"'{self.config.scenarios}' can be accepted")
            self._emit(Rejected(eval_no=eval_no, reason=reason, geomean=result.geomean_speedup))
            return agent_summary(result) + f"\nNOT A CANDIDATE: {reason}"
        best_geomean, best_noise = self.state.best_geomean, self._best_noise()
        if fresh_best is not None:
            best_geomean, best_noise = fresh_best.geomean_speedup, fresh_best.noise_pct
        verdict = decide(result, best_geomean, best_noise,
                        floor_pct=self.config.noise_floor_pct, borderline_factor=self.config.borderline_factor)
        if verdict.kind == "borderline":
            if self._evals_left(2 * max(1, self.config.recheck_rounds)):
                verdict, result = await self._recheck(content, result, scenarios)
            else:
                verdict = Verdict("reject", f"borderline ({verdict.reason}), and re-checking it would go past "
                                            f"--max-evals {self.config.max_evals}")
        if verdict.kind != "accept":
            return self._reject(eval_no, result, verdict.reason)
        return self._accept(eval_no, content, result, verdict)

    def _refused(self, content: str) -> str | None:
        """A kernel never sent to be judged: a link, FIFO or device in the kernel file's place (what it
        points to is not the agent's to submit; a FIFO would hang the judge), a file too big, or text
        carrying a secret's value (never judged, shown or committed)."""
        reason = self.kernel.problem() or kernel_secret(content, [self.config.api_key or ""])
        if reason is None:
            return None
        eval_no = self.state.evals + 1
        self._emit(EvaluationStarted(eval_no=eval_no, kernel_sha256=hashlib.sha256(content.encode("utf-8",
                   "surrogateescape")).hexdigest(), scenarios=self.config.scenarios, where="kstui (refused)"))
        self._emit(EvaluationFinished(eval_no=eval_no, result=None, error=reason, where="kstui (refused)"))
        self._emit(Rejected(eval_no=eval_no, reason=reason))
        self._observed(False)
        return f"REJECTED: {reason}"

    def _evals_left(self, count: int) -> bool:
        """`count` more evaluations stay within --max-evals (re-checks count like any other)."""
        return self.config.max_evals is None or self.state.evals + count <= self.config.max_evals

    def _reject(self, eval_no: int, result: EvalResult, reason: str) -> str:
        self._emit(Rejected(eval_no=eval_no, reason=reason, geomean=result.geomean_speedup))
        self._observed(False)
        return agent_summary(result) + f"\nREJECTED: {reason}"

    def _accept(self, eval_no: int, content: str, result: EvalResult, verdict: Verdict) -> str:
        previous = self.state.best_geomean
        q = self._last_question()
        # Commit and Accepted event with no await between: a stop() cannot split them.
        try:
            entry = self.history.commit_accepted(content, result, previous=previous, turn=self.state.turn,
                                                 question=q.text if q else None,
                                                 question_source=q.source if q else None, eval_no=eval_no)
        except BranchCheckedOut as exc:
            self._emit(Rejected(eval_no=eval_no, reason=f"not committed: {exc}", geomean=result.geomean_speedup))
            self._stop_for(str(exc))
            return agent_summary(result) + f"\nNOT COMMITTED: {exc}; the session stops"
        except HistoryError as exc:
            self._emit(Error(message=f"could not commit the accepted version: {exc}", where="git"))
            self._emit(Rejected(eval_no=eval_no, reason=f"not committed: {exc}", geomean=result.geomean_speedup))
            return agent_summary(result) + f"\nNOT COMMITTED (git failed: {exc}); evaluate again"
        geomean = result.geomean_speedup or 0.0
        self._emit(Accepted(eval_no=eval_no, commit=entry.sha, geomean=geomean, previous=previous,
                            correct=result.correct_count, total=len(result.scenarios), message=entry.message))
        self._observed(True)
        was = f", previous best {previous:.4g}x" if previous is not None else " (the baseline)"
        return agent_summary(result) + f"\nACCEPTED as commit {entry.short}: {geomean:.4g}x{was}. {verdict.reason}"

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

    async def _run(self, path: Path, scenarios: str, *, diff: str = "",
                   label: str = "") -> tuple[int, EvalResult | None]:
        eval_no = self.state.evals + 1
        where = self.executor.describe() + (f" ({label})" if label else "")
        self._emit(EvaluationStarted(eval_no=eval_no, kernel_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                                     scenarios=scenarios, where=where))
        started = time.monotonic()
        reporter = ProgressReporter(eval_no, self._emit)
        try:
            try:
                result = await self.executor.evaluate(path, scenarios=scenarios, extra_args=self.config.eval_args,
                                                      progress=reporter)
            finally:
                reporter.close()
        except asyncio.CancelledError:
            self._emit(EvaluationFinished(eval_no=eval_no, result=None, error="cancelled: the session stopped",
                                          diff=diff, where=where, seconds=time.monotonic() - started))
            raise
        except Exception as exc:  # ExecutorError is the expected one; any other failure is reported alike
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self._last_error = message
            # One line: the evaluation's own failure says it (an Error beside it said it twice).
            self._emit(EvaluationFinished(eval_no=eval_no, result=None, error=message, diff=diff, where=where,
                                          seconds=time.monotonic() - started))
            return eval_no, None
        self._emit(EvaluationFinished(eval_no=eval_no, result=result, diff=diff, where=where,
                                      seconds=time.monotonic() - started))
        return eval_no, result

    async def _beside_best(self, path: Path, best_text: str, scenarios: str,
                           diff: str) -> tuple[tuple[int, EvalResult | None], EvalResult | None]:
        """The candidate and the best at once, on spare GPUs: the margin then rests on fresh numbers of
        both, taken under the same conditions. A best that fails to re-time leaves the recorded figure."""
        best_path = self._snapshots.write("best", best_text)
        try:
            candidate, (_, best) = await asyncio.gather(
                self._run(path, scenarios, diff=diff),
                self._run(best_path, scenarios, label="best, re-timed on a spare GPU"))
        finally:
            self._snapshots.remove(best_path)
        fresh = best if best is not None and failure_reason(best) is None and best.geomean_speedup else None
        return candidate, fresh

    async def _recheck(self, content: str, first: EvalResult, scenarios: str) -> tuple[Verdict, EvalResult]:
        """Re-evaluate the candidate and the best, interleaved, from snapshots; decide on the fresh numbers."""
        best_text = self._best_text()
        if best_text is None:
            return Verdict("reject", "borderline and the best version cannot be read back for a recheck"), first
        paths = [(self._snapshots.write("candidate", content), "recheck candidate"),
                 (self._snapshots.write("best", best_text), "recheck best")]
        rounds: dict[str, list[EvalResult]] = {"recheck candidate": [], "recheck best": []}
        try:
            for _ in range(max(1, self.config.recheck_rounds)):
                for path, label in paths:
                    _, r = await self._run(path, scenarios, label=label)
                    if r is None:
                        return Verdict("reject", f"borderline, and the {label} failed: {self._last_error}"), first
                    failure = failure_reason(r) or (None if r.geomean_speedup else "no geomean")
                    if failure:
                        return Verdict("reject", f"borderline, and the {label} did not pass: {failure}"), first
                    rounds[label].append(r)
        finally:
            for path, _ in paths:
                self._snapshots.remove(path)
        candidates = rounds["recheck candidate"]
        verdict = decide_recheck(candidates, rounds["recheck best"], floor_pct=self.config.noise_floor_pct)
        return verdict, candidates[-1]

    def _stop_for(self, reason: str) -> None:
        """Git refuses what the session is for: say so once and end the session."""
        self._emit(Error(message=reason, where="git"))
        self.state.stop_reason = "branch checked out"
        self._wake()

    def _judge_changed(self) -> str | None:
        if not self.state.harness_ok:
            return "evaluation stopped: the harness changed during this session"
        names = self._fingerprint.changed() if self._fingerprint is not None else []
        if not names:
            return self._task_changed()
        self.state.harness_ok = False
        message = (f"the harness changed during the session ({', '.join(names[:5])}): evaluation stopped; "
                   f"restore the harness and start a new session")
        self._emit(Error(message=message, where="harness"))
        self._wake()
        return "evaluation stopped: " + message

    def _task_changed(self) -> str | None:
        """A task file or reference changed since the start: refused (the session says so once per change)."""
        names = self._fingerprint.task_changed() if self._fingerprint is not None else []
        if not names:
            self._told_task_change = []
            return None
        message = (f"the task's judge files changed during the session ({', '.join(names[:5])}): evaluation refused; "
                   "restore them, or start a new session to judge against the new ones")
        if names != self._told_task_change:
            self._told_task_change = names
            self._emit(Error(message=message, where="task"))
        return "evaluation refused: " + message
