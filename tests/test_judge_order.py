"""The worker's job loop (harness.worker.judge_job) with a stand-in Judge: correctness of every scenario
before any timing, nothing timed after a failure, timing only on the parent's word, and stopped by it."""

import json
import os

import pytest

pytest.importorskip("torch")

from harness.result import ScenarioResult  # noqa: E402
from harness.worker import LineReader, judge_job  # noqa: E402


class StandInJudge:
    """check() and time() as the Judge's, scripted: `wrong` fails correctness, `too_fast` fails timing."""

    def __init__(self, wrong=(), too_fast=()):
        self.wrong, self.too_fast = set(wrong), set(too_fast)
        self.calls = []
        self.profile = {}
        self.device = type("D", (), {"index": 0})()
        self.cache = type("C", (), {"save": lambda self: None})()

    def check(self, s, validate):
        self.calls.append(("check", s.id, validate))
        bad = s.id in self.wrong
        return ScenarioResult(id=s.id, timed=s.timed, correct=not bad, verdict="wrong" if bad else "ok")

    def predicted_timing_s(self, s):
        return 0.05

    def time(self, s, res):
        self.calls.append(("time", s.id))
        if s.id in self.too_fast:
            res.verdict, res.correct = "too-fast", False
        else:
            res.time_us, res.speedup = 10.0, 1.0
        return res


def job(time=True):
    ids = [("u0", False), ("t1", True), ("u2", False), ("t3", True), ("t4", True)]
    return {"time": time, "scenarios": [{"id": i, "timed": t, "params": {}} for i, t in ids]}


def run(judge, job, parent_lines="", parent_gone=False):
    """The job against these lines from the parent; its stdin stays open (as a live parent keeps it)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, parent_lines.encode())
    if parent_gone:
        os.close(write_fd)
    sent = []
    try:
        rc = judge_job(judge, job, LineReader(read_fd), sent.append)
    finally:
        os.close(read_fd)
        if not parent_gone:
            os.close(write_fd)
    return rc, sent


def test_every_scenario_is_checked_before_the_first_is_timed():
    judge = StandInJudge()
    rc, sent = run(judge, job(), '{"time": true}\n')
    kinds = [c[0] for c in judge.calls]
    assert rc == 0 and kinds == ["check"] * 5 + ["time"] * 3
    assert [c[1] for c in judge.calls if c[0] == "time"] == ["t1", "t3", "t4"]
    checked = next(i for i, m in enumerate(sent) if m["kind"] == "checked")
    assert sent[checked]["ok"] is True
    assert all(m["phase"] == "correctness" for m in sent[:checked] if m["kind"] in ("start", "result"))
    assert all(m["phase"] == "timing" for m in sent[checked:] if m["kind"] in ("start", "result"))
    timing_starts = [m for m in sent if m["kind"] == "start" and m["phase"] == "timing"]
    assert all(m["budget_s"] > m["predicted_s"] for m in timing_starts)  # each timed scenario has a hang budget
    # each timed scenario that passed correctness says how long it should take to time (progress)
    assert [m["scenario"]["id"] for m in sent if m["kind"] == "result" and "timing_s" in m] == ["t1", "t3", "t4"]


def test_a_kernel_wrong_on_one_scenario_is_never_timed_and_every_failure_is_listed():
    judge = StandInJudge(wrong={"u2", "t4"})
    rc, sent = run(judge, job(), '{"time": false}\n')
    assert rc == 0 and [c[0] for c in judge.calls] == ["check"] * 5
    # the baselines are checked (for timing) only while the evaluation is clean: t1 yes, t3 no
    assert [(c[1], c[2]) for c in judge.calls if c[1].startswith("t")] == [("t1", True), ("t3", False), ("t4", False)]
    failed = [m["scenario"]["id"] for m in sent if m["kind"] == "result" and not m["scenario"]["correct"]]
    assert failed == ["u2", "t4"]
    assert next(m for m in sent if m["kind"] == "checked")["ok"] is False
    assert sent[-1]["kind"] == "done"


def test_nothing_is_timed_without_the_parents_word():
    judge = StandInJudge()
    run(judge, job(), '{"time": false}\n')
    assert "time" not in [c[0] for c in judge.calls]
    judge = StandInJudge()
    run(judge, job(), parent_gone=True)
    assert "time" not in [c[0] for c in judge.calls]


def test_a_worker_that_may_not_time_does_not_wait_for_a_decision():
    judge = StandInJudge()
    rc, sent = run(judge, job(time=False))  # nothing on stdin: waiting would block forever
    assert rc == 0 and [c[0] for c in judge.calls] == ["check"] * 5 and sent[-1]["kind"] == "done"
    assert all("timing_s" not in m for m in sent)


def test_timing_stops_at_the_first_failure():
    judge = StandInJudge(too_fast={"t3"})
    run(judge, job(), '{"time": true}\n')
    assert [c[1] for c in judge.calls if c[0] == "time"] == ["t1", "t3"]


def test_the_parent_stops_timing():
    judge = StandInJudge()
    run(judge, job(), '{"time": true}\n{"stop": true}\n')
    assert [c[0] for c in judge.calls] == ["check"] * 5


def test_messages_are_json_lines():
    _, sent = run(StandInJudge(), job(), '{"time": true}\n')
    assert all(json.loads(json.dumps(m)) == m for m in sent)
