"""The parent survives whatever the worker does: crash, abort, hang, garbage, dying at start.

A stand-in worker (a small Python program run in place of `python -m harness.worker`) speaks the real
protocol and misbehaves on the scenario named in its job; run_worker must give every scenario a
verdict within the budgets.
"""

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from fake_worker import fake_python  # noqa: F401 (a fixture)
from nvcc_support import needs_nvcc

from harness.pool import WorkerPool
from harness.runner import EvalOptions, evaluate
from harness.started_worker import run_worker
from harness.tasks import get_task
from harness.tasks.base import Scenario

ROOT = Path(__file__).resolve().parents[1]

SCENARIOS = [Scenario(f"s{i}", i == 2, {}) for i in range(4)]


def run(fake_python, mode, scenario_timeout=3.0, total=60.0):
    t0 = time.monotonic()
    prep = {"mode": mode, "warm": [{"id": "s2", "params": {}}]}
    out = run_worker(prep, {"bad": "s1"}, SCENARIOS, fake_python, scenario_timeout, total)
    return out, time.monotonic() - t0


def verdicts(out):
    return [s.verdict for s in out.results]


def test_a_healthy_worker_reports_every_scenario(fake_python):
    out, _ = run(fake_python, "none")
    assert verdicts(out) == ["ok"] * 4 and out.error is None and out.device["name"] == "fake"


@pytest.mark.parametrize("mode,signame", [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_crash_names_the_scenario_and_the_signal(fake_python, mode, signame):
    out, _ = run(fake_python, mode)
    assert verdicts(out) == ["ok", "crash", "skipped", "skipped"]
    assert signame in out.results[1].detail
    assert "s1" in out.results[2].detail


@pytest.mark.parametrize("mode", ["hang", "hang-child"])
def test_a_hang_is_killed_at_the_scenario_budget(fake_python, mode):
    out, seconds = run(fake_python, mode, scenario_timeout=2.0)
    assert verdicts(out) == ["ok", "timeout", "skipped", "skipped"]
    assert seconds < 10


def test_the_total_budget_bounds_the_evaluation(fake_python):
    out, seconds = run(fake_python, "hang", scenario_timeout=60.0, total=2.0)
    assert out.results[1].verdict == "timeout" and "total budget" in out.results[1].detail
    assert seconds < 10


def test_a_corrupted_result_stream_is_a_crash(fake_python):
    out, seconds = run(fake_python, "garbage")
    assert verdicts(out)[:2] == ["ok", "crash"] and seconds < 10


def test_a_worker_that_dies_at_start_is_an_evaluation_error(fake_python):
    out, _ = run(fake_python, "die-at-start")
    assert out.error and "no torch here" in out.error
    assert verdicts(out) == ["skipped"] * 4


@needs_nvcc
def test_devices_run_one_worker_per_gpu_and_merge_in_order(fake_python, tmp_path):
    kernel = tmp_path / "rmsnorm.cu"
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", kernel)
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", kernel.with_suffix(".toml"))
    opts = EvalOptions(devices=[0, 1], python=fake_python, cache_dir=tmp_path / "cache")
    result = evaluate(kernel, opts)
    expected = [s.id for s in get_task("rmsnorm").scenarios("full")]
    assert [s.id for s in result.scenarios] == expected and result.passed
    assert {s.gpu for s in result.scenarios} == {0, 1}
    assert [g["index"] for g in result.device["gpus"]] == [0, 1]


def test_a_hang_while_warming_up_is_an_evaluation_error(fake_python):
    out, seconds = run(fake_python, "hang-warm", scenario_timeout=2.0)
    assert out.error and "warming up s2" in out.error
    assert verdicts(out) == ["skipped"] * 4 and seconds < 10


def test_the_job_is_sent_while_the_worker_still_warms_up(fake_python):
    # This stand-in warms up until the job arrives: a runner that waits for "ready" would hang here.
    out, seconds = run(fake_python, "warm-until-job", scenario_timeout=5.0)
    assert verdicts(out) == ["ok"] * 4 and out.error is None and seconds < 10


def test_the_line_reader_looks_without_blocking():
    from harness.worker import LineReader

    read_fd, write_fd = os.pipe()
    reader = LineReader(read_fd)
    assert not reader.waiting()
    os.write(write_fd, b'{"a": 1}\n{"b"')
    assert reader.waiting() and reader.read() == {"a": 1}
    assert not reader.waiting()  # half a line is not a line
    os.write(write_fd, b': 2}\n')
    assert reader.read() == {"b": 2}
    os.close(write_fd)
    assert reader.waiting() and reader.read() is None
    os.close(read_fd)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _rmsnorm(tmp_path):
    kernel = tmp_path / "rmsnorm.cu"
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", kernel)
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", kernel.with_suffix(".toml"))
    return kernel


@needs_nvcc
def test_a_pool_hands_the_next_evaluation_a_worker_prepared_after_the_last(fake_python, tmp_path):
    kernel = _rmsnorm(tmp_path)
    pool = WorkerPool()
    opts = EvalOptions(python=fake_python, cache_dir=tmp_path / "cache", selection="quick")
    try:
        first = evaluate(kernel, opts, pool)
        (prepared,) = [w for _, w in pool._workers.values()]
        time.sleep(0.5)
        assert prepared.alive()  # ready and waiting for a kernel
        second = evaluate(kernel, opts, pool)
        assert first.passed and second.passed
        assert first.device["pid"] != second.device["pid"] == prepared.proc.pid  # fresh process, started early
        assert second.profile["worker_wait_s"] < first.profile["worker_wait_s"]
        assert not _pid_alive(first.device["pid"]) and not _pid_alive(second.device["pid"])
    finally:
        pool.close()
    (after,) = {w.proc.pid for w in [prepared]}
    assert not _pid_alive(after)


@needs_nvcc
def test_a_prepared_worker_for_other_options_is_killed_not_used(fake_python, tmp_path):
    kernel = _rmsnorm(tmp_path)
    pool = WorkerPool()
    try:
        evaluate(kernel, EvalOptions(python=fake_python, cache_dir=tmp_path / "a"), pool)
        (stale,) = [w for _, w in pool._workers.values()]
        result = evaluate(kernel, EvalOptions(python=fake_python, cache_dir=tmp_path / "b"), pool)
        assert result.passed and result.device["pid"] != stale.proc.pid
        assert not _pid_alive(stale.proc.pid)
    finally:
        pool.close()


@needs_nvcc
def test_a_prepared_worker_that_died_is_replaced(fake_python, tmp_path):
    kernel = _rmsnorm(tmp_path)
    pool = WorkerPool()
    opts = EvalOptions(python=fake_python, cache_dir=tmp_path / "cache")
    try:
        evaluate(kernel, opts, pool)
        (dead,) = [w for _, w in pool._workers.values()]
        os.kill(dead.proc.pid, signal.SIGKILL)
        dead.proc.wait()
        result = evaluate(kernel, opts, pool)
        assert result.passed and result.error is None and result.device["pid"] != dead.proc.pid
    finally:
        pool.close()
