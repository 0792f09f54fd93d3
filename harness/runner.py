"""The parent side of an evaluation: resolve the task, build, checks, one fresh worker per GPU, the merged result.

Never imports torch: a worker that segfaults, aborts, hangs or poisons its CUDA context takes only
itself down (harness.started_worker runs each in its own process group, within its budgets; harness.part
starts a fresh one for the scenarios it left). Correctness of every scenario comes before any timing
(harness.part's gate), and a `progress` callback hears how far the evaluation is (harness.progress).
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness import confine
from harness.merge import PER_SCENARIO_COST, split_balanced
from harness.part import TimingGate, judge_part
from harness.progress import Progress
from harness.result import BuildReport, Check, CompileError, EvalResult, ScenarioResult
from harness.secret_env import secret_values
from harness.secret_scan import secret_check
from harness.started_worker import EXIT_NO_CUDA, EXIT_NO_DEVICE, StartedWorker, WorkerOutcome, scenario_dicts
from harness.taskfile import JudgeLayout, TaskFileError, judge_layout, load_task_file
from harness.tasks import get_task
from harness.tasks.base import Scenario, ScenarioError, Task
from harness.worker_files import StagingError, sha256_file
from harness.worker_launch import outside_workspace

if TYPE_CHECKING:
    from harness.pool import WorkerPool

TIMING_PRIOR = 3.0  # a timed scenario's duration in time budgets, until the worker predicts it


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
    # Hidden from the worker (default: the kernel's directory). Given, nothing the judge trusts (the
    # harness, the worker's Python, the caches) may lie inside it.
    workspace: Path | None = None


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
                scenarios: list[Scenario], *, hide: Sequence[Path] = (), judge: dict[str, Any] | None = None,
                retime: bool = False) -> dict[str, Any]:
    """A worker's first line: everything it can do before it sees the kernel. `judge`: judged(layout)."""
    return {"task": task.name, "options": options, "device_index": device_index,
            "cache_path": str((cache_dir or _default_cache()) / "judge" / "baselines.json"),
            "hide": [str(p) for p in hide], "retime": retime, **(judge or {"judge_files": {}}),
            # Untimed first: their references are quick to warm and come first in the job.
            "warm": scenario_dicts(sorted(scenarios, key=lambda s: s.timed))}


def judged(layout: JudgeLayout) -> dict[str, Any]:
    """The judge files as a worker stages them (harness.started_worker): each file's name in the layout,
    where it is read and its hash now; and the task file's folder there, where the worker loads the task."""
    return {"judge_files": {name: {"path": str(path), "sha256": sha256_file(path)} for name, path in layout.files.items()},
            "judge_task_dir": layout.task_dir}


def evaluate(kernel: Path, opts: EvalOptions, pool: WorkerPool | None = None,
             progress: Callable[[dict[str, Any]], None] | None = None) -> EvalResult:
    """Judge a kernel. With a pool, take its prepared worker and leave a new one prepared after.

    `progress` (called from other threads) gets harness.progress's dicts while the evaluation runs.
    """
    started = time.monotonic()
    kernel = kernel.resolve() if kernel.exists() else kernel
    task, tf, scenarios = resolve(kernel, opts)
    try:
        source = kernel.read_bytes()
    except OSError as exc:
        raise BadInput(f"{kernel}: {exc.strerror}") from None
    watch = None
    if progress is not None:
        weights = {s.id: PER_SCENARIO_COST + task.exact_flops(s) for s in scenarios}
        watch = Progress(progress, weights, sum(s.timed for s in scenarios),
                         TIMING_PRIOR * tf.time_budget_ms / 1000.0, len(opts.devices or [None]))
    try:
        return _evaluate(kernel, source, opts, pool, task, tf, scenarios, watch, started)
    finally:
        if watch is not None:
            watch.close()


