"""Number and summary formatting shared by the panes (plain functions: a number we print must be true,
so "no value" prints as a dash, never as a zero)."""

from __future__ import annotations

SOURCE_LABELS = {"human": "you asked", "bank": "bank question", "self": "agent asked itself"}
SOURCE_ICONS = {"human": "👤", "bank": "📚", "self": "🤖"}


def fmt_num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def fmt_tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    if n >= 1_000:
        return f"{n / 1_000:.1f}k"
    return str(n)
