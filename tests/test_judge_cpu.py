"""The worker's Judge, both passes, on the CPU: torch computes the candidate (as bench/stand_in.py does on
the GPU), CUDA's events, syncs and streams stand in as no-ops, and the Timer times host calls. What
this checks is the Judge's own logic (draws, verdicts, the baselines checked in the correctness pass
and timed in the timing pass, the re-check after timing), which CI has no GPU to run."""

import contextlib
import time

import pytest

torch = pytest.importorskip("torch")

from harness.baselines import BaselineCache  # noqa: E402
from harness.tasks import attention_reference, get_task  # noqa: E402
from harness.timing import Samples  # noqa: E402
from harness import worker  # noqa: E402

PEAKS = {"peak_tflops_bf16": 790.0, "peak_gbps": 4250.0}


class HostEvent:
    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class HostTimer:
    """The Timer's interface, timing host calls (the candidate and baselines run on the CPU here)."""

    flush_bytes = 1 << 20
    stream = type("S", (), {"cuda_stream": 0})()

    def interleaved(self, fns, budget_s, noise_target_pct=0.0):
        times = {n: [] for n in fns}
        for _ in range(5):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e6)
        return {n: Samples(t) for n, t in times.items()}

    def wall_excess_us(self, fn, calls):
        fn()
        return 0.0, 0.0


@pytest.fixture(autouse=True)
def host_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)


def make_judge(tmp_path, candidate):
    """A Judge whose candidate is `candidate(q, k, v, scale, causal, call_number) -> (o, lse)` in torch."""
    task = get_task("attention")
    calls = [0]

    class CpuJudge(worker.Judge):
        def _call(self, s, inputs, outs):
            o, lse = outs["o"].tensor, outs["lse"].tensor
            q, k, v = inputs["q"], inputs["k"], inputs["v"]

            def call():
                calls[0] += 1
                out, l_ = candidate(q, k, v, float(inputs["scale"]), s.params["causal"], calls[0])
                o.copy_(out)
                lse.copy_(l_)

            return call

    judge = CpuJudge(task, torch.device("cpu"), HostTimer(), BaselineCache(tmp_path / "b.json", "k"), PEAKS)
    judge.baselines = [b for b in judge.baselines if b.name in ("flash", "efficient", "flash+kvexpand")]  # CPU-able
    judge.job = {"seed": 7, "baseline": None, "retime": False, "time_budget_s": 0.001, "noise_target_pct": 0.0}
    sent = []
    judge.send = sent.append
    return task, judge, sent


def exact(q, k, v, scale, causal, n):
    return attention_reference.chunked(q, k, v, scale, causal, lowp=False)


def scenario(task, sid):
    return next(s for s in task.scenarios("full") if s.id == sid)


TIMED = "bf16-d128-b9-h6x6-s1x1"  # the smallest timed scenario
UNTIMED = "fp16-d64-b9-h6x2-s64x128"


def test_a_correct_candidate_passes_and_is_timed_against_a_valid_baseline(tmp_path):
    task, judge, sent = make_judge(tmp_path, exact)
    s = scenario(task, TIMED)
    res = judge.check(s, validate=True)
    assert res.correct and res.verdict == "ok" and res.time_us is None
    calls = [m for m in sent if m["kind"] == "call"]
    assert len(calls) == 2 and all(m["budget_s"] >= 2.0 for m in calls)  # two draws, each announced
    assert [m["kind"] for m in sent].count("back") == 2
    assert judge._last_ref is None  # no answer kept past the scenario
    names, record = judge._checked[s.id]
    assert names and record is None  # a cold cache: every valid baseline is timed
    predicted = judge.predicted_timing_s(s)
    assert 0 < predicted < 5
    res = judge.time(s, res)
    assert res.correct and res.time_us and res.baseline in names and res.speedup
    assert set(res.baselines) >= set(names)


def test_a_candidate_that_ignores_the_scale_fails_the_second_draw(tmp_path):
    def default_scale(q, k, v, scale, causal, n):
        return attention_reference.chunked(q, k, v, q.shape[-1] ** -0.5, causal, lowp=False)

    task, judge, _ = make_judge(tmp_path, default_scale)
    res = judge.check(scenario(task, UNTIMED), validate=False)
    assert not res.correct and res.verdict == "wrong" and res.detail.startswith("draw 2:")


def test_a_result_replayed_after_timing_is_a_stale_result(tmp_path):
    saved = {}

    def replays_after_eight_calls(q, k, v, scale, causal, n):
        if n > 8 and "o" in saved:
            return saved["o"], saved["lse"]
        saved["o"], saved["lse"] = attention_reference.chunked(q, k, v, scale, causal, lowp=False)
        return saved["o"], saved["lse"]

    task, judge, _ = make_judge(tmp_path, replays_after_eight_calls)
    s = scenario(task, TIMED)
    res = judge.check(s, validate=True)
    assert res.correct
    res = judge.time(s, res)
    assert not res.correct and res.verdict == "stale-result"


def test_hidden_work_is_caught_in_the_correctness_pass(tmp_path, monkeypatch):
    task, judge, _ = make_judge(tmp_path, exact)
    # As if every call's wall clock ran 10 s past its events (far past the CPU's own call times).
    judge._screen_us = -1e7
    monkeypatch.setattr(HostTimer, "wall_excess_us", lambda self, fn, calls: (1e7, 5.0))
    res = judge.check(scenario(task, UNTIMED), validate=False)
    assert res.verdict == "hidden-work" and "work outside the harness stream" in res.detail


def test_once_the_cache_names_a_record_only_the_record_is_checked_and_timed(tmp_path):
    task, judge, _ = make_judge(tmp_path, exact)
    s = scenario(task, TIMED)
    judge.time(s, judge.check(s, validate=True))  # a cold cache: every regular baseline timed
    assert set(judge.cache.scenario(s.id)) == {"flash", "efficient"}  # the fallback was never needed
    _, again, _ = make_judge(tmp_path, exact)
    again.cache = judge.cache
    res = again.check(s, validate=True)
    names, record = again._checked[s.id]
    assert names == [record] and record in ("flash", "efficient")
    res = again.time(s, res)
    assert res.baseline == record and list(k for k, v in res.baselines.items() if v) == [record]
