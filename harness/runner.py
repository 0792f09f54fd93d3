"""The parent side of an evaluation: build, checks, one fresh worker per GPU, budgets, hard kill.

Never imports torch: a worker that segfaults, aborts, hangs or poisons its CUDA context takes only
itself down. Each worker runs in its own process group so a kill reaches anything it started.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.merge import split_balanced
from harness.result import BuildReport, Check, EvalResult, ScenarioResult
from harness.taskfile import TaskFileError, load_task_file
from harness.tasks import get_task
from harness.tasks.base import Scenario, ScenarioError, Task

if TYPE_CHECKING:
    from harness.pool import WorkerPool

STARTUP_TIMEOUT_S = 240.0  # torch import, CUDA context, peak measurement on a cold cache
LOG_TAIL = 2000
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class BadInput(Exception):
    """Input a person can fix (missing file, bad task file, unknown scenario): one line, exit 2."""


@dataclass
class EvalOptions:
    selection: str = "full"
    specs: tuple[str, ...] = ()
    baseline: str | None = None
    retime: bool = False
    check_only: bool = False
    devices: list[int] | None = None
    shard: tuple[int, int] | None = None  # (k, n), 1-based k
    seed: int | None = None
    scenario_timeout_s: float | None = None
    total_timeout_s: float | None = None
    cache_dir: Path | None = None
    python: str = field(default_factory=lambda: sys.executable)


def resolve(kernel: Path, opts: EvalOptions) -> tuple[Task, Any, list[Scenario]]:
    """Task, task file and scenario list for a kernel, or BadInput."""
    if not kernel.exists():
        raise BadInput(f"{kernel}: no such file")
    if not kernel.is_file():
        raise BadInput(f"{kernel}: not a file")
    if kernel.suffix != ".cu":
        raise BadInput(f"{kernel}: not a CUDA source file (expected a .cu file)")
    try:
        tf = load_task_file(kernel)
        task = get_task(tf.task, tf.options)
    except TaskFileError as exc:
        raise BadInput(str(exc)) from None
    except KeyError as exc:
        raise BadInput(f"{kernel.with_suffix('.toml')}: {exc.args[0]}") from None
    try:
        scenarios = task.scenarios(opts.selection, opts.specs)
    except ScenarioError as exc:
        raise BadInput(str(exc)) from None
    if opts.shard:
        k, n = opts.shard
        if not 1 <= k <= n:
            raise BadInput(f"--shard {k}/{n}: K must be between 1 and N")
        scenarios = split_balanced(scenarios, n, task.exact_flops)[k - 1]
    return task, tf, scenarios


def preparation(task: Task, options: dict[str, Any], cache_dir: Path | None, device_index: int | None,
                scenarios: list[Scenario]) -> dict[str, Any]:
    """A worker's first line: everything it can do before it sees the kernel."""
    return {"task": task.name, "options": options, "device_index": device_index,
            "cache_path": str((cache_dir or _default_cache()) / "baselines.json"),
            # Untimed first: their references are quick to warm and come first in the job.
            "warm": _scenario_dicts(sorted(scenarios, key=lambda s: s.timed))}


