"""A worker process seen from its parent: started with its preparation, given its job, read to the end.

`StartedWorker` starts harness.worker in its own process group and session, as harness.worker_launch
says (isolated Python, no secrets, a private directory, bubblewrap where it works); `run` sends the
job and turns the worker's message stream into one `ScenarioResult` per scenario, whatever the
worker does (hangs, crashes, corrupt output), within its budgets: each call of the candidate and each
timed scenario within the budget the worker sends with it (harness.budgets: a multiple of the
scenario's expected time), the harness's own work within the per-scenario budget, all of it within
the total budget. Between correctness and timing it asks its `Hooks` whether the worker may time.
What the worker measured before loading the candidate arrives on a second pipe and is kept
(harness.trusted).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import budgets
from harness.result import ScenarioResult
from harness.tasks.base import Scenario
from harness.trusted import Keeper
from harness.worker_launch import judge_cache_dir, launch

STARTUP_TIMEOUT_S = 240.0  # torch import, CUDA context, peak measurement on a cold cache
REAP_WAIT_S = 0.2  # how long a kill waits for the process to go before leaving that to a thread
LOG_TAIL = 2000
KEEP_TIMEOUT_S = 60.0
LIBRARY_NAME = "kernel.so"
# The worker's exit codes for a machine without a usable GPU (bad input for the parent, not a verdict).
EXIT_NO_DEVICE = 5
EXIT_NO_CUDA = {4: "CPU build of torch", EXIT_NO_DEVICE: "torch sees no CUDA device"}


@dataclass
class WorkerOutcome:
    results: list[ScenarioResult]
    device: dict[str, Any] | None
    error: str | None
    profile: dict[str, float]
    checked: bool = False  # the worker finished the correctness pass (it did not die of a fault in it)


class Hooks:
    """What a running evaluation hears from a worker and tells it; these defaults judge one worker alone."""

    def decide(self, ok: bool) -> bool:
        """Correctness is done here (`ok`: every scenario passed): may this worker time?"""
        return ok

    def stopping(self) -> bool:
        """Should timing stop now (another GPU's part failed)?"""
        return False

    def heard(self, msg: dict[str, Any]) -> None:
        """A "start", "result" or "checked" message, as the worker sent it (progress)."""


def scenario_dicts(scenarios: list[Scenario]) -> list[dict[str, Any]]:
    return [{"id": s.id, "timed": s.timed, "params": s.params, "group": s.group} for s in scenarios]


def staged_prep(prep: dict[str, Any], judge: Path) -> dict[str, Any]:
    """The preparation the worker reads: a spec task loaded from its staged copies in `judge`, never
    from the workspace (which the sandbox hides, and which the agent can still change)."""
    if "spec" not in prep.get("options", {}) or "judge_task_dir" not in prep:
        return prep
    return {**prep, "options": {**prep["options"], "dir": os.path.normpath(judge / prep["judge_task_dir"])}}


class StartedWorker:
    """A worker process, started with its preparation; run() gives it the job and reads its results.

    The preparation (torch, the CUDA context, the measured peaks, the baselines' first calls) does
    not depend on the kernel, so a worker can be started long before it is run (harness.pool).
    """

    def __init__(self, prep: dict[str, Any], python: str) -> None:
        self.prep = prep
        self.python = python
        self.launch = launch(prep, python)
        self.sandbox = self.launch.sandbox
        self.library: str | None = None  # the staged library its job names (stage())
        self._log = tempfile.TemporaryFile()
        self._read_fd, write_fd = os.pipe()
        report_fd, report_write_fd = os.pipe()  # the worker's pre-load report (harness.trusted)
        self.started = time.monotonic()
        try:
            judge = self.launch.files.eval / "judge"
            for name, staged in prep.get("judge_files", {}).items():
                self.launch.files.stage(Path(staged["path"]), staged["sha256"], f"judge/{name}")
            self.proc = subprocess.Popen(self.launch.argv, stdin=subprocess.PIPE, stdout=self._log, stderr=self._log,
                                         pass_fds=(write_fd, report_write_fd), start_new_session=True,
                                         env=self.launch.env, cwd=self.launch.cwd)
        except BaseException:
            for fd in (self._read_fd, write_fd, report_fd, report_write_fd):
                os.close(fd)
            self._log.close()
            self.launch.files.remove()
            raise
        os.close(write_fd)
        os.close(report_write_fd)
        cache = judge_cache_dir(prep)
        self._keeper = Keeper(report_fd, cache / "baselines.json" if cache else None, self.launch.files.triton,
                              cache / "triton" if cache else None)
        line = (json.dumps({**staged_prep(prep, judge), "fd": write_fd, "report_fd": report_write_fd}) + "\n").encode()
        # The worker reads this only after importing torch: write from a thread so a long preparation
        # (many scenarios to warm) never blocks the caller on a full pipe.
        self._writer = threading.Thread(target=self._write, args=(line,), daemon=True)
        self._writer.start()
        self._closed = False

    def _write(self, data: bytes) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def _send_job(self, line: bytes) -> None:
        self._writer.join()  # after the preparation, never interleaved with it
        self._write(line)  # stdin stays open: the decision to time, and a stop, follow

    def alive(self) -> bool:
        return not self._closed and self.proc.poll() is None

    def kill(self) -> None:
        if self._closed:
            return
        self._closed = True
        _kill(self.proc)
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass  # a write of the preparation was cut short: nothing to flush
        os.close(self._read_fd)
        self._log.close()
        self._keeper.wait(KEEP_TIMEOUT_S)  # its harvest reads the private directory
        self.launch.files.remove()

    def stage(self, library: Path, sha256: str) -> str:
        """The library copied where this worker can read it and nothing else can change it (also kept as
        `self.library`, the path its job names)."""
        self.library = str(self.launch.files.stage(library, sha256, LIBRARY_NAME))
        return self.library

    def run(self, job: dict[str, Any], scenarios: list[Scenario], scenario_timeout_s: float,
            total_timeout_s: float, hooks: Hooks | None = None) -> WorkerOutcome:
        """Run the job over scenarios; every scenario gets a result, whatever the worker does."""
        hooks = hooks or Hooks()
        job_line = (json.dumps({**job, "scenarios": scenario_dicts(scenarios)}) + "\n").encode()
        device_index = self.prep.get("device_index")
        results: dict[str, ScenarioResult] = {}
        device: dict[str, Any] | None = None
        current: str | None = None
        phase = "correctness"  # of the scenario in flight
        failure: tuple[str, str] | None = None  # (verdict, detail) for the scenario in flight
        error: str | None = None
        stopped_at: str | None = None
        warming: str | None = None
        checked = stop_sent = False
        harness_work = f"ran past the per-scenario budget of {scenario_timeout_s:.0f} s (a hang?)"
        hang = harness_work  # what running out of the present budget means
        profile: dict[str, float] = {}
        began = time.monotonic()
        # A worker started long ago and idle since has its "device" and "ready" lines waiting.
        deadline = max(self.started + STARTUP_TIMEOUT_S, began + 1.0)
        total_deadline = began + total_timeout_s
        read_fd, proc, log = self._read_fd, self.proc, self._log
        # Sent at once: a worker still warming up stops there and starts on the job.
        threading.Thread(target=self._send_job, args=(job_line,), daemon=True).start()
        sel = selectors.DefaultSelector()
        sel.register(read_fd, selectors.EVENT_READ)
        buf = b""
        try:
            while True:
                now = time.monotonic()
                limit = min(deadline, total_deadline)
                if now >= limit:
                    _signal(proc)
                    if warming is not None:
                        error = (f"the worker hung warming up {warming} "
                                 f"(past the per-scenario budget of {scenario_timeout_s:.0f} s)")
                    elif current is None and device is None:
                        error = f"the worker did not start within {STARTUP_TIMEOUT_S:.0f} s"
                    elif now >= total_deadline:
                        failure = ("timeout", f"the evaluation ran past its total budget of {total_timeout_s:.0f} s")
                    else:
                        failure = ("timeout", hang)
                    break
                if checked and not stop_sent and hooks.stopping():
                    stop_sent = True
                    self._write(b'{"stop": true}\n')
                if not sel.select(timeout=min(1.0, limit - now)):
                    continue
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    rc = proc.wait()
                    if current is not None:
                        failure = ("crash", _describe_exit(rc, log))
                    elif not results:
                        error = f"the worker failed before running anything: {_describe_exit(rc, log)}"
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                done = False
                for line in lines:
                    try:
                        msg = json.loads(line)
                        kind = msg["kind"]
                    except (ValueError, KeyError, TypeError):
                        failure = ("crash", "the worker's result stream was corrupted")
                        _signal(proc)
                        done = True
                        break
                    now = time.monotonic()
                    budget, hang = scenario_timeout_s, harness_work
                    if kind == "device":
                        device = msg["device"]
                        profile["worker_startup_s"] = now - began
                    elif kind == "warm":
                        warming = msg["id"]
                    elif kind == "ready":
                        warming = None
                        profile["worker_wait_s"] = now - began
                    elif kind == "start":
                        current, phase = msg["id"], msg.get("phase", "correctness")
                        if phase == "timing":
                            budget = min(float(msg["budget_s"]), scenario_timeout_s)
                            hang = budgets.describe_timing(budget, float(msg["predicted_s"]))
                        hooks.heard(msg)
                    elif kind == "call":
                        budget = min(float(msg["budget_s"]), scenario_timeout_s)
                        hang = budgets.describe_call(budget, float(msg["expected_us"]))
                    elif kind == "result":
                        res = ScenarioResult(**msg["scenario"])
                        results[res.id] = res
                        if res.verdict == "crash":
                            stopped_at = res.id
                        current = None
                        hooks.heard(msg)
                    elif kind == "checked":
                        checked = True
                        hooks.heard(msg)
                        t0 = time.monotonic()
                        decision = hooks.decide(bool(msg["ok"]))  # waits for the other GPUs' parts
                        profile["gate_s"] = time.monotonic() - t0
                        if job.get("time"):  # the worker waits for this line only when it may time
                            self._write((json.dumps({"time": decision}) + "\n").encode())
                        now = time.monotonic()
                    elif kind == "done":
                        profile.update(msg.get("profile", {}))
                        done = True
                    deadline = now + budget
                if done:
                    break
        finally:
            sel.close()
            self.kill()
        if current is not None and failure is not None:
            results[current] = ScenarioResult(id=current, timed=_timed(scenarios, current), correct=False,
                                              verdict=failure[0], detail=failure[1], gpu=device_index)
            stopped_at = current
            hooks.heard({"kind": "result", "phase": phase, "scenario": asdict(results[current])})
        stopped_at = stopped_at or (error and "startup")
        out = []
        for s in scenarios:
            if s.id in results:
                out.append(results[s.id])
            else:
                why = f"not run: the evaluation stopped at {stopped_at}" if stopped_at else "not run"
                out.append(ScenarioResult(id=s.id, timed=s.timed, correct=False, verdict="skipped", detail=why,
                                          gpu=device_index))
        profile["worker_s"] = time.monotonic() - began
        return WorkerOutcome(out, device, error, profile, checked)


def run_worker(prep: dict[str, Any], job: dict[str, Any], scenarios: list[Scenario], python: str,
               scenario_timeout_s: float, total_timeout_s: float) -> WorkerOutcome:
    """Start a worker and run it at once: an evaluation without a prepared worker."""
    return StartedWorker(prep, python).run(job, scenarios, scenario_timeout_s, total_timeout_s)


def _timed(scenarios: list[Scenario], sid: str) -> bool:
    return next(s.timed for s in scenarios if s.id == sid)


def _signal(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker's group; reap it here if it goes at once, else on a thread: a process that held
    a CUDA context (or a hung kernel) may take a while to go, and the verdict need not wait for that."""
    _signal(proc)
    try:
        proc.wait(timeout=REAP_WAIT_S)
    except subprocess.TimeoutExpired:
        threading.Thread(target=proc.wait, name="reap-worker", daemon=True).start()


def _describe_exit(rc: int, log: Any) -> str:
    log.seek(0, os.SEEK_END)
    size = log.tell()
    log.seek(max(0, size - LOG_TAIL))
    lines = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
    tail = lines[-1].strip() if lines else ""
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with code {rc}"
    return f"the worker {how}" + (f": {tail[:300]}" if tail else "")
