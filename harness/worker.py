"""The worker: a fresh process per evaluation that loads the candidate and judges it, correctness first.

Started by harness.runner, which writes JSON lines on stdin: the preparation (task, options, GPU,
cache, the scenarios to warm up) and, whenever the kernel is ready, the job (the library, the secret
seed, the scenarios to judge, whether this worker may time). Everything before the job does not
depend on the kernel, so a worker can be prepared while the agent is still writing it (see
harness.pool); a job that arrives during the warm-up cuts it short.

The job runs in two passes. Correctness: every scenario on two draws, nothing timed. Then, only if
the job allows timing, the worker says whether every scenario passed and waits for the parent's
decision line {"time": true|false} (on several GPUs a part that passed waits for the others); timing
runs the timed scenarios on fresh draws and stops at the first failure, or when the parent writes
{"stop": true} (another GPU's part failed). So a kernel wrong anywhere is never timed.

It writes one JSON object per line to the file descriptor named in the preparation (never stdout,
which the kernel may print to):
  {"kind": "device", "device": {...}}                    once, after CUDA is up
  {"kind": "warm", "id": ...}                            before warming each scenario up (a clock, as start)
  {"kind": "ready"}                                      prepared (or cut short by the job): reading the job
  {"kind": "start", "id", "phase": "correctness"}        before each scenario's correctness (harness work)
  {"kind": "call", "id", "budget_s", "expected_us"}      the candidate is called: a hang after budget_s
  {"kind": "back"}                                       it returned
  {"kind": "result", "scenario": {...}, "phase", ["timing_s"]}   a ScenarioResult as a dict; for a timed
                                                         scenario that passed correctness, its predicted timing
  {"kind": "checked", "ok": bool}                        correctness done (then the decision line, if timing)
  {"kind": "start", "id", "phase": "timing", "budget_s", "predicted_s"}   before each timed scenario
  {"kind": "done", "profile": {...}}
Budgets come from each scenario's expected time (harness.budgets). A CUDA error that may have
poisoned the context (illegal address, trap, launch failure) ends the worker after its result is
written; the parent starts a fresh worker for the scenarios left unchecked (harness.part).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from harness import budgets
from harness.baselines import BaselineCache, fingerprint
from harness.orphan import die_with_parent
from harness.poison import GuardedBuffer, guarded_empty
from harness.result import ScenarioResult
from harness.tasks import get_task
from harness.tasks.base import Comparison, Scenario, Task
from harness.timing import EXTRA_FACTOR, MAX_REPS, MIN_REPS, Timer, load_cudart, measure_peaks
from harness.trusted import send_report, triton_entries, triton_manifest

DRAWS = 2  # fresh random inputs per scenario before timing; one more after it
FLOOR_MARGIN = 1.10  # a time below the floor at 110% of the measured peaks is impossible, not fast
HIDDEN_WORK_US = 10.0  # wall-clock excess over the events tolerated per call, plus 20% of the call
WALL_CHECK_US = 6e3  # the wall-clock check's calls per scenario: 3 to 12, about this long in all
BASELINE_BUDGET_S = 0.025  # timing the baselines before a candidate is loaded, to find the fastest


class EntryPointError(Exception):
    def __init__(self, rc: int) -> None:
        super().__init__(rc)
        self.rc = rc


class FatalCudaError(Exception):
    """The CUDA context may be unusable: report and end the worker."""


def _cuda_error_name(rc: int) -> str:
    lib = load_cudart()
    if lib is None:
        return f"error {rc}"
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    return f"{lib.cudaGetErrorName(rc).decode()} ({rc})"


def _seed_for(seed: int, sid: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{sid}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _library_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("flash-attn", "flash-attn-4", "flash_attn_3", "flash-attn-cute"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def device_info(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    major, minor = props.major, props.minor
    return {
        "name": props.name,
        "index": device.index,
        "cc": f"{major}.{minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": props.L2_cache_size,
        "memory_bytes": props.total_memory,
        "driver": _driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "libraries": _library_versions(),
        "host": socket.gethostname(),
    }


def _cuda_sync(device: torch.device) -> None:
    try:
        torch.cuda.synchronize(device)
    except Exception as exc:  # torch raises RuntimeError/AcceleratorError for sticky CUDA errors
        raise FatalCudaError(str(exc).strip().splitlines()[0]) from None


class Judge:
    """Judges one scenario at a time: check() in the correctness pass, time() in the timing pass."""

    def __init__(self, task: Task, device: torch.device, timer: Timer, cache: BaselineCache,
                 peaks: dict[str, float]) -> None:
        self.task, self.device, self.timer, self.cache, self.peaks = task, device, timer, cache, peaks
        self.entry: Any = None
        self.job: dict[str, Any] = {}
        self.baselines = task.baselines()
        self.profile: dict[str, float] = defaultdict(float)
        self.send: Callable[[dict[str, Any]], None] = lambda msg: None  # the parent's messages
        self._last_ref: Any = None
        self._checked: dict[str, tuple[list[str], str | None]] = {}  # timed scenario -> baselines to time, record
        self._costs: dict[str, dict[str, Any]] = {}  # per scenario: the candidate's call, references, baselines
        self._screen_us: float | None = None  # the screen's own overhead (a trivial op in the same bracket)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.profile[name] += time.perf_counter() - t0

    def _call(self, s: Scenario, inputs: dict, outs: dict[str, GuardedBuffer]) -> Callable[[], None]:
        args = self.task.call_args(s, inputs, {n: b.tensor for n, b in outs.items()}, self.timer.stream.cuda_stream)
        entry = self.entry

        def call() -> None:
            rc = entry(*args)
            if rc != 0:
                raise EntryPointError(rc)

        return call

    def _generator(self, key: str) -> torch.Generator:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(_seed_for(self.job["seed"], key))
        return gen

    def _floor_us(self, s: Scenario, margin: float = 1.0) -> float:
        """The time under which no implementation can run: exact FLOPs and bytes over the measured peaks."""
        return 1e6 * max(self.task.exact_flops(s) / (self.peaks["peak_tflops_bf16"] * 1e12 * margin),
                         self.task.min_bytes(s) / (self.peaks["peak_gbps"] * 1e9 * margin))

    def _announce(self, s: Scenario, calls: int = 1) -> None:
        """Tell the parent the candidate is being called `calls` times, and how long that may take."""
        known = [e["us"] for e in self.cache.scenario(s.id).values() if e["valid"] and e["us"]]
        expected = calls * budgets.expected_call_us(self._floor_us(s), known)
        self.send({"kind": "call", "id": s.id, "budget_s": budgets.call_budget_s(expected), "expected_us": expected})

    def _judged_call(self, s: Scenario, inputs: dict, outs: dict[str, GuardedBuffer]) -> Comparison:
        """One poisoned, guarded call of the candidate on these inputs, judged against the reference.

        The reference is computed after the call, so no answer sits in the process's memory while the
        candidate runs. The call is bracketed by device-wide syncs and by events on the harness stream:
        wall clock far past the events is work left on another stream (screened in check()).
        """
        clones = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        for b in outs.values():
            b.repoison()
        _cuda_sync(self.device)
        call = self._call(s, inputs, outs)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._announce(s)
        try:
            with self.phase("candidate_calls_s"):
                t0 = time.perf_counter()
                start.record(self.timer.stream)
                call()
                end.record(self.timer.stream)
                _cuda_sync(self.device)
                wall_us = (time.perf_counter() - t0) * 1e6
        except EntryPointError as exc:
            _cuda_sync(self.device)
            self.send({"kind": "back"})
            return Comparison("error", f"the entry point returned {_cuda_error_name(exc.rc)}")
        self.send({"kind": "back"})
        events_us = start.elapsed_time(end) * 1000.0
        cost = self._costs.setdefault(s.id, {"call_us": 0.0, "reference_s": 0.0, "excess_us": math.inf,
                                             "events_us": 0.0, "baselines_us": []})
        cost["call_us"] = max(cost["call_us"], wall_us)
        cost["events_us"] = max(cost["events_us"], events_us)
        cost["excess_us"] = min(cost["excess_us"], wall_us - events_us - self._screen_overhead_us())
        # Input mutations (bit for bit) and guard damage, fetched in one host sync.
        damage = torch.stack([(_bits(before) != _bits(inputs[name])).sum() for name, before in clones.items()]
                             + [b.guard_damage() for b in outs.values()]).tolist()
        for name, changed in zip(clones, damage):
            if changed:
                return Comparison("input-mutated", f"input {name} changed during the call")
        for name, broken in zip(outs, damage[len(clones):]):
            if broken:
                return Comparison("wrong", f"wrote outside {name} (guard zone overwritten)")
        t0 = time.perf_counter()
        with self.phase("reference_s"):
            ref = self.task.reference(s, inputs)
        cost["reference_s"] = max(cost["reference_s"], time.perf_counter() - t0)
        self._last_ref = ref
        with self.phase("compare_s"):
            return self.task.compare(s, ref, {n: b.tensor for n, b in outs.items()}, self.task.output_names)

    def _screen_overhead_us(self) -> float:
        """What the screen's bracket costs around a trivial op on this machine (measured once)."""
        if self._screen_us is None:
            tiny = torch.zeros(1, device=self.device)
            diffs = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                _cuda_sync(self.device)
                t0 = time.perf_counter()
                start.record(self.timer.stream)
                with torch.cuda.stream(self.timer.stream):
                    tiny.add_(1)
                end.record(self.timer.stream)
                _cuda_sync(self.device)
                diffs.append((time.perf_counter() - t0) * 1e6 - start.elapsed_time(end) * 1000.0)
            self._screen_us = statistics.median(diffs)
        return self._screen_us

    def check(self, s: Scenario, validate: bool) -> ScenarioResult:
        """Correctness: two draws (fresh inputs, then fresh data and a jittered scale in the same
        buffers), each poisoned, guarded and compared; the hidden-work screen; and, with `validate`
        (a timed scenario of an evaluation still clean), the baselines checked on the last draw's
        reference, so the timing pass knows which to time."""
        res = ScenarioResult(id=s.id, timed=s.timed, correct=False, gflop=self.task.exact_flops(s) / 1e9,
                             gpu=self.device.index)
        gen = self._generator(s.id)
        inputs = self.task.make_inputs(s, gen, self.device)
        outs = {n: guarded_empty(shape, dt, self.device) for n, (shape, dt) in self.task.output_shapes(s, inputs).items()}
        worst = -1.0
        try:
            for draw in range(DRAWS):
                if draw:
                    self.task.refill_inputs(s, inputs, gen)
                cmp = self._judged_call(s, inputs, outs)
                if cmp.verdict != "ok":
                    res.verdict, res.detail = cmp.verdict, f"draw {draw + 1}: {cmp.detail}"
                    _fill_errors(res, cmp)
                    return res
                ratio = max((cmp.errors[k] / cmp.tolerances[k] if cmp.tolerances[k] else 0.0) for k in cmp.errors)
                if ratio > worst:
                    worst = ratio
                    _fill_errors(res, cmp)
            cost = self._costs[s.id]
            if cost["excess_us"] > HIDDEN_WORK_US + 0.2 * cost["events_us"]:
                t = cost["events_us"]
                calls = int(min(12, max(3, WALL_CHECK_US / max(t, 1.0))))
                self._announce(s, 3 * calls)
                try:
                    with self.phase("wall_clock_check_s"):
                        hidden = self._hidden_us(self._call(s, inputs, outs), calls, t)
                except EntryPointError as exc:
                    _cuda_sync(self.device)
                    res.verdict, res.detail = "error", f"the entry point returned {_cuda_error_name(exc.rc)}"
                    return res
                finally:
                    self.send({"kind": "back"})
                if hidden > HIDDEN_WORK_US + 0.2 * t:
                    res.verdict, res.detail = "hidden-work", _hidden_detail(hidden, t)
                    return res
            if validate:
                with self.phase("baseline_checks_s"):
                    self._checked[s.id] = self._pick_baselines(s, inputs)
        finally:
            self._last_ref = None  # no answer stays in memory for the next scenario's calls
        res.verdict, res.correct = "ok", True
        return res

    def predicted_timing_s(self, s: Scenario) -> float:
        """How long time() should take for a scenario that passed check(): harness.budgets' prediction."""
        cost = self._costs[s.id]
        flush_us = 1e6 * self.timer.flush_bytes / 2e12
        noisy = EXTRA_FACTOR if self.job.get("noise_target_pct") else 0.0
        return budgets.timing_seconds([cost["call_us"], *cost["baselines_us"]], cost["reference_s"],
                                      self.job["time_budget_s"], flush_us, MIN_REPS, MAX_REPS, noisy)

    def time(self, s: Scenario, res: ScenarioResult) -> ScenarioResult:
        """Timing of a scenario check() passed: its own fresh draw of the secret seed, the baselines
        check() found valid, interleaved timing, the physical floor and the wall-clock check, then one
        more draw in the same buffers (a result cached from the timed calls fails it)."""
        gen = self._generator("timing:" + s.id)
        inputs = self.task.make_inputs(s, gen, self.device)
        outs = {n: guarded_empty(shape, dt, self.device) for n, (shape, dt) in self.task.output_shapes(s, inputs).items()}
        names, record = self._checked.pop(s.id, ([], None))
        with self.phase("baseline_checks_s"):
            baselines = self._prepared(s, inputs, names)
        self._time(s, inputs, outs, res, baselines, record if record in baselines else None)
        if res.verdict == "ok":
            self.task.refill_inputs(s, inputs, gen)
            cmp = self._judged_call(s, inputs, outs)
            self._last_ref = None
            if cmp.verdict != "ok":
                res.verdict = "stale-result"
                res.detail = f"fresh inputs in the same buffers after timing: {cmp.verdict}: {cmp.detail}"
        res.correct = res.verdict == "ok"
        return res

    def run(self, s: Scenario) -> ScenarioResult:
        """Both passes for one scenario, in-process (bench/profile_judge.py)."""
        res = self.check(s, validate=s.timed)
        return self.time(s, res) if s.timed and res.correct else res

    def _valid_baselines(self, s: Scenario, inputs: dict, names: list[str]) -> dict[str, Callable[[], Any]]:
        """Baselines (by name) that accept the scenario and pass the same check on the same inputs."""
        valid = {}
        by_name = {b.name: b for b in self.baselines}
        cost = self._costs[s.id]
        for name in names:
            b = by_name[name]
            try:
                fn = b.prepare(s, inputs)
                t0 = time.perf_counter()
                with torch.cuda.stream(self.timer.stream):
                    out = fn()
                _cuda_sync(self.device)
                wall_us = (time.perf_counter() - t0) * 1e6
            except FatalCudaError:
                raise
            except Exception as exc:
                self.cache.put(s.id, name, False, None, _first_line(exc))
                continue
            cmp = self.task.compare(s, self._last_ref, out, b.checks)
            if cmp.verdict == "ok":
                valid[name] = fn
                cost["baselines_us"].append(wall_us)
            else:
                self.cache.put(s.id, name, False, None, f"{cmp.verdict}: {cmp.detail}")
        return valid

    def _prepared(self, s: Scenario, inputs: dict, names: list[str]) -> dict[str, Callable[[], Any]]:
        """The baselines check() found valid, bound to the timing pass's inputs and called once; one
        that now refuses the scenario is recorded as invalid and not timed."""
        by_name = {b.name: b for b in self.baselines}
        fns = {}
        for name in names:
            try:
                fn = by_name[name].prepare(s, inputs)
                with torch.cuda.stream(self.timer.stream):
                    fn()
                _cuda_sync(self.device)
            except FatalCudaError:
                raise
            except Exception as exc:
                self.cache.put(s.id, name, False, None, _first_line(exc))
                continue
            fns[name] = fn
        return fns

    def _cached_record(self, s: Scenario, names: list[str]) -> str | None:
        """The fastest valid baseline the cache knows for this scenario, once it knows every one an
        evaluation would try: each regular baseline, and the fallbacks only where no regular one is
        valid. (Waiting for the fallbacks too, which are never tried where a regular baseline is valid,
        kept the cache from ever naming a record: every evaluation checked and timed every baseline, and
        cuDNN's call on one GQA chunked-prefill scenario cost 5.7 s of each quick evaluation on the H200.)"""
        if self.job.get("retime") or not names:
            return None
        fallback = {b.name for b in self.baselines if b.fallback}
        cached = self.cache.scenario(s.id)
        for group in ([n for n in names if n not in fallback], [n for n in names if n in fallback]):
            if not group:
                continue
            if not all(n in cached for n in group):
                return None
            valid = {n: cached[n]["us"] for n in group if cached[n]["valid"] and cached[n]["us"]}
            if valid:
                return min(valid, key=valid.get)
        return None

    def _pick_baselines(self, s: Scenario, inputs: dict) -> tuple[list[str], str | None]:
        """The baselines to time (those that pass the check on these inputs), and the one of record if
        the cache already names it; with no record cached, every valid one is timed and the fastest is
        the record (the fallbacks only where no regular baseline is valid)."""
        wanted = self.job.get("baseline")
        names = [b.name for b in self.baselines if wanted in (None, b.name)]
        fallback = {b.name for b in self.baselines if b.fallback}
        record = self._cached_record(s, names)
        if record:
            fns = self._valid_baselines(s, inputs, [record])
            if fns:
                return list(fns), record
        fns = self._valid_baselines(s, inputs, [n for n in names if n not in fallback])
        if not fns:
            fns = self._valid_baselines(s, inputs, [n for n in names if n in fallback])
        return list(fns), None

    def lacks(self, s: Scenario, retime: bool) -> bool:
        """The cache lacks what a judgement of s will want: every baseline's validity and time (timed),
        or a warm-up of the reference (untimed: its Triton kernels, kept in the trusted cache)."""
        if not s.timed:
            return not self.cache.warmed(s.id)
        cached = self.cache.scenario(s.id)
        return retime or not all(b.name in cached for b in self.baselines)

    def fill(self, s: Scenario) -> None:
        """Measure what the cache lacks for s. Call only before a candidate is loaded: the result is
        reported to the parent, which keeps it for later evaluations (harness.trusted)."""
        if not s.timed:
            self.warm(s)
            self.cache.mark_warmed(s.id)
            return
        try:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(_seed_for(0, s.id))
            inputs = self.task.make_inputs(s, gen, self.device)
            self._last_ref = self.task.reference(s, inputs)
            fns = self._valid_baselines(s, inputs, [b.name for b in self.baselines])
            samples = self.timer.interleaved(fns, BASELINE_BUDGET_S) if fns else {}
            _cuda_sync(self.device)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return
        for name, smp in samples.items():
            self.cache.put(s.id, name, True, smp.median)
        self._last_ref = None

    def warm(self, s: Scenario) -> None:
        """First calls of what this scenario will run, on throwaway inputs; nothing is judged or kept.

        cuDNN builds an execution plan on its first call per shape (about a quarter of a second), and
        the references' kernels compile or load on first use (Triton's kernel; cuBLAS's algorithm
        choice on the torch path), so a prepared worker pays that before the kernel arrives: the
        baselines a timed scenario is likely to time, the reference of an untimed one (the untimed
        grid meets every dtype and head-dim tile, and a timed scenario's reference is dominated by its
        arithmetic).
        """
        try:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(0)
            inputs = self.task.make_inputs(s, gen, self.device)
            if not s.timed:
                self.task.reference(s, inputs)
                return
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return
        record = self._cached_record(s, [b.name for b in self.baselines])
        for b in self.baselines:
            if (record and b.name != record) or (not record and b.fallback):
                continue
            try:
                fn = b.prepare(s, inputs)
                with torch.cuda.stream(self.timer.stream):
                    fn()
                _cuda_sync(self.device)
            except FatalCudaError:
                raise
            except Exception:
                continue  # the judged check records why, if it fails there too

    def _time(self, s: Scenario, inputs: dict, outs: dict[str, GuardedBuffer], res: ScenarioResult,
              baselines: dict[str, Callable[[], Any]], record: str | None) -> None:
        for b in outs.values():
            b.repoison()
        candidate = self._call(s, inputs, outs)
        fns = {"candidate": candidate, **baselines}
        try:
            with self.phase("timing_s"):
                samples = self.timer.interleaved(fns, self.job["time_budget_s"],
                                                 noise_target_pct=self.job.get("noise_target_pct", 0.0))
                _cuda_sync(self.device)
            t = samples["candidate"].median
            calls = int(min(12, max(3, WALL_CHECK_US / max(t, 1.0))))
            with self.phase("wall_clock_check_s"):
                hidden = self._hidden_us(candidate, calls, t)
        except EntryPointError as exc:
            _cuda_sync(self.device)
            res.verdict, res.detail = "error", f"the entry point returned {_cuda_error_name(exc.rc)} while timed"
            return
        for name, smp in samples.items():
            if name != "candidate":
                self.cache.put(s.id, name, True, smp.median)
        res.time_us, res.spread_pct = t, samples["candidate"].spread_pct
        res.baselines = {n: smp.median for n, smp in samples.items() if n != "candidate"}
        res.baselines.update({n: None for n, e in self.cache.scenario(s.id).items() if not e["valid"]})
        if baselines:
            if record not in samples:
                record = min((n for n in samples if n != "candidate"), key=lambda n: samples[n].median)
            res.baseline, res.baseline_us = record, samples[record].median
            res.speedup = res.baseline_us / t
        res.tflops = self.task.exact_flops(s) / t / 1e6
        res.pct_peak = 100.0 * res.tflops / self.peaks["peak_tflops_bf16"]
        floor_us = self._floor_us(s, FLOOR_MARGIN)
        if t < floor_us:
            res.verdict = "too-fast"
            res.detail = f"{t:.2f} µs is below the physical floor {floor_us:.2f} µs (exact FLOPs and bytes over measured peaks)"
        elif hidden > HIDDEN_WORK_US + 0.2 * t:
            res.verdict, res.detail = "hidden-work", _hidden_detail(hidden, t)

    def _hidden_us(self, candidate: Callable[[], None], calls: int, t: float) -> float:
        """Wall clock over the events per call, beyond the harness's own overhead. A first excess is
        measured again with twice the calls and the smaller kept: work left on another stream shows
        every time, a hiccup of the host does not (one gave a 21 µs excess on a 21 µs scenario of a
        library kernel, docs/BENCHMARKS.md)."""
        excess, overhead = self.timer.wall_excess_us(candidate, calls)
        first = excess - overhead
        if first <= HIDDEN_WORK_US + 0.2 * t:
            return first
        excess, overhead = self.timer.wall_excess_us(candidate, 2 * calls)
        return min(first, excess - overhead)


