"""Progress while an evaluation runs: the Progress object's contract, `harness eval --progress` (lines on
stderr, the JSON alone on stdout) and `harness serve` ({"id", "progress"} lines before the reply)."""

import io
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_worker import fake_python  # noqa: F401 (a fixture)
from nvcc_support import needs_nvcc

from harness.progress import PROGRESS_PREFIX
from harness.progress import HEARTBEAT_S, Progress
from harness.result import EvalResult
from harness.serve import serve

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"phase", "done", "total", "elapsed_s", "eta_s", "failed"}


def result_msg(sid, phase="correctness", correct=True, verdict="ok", **extra):
    return {"kind": "result", "phase": phase, **extra,
            "scenario": {"id": sid, "correct": correct, "verdict": verdict, "detail": "" if correct else "bad"}}


class Collect:
    def __init__(self):
        self.calls, self.lock = [], threading.Lock()

    def __call__(self, state):
        with self.lock:
            self.calls.append((time.monotonic(), state))


def test_phases_counts_and_failures_come_at_once_each_once():
    got = Collect()
    p = Progress(got, {f"s{i}": 1.0 for i in range(4)}, timed=1, timing_prior_s=0.1)
    p.phase("checks")
    p.phase("correctness", 4)
    p.heard(result_msg("s0"))
    p.heard(result_msg("s1", correct=False, verdict="wrong"))
    p.heard(result_msg("s2", correct=False, verdict="skipped"))  # not run: counted, not a failure of the kernel
    p.heard(result_msg("s3"))
    p.close()
    states = [s for _, s in got.calls]
    assert all(set(s) == KEYS for s in states)
    assert [s["phase"] for s in states][:3] == ["build", "checks", "correctness"]
    failures = [f for s in states for f in s["failed"]]
    assert failures == [{"id": "s1", "verdict": "wrong", "detail": "bad"}]
    assert next(s for s in states if s["failed"])["done"] == 2  # sent the moment s1 failed
    assert states[-1]["done"] == states[-1]["total"] == 4


def test_the_call_rate_is_bounded_and_the_last_state_is_not_lost():
    got = Collect()
    n = 400
    p = Progress(got, {f"s{i}": 1.0 for i in range(n)}, timed=0, timing_prior_s=0.1)
    p.phase("correctness", n)
    t0 = time.monotonic()
    for i in range(n):
        p.heard(result_msg(f"s{i}"))
        time.sleep(0.001)
    seconds = time.monotonic() - t0
    p.close()
    during = [s for t, s in got.calls if s["phase"] == "correctness"]
    assert len(during) <= 3 + seconds * 5  # the phase change, about 5 a second, the last
    assert during[-1]["done"] == n


def test_a_heartbeat_while_nothing_finishes():
    got = Collect()
    p = Progress(got, {"s0": 1.0}, timed=0, timing_prior_s=0.1)
    p.phase("correctness", 1)
    time.sleep(2.5 * HEARTBEAT_S)
    p.close()
    assert len([s for _, s in got.calls if s["phase"] == "correctness"]) >= 2
    assert got.calls[-1][1]["elapsed_s"] >= 2 * HEARTBEAT_S


def test_the_time_left_follows_the_rate_and_the_predicted_timing():
    now = [0.0]
    got = Collect()
    weights = {"small": 1.0, "big": 3.0, "t": 4.0}
    p = Progress(got, weights, timed=1, timing_prior_s=9.0, clock=lambda: now[0])
    p.phase("correctness", 3)
    assert got.calls[-1][1]["eta_s"] is None  # nothing done yet: no rate
    now[0] = 1.0
    p.heard(result_msg("small"))  # 1 of 8 weight units in 1 s: 7 s of correctness left
    assert got.calls[-1][1]["eta_s"] == pytest.approx(7.0 + 9.0)  # + the prior for the timed scenario
    now[0] = 2.0
    p.heard(result_msg("t", timing_s=2.0))  # the worker's prediction replaces the prior
    assert got.calls[-1][1]["eta_s"] == pytest.approx(2.0 / 5 * 3 + 2.0)
    now[0] = 2.5
    p.heard(result_msg("big", correct=False, verdict="wrong"))  # rejected: nothing will be timed
    assert got.calls[-1][1]["eta_s"] == pytest.approx(0.0)
    p.close()


@pytest.fixture
def rmsnorm(tmp_path, monkeypatch):
    k = tmp_path / "rmsnorm.cu"
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", k)
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", k.with_suffix(".toml"))
    log = tmp_path / "workers.log"
    monkeypatch.setenv("FAKE_WORKER_LOG", str(log))
    monkeypatch.setenv("KSTUI_CACHE_DIR", str(tmp_path / "cache"))
    return k, log


def progress_lines(stderr):
    lines = [ln for ln in stderr.splitlines() if ln.startswith(PROGRESS_PREFIX)]
    return [json.loads(ln[len(PROGRESS_PREFIX):]) for ln in lines]


@needs_nvcc
def test_harness_eval_progress_writes_lines_on_stderr_and_the_json_alone_on_stdout(rmsnorm, fake_python):  # noqa: F811
    k, log = rmsnorm
    Path(f"{log}.mode").write_text("wrong")
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(k), "--json", "-", "--progress",
                           "--worker-python", fake_python], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1, proc.stderr
    result = EvalResult.from_json(proc.stdout)  # stdout holds the JSON and nothing else
    states = progress_lines(proc.stderr)
    assert states and all(set(s) == KEYS for s in states)
    phases = [s["phase"] for s in states]
    assert phases[0] == "build" and "correctness" in phases and "timing" not in phases
    failed = [f for s in states for f in s["failed"]]
    assert [f["id"] for f in failed] == [s.id for s in result.scenarios if not s.correct]
    last = states[-1]
    assert last["phase"] == "correctness" and last["done"] == last["total"] == len(result.scenarios)
    assert "REJECTED" in proc.stderr  # the table still goes to stderr


@needs_nvcc
def test_harness_eval_without_progress_writes_no_progress(rmsnorm, fake_python):  # noqa: F811
    k, log = rmsnorm
    Path(f"{log}.mode").write_text("none")
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(k), "--json", "-",
                           "--worker-python", fake_python], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and PROGRESS_PREFIX not in proc.stderr


@needs_nvcc
def test_serve_sends_progress_lines_before_the_reply_of_a_request_that_asks(rmsnorm, fake_python):  # noqa: F811
    k, log = rmsnorm
    Path(f"{log}.mode").write_text("none")
    argv = [str(k), "--json", "-", "--worker-python", fake_python]
    out = io.StringIO()
    requests = json.dumps({"id": 1, "argv": argv + ["--progress"]}) + "\n"
    assert serve(io.StringIO(requests), out) == 0
    out2 = io.StringIO()
    assert serve(io.StringIO(json.dumps({"id": 2, "argv": argv}) + "\n"), out2) == 0
    lines = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert all(m["id"] == 1 for m in lines) and "rc" in lines[-1] and all("progress" in m for m in lines[:-1])
    states = [m["progress"] for m in lines[:-1]]
    assert [s["phase"] for s in states][0] == "build" and "timing" in [s["phase"] for s in states]
    assert states[-1]["phase"] == "timing" and states[-1]["done"] == states[-1]["total"] > 0
    assert lines[-1]["rc"] == 0 and PROGRESS_PREFIX not in lines[-1]["stderr"]
    assert [list(json.loads(ln)) for ln in out2.getvalue().splitlines()] == [["id", "rc", "stdout", "stderr"]]
