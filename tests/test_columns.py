"""The main screen's column split: plain arithmetic, no Textual."""

from __future__ import annotations

import pytest

from kstui.screens.columns import MIN_CELLS, ColumnSplit


@pytest.mark.parametrize("total", [100, 117, 140, 200, 321])
def test_widths_fill_the_screen_and_respect_minimums(total):
    widths = ColumnSplit().widths(total)
    assert sum(widths.values()) == total
    assert all(widths[name] >= MIN_CELLS[name] for name in widths)


def test_moving_one_divider_leaves_the_far_column_alone():
    split = ColumnSplit()
    before = split.widths(140)
    assert split.move("source", 1, 140)
    after = split.widths(140)
    assert after["source"] > before["source"] and after["speedup"] == before["speedup"]
    assert after["middle"] == 140 - after["source"] - after["speedup"]


def test_a_divider_stops_at_the_limits():
    split = ColumnSplit()
    while split.move("speedup", 1, 140):
        pass
    assert split.widths(140)["middle"] >= MIN_CELLS["middle"]
    assert not split.move("speedup", 1, 140)
    while split.move("source", -1, 140):
        pass
    assert split.widths(140)["source"] == MIN_CELLS["source"]
    with pytest.raises(ValueError):
        split.move("middle", 1, 140)


def test_too_narrow_for_the_shares_the_side_columns_give_way():
    split = ColumnSplit(source=0.6, speedup=0.35)
    widths = split.widths(100)
    assert widths["middle"] >= MIN_CELLS["middle"] and sum(widths.values()) == 100
