"""Hang budgets from each scenario's expected time, not a fixed 60 s: the arithmetic, the worker's own
computation of a call's budget (the real Judge, on the CPU), and the parent killing at that budget."""

import time

import pytest
from fake_worker import fake_python  # noqa: F401 (a fixture)

from harness import budgets
from harness.started_worker import run_worker
from harness.tasks.base import Scenario

SCENARIOS = [Scenario(f"s{i}", False, {}) for i in range(4)]


def test_a_call_may_take_a_multiple_of_the_slowest_baseline_plus_a_floor():
    expected = budgets.expected_call_us(floor_us=10.0, baseline_us=[900.0, 4000.0, 1200.0])
    assert expected == 4000.0
    assert budgets.call_budget_s(expected) == pytest.approx(budgets.HANG_FLOOR_S + budgets.HANG_FACTOR * 4e-3)


def test_without_a_baseline_the_physical_floor_sets_the_expected_time():
    assert budgets.expected_call_us(floor_us=100.0, baseline_us=[]) == budgets.FLOOR_FACTOR * 100.0
    # a tiny scenario: the floor of the budget holds
    assert budgets.call_budget_s(budgets.expected_call_us(0.01, [])) == pytest.approx(budgets.HANG_FLOOR_S, rel=1e-3)


def test_a_timed_scenario_is_predicted_from_its_calls_and_the_time_budget():
    # Short calls: the time budget sets the rounds (5 to 200); long calls: at least 5 rounds each.
    short = budgets.timing_seconds([20.0, 15.0], 0.001, 0.025, 150.0, 5, 200, 0.0)
    assert 0.025 < short < 0.05
    long = budgets.timing_seconds([10_000.0, 8_000.0], 0.05, 0.025, 150.0, 5, 200, 0.0)
    assert long == pytest.approx(7 * 0.0183 + 37 * 0.01 + 0.008 + 0.05, rel=0.01)
    assert budgets.timing_seconds([10_000.0, 8_000.0], 0.05, 0.025, 150.0, 5, 200, 2.0) > long
    assert budgets.timing_budget_s(long) == pytest.approx(budgets.HANG_FLOOR_S + budgets.TIMING_FACTOR * long)


def test_the_worker_announces_each_call_with_a_budget_from_the_cache_and_the_floor(tmp_path):
    """The real Judge (torch on the CPU; no call is made): what it tells the parent before a call."""
    torch = pytest.importorskip("torch")
    from harness.baselines import BaselineCache
    from harness.tasks import get_task
    from harness.worker import Judge

    task = get_task("attention")
    s = next(s for s in task.timed_grid() if s.id == "bf16-d128-b2-h16x16-s8192x8192")
    peaks = {"peak_tflops_bf16": 790.0, "peak_gbps": 4250.0}
    judge = Judge(task, torch.device("cpu"), None, BaselineCache(tmp_path / "b.json", "k"), peaks)
    sent = []
    judge.send = sent.append
    judge._announce(s)
    floor_us = 1e6 * task.exact_flops(s) / 790e12
    assert sent[-1]["expected_us"] == pytest.approx(budgets.FLOOR_FACTOR * floor_us)
    judge.cache.put(s.id, "cudnn", True, 1800.0)
    judge.cache.put(s.id, "efficient", True, 60_000.0)  # the slowest valid baseline sets it
    judge.cache.put(s.id, "flash+kvexpand", False, None, "refused")
    judge._announce(s, calls=3)
    msg = sent[-1]
    assert msg["kind"] == "call" and msg["id"] == s.id and msg["expected_us"] == pytest.approx(3 * 60_000.0)
    assert msg["budget_s"] == pytest.approx(budgets.call_budget_s(3 * 60_000.0))
    assert msg["budget_s"] < 12  # seconds, where the task's per-scenario budget is 60


def test_the_parent_kills_a_hung_call_at_the_budget_the_worker_sent(fake_python):  # noqa: F811
    t0 = time.monotonic()
    out = run_worker({"mode": "hang"}, {"bad": "s1", "call_budget_s": 1.0}, SCENARIOS, fake_python, 60.0, 600.0)
    seconds = time.monotonic() - t0
    assert [s.verdict for s in out.results] == ["ok", "timeout", "skipped", "skipped"]
    assert "1.0 s" in out.results[1].detail and "expected 1 ms" in out.results[1].detail
    assert seconds < 8  # not the per-scenario 60 s


def test_a_budget_never_extends_the_per_scenario_one(fake_python):  # noqa: F811
    t0 = time.monotonic()
    out = run_worker({"mode": "hang"}, {"bad": "s1", "call_budget_s": 3600.0}, SCENARIOS, fake_python, 2.0, 600.0)
    assert out.results[1].verdict == "timeout" and time.monotonic() - t0 < 8