def _hidden_detail(hidden_us: float, t_us: float) -> str:
    return (f"wall clock exceeds the stream's events by {hidden_us:.1f} µs per call "
            f"({t_us:.1f} µs timed): work outside the harness stream")


def _fill_errors(res: ScenarioResult, cmp: Comparison) -> None:
    first = next(iter(cmp.errors), None)
    if first is not None:
        res.max_abs_err, res.tolerance = cmp.errors[first], cmp.tolerances.get(first)
    if "lse" in cmp.errors:
        res.lse_max_abs_err, res.lse_tolerance = cmp.errors["lse"], cmp.tolerances.get("lse")


def judging_device(index: int) -> torch.device:
    """The GPU to judge on, with no TF32 anywhere a reference or baseline did not ask for it."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    return device


def load_entry(task: Task, library: str) -> Any:
    """The candidate's entry point, typed by the task's ABI."""
    entry = getattr(ctypes.CDLL(library), task.entry_symbol)
    entry.argtypes, entry.restype = task.argtypes, ctypes.c_int
    return entry


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


class LineReader:
    """JSON lines from a file descriptor, with a look that does not block: the job may arrive while
    the worker is still warming up, and then cuts the warm-up short."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def _fill(self, timeout: float | None) -> None:
        if self.eof or (timeout is not None and not select.select([self.fd], [], [], timeout)[0]):
            return
        chunk = os.read(self.fd, 1 << 16)
        self.buf += chunk
        self.eof = not chunk

    def waiting(self) -> bool:
        """A line (or the end of input) has arrived."""
        if b"\n" not in self.buf:
            self._fill(0)
        return b"\n" in self.buf or self.eof

    def read(self) -> dict[str, Any] | None:
        while b"\n" not in self.buf and not self.eof:
            self._fill(None)
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line) if line.strip() else None


