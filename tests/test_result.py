"""The EvalResult schema: round trip, validation, and the derived figures."""

import math

import pytest

from harness.merge import merge_results, split_balanced
from harness.result import BuildReport, Check, EvalResult, ScenarioResult, SchemaError, geomean_of, noise_of


def result(*speedups, correct=True):
    r = EvalResult(task="attention", kernel="k.cu", kernel_sha256="0" * 64, scenario_set="full",
                   build=BuildReport(ok=True), checks=[Check("single-file", True)])
    r.scenarios = [ScenarioResult(id=f"s{i}", timed=True, correct=correct, verdict="ok" if correct else "wrong",
                                  speedup=x, time_us=10.0, baseline_us=10.0 * x, spread_pct=1.0)
                   for i, x in enumerate(speedups)]
    r.finalize()
    return r


def test_round_trip_and_derived_figures():
    r = result(0.5, 2.0)
    back = EvalResult.from_json(r.to_json())
    assert back == r and back.passed
    assert math.isclose(back.geomean_speedup, 1.0)
    assert back.noise_pct == pytest.approx(math.sqrt(2) / math.sqrt(2))


def test_a_failed_scenario_is_never_dropped_from_the_mean():
    r = result(2.0, 2.0)
    r.scenarios.append(ScenarioResult(id="bad", timed=True, correct=False, verdict="wrong"))
    r.finalize()
    assert not r.all_correct and r.geomean_speedup is None and not r.passed
    assert geomean_of([]) is None and noise_of([]) is None


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("scenarios"), "missing field"),
    (lambda d: d.update(schema=2), "schema 2"),
    (lambda d: d.update(all_correct=False), "contradicts"),
    (lambda d: d["scenarios"][0].update(verdict="fine"), "unknown verdict"),
    (lambda d: d["scenarios"][0].update(correct=False), "contradicts verdict"),
    (lambda d: d.update(geomean_speedup=-1), "positive"),
])
def test_validation_names_what_is_wrong(mutate, message):
    d = result(1.0).to_dict()
    mutate(d)
    with pytest.raises(SchemaError, match=message):
        EvalResult.from_dict(d)
    with pytest.raises(SchemaError, match="not JSON"):
        EvalResult.from_json("{")


def test_split_is_balanced_deterministic_and_merge_restores_the_whole():
    items = list(range(20))
    parts = split_balanced(items, 3, cost=lambda i: float(i) * 1e10)
    assert sorted(x for p in parts for x in p) == items
    assert parts == split_balanced(items, 3, cost=lambda i: float(i) * 1e10)
    loads = [sum(p) for p in parts]
    assert max(loads) - min(loads) <= 19
    whole = result(1.0, 2.0, 4.0, 0.5)
    halves = []
    for ids in ({"s0", "s2"}, {"s1", "s3"}):
        part = EvalResult.from_dict(whole.to_dict())
        part.scenarios = [s for s in part.scenarios if s.id in ids]
        halves.append(part)
    halves[1].checks = [Check("single-file", False, "x.cu:3: #include \"local.h\"")]
    merged = merge_results(halves, order=[s.id for s in whole.scenarios])
    assert [s.id for s in merged.scenarios] == ["s0", "s1", "s2", "s3"]
    assert merged.geomean_speedup == pytest.approx(whole.geomean_speedup)
    assert not merged.checks_ok and not merged.passed
