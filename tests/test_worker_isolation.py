"""The parent survives whatever the worker does: crash, abort, hang, garbage, dying at start.

A stand-in worker (a small Python program run in place of `python -m harness.worker`) speaks the real
protocol and misbehaves on the scenario named in its job; run_worker must give every scenario a
verdict within the budgets.
"""

import shutil
import sys
import textwrap
import time

import pytest
from nvcc_support import needs_nvcc

from pathlib import Path

from harness.runner import EvalOptions, evaluate, run_worker
from harness.tasks import get_task
from harness.tasks.base import Scenario

ROOT = Path(__file__).resolve().parents[1]

FAKE = textwrap.dedent('''
    import json, os, signal, sys, time
    job = json.loads(sys.stdin.read())
    out = os.fdopen(job["fd"], "w", buffering=1)
    mode = job.get("mode", "none")
    if mode == "die-at-start":
        print("ImportError: no torch here", file=sys.stderr)
        sys.exit(1)
    out.write(json.dumps({"kind": "device", "device": {"name": "fake", "index": job.get("device_index")}}) + "\\n")
    for s in job["scenarios"]:
        out.write(json.dumps({"kind": "start", "id": s["id"]}) + "\\n")
        if s["id"] == job.get("bad"):
            if mode == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "abort":
                os.abort()
            if mode == "hang":
                time.sleep(3600)
            if mode == "garbage":
                out.write("this is not json\\n")
                time.sleep(3600)
            if mode == "hang-child":
                os.system("sleep 3600")
        out.write(json.dumps({"kind": "result", "scenario": {"id": s["id"], "timed": s["timed"], "correct": True,
                                                             "verdict": "ok", "gpu": job.get("device_index"),
                                                             "speedup": 1.0, "time_us": 1.0}}) + "\\n")
    out.write(json.dumps({"kind": "done", "profile": {}}) + "\\n")
''')


@pytest.fixture
def fake_python(tmp_path):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")  # ignores `-m harness.worker`
    exe.chmod(0o755)
    return str(exe)


SCENARIOS = [Scenario(f"s{i}", i == 2, {}) for i in range(4)]


def run(fake_python, mode, scenario_timeout=3.0, total=60.0):
    t0 = time.monotonic()
    out = run_worker({"mode": mode, "bad": "s1"}, SCENARIOS, fake_python, scenario_timeout, total)
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