def main() -> int:
    die_with_parent()
    triton_dir = Path(os.environ.get("TRITON_CACHE_DIR", "/nonexistent"))
    seeded = triton_entries(triton_dir)
    stdin = LineReader(sys.stdin.fileno())
    prep = stdin.read()
    if prep is None:
        return 0
    out = os.fdopen(prep["fd"], "w", buffering=1)

    def send(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if not torch.cuda.is_available():  # harness.started_worker.EXIT_NO_CUDA: bad input for the parent
        return 5 if torch.version.cuda else 4
    device = judging_device(prep.get("device_index") or 0)
    task = get_task(prep["task"], prep.get("options"))
    info = device_info(device)
    cache_path, key = Path(prep["cache_path"]), fingerprint(info, task.name)
    cache = BaselineCache(cache_path, key)
    if not cache.peaks:
        t0 = time.perf_counter()
        cache.peaks = measure_peaks(device)
        info["peaks_measured_s"] = time.perf_counter() - t0
    peaks = cache.peaks
    info.update(peaks)
    stream = torch.cuda.Stream(device)
    timer = Timer(device, stream)
    info["l2_flush_bytes"], info["l2_persist_reset"] = timer.flush_bytes, timer.resets_persisting_l2
    send({"kind": "device", "device": info})
    judge = Judge(task, device, timer, cache, peaks)
    t0 = time.perf_counter()
    for sd in prep.get("warm", []):
        s = Scenario(sd["id"], sd["timed"], sd["params"], sd.get("group", ""))
        # What the cache lacks is measured even once the job is here: only now, before any candidate
        # is loaded, can it be trusted. The rest of the warm-up stops at the job.
        lacking = judge.lacks(s, prep.get("retime", False))
        if lacking or not stdin.waiting():
            send({"kind": "warm", "id": s.id})
            judge.fill(s) if lacking else judge.warm(s)
    torch.cuda.empty_cache()  # give back the warm-up's inputs while this worker waits
    warm_s = time.perf_counter() - t0
    send_report(prep.get("report_fd"), key, cache.changes(), triton_manifest(triton_dir, seeded))
    send({"kind": "ready"})
    job = stdin.read()
    if job is None:
        return 0  # the parent went away, or prepared us for an evaluation that never came
    cache.reread()  # another worker may have reported baselines while this one waited
    entry = load_entry(task, job["library"])
    if job.get("retime"):
        cache.clear()
    judge.entry, judge.job, judge.send = entry, job, send
    judge.profile["warmup_s"] = warm_s
    return judge_job(judge, job, stdin, send)


def judge_job(judge: Judge, job: dict[str, Any], stdin: LineReader, send: Callable[[dict[str, Any]], None]) -> int:
    """The job's two passes; the exit status (3 after a CUDA error that may have poisoned the context)."""
    scenarios = [Scenario(sd["id"], sd["timed"], sd["params"], sd.get("group", "")) for sd in job["scenarios"]]
    may_time = bool(job.get("time"))
    passed: dict[str, ScenarioResult] = {}
    clean = True
    t0 = time.perf_counter()
    for s in scenarios:
        send({"kind": "start", "id": s.id, "phase": "correctness"})
        validate = may_time and clean and s.timed
        res, fatal = _judged(judge, s, lambda: judge.check(s, validate))
        msg: dict[str, Any] = {"kind": "result", "scenario": asdict(res), "phase": "correctness"}
        if validate and res.correct:
            msg["timing_s"] = judge.predicted_timing_s(s)
        send(msg)
        if fatal:
                return 3
        clean = clean and res.correct
        passed[s.id] = res
    judge.profile["correctness_pass_s"] = time.perf_counter() - t0
    send({"kind": "checked", "ok": clean})
    if may_time:
        t0 = time.perf_counter()
        decision = stdin.read()  # the parent's, once every GPU's part is checked
        judge.profile["gate_wait_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for s in (s for s in scenarios if s.timed and clean and decision and decision.get("time")):
            if stdin.waiting():
                break  # {"stop": true}, or the parent is gone: no more timing
            predicted = judge.predicted_timing_s(s)
            send({"kind": "start", "id": s.id, "phase": "timing", "budget_s": budgets.timing_budget_s(predicted),
                  "predicted_s": predicted})
            res, fatal = _judged(judge, s, lambda: judge.time(s, passed[s.id]))
            send({"kind": "result", "scenario": asdict(res), "phase": "timing"})
            if fatal:
                        return 3
            if not res.correct:
                break  # rejected: nothing more is timed
        judge.profile["timing_pass_s"] = time.perf_counter() - t0
    send({"kind": "done", "profile": dict(judge.profile)})
    return 0


def _judged(judge: Judge, s: Scenario, step: Callable[[], ScenarioResult]) -> tuple[ScenarioResult, bool]:
    """The step's result, or the verdict for what it raised; True when the CUDA context may be unusable."""
    t0 = time.perf_counter()
    try:
        res = step()
    except FatalCudaError as exc:
        return ScenarioResult(id=s.id, timed=s.timed, correct=False, verdict="crash", detail=str(exc),
                              gpu=judge.device.index, seconds=time.perf_counter() - t0), True
    except torch.OutOfMemoryError as exc:
        torch.cuda.empty_cache()
        res = ScenarioResult(id=s.id, timed=s.timed, correct=False, verdict="error",
                             detail=f"out of GPU memory: {_first_line(exc)}", gpu=judge.device.index)
    res.seconds = (res.seconds or 0.0) + time.perf_counter() - t0
    return res, False

if __name__ == "__main__":
    sys.exit(main())
