"""Timing on a harness-owned stream (worker side; imports torch).

Every timed call is preceded by an L2 flush (a write over more than twice the L2) and a reset of
persisting L2 lines, so no implementation times a warm cache. Implementations are timed
interleaved in rounds, rotating their order each round, so clock drift hits them alike; within a
round each runs a burst of calls back to back, so each is timed at the clock its own power draw
holds (as triton.testing.do_bench times it), not at the clock its partner's left behind.
"""

from __future__ import annotations

import ctypes
import math
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
# A burst lasts at least this long: the H200's clock follows the power draw within a few milliseconds
# (after a 9 ms idle wait cuDNN ran 13% faster than back to back; docs/BENCHMARKS.md), so most of a
# burst runs at the implementation's own sustained clock.
BURST_S = 5e-3
# Noisy implementations get more rounds, until two evaluations' medians would differ by at most this
# much (one standard error, in percent) or EXTRA_BUDGETS more time budgets are spent.
NOISE_TARGET_PCT = 0.7
EXTRA_BUDGETS = 8


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
        """Median-ready samples per implementation; rounds and bursts chosen by a time budget."""
        names = list(fns)
        with torch.cuda.stream(self.stream):
            for name in names:  # warm-up (each was called at least once already, in its checks)
                fns[name]()
            estimate = self._one_round(fns, names)
            costs = {n: estimate[n] / 1e6 + self.flush_bytes / 2e12 for n in names}
            bursts, rounds = plan(costs, budget_s, min_reps, max_reps)
            times = {n: [] for n in names}
            self._rounds(fns, bursts, range(rounds), times)
            more = extra_rounds(times, bursts, costs, EXTRA_BUDGETS * budget_s, max_reps)
            if more:
                self._rounds(fns, bursts, range(rounds, rounds + more), times)
        return {n: Samples(t) for n, t in times.items()}

    def _rounds(self, fns: dict[str, Callable[[], Any]], bursts: dict[str, int], rounds: range,
                times: dict[str, list[float]]) -> None:
        names = list(fns)
        events = []
        for r in rounds:
            for name in names[r % len(names):] + names[: r % len(names)]:
                for _ in range(bursts[name]):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    self.flush()
                    start.record(self.stream)
                    fns[name]()
                    end.record(self.stream)
                    events.append((name, start, end))
        torch.cuda.synchronize(self.device)
        for name, start, end in events:
            times[name].append(start.elapsed_time(end) * 1000.0)

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


def plan(costs_s: dict[str, float], budget_s: float, min_reps: int, max_reps: int) -> tuple[dict[str, int], int]:
    """(calls per burst for each implementation, rounds): bursts of at least BURST_S, at least two rounds
    so each implementation goes first once, at least min_reps samples each, about budget_s in all,
    at most max_reps samples each."""
    bursts = {n: max(1, min(max_reps // 2, math.ceil(BURST_S / c))) for n, c in costs_s.items()}
    per_round = sum(bursts[n] * c for n, c in costs_s.items())
    rounds = max(2, math.ceil(min_reps / min(bursts.values())), round(budget_s / max(per_round, 1e-9)))
    return bursts, max(2, min(rounds, max_reps // max(bursts.values())))


def extra_rounds(times_us: dict[str, list[float]], bursts: dict[str, int], costs_s: dict[str, float],
                 extra_s: float, max_reps: int) -> int:
    """More rounds for a noisy implementation: the standard error of a median is about 0.93 x IQR
    over the square root of the samples, so two evaluations' medians differ by about 1.31 x IQR /
    sqrt(n) (one standard error); rounds are added until that is NOISE_TARGET_PCT, within extra_s
    more seconds and max_reps samples per implementation."""
    wanted = 0
    for name, t in times_us.items():
        spread = Samples(t).spread_pct
        need = math.ceil((1.31 * spread / NOISE_TARGET_PCT) ** 2) - len(t)
        wanted = max(wanted, math.ceil(need / bursts[name]) if need > 0 else 0)
    per_round = sum(bursts[n] * c for n, c in costs_s.items())
    room = min(int(extra_s / max(per_round, 1e-9)),
               min((max_reps - len(times_us[n])) // bursts[n] for n in times_us))
    return max(0, min(wanted, room))


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
