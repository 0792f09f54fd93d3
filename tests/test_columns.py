"""The main screen's column split: plain arithmetic, no Textual."""

from __future__ import annotations

import pytest

from kstui.views.columns import MIN_CELLS, ColumnSplit


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


def test_placing_a_divider_sizes_its_column_and_keeps_the_far_one():
    split = ColumnSplit()
    before = split.widths(138)
    assert split.place("source", 60, 138)
    assert split.widths(138) == {"source": 60, "middle": 138 - 60 - before["speedup"], "speedup": before["speedup"]}
    assert not split.place("source", 60, 138)  # the same cell again: nothing to lay out
    assert split.place("speedup", 40, 138)
    assert split.widths(138)["source"] == 60 and split.widths(138)["speedup"] == 40


def test_a_placed_divider_stops_at_the_limits():
    split = ColumnSplit()
    speedup = split.widths(138)["speedup"]
    split.place("source", -5, 138)
    assert split.widths(138)["source"] == MIN_CELLS["source"]
    split.place("source", 500, 138)
    assert split.widths(138) == {"source": 138 - MIN_CELLS["middle"] - speedup, "middle": MIN_CELLS["middle"],
                                 "speedup": speedup}
    split.place("speedup", 0, 138)
    assert split.widths(138)["speedup"] == MIN_CELLS["speedup"]
    with pytest.raises(ValueError):
        split.place("middle", 40, 138)


def test_placed_widths_survive_a_resize_as_shares():
    split = ColumnSplit()
    split.place("source", 70, 140)
    split.place("speedup", 35, 140)
    assert split.widths(200)["source"] == 100 and split.widths(200)["speedup"] == 50


@pytest.mark.parametrize("widen", [lambda s: s.move("speedup", 40, 140), lambda s: s.place("speedup", 500, 140)])
def test_a_share_left_below_its_minimum_by_a_wider_screen_still_leaves_the_middle_its_minimum(widen):
    split = ColumnSplit(source=0.1)  # the minimum at 200 cells, less than it at 140
    assert split.widths(140)["source"] == MIN_CELLS["source"]
    widen(split)
    widths = split.widths(140)
    assert widths["source"] == MIN_CELLS["source"] and widths["middle"] == MIN_CELLS["middle"]
