"""The worker: a fresh process per evaluation that loads the candidate and judges it scenario by scenario.

Started by harness.runner, which writes two JSON lines on stdin: the preparation (task, options,
GPU, cache, the scenarios to warm up) and, whenever the kernel is ready, the job (the library, the
secret seed, the scenarios to judge). Everything before the second line is work that does not
depend on the kernel, so a worker can be prepared while the agent is still writing it (see
harness.pool); a job that arrives during the warm-up cuts it short. It writes one JSON object per
line to the file descriptor named in the preparation (never stdout, which the kernel may print to):
  {"kind": "device", "device": {...}}     once, after CUDA is up
  {"kind": "warm", "id": ...}             before warming each scenario up (a clock, as start)
  {"kind": "ready"}                       prepared (or cut short by the job): reading the job
  {"kind": "start", "id": ...}            before each scenario (the parent's per-scenario clock)
  {"kind": "result", "scenario": {...}}   after each scenario (a ScenarioResult as a dict)
  {"kind": "done", "profile": {...}}
A CUDA error that may have poisoned the context (illegal address, trap, launch failure) ends the
worker after its result is written; the parent marks the rest skipped and the next evaluation starts
in a new process, on a healthy context.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from harness.baselines import BaselineCache, fingerprint
from harness.orphan import die_with_parent
from harness.poison import GuardedBuffer, guarded_empty
from harness.result import ScenarioResult
from harness.tasks import get_task
from harness.tasks.base import Comparison, Scenario, Task
from harness.timing import Timer, load_cudart, measure_peaks

DRAWS = 2  # fresh random inputs per scenario before timing; one more after it
FLOOR_MARGIN = 1.10  # a time below the floor at 110% of the measured peaks is impossible, not fast
HIDDEN_WORK_US = 10.0  # wall-clock excess over the events tolerated per call, plus 20% of the call
WALL_CHECK_US = 6e3  # the wall-clock check's calls per scenario: 3 to 12, about this long in all


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
    """Runs one scenario: draws, checks, baselines, timing, the re-check on fresh data."""

    def __init__(self, task: Task, device: torch.device, timer: Timer, cache: BaselineCache,
                 peaks: dict[str, float]) -> None:
        self.task, self.device, self.timer, self.cache, self.peaks = task, device, timer, cache, peaks
        self.entry: Any = None
        self.job: dict[str, Any] = {}
        self.baselines = task.baselines()
        self.profile: dict[str, float] = defaultdict(float)

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

    def _judged_call(self, s: Scenario, inputs: dict, outs: dict[str, GuardedBuffer]) -> Comparison:
        """One poisoned, guarded call of the candidate on these inputs, judged against the reference.

        The reference is computed after the call, so no answer sits in the process's memory while the
        candidate runs.
        """
        clones = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        for b in outs.values():
            b.repoison()
        _cuda_sync(self.device)
        call = self._call(s, inputs, outs)
        try:
            with self.phase("candidate_calls_s"):
                call()
                _cuda_sync(self.device)
        except EntryPointError as exc:
            _cuda_sync(self.device)
            return Comparison("error", f"the entry point returned {_cuda_error_name(exc.rc)}")
        # Input mutations (bit for bit) and guard damage, fetched in one host sync.
        damage = torch.stack([(_bits(before) != _bits(inputs[name])).sum() for name, before in clones.items()]
                             + [b.guard_damage() for b in outs.values()]).tolist()
        for name, changed in zip(clones, damage):
            if changed:
                return Comparison("input-mutated", f"input {name} changed during the call")
        for name, broken in zip(outs, damage[len(clones):]):
            if broken:
                return Comparison("wrong", f"wrote outside {name} (guard zone overwritten)")
        with self.phase("reference_s"):
            ref = self.task.reference(s, inputs)
        self._last_ref = ref
        with self.phase("compare_s"):
            return self.task.compare(s, ref, {n: b.tensor for n, b in outs.items()}, self.task.output_names)

    def run(self, s: Scenario) -> ScenarioResult:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(_seed_for(self.job["seed"], s.id))
        res = ScenarioResult(id=s.id, timed=s.timed, correct=False, gflop=self.task.exact_flops(s) / 1e9,
                             gpu=self.device.index)
        inputs = self.task.make_inputs(s, gen, self.device)
        outs = {n: guarded_empty(shape, dt, self.device) for n, (shape, dt) in self.task.output_shapes(s, inputs).items()}
        worst = -1.0
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
        if s.timed:
            self._time(s, inputs, outs, res)
            if res.verdict != "ok":
                return res
            self.task.refill_inputs(s, inputs, gen)
            cmp = self._judged_call(s, inputs, outs)
            if cmp.verdict != "ok":
                res.verdict = "stale-result"
                res.detail = f"fresh inputs in the same buffers after timing: {cmp.verdict}: {cmp.detail}"
                return res
        res.verdict, res.correct = "ok", True
        return res

    def _valid_baselines(self, s: Scenario, inputs: dict, names: list[str]) -> dict[str, Callable[[], Any]]:
        """Baselines (by name) that accept the scenario and pass the same check on the same inputs."""
        valid = {}
        by_name = {b.name: b for b in self.baselines}
        for name in names:
            b = by_name[name]
            try:
                fn = b.prepare(s, inputs)
                with torch.cuda.stream(self.timer.stream):
                    out = fn()
                _cuda_sync(self.device)
            except FatalCudaError:
                raise
            except Exception as exc:
                self.cache.put(s.id, name, False, None, _first_line(exc))
                continue
            cmp = self.task.compare(s, self._last_ref, out, b.checks)
            if cmp.verdict == "ok":
                valid[name] = fn
            else:
                self.cache.put(s.id, name, False, None, f"{cmp.verdict}: {cmp.detail}")
        return valid

    def _cached_record(self, s: Scenario, names: list[str]) -> str | None:
        """The fastest valid baseline the cache knows for this scenario, if it knows them all."""
        fallback = {b.name for b in self.baselines if b.fallback}
        cached = self.cache.scenario(s.id)
        if self.job.get("retime") or not names or not all(n in cached for n in names):
            return None
        valid_cached = {n: e["us"] for n, e in cached.items() if n in names and e["valid"] and e["us"]}
        native = {n: us for n, us in valid_cached.items() if n not in fallback}
        pool = native or valid_cached
        return min(pool, key=pool.get) if pool else None

    def _pick_baselines(self, s: Scenario, inputs: dict) -> tuple[dict[str, Callable[[], Any]], str | None]:
        """The baselines to time now, and the one of record if the cache already names it."""
        wanted = self.job.get("baseline")
        names = [b.name for b in self.baselines if wanted in (None, b.name)]
        fallback = {b.name for b in self.baselines if b.fallback}
        record = self._cached_record(s, names)
        if record:
            fns = self._valid_baselines(s, inputs, [record])
            if fns:
                return fns, record
        fns = self._valid_baselines(s, inputs, [n for n in names if n not in fallback])
        if not fns:
            fns = self._valid_baselines(s, inputs, [n for n in names if n in fallback])
        return fns, None

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

    def _time(self, s: Scenario, inputs: dict, outs: dict[str, GuardedBuffer], res: ScenarioResult) -> None:
        with self.phase("baseline_checks_s"):
            baselines, record = self._pick_baselines(s, inputs)
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
        flops, nbytes = self.task.exact_flops(s), self.task.min_bytes(s)
        res.tflops = flops / t / 1e6
        res.pct_peak = 100.0 * res.tflops / self.peaks["peak_tflops_bf16"]
        floor_us = 1e6 * max(flops / (self.peaks["peak_tflops_bf16"] * 1e12 * FLOOR_MARGIN),
                             nbytes / (self.peaks["peak_gbps"] * 1e9 * FLOOR_MARGIN))
        if t < floor_us:
            res.verdict = "too-fast"
            res.detail = f"{t:.2f} µs is below the physical floor {floor_us:.2f} µs (exact FLOPs and bytes over measured peaks)"
        elif hidden > HIDDEN_WORK_US + 0.2 * t:
            res.verdict = "hidden-work"
            res.detail = (f"wall clock exceeds the stream's events by {hidden:.1f} µs per call "
                          f"({t:.1f} µs timed): work outside the harness stream")

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
    stdin = LineReader(sys.stdin.fileno())
    prep = stdin.read()
    if prep is None:
        return 0
    out = os.fdopen(prep["fd"], "w", buffering=1)

    def send(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    device = judging_device(prep.get("device_index") or 0)
    task = get_task(prep["task"], prep.get("options"))
    info = device_info(device)
    cache_path, key = Path(prep["cache_path"]), fingerprint(info, task.name)
    cache = BaselineCache(cache_path, key)
    if not cache.peaks:
        t0 = time.perf_counter()
        cache.peaks = measure_peaks(device)
        info["peaks_measured_s"] = time.perf_counter() - t0
        cache.save()
    peaks = cache.peaks
    info.update(peaks)
    stream = torch.cuda.Stream(device)
    timer = Timer(device, stream)
    info["l2_flush_bytes"], info["l2_persist_reset"] = timer.flush_bytes, timer.resets_persisting_l2
    send({"kind": "device", "device": info})
    judge = Judge(task, device, timer, cache, peaks)
    t0 = time.perf_counter()
    for sd in prep.get("warm", []):
        if stdin.waiting():
            break  # the job is here: what is not warm yet is paid for inside the evaluation
        send({"kind": "warm", "id": sd["id"]})
        judge.warm(Scenario(sd["id"], sd["timed"], sd["params"], sd.get("group", "")))
    torch.cuda.empty_cache()  # give back the warm-up's inputs while this worker waits
    warm_s = time.perf_counter() - t0
    send({"kind": "ready"})
    job = stdin.read()
    if job is None:
        return 0  # the parent went away, or prepared us for an evaluation that never came
    entry = load_entry(task, job["library"])
    # Re-read: another evaluation may have timed baselines while this worker waited.
    judge.cache = cache = BaselineCache(cache_path, key)
    if job.get("retime"):
        cache.clear()
    judge.entry, judge.job = entry, job
    for sd in job["scenarios"]:
        s = Scenario(sd["id"], sd["timed"], sd["params"], sd.get("group", ""))
        send({"kind": "start", "id": s.id})
        t0 = time.perf_counter()
        try:
            res = judge.run(s)
        except FatalCudaError as exc:
            res = ScenarioResult(id=s.id, timed=s.timed, correct=False, verdict="crash", detail=str(exc), gpu=device.index)
            send({"kind": "result", "scenario": asdict(res)})
            cache.save()
            return 3
        except torch.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            res = ScenarioResult(id=s.id, timed=s.timed, correct=False, verdict="error",
                                 detail=f"out of GPU memory: {_first_line(exc)}", gpu=device.index)
        res.seconds = time.perf_counter() - t0
        send({"kind": "result", "scenario": asdict(res)})
    cache.save()
    send({"kind": "done", "profile": {**judge.profile, "warmup_s": warm_s}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
