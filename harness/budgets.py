"""How long a candidate may take before it counts as hung: a multiple of what the scenario should cost.

Torch-free: the worker computes a budget before each call of the candidate and before each timed
scenario and sends it with the message that starts it; the parent kills the worker when it runs out
(harness.started_worker). A fixed 60 s per scenario made a hang cost a minute; these budgets come
from the scenario's expected time, so a hang is seen within seconds and a slow but honest kernel
still has a wide margin.
"""

from __future__ import annotations

HANG_FLOOR_S = 2.0  # whatever the expected time: a first call's setup, a busy host
HANG_FACTOR = 50.0  # a call may take this many times the expected time before it is a hang
# With no baseline timed on a scenario (the untimed grid, a cold cache), a call is expected to run at
# no less than 1/FLOOR_FACTOR of the physical peak: the starting kernel runs at 11-13% of it on long
# shapes (docs/BENCHMARKS.md), so a kernel 50 x 20 = 1000 times slower than the floor is still judged.
FLOOR_FACTOR = 20.0
TIMING_FACTOR = 10.0  # a timed scenario may take this many times its predicted duration
WALL_CHECK_CALLS = 36  # the wall-clock check's most candidate calls: 12, then 24 more on an excess


def expected_call_us(floor_us: float, baseline_us: list[float]) -> float:
    """What a call of this scenario should cost: the slowest valid baseline timed on it, and no less
    than FLOOR_FACTOR times the physical floor (exact FLOPs and bytes over the measured peaks)."""
    return max([FLOOR_FACTOR * floor_us, *baseline_us])


def call_budget_s(expected_us: float) -> float:
    return HANG_FLOOR_S + HANG_FACTOR * expected_us / 1e6


def timing_seconds(calls_us: list[float], reference_s: float, time_budget_s: float, flush_us: float,
                   min_reps: int, max_reps: int, extra_factor: float) -> float:
    """The predicted duration of one timed scenario: the interleaved rounds (a warm-up and an estimate
    round, then repetitions chosen by the time budget, then at most extra_factor times as many for a
    noisy call), the wall-clock check, and the re-check on fresh inputs after timing (a call and its
    reference). calls_us[0] is the candidate's call, the rest are the baselines timed beside it."""
    per_round_s = sum(us + flush_us for us in calls_us) / 1e6
    reps = min(max_reps, max(min_reps, time_budget_s / max(per_round_s, 1e-9)))
    rounds = 2 + reps * (1 + extra_factor)
    candidate_s = calls_us[0] / 1e6
    return rounds * per_round_s + (WALL_CHECK_CALLS + 1) * candidate_s + sum(calls_us[1:]) / 1e6 + reference_s


def timing_budget_s(predicted_s: float) -> float:
    return HANG_FLOOR_S + TIMING_FACTOR * predicted_s


def describe_call(budget_s: float, expected_us: float) -> str:
    return (f"the call did not return within {budget_s:.1f} s ({HANG_FLOOR_S:g} s + {HANG_FACTOR:g} x the "
            f"expected {expected_us / 1e3:.3g} ms): a hang?")


def describe_timing(budget_s: float, predicted_s: float) -> str:
    return (f"timing did not finish within {budget_s:.1f} s ({HANG_FLOOR_S:g} s + {TIMING_FACTOR:g} x the "
            f"predicted {predicted_s:.3g} s): a hang?")
