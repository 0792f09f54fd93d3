"""The acceptance rule: what a result must show to be committed, as pure functions of the harness's verdicts.

A version is accepted when it passed (built, every check, every scenario correct, no evaluation-wide
error), has a geomean, and beats the best accepted one by more than max(noise of both, a floor). A gain
within `borderline_factor` times that margin is borderline: candidate and best are re-evaluated,
interleaved, and `decide_recheck` decides on the fresh numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from harness.result import EvalResult

_MAX_FAILURES_LISTED = 5


@dataclass(frozen=True)
class Verdict:
    kind: Literal["accept", "reject", "borderline"]
    reason: str
    margin_pct: float | None = None  # the noise margin a gain had to clear, where it was compared


def failure_reason(result: EvalResult) -> str | None:
    """Why a result cannot be accepted whatever its speed, in one line; None if it passed."""
    if result.error:
        return f"evaluation error: {result.error}"
    if not result.build.ok:
        if result.build.errors:
            e = result.build.errors[0]
            more = f" (+{len(result.build.errors) - 1} more)" if len(result.build.errors) > 1 else ""
            return f"build failed: {e.file}:{e.line}: {e.message}{more}"
        return "build failed"
    failed = [c for c in result.checks if not c.ok]
    if failed:
        return "check failed: " + "; ".join(f"{c.name}" + (f" ({c.detail})" if c.detail else "") for c in failed)
    if not result.scenarios:
        return "no scenarios were run"
    wrong = [s for s in result.scenarios if not s.correct]
    if wrong:
        listed = ", ".join(f"{s.id}: {s.verdict}" for s in wrong[:_MAX_FAILURES_LISTED])
        more = f" (+{len(wrong) - _MAX_FAILURES_LISTED} more)" if len(wrong) > _MAX_FAILURES_LISTED else ""
        return f"{result.correct_count}/{len(result.scenarios)} correct; {listed}{more}"
    if not result.passed:
        return "not every scenario passed"
    return None


def decide(candidate: EvalResult, best_geomean: float | None, best_noise_pct: float | None, *,
          floor_pct: float, borderline_factor: float) -> Verdict:
    """Accept, reject, or ask for an interleaved re-evaluation (borderline) of a candidate."""
    failure = failure_reason(candidate)
    if failure is not None:
        return Verdict("reject", failure)
    g = candidate.geomean_speedup
    if g is None:
        return Verdict("reject", "no geomean: no timed scenarios")
    if best_geomean is None:
        return Verdict("accept", "first passing version (baseline of this history)")
    margin = max(candidate.noise_pct or 0.0, best_noise_pct or 0.0, floor_pct)
    gain = (g / best_geomean - 1.0) * 100.0
    if gain <= 0:
        return Verdict("reject", f"not faster: {g:.4g}x vs best {best_geomean:.4g}x ({gain:+.2f}%)", margin)
    if gain > borderline_factor * margin:
        return Verdict("accept", f"{gain:+.2f}% over best (noise margin {margin:.2f}%)", margin)
    return Verdict("borderline", f"{gain:+.2f}% is within {borderline_factor:g}x the noise margin {margin:.2f}%",
                   margin)


def decide_recheck(candidates: list[EvalResult], bests: list[EvalResult], *, floor_pct: float) -> Verdict:
    """Accept or reject a borderline candidate on interleaved re-evaluations of it and of the best."""
    g_cand = _geomean([r.geomean_speedup for r in candidates])  # type: ignore[misc]
    g_best = _geomean([r.geomean_speedup for r in bests])  # type: ignore[misc]
    margin = max([r.noise_pct or 0.0 for r in candidates + bests] + [floor_pct])
    gain = (g_cand / g_best - 1.0) * 100.0
    reason = (f"rechecked {len(candidates)}x interleaved: {g_cand:.4g}x vs best {g_best:.4g}x ({gain:+.2f}%, "
              f"noise margin {margin:.2f}%)")
    return Verdict("accept" if gain > margin else "reject", reason, margin)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))