def _evaluate(kernel: Path, source: bytes, opts: EvalOptions, pool: WorkerPool | None, task: Task, tf: Any,
              scenarios: list[Scenario], watch: Progress | None, started: float) -> EvalResult:
    from harness import check_cache
    from harness.build import BuildInputError, BuildOptions, build, private_copy

    cache_dir = opts.cache_dir
    box, confinement = confine.detect()
    if box is None and confine.required():
        raise BadInput(confinement[len("none: "):] + " (KSTUI_WORKER_SANDBOX=require)")
    if opts.workspace is not None:
        problem = outside_workspace(opts.workspace, opts.python, cache_dir or _default_cache())
        if problem:
            raise BadInput(problem)
    result = EvalResult(task=task.name, kernel=kernel.name, kernel_sha256=hashlib.sha256(source).hexdigest(),
                        scenario_set=_describe_selection(opts), build=BuildReport(ok=False))
    build_options = BuildOptions(fast_math=tf.fast_math, extra_flags=tf.build_flags, timeout_s=tf.build_timeout_s,
                                 cache_dir=cache_dir / "build" if cache_dir else None)
    private = tempfile.TemporaryDirectory(prefix="kstui-eval-")  # the library as checked and run
    try:
        # The checks preprocess the bytes the build compiles, with its own macros, so no branch is
        # checked that is not built; the preprocessor's pass runs beside the compile.
        with ThreadPoolExecutor(1) as executor:
            checked = executor.submit(check_cache.source_checks, kernel, build_options, source)
            report, library = build(kernel, [task.entry_symbol], build_options, source)
            if watch:
                watch.phase("checks")
            result.checks = checked.result() + [secret_check(source, secret_values())]
        result.build = report
        if box is None and not next(c.ok for c in result.checks if c.name == "single-file"):
            _withhold_log(report)
        if library is not None:  # what is checked and run is a private copy, never the cache's file
            library, library_sha256 = private_copy(library, Path(private.name))
            result.checks += check_cache.binary_checks(library, [task.entry_symbol], build_options)
    except BuildInputError as exc:
        raise BadInput(str(exc)) from None
    if opts.check_only or library is None or not result.checks_ok:
        private.cleanup()
        if not opts.check_only and library is not None:
            result.error = "rejected by static checks before running: " + "; ".join(c.name for c in result.checks if not c.ok)
        result.finalize()
        result.seconds = time.monotonic() - started
        return result

    devices = opts.devices or [None]
    parts = split_balanced(scenarios, len(devices), task.exact_flops) if len(devices) > 1 else [scenarios]
    seed = opts.seed if opts.seed is not None else secrets.randbits(62)
    job = {"seed": seed, "baseline": opts.baseline, "retime": opts.retime,
           "time_budget_s": tf.time_budget_ms / 1000.0, "noise_target_pct": tf.noise_target_pct}
    try:
        judge = judged(judge_layout(kernel))
    except TaskFileError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"cannot read a file the task names: {exc.strerror or exc}") from None

    def prep(i: int, part: list[Scenario]) -> dict[str, Any]:
        return preparation(task, tf.options, cache_dir, devices[i], part, hide=[opts.workspace or kernel.parent],
                           judge=judge, retime=opts.retime)

    preps = [prep(i, parts[i]) for i in range(len(parts))]
    budgets = (opts.scenario_timeout_s or tf.scenario_timeout_s, opts.total_timeout_s or tf.total_timeout_s)
    outcomes: list[WorkerOutcome | None] = [None] * len(parts)
    workers: list[StartedWorker] = []  # every worker started, in any thread (list.append is atomic)
    failures: list[str] = []
    gate = TimingGate(len(parts))
    listener = watch.heard if watch else (lambda msg: None)
    if watch:
        watch.phase("correctness", len(scenarios))

    def staged(worker: StartedWorker) -> StartedWorker:
        workers.append(worker)
        worker.stage(library, library_sha256)
        return worker

    def work(i: int) -> None:
        def first() -> StartedWorker:
            return staged(pool.take(preps[i], opts.python) if pool else StartedWorker(preps[i], opts.python))

        def fresh(rest: list[Scenario]) -> StartedWorker:
            return staged(StartedWorker(prep(i, rest), opts.python))

        try:
            outcomes[i] = judge_part(first, fresh, job, parts[i], *budgets, gate, listener)
        except StagingError as exc:
            failures.append(str(exc))
        except OSError as exc:
            failures.append(f"cannot start the worker ({opts.python}): {exc.strerror or exc}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(parts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in workers:
        w.kill()  # a worker whose staging failed is still running
    private.cleanup()
    if failures:
        raise BadInput(failures[0])
    codes = [w.proc.returncode for w in workers if w.proc.returncode in EXIT_NO_CUDA]
    if codes:
        confined = codes[0] == EXIT_NO_DEVICE and any(w.sandbox == "bubblewrap" for w in workers)
        where = ", inside the worker's sandbox" if confined else ""
        raise BadInput(f"no CUDA GPU here ({EXIT_NO_CUDA[codes[0]]}{where}): "
                       "use --check-only, or --gpu ssh://… / --eval-cmd")
    if pool:
        for p in preps:
            try:
                pool.prepare(p, opts.python)
            except (OSError, StagingError):
                pass  # the next evaluation starts its own worker
    by_id: dict[str, ScenarioResult] = {}
    errors = []
    for out in outcomes:
        assert out is not None
        by_id.update({s.id: s for s in out.results})
        if out.error:
            errors.append(out.error)
    result.scenarios = [by_id[s.id] for s in scenarios]
    _mark_untimed(result.scenarios)
    infos = [o.device for o in outcomes if o and o.device]
    result.device = dict(infos[0]) if infos else {}
    result.device["sandbox"] = workers[0].sandbox if workers else ""
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


def _mark_untimed(scenarios: list[ScenarioResult]) -> None:
    """A timed scenario that passed correctness but was never timed says why: the kernel was rejected."""
    failed = next((s for s in scenarios if not s.correct), None)
    for s in scenarios:
        if s.timed and s.correct and s.time_us is None and failed is not None:
            s.detail = f"correct, not timed: the kernel was rejected ({failed.id}: {failed.verdict})"


def _withhold_log(report: BuildReport) -> None:
    """An unconfined compiler that included a file beyond the toolkit's and the standard headers may
    have quoted it (any file the user can read) in its messages: none of them goes back."""
    note = "withheld: the kernel includes files other than the CUDA toolkit's and the standard headers"
    report.log = note + " (see the single-file check)"
    report.errors = [CompileError(e.file, e.line, note) for e in report.errors[:1]]


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
