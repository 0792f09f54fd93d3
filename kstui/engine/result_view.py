"""One reading of an EvalResult for every place that shows one: the agent's tool result, the one-line
summary (transcript, history screen, headless), the baseline of record and the commit subject.

A number we print must be true, so "no value" prints as a dash, never as a zero.
"""

from __future__ import annotations

from collections import Counter

from harness.result import EvalResult

_FAILURES_SHOWN = 10


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}×"


def baseline_of_record(result: EvalResult | None) -> str | None:
    """The baseline most timed scenarios were compared against (each scenario's strongest valid one)."""
    if result is None:
        return None
    names = Counter(s.baseline for s in result.scenarios if s.baseline)
    return names.most_common(1)[0][0] if names else None


def baselines(result: EvalResult) -> str | None:
    """Every baseline some scenario was compared against, sorted and joined ("cudnn,fa4")."""
    return ",".join(sorted({s.baseline for s in result.scenarios if s.baseline})) or None


def one_line(result: EvalResult) -> str:
    """Geomean, correct count, and the first reason it failed if it did."""
    noise = f" ± {result.noise_pct:.2f}%" if result.noise_pct is not None and result.geomean_speedup else ""
    parts = [f"geomean {fmt_x(result.geomean_speedup)}{noise}", f"{result.correct_count}/{len(result.scenarios)} correct"]
    if not result.build.ok:
        parts.append("build failed" + (f": {result.build.errors[0].message}" if result.build.errors else ""))
    failed_checks = [c.name for c in result.checks if not c.ok]
    if failed_checks:
        parts.append("failed checks: " + ", ".join(failed_checks))
    wrong = next((s for s in result.scenarios if not s.correct), None)
    if wrong is not None:
        parts.append(f"first failure {wrong.id}: {wrong.verdict}")
    if result.error:
        parts.append(result.error)
    return " · ".join(parts)


def agent_summary(result: EvalResult) -> str:
    """The compact text the agent gets back from `evaluate`."""
    lines = [f"{result.correct_count}/{len(result.scenarios)} scenarios correct"
             + (f", geomean speedup {result.geomean_speedup:.4g}x" if result.geomean_speedup else "")
             + (f" (noise {result.noise_pct:.2f}%)" if result.noise_pct is not None else "")]
    b = result.build
    build = f"build {'ok' if b.ok else 'FAILED'}"
    if b.registers is not None:
        build += f", {b.registers} registers"
    build += f", {b.spills} bytes spilled" if b.spills else ""
    if b.smem_bytes is not None:
        build += f", {b.smem_bytes} B shared memory"
    lines.append(build)
    lines += [f"  {e.file}:{e.line}: {e.message}" for e in b.errors[:_FAILURES_SHOWN]]
    if not b.ok and not b.errors and b.log:
        lines.append(b.log[-2000:])
    lines += [f"check {c.name} failed" + (f": {c.detail}" if c.detail else "") for c in result.checks if not c.ok]
    wrong = [s for s in result.scenarios if not s.correct]
    lines += [f"  {s.id}: {s.verdict}" + (f" ({s.detail})" if s.detail else "") for s in wrong[:_FAILURES_SHOWN]]
    if len(wrong) > _FAILURES_SHOWN:
        lines.append(f"  … {len(wrong) - _FAILURES_SHOWN} more failing scenarios")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines)


def commit_subject(stem: str, geomean: float, previous: float | None, correct: int, total: int) -> str:
    head = f"{stem}: {previous:.2f}x -> {geomean:.2f}x" if previous is not None else f"{stem}: {geomean:.2f}x"
    return f"{head} geomean ({correct}/{total} correct)"