def evaluate(kernel: Path, opts: EvalOptions, pool: WorkerPool | None = None) -> EvalResult:
    """Judge a kernel. With a pool, take its prepared worker and leave a new one prepared after."""
    from harness import check_cache
    from harness.build import BuildInputError, BuildOptions, build

    started = time.monotonic()
    kernel = kernel.resolve() if kernel.exists() else kernel
    task, tf, scenarios = resolve(kernel, opts)
    try:
        source = kernel.read_bytes()
    except OSError as exc:
        raise BadInput(f"{kernel}: {exc.strerror}") from None
    cache_dir = opts.cache_dir
    result = EvalResult(task=task.name, kernel=kernel.name, kernel_sha256=hashlib.sha256(source).hexdigest(),
                        scenario_set=_describe_selection(opts), build=BuildReport(ok=False))
    build_options = BuildOptions(fast_math=tf.fast_math, extra_flags=tf.build_flags, timeout_s=tf.build_timeout_s,
                                 cache_dir=cache_dir / "build" if cache_dir else None)
    try:
        # The checks preprocess the bytes the build compiles, with its own macros, so no branch is
        # checked that is not built; the preprocessor's pass runs beside the compile.
        with ThreadPoolExecutor(1) as executor:
            checked = executor.submit(check_cache.source_checks, kernel, build_options, source)
            report, library = build(kernel, [task.entry_symbol], build_options, source)
            result.checks = checked.result()
    except BuildInputError as exc:
        raise BadInput(str(exc)) from None
    result.build = report
    if library is not None:
        result.checks += check_cache.binary_checks(library, [task.entry_symbol], build_options)
    if opts.check_only or library is None or not result.checks_ok:
        if not opts.check_only and library is not None:
            result.error = "rejected by static checks before running: " + "; ".join(c.name for c in result.checks if not c.ok)
        result.finalize()
        result.seconds = time.monotonic() - started
        return result

    devices = opts.devices or [None]
    parts = split_balanced(scenarios, len(devices), task.exact_flops) if len(devices) > 1 else [scenarios]
    seed = opts.seed if opts.seed is not None else secrets.randbits(62)
    job = {"library": str(library), "seed": seed, "baseline": opts.baseline, "retime": opts.retime,
           "time_budget_s": tf.time_budget_ms / 1000.0, "noise_target_pct": tf.noise_target_pct}
    preps = [preparation(task, tf.options, cache_dir, devices[i], parts[i]) for i in range(len(parts))]
    budgets = (opts.scenario_timeout_s or tf.scenario_timeout_s, opts.total_timeout_s or tf.total_timeout_s)
    outcomes: list[WorkerOutcome | None] = [None] * len(parts)

    def work(i: int) -> None:
        worker = pool.take(preps[i], opts.python) if pool else StartedWorker(preps[i], opts.python)
        outcomes[i] = worker.run(job, parts[i], *budgets)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(parts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if pool:
        for prep in preps:
            pool.prepare(prep, opts.python)
    by_id: dict[str, ScenarioResult] = {}
    errors = []
    for out in outcomes:
        assert out is not None
        by_id.update({s.id: s for s in out.results})
        if out.error:
            errors.append(out.error)
    result.scenarios = [by_id[s.id] for s in scenarios]
    infos = [o.device for o in outcomes if o and o.device]
    result.device = dict(infos[0]) if infos else {}
    if len(infos) > 1:
        result.device["gpus"] = [{"index": d.get("index"), "name": d.get("name")} for d in infos]
    result.checks += _timing_checks(result.scenarios)
    for out in outcomes:
        for phase, seconds in (out.profile if out else {}).items():
            result.profile[phase] = max(result.profile.get(phase, 0.0), seconds) if len(parts) > 1 else seconds
    result.profile["build_s"] = report.seconds
    result.error = "; ".join(errors) if errors else None
    result.finalize()
    result.seconds = time.monotonic() - started
    return result


def _describe_selection(opts: EvalOptions) -> str:
    text = opts.selection + "".join(f" +{s}" for s in opts.specs)
    return text + (f" shard {opts.shard[0]}/{opts.shard[1]}" if opts.shard else "")


def _default_cache() -> Path:
    from harness.baselines import default_cache_dir

    return default_cache_dir()


def _timing_checks(scenarios: list[ScenarioResult]) -> list[Check]:
    """The timing cross-checks as named checks, so a cheat is a failed check, never a speedup."""
    out = []
    for name, verdict in (("physical-floor", "too-fast"), ("wall-clock", "hidden-work")):
        bad = [s for s in scenarios if s.verdict == verdict]
        out.append(Check(name, not bad, "; ".join(f"{s.id}: {s.detail}" for s in bad[:3])))
    return out


@dataclass
class WorkerOutcome:
    results: list[ScenarioResult]
    device: dict[str, Any] | None
    error: str | None
    profile: dict[str, float]


def _scenario_dicts(scenarios: list[Scenario]) -> list[dict[str, Any]]:
    return [{"id": s.id, "timed": s.timed, "params": s.params, "group": s.group} for s in scenarios]


class StartedWorker:
    """A worker process, started with its preparation; run() gives it the job and reads its results.

    The preparation (torch, the CUDA context, the measured peaks, the baselines' first calls) does
    not depend on the kernel, so a worker can be started long before it is run (harness.pool).
    """

    def __init__(self, prep: dict[str, Any], python: str) -> None:
        self.prep = prep
        self.python = python
        self._read_fd, write_fd = os.pipe()
        self._log = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")])),
                   PYTHONUNBUFFERED="1")
        self.started = time.monotonic()
        self.proc = subprocess.Popen([python, "-m", "harness.worker"], stdin=subprocess.PIPE, stdout=self._log,
                                     stderr=self._log, pass_fds=(write_fd,), start_new_session=True, env=env,
                                     cwd=tempfile.gettempdir())
        os.close(write_fd)
        line = (json.dumps({**prep, "fd": write_fd}) + "\n").encode()
        # The worker reads this only after importing torch: write from a thread so a long preparation
        # (many scenarios to warm) never blocks the caller on a full pipe.
        self._writer = threading.Thread(target=self._write, args=(line,), daemon=True)
        self._writer.start()
        self._closed = False

    def _write(self, data: bytes, close: bool = False) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            if close:
                self.proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def _send_job(self, line: bytes) -> None:
        self._writer.join()  # after the preparation, never interleaved with it
        self._write(line, close=True)

    def alive(self) -> bool:
        return not self._closed and self.proc.poll() is None

    def kill(self) -> None:
        if self._closed:
            return
        self._closed = True
        _kill(self.proc)
        os.close(self._read_fd)
        self._log.close()

    def run(self, job: dict[str, Any], scenarios: list[Scenario], scenario_timeout_s: float,
            total_timeout_s: float) -> WorkerOutcome:
        """Run the job over scenarios; every scenario gets a result, whatever the worker does."""
        job_line = (json.dumps({**job, "scenarios": _scenario_dicts(scenarios)}) + "\n").encode()
        device_index = self.prep.get("device_index")
        results: dict[str, ScenarioResult] = {}
        device: dict[str, Any] | None = None
        current: str | None = None
        failure: tuple[str, str] | None = None  # (verdict, detail) for the scenario in flight
        error: str | None = None
        stopped_at: str | None = None
        warming: str | None = None
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
                    _kill(proc)
                    if warming is not None:
                        error = (f"the worker hung warming up {warming} "
                                 f"(past the per-scenario budget of {scenario_timeout_s:.0f} s)")
                    elif current is None and device is None:
                        error = f"the worker did not start within {STARTUP_TIMEOUT_S:.0f} s"
                    elif now >= total_deadline:
                        failure = ("timeout", f"the evaluation ran past its total budget of {total_timeout_s:.0f} s")
                    else:
                        failure = ("timeout", f"ran past the per-scenario budget of {scenario_timeout_s:.0f} s (a hang?)")
                    break
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
                        _kill(proc)
                        done = True
                        break
                    if kind == "device":
                        device = msg["device"]
                        profile["worker_startup_s"] = time.monotonic() - began
                    elif kind == "warm":
                        warming = msg["id"]
                        deadline = time.monotonic() + scenario_timeout_s
                    elif kind == "ready":
                        warming = None
                        profile["worker_wait_s"] = time.monotonic() - began
                        deadline = time.monotonic() + scenario_timeout_s
                    elif kind == "start":
                        current = msg["id"]
                        deadline = time.monotonic() + scenario_timeout_s
                    elif kind == "result":
                        res = ScenarioResult(**msg["scenario"])
                        results[res.id] = res
                        if res.verdict == "crash":
                            stopped_at = res.id
                        current = None
                        deadline = time.monotonic() + scenario_timeout_s
                    elif kind == "done":
                        profile.update(msg.get("profile", {}))
                        done = True
                if done:
                    break
        finally:
            sel.close()
            self.kill()
        if current is not None and failure is not None:
            results[current] = ScenarioResult(id=current, timed=_timed(scenarios, current), correct=False,
                                              verdict=failure[0], detail=failure[1], gpu=device_index)
        stopped_at = current or stopped_at or (error and "startup")
        out = []
        for s in scenarios:
            if s.id in results:
                out.append(results[s.id])
            else:
                why = f"not run: the evaluation stopped at {stopped_at}" if stopped_at else "not run"
                out.append(ScenarioResult(id=s.id, timed=s.timed, correct=False, verdict="skipped", detail=why,
                                          gpu=device_index))
        profile["worker_s"] = time.monotonic() - began
        return WorkerOutcome(out, device, error, profile)


def run_worker(prep: dict[str, Any], job: dict[str, Any], scenarios: list[Scenario], python: str,
               scenario_timeout_s: float, total_timeout_s: float) -> WorkerOutcome:
    """Start a worker and run it at once: an evaluation without a prepared worker."""
    return StartedWorker(prep, python).run(job, scenarios, scenario_timeout_s, total_timeout_s)


def _timed(scenarios: list[Scenario], sid: str) -> bool:
    return next(s.timed for s in scenarios if s.id == sid)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


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
