"""Timing on a harness-owned stream (worker side; imports torch).

Every timed call is preceded by an L2 flush (a write over more than twice the L2) and a reset of
persisting L2 lines, so no implementation times a warm cache. Implementations are timed
interleaved, rotating their order each round, so clock drift and thermal state hit them alike.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

MIB = 1 << 20
# The flush is sized to keep the GPU busy ~150 µs: the host enqueues the timed call meanwhile, so an
# implementation's host overhead (Python dispatch, launch latency) stays out of the events. Busy, not
# idle: an idle spin instead lets the flush's dirty lines drain first and times kernels ~5% faster
# than triton.testing.do_bench does (measured on the H200, docs/BENCHMARKS.md).
MIN_FLUSH_BYTES = 512 * MIB


def load_cudart() -> Any | None:
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@dataclass
class Samples:
    times_us: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times_us)

    @property
    def spread_pct(self) -> float:
        """Interquartile range over the median, in percent."""
        if len(self.times_us) < 4:
            return 100.0 * (max(self.times_us) - min(self.times_us)) / self.median
        q = statistics.quantiles(self.times_us, n=4)
        return 100.0 * (q[2] - q[0]) / self.median


class Timer:
    def __init__(self, device: torch.device, stream: torch.cuda.Stream) -> None:
        self.device = device
        self.stream = stream
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush_bytes = max(2 * l2 + 16 * MIB, MIN_FLUSH_BYTES)
        self._flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device=device)
        self._cudart = load_cudart()
        self._round = 0

    @property
    def resets_persisting_l2(self) -> bool:
        return self._cudart is not None

    def flush(self) -> None:
        self._round += 1
        self._flush_buf.fill_(self._round)
        if self._cudart is not None:
            self._cudart.cudaCtxResetPersistingL2Cache()

    def interleaved(self, fns: dict[str, Callable[[], Any]], budget_s: float, min_reps: int = 5, max_reps: int = 200) -> dict[str, Samples]:
        """Median-ready samples per implementation; repetitions chosen by a time budget."""
        names = list(fns)
        with torch.cuda.stream(self.stream):
            for name in names:  # warm-up (each was called at least once already, in its checks)
                fns[name]()
            estimate = self._one_round(fns, names)
            per_round = sum(estimate.values()) / 1e6 + len(names) * self.flush_bytes / 2e12
            reps = int(min(max_reps, max(min_reps, budget_s / max(per_round, 1e-9))))
            starts = {n: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for n in names}
            ends = {n: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for n in names}
            for r in range(reps):
                order = names[r % len(names):] + names[: r % len(names)]
                for name in order:
                    self.flush()
                    starts[name][r].record(self.stream)
                    fns[name]()
                    ends[name][r].record(self.stream)
            torch.cuda.synchronize(self.device)
        return {n: Samples([s.elapsed_time(e) * 1000.0 for s, e in zip(starts[n], ends[n])]) for n in names}

    def _one_round(self, fns: dict[str, Callable[[], Any]], names: list[str]) -> dict[str, float]:
        out = {}
        for name in names:
            self.flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            fns[name]()
            end.record(self.stream)
            end.synchronize()
            out[name] = start.elapsed_time(end) * 1000.0
        return out

    def wall_excess_us(self, fn: Callable[[], Any], calls: int) -> tuple[float, float]:
        """(median wall-clock minus event time of fn, the same for a trivial op), in µs.

        Each call is bracketed by device-wide synchronizes: work the call left on another stream
        lengthens the wall clock but not the events on ours. The trivial op measures the harness's
        own enqueue-and-sync overhead on this machine.
        """
        tiny = torch.zeros(1, device=self.device)

        def trivial() -> None:
            tiny.add_(1)

        return self._excess(fn, calls), self._excess(trivial, calls)

    def _excess(self, fn: Callable[[], Any], calls: int) -> float:
        diffs = []
        with torch.cuda.stream(self.stream):
            for _ in range(calls):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize(self.device)
                t0 = time.perf_counter()
                start.record(self.stream)
                fn()
                end.record(self.stream)
                torch.cuda.synchronize(self.device)
                wall = (time.perf_counter() - t0) * 1e6
                diffs.append(wall - start.elapsed_time(end) * 1000.0)
        return statistics.median(diffs)


def measure_peaks(device: torch.device) -> dict[str, float]:
    """Measured ceilings: bf16 tensor-core rate (8192³ product on random data) and copy bandwidth."""
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    src = torch.empty(1 << 28, dtype=torch.int32, device=device).random_()
    dst = torch.empty_like(src)

    def best_of(fn: Callable[[], Any], reps: int = 10) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1000.0)
        return statistics.median(times)

    t_mm = best_of(lambda: torch.matmul(a, b))
    t_cp = best_of(lambda: dst.copy_(src))
    return {"peak_tflops_bf16": 2 * n**3 / t_mm / 1e12, "peak_gbps": 2 * src.numel() * 4 / t_cp / 1e9}
