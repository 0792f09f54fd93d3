"""Number and summary formatting shared by the panes (plain functions: a number we print must be true,
so "no value" prints as a dash, never as a zero)."""

from __future__ import annotations

from collections import Counter
from typing import Any

SOURCE_LABELS = {"human": "you asked", "bank": "bank question", "self": "agent asked itself"}
SOURCE_ICONS = {"human": "👤", "bank": "📚", "self": "🤖"}


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}×"


def fmt_num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def fmt_tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    if n >= 1_000:
        return f"{n / 1_000:.1f}k"
    return str(n)


def baseline_name(result: dict[str, Any] | None) -> str | None:
    """The baseline most scenarios were compared against (the strongest one per scenario)."""
    if not result:
        return None
    names = Counter(s.get("baseline") for s in result.get("scenarios", []) if s.get("baseline"))
    return names.most_common(1)[0][0] if names else None


def result_summary(result: dict[str, Any]) -> str:
    """One line: geomean, correct count, and the first reason it failed if it did."""
    scenarios = result.get("scenarios", [])
    correct = sum(1 for s in scenarios if s.get("correct"))
    parts = [f"geomean {fmt_x(result.get('geomean_speedup'))}", f"{correct}/{len(scenarios)} correct"]
    build = result.get("build", {})
    if not build.get("ok", False):
        errors = build.get("errors") or []
        parts.append("build failed" + (f": {errors[0].get('message', '')}" if errors else ""))
    failed_checks = [c.get("name", "?") for c in result.get("checks", []) if not c.get("ok")]
    if failed_checks:
        parts.append("failed checks: " + ", ".join(failed_checks))
    wrong = [s for s in scenarios if not s.get("correct")]
    if wrong:
        parts.append(f"first failure {wrong[0].get('id')}: {wrong[0].get('verdict')}")
    if result.get("error"):
        parts.append(str(result["error"]))
    return " · ".join(parts)
