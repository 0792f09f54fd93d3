"""Full collections wait for a pause in the input, then freeze what is alive."""

from __future__ import annotations

import gc

import pytest

from kstui.collector import HOLD_MAX_S, IDLE_S, MIN_GAP_S, NO_FULL, IdleCollector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def calls(monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: made.append("collect") or 0)
    monkeypatch.setattr(gc, "freeze", lambda: made.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: made.append("unfreeze"))
    return made


def test_a_full_collection_waits_for_a_pause_in_the_input(calls):
    clock = Clock()
    collector = IdleCollector(clock)
    clock.now += MIN_GAP_S
    for _ in range(20):  # a key every 0.1 s: never idle for IDLE_S
        collector.hold()
        collector.release()
        clock.now += 0.1
        collector.tick()
    assert calls == []
    clock.now += IDLE_S
    collector.tick()
    # Everything is collected (the frozen objects too), then what is alive is frozen again.
    assert calls == ["unfreeze", "collect", "freeze"] and collector.full_collections == 1


def test_idle_collections_come_at_most_every_min_gap(calls):
    clock = Clock()
    collector = IdleCollector(clock)
    for _ in range(int(3 * MIN_GAP_S)):
        clock.now += 1.0
        collector.tick()
    assert calls.count("collect") == 3


def test_collection_turned_off_by_someone_else_stays_off(calls):
    clock = Clock()
    collector = IdleCollector(clock)
    clock.now += MIN_GAP_S + IDLE_S
    gc.disable()
    try:
        collector.tick()
    finally:
        gc.enable()
    assert calls == []


def test_a_real_idle_collection_frees_a_cycle_that_was_frozen():
    class Node:
        pass

    clock = Clock()
    collector = IdleCollector(clock)
    node = Node()
    node.me = node  # a cycle: only the collector frees it
    gc.freeze()
    try:
        alive = len(gc.get_objects())
        del node
        clock.now += MIN_GAP_S + IDLE_S
        collector.tick()
        assert not any(type(o) is Node for o in gc.get_objects()) and gc.get_freeze_count() > 0
        assert len(gc.get_objects()) <= alive  # what was frozen is frozen again, not scanned
    finally:
        gc.unfreeze()


def test_a_hold_keeps_full_collections_from_starting_until_released():
    before = gc.get_threshold()
    collector = IdleCollector()
    collector.hold()
    collector.hold()  # a second input before the frame changes nothing
    try:
        assert gc.get_threshold() == (before[0], before[1], NO_FULL)
    finally:
        collector.release()
    assert gc.get_threshold() == before


def test_a_hold_whose_frame_never_came_ends_with_the_next_tick():
    before = gc.get_threshold()
    clock = Clock()
    collector = IdleCollector(clock)
    collector.hold()
    clock.now += HOLD_MAX_S
    collector.tick()
    assert gc.get_threshold() == before
