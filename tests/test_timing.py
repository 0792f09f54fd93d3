"""The timing schedule: bursts, rounds and the extra rounds a noisy implementation gets."""

from __future__ import annotations

import random

import pytest

from harness.timing import BURST_S, EXTRA_BUDGETS, NOISE_TARGET_PCT, Samples, Timer, extra_rounds, plan

COSTS = [
    {"candidate": 0.17e-3, "cudnn": 0.16e-3},  # short kernels: the flush dominates
    {"candidate": 26e-3, "cudnn": 3.4e-3},  # a slow candidate on a long shape
    {"candidate": 2.1e-3, "cudnn": 2.0e-3, "flash": 3.5e-3},
    {"candidate": 40e-6, "cudnn": 1.5e-3},
]


@pytest.mark.parametrize("costs", COSTS)
def test_plan_bursts_last_long_enough_and_rounds_fit_the_budget(costs: dict[str, float]) -> None:
    bursts, rounds = plan(costs, budget_s=0.025, min_reps=5, max_reps=200)
    assert rounds >= 2  # each implementation goes first at least once
    for name, cost in costs.items():
        assert bursts[name] * cost >= BURST_S or bursts[name] in (1, 100)  # one call, or max_reps / 2
        assert (bursts[name] - 1) * cost < BURST_S  # no longer than it needs to be
        assert 5 <= bursts[name] * rounds <= 200
    per_round = sum(bursts[n] * c for n, c in costs.items())
    if rounds > max(2, -(-5 // min(bursts.values()))):  # the budget, not a minimum, set the rounds
        assert abs(rounds * per_round - 0.025) <= per_round / 2


def test_plan_keeps_to_max_reps() -> None:
    bursts, rounds = plan({"a": 1e-6, "b": 1e-6}, budget_s=10.0, min_reps=5, max_reps=200)
    assert all(b * rounds <= 200 for b in bursts.values())


def _noisy(n: int, pct: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [100.0 * (1 + rng.gauss(0, pct / 100)) for _ in range(n)]


def test_steady_samples_get_no_extra_rounds() -> None:
    times = {"candidate": _noisy(60, 0.1), "cudnn": _noisy(60, 0.1, 1)}
    assert extra_rounds(times, {"candidate": 20, "cudnn": 20}, {"candidate": 1e-4, "cudnn": 1e-4}, 0.2, 200) == 0


def test_a_noisy_implementation_gets_rounds_until_its_median_is_settled() -> None:
    times = {"candidate": _noisy(5, 3.0), "cudnn": _noisy(5, 0.1, 1)}
    bursts, costs = {"candidate": 1, "cudnn": 2}, {"candidate": 1e-3, "cudnn": 1e-3}
    more = extra_rounds(times, bursts, costs, extra_s=10.0, max_reps=1000)
    spread = Samples(times["candidate"]).spread_pct
    wanted = (1.31 * spread / NOISE_TARGET_PCT) ** 2
    assert 5 + more >= wanted > 5 + more - 1


def test_extra_rounds_stay_within_the_extra_time_and_max_reps() -> None:
    times = {"candidate": _noisy(5, 10.0), "cudnn": _noisy(5, 0.1, 1)}
    bursts, costs = {"candidate": 1, "cudnn": 1}, {"candidate": 20e-3, "cudnn": 5e-3}
    assert extra_rounds(times, bursts, costs, extra_s=EXTRA_BUDGETS * 0.025, max_reps=200) == 8  # 0.2 s / 25 ms
    assert extra_rounds(times, bursts, costs, extra_s=100.0, max_reps=12) == 7


@pytest.mark.gpu
def test_interleaved_times_each_implementation_at_its_own_length() -> None:
    import torch

    device = torch.device("cuda", 0)
    timer = Timer(device, torch.cuda.Stream(device))
    cycles = 400_000  # about 200 µs at the H200's clocks
    fns = {"short": lambda: torch.cuda._sleep(cycles), "long": lambda: torch.cuda._sleep(4 * cycles)}
    samples = timer.interleaved(fns, budget_s=0.05)
    ratio = samples["long"].median / samples["short"].median
    assert 3.6 < ratio < 4.4
    assert len(samples["short"].times_us) > len(samples["long"].times_us) >= 5
