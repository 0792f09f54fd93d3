"""Where the main screen's two column dividers sit.

The source and speedup columns hold shares of the screen width; the transcript takes what is left.
A key or a mouse drag moves one divider, so only the two columns beside it change size: widening the
source leaves the speedup panel (its plot and table, the dearest panes to lay out again) as it was.
Shares rather than cells, so a terminal resize keeps the proportions.
"""

from __future__ import annotations

from dataclasses import dataclass

STEP = 0.04  # of the screen width per key press: 5-6 cells at 140 columns
MIN_CELLS = {"source": 20, "middle": 30, "speedup": 32}


@dataclass
class ColumnSplit:
    source: float = 4 / 11
    speedup: float = 3 / 11

    def widths(self, total: int) -> dict[str, int]:
        """Cells per column for a screen `total` cells wide; the middle never drops below its minimum
        while the side columns can give way."""
        source = max(MIN_CELLS["source"], round(self.source * total))
        speedup = max(MIN_CELLS["speedup"], round(self.speedup * total))
        spare = total - MIN_CELLS["middle"]
        if source + speedup > spare:
            # Too narrow for the shares: the side columns shrink in proportion, not below their minimum.
            speedup = max(MIN_CELLS["speedup"], int(speedup * max(0, spare) / (source + speedup)))
            source = max(MIN_CELLS["source"], spare - speedup)
        return {"source": source, "middle": max(0, total - source - speedup), "speedup": speedup}

    def move(self, column: str, steps: int, total: int) -> bool:
        """Widen (steps > 0) or narrow one side column by whole steps; False when it is already at a limit."""
        _check(column)
        return self._set(column, getattr(self, column) + steps * STEP, total)

    def place(self, column: str, cells: int, total: int) -> bool:
        """Make one side column `cells` wide (its divider dragged there), within the limits `move` keeps;
        False when its width does not change."""
        _check(column)
        return self._set(column, cells / total, total)

    def _set(self, column: str, share: float, total: int) -> bool:
        before = self.widths(total)
        # The far column's cells, not its share: a share below its minimum (kept from a wider screen)
        # would otherwise leave room that widths() then takes back from both side columns.
        other = before["speedup" if column == "source" else "source"]
        lowest = MIN_CELLS[column] / total
        highest = (total - other - MIN_CELLS["middle"]) / total
        setattr(self, column, min(max(share, lowest), max(lowest, highest)))
        return self.widths(total) != before


def _check(column: str) -> None:
    if column not in ("source", "speedup"):
        raise ValueError(f"no divider beside {column!r}")
