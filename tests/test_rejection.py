"""Rejection through a real evaluation (the parent, its parts and gate; nvcc builds the rmsnorm kernel)
with stand-in workers: a wrong kernel is never timed, a hang costs its budget and not the task's
60 s, a fresh worker checks what a hung or crashed one left, and the GPUs time only if all passed."""

import shutil
import time
from pathlib import Path

import pytest
from fake_worker import fake_python  # noqa: F401 (a fixture)
from nvcc_support import needs_nvcc

from harness.part import MAX_FAULTS
from harness.runner import EvalOptions, evaluate

ROOT = Path(__file__).resolve().parents[1]

pytestmark = needs_nvcc


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    k = tmp_path / "rmsnorm.cu"
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", k)
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", k.with_suffix(".toml"))
    log = tmp_path / "workers.log"
    monkeypatch.setenv("FAKE_WORKER_LOG", str(log))
    return k, log


def judge(kernel, fake_python, **kw):  # noqa: F811
    k, _ = kernel
    opts = EvalOptions(python=fake_python, cache_dir=k.parent / "cache", **kw)
    t0 = time.monotonic()
    result = evaluate(k, opts)
    return result, time.monotonic() - t0


def test_a_passing_kernel_is_timed_after_every_scenario_is_checked(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode").write_text("none")
    result, _ = judge(kernel, fake_python)
    assert result.passed and all(s.time_us for s in result.timed) and result.geomean_speedup == 1.0


def test_a_kernel_wrong_on_one_scenario_is_not_timed_anywhere(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode").write_text("wrong")
    result, _ = judge(kernel, fake_python)
    wrong = [s for s in result.scenarios if not s.correct]
    assert [s.verdict for s in wrong] == ["wrong"] and not result.passed
    assert all(s.time_us is None and s.speedup is None for s in result.scenarios)
    untimed = [s for s in result.timed if s.correct]
    assert untimed and all("not timed: the kernel was rejected" in s.detail for s in untimed)


def test_after_a_hang_a_fresh_worker_checks_the_rest_within_seconds(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode").write_text("hang\nwrong\nnone")  # the first worker hangs, the second finds a wrong one
    Path(f"{log}.budget").write_text("1.0")
    result, seconds = judge(kernel, fake_python)
    verdicts = [s.verdict for s in result.scenarios]
    assert verdicts[:2] == ["timeout", "wrong"] and set(verdicts[2:]) == {"ok"}  # every failure listed
    assert "did not return within 1.0 s" in result.scenarios[0].detail
    assert len(log.read_text().split()) == 2 and seconds < 15  # the task's budget is 60 s a scenario
    assert all(s.time_us is None for s in result.scenarios)


def test_a_kernel_that_keeps_hanging_costs_at_most_max_faults_workers(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode").write_text("hang")
    Path(f"{log}.budget").write_text("1.0")
    result, seconds = judge(kernel, fake_python)
    verdicts = [s.verdict for s in result.scenarios]
    assert verdicts[:MAX_FAULTS] == ["timeout"] * MAX_FAULTS and set(verdicts[MAX_FAULTS:]) == {"skipped"}
    assert f"brought down {MAX_FAULTS} workers" in result.scenarios[-1].detail
    assert len(log.read_text().split()) == MAX_FAULTS and seconds < 15


def test_a_crash_in_correctness_is_followed_by_a_fresh_worker(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode").write_text("segfault\nnone")
    result, _ = judge(kernel, fake_python)
    verdicts = [s.verdict for s in result.scenarios]
    assert verdicts[0] == "crash" and "SIGSEGV" in result.scenarios[0].detail and set(verdicts[1:]) == {"ok"}
    assert not result.passed and all(s.time_us is None for s in result.scenarios)


def test_gpus_time_only_when_every_part_passed(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode.0").write_text("wrong")
    Path(f"{log}.mode.1").write_text("none")
    result, _ = judge(kernel, fake_python, devices=[0, 1])
    assert {s.gpu for s in result.scenarios} == {0, 1}
    assert [s.verdict for s in result.scenarios if not s.correct] == ["wrong"]
    assert all(s.time_us is None for s in result.scenarios)  # GPU 1's part passed, and waited, and was not timed
    Path(f"{log}.mode.0").write_text("none")
    result, _ = judge(kernel, fake_python, devices=[0, 1])
    assert result.passed and all(s.time_us for s in result.timed)


def test_a_failure_while_timing_stops_the_timing_of_the_other_gpu(kernel, fake_python):  # noqa: F811
    _, log = kernel
    Path(f"{log}.mode.0").write_text("too-fast")
    Path(f"{log}.mode.1").write_text("slow-timing")
    result, _ = judge(kernel, fake_python, devices=[0, 1])
    assert [s.verdict for s in result.scenarios if not s.correct] == ["too-fast"]
    timed_on_1 = [s for s in result.timed if s.gpu == 1 and s.time_us]
    assert len(timed_on_1) < len([s for s in result.timed if s.gpu == 1])
