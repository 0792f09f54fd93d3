"""Full collections wait for a moment without input; Python's own become rare meanwhile."""

from __future__ import annotations

import gc

import pytest

from kstui.collector import IDLE_S, MIN_GAP_S, RARE, IdleCollector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def collections(monkeypatch):
    made: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: made.append(generation) or 0)
    return made


def test_a_full_collection_waits_for_a_pause_in_the_input(collections):
    clock = Clock()
    collector = IdleCollector(clock)
    clock.now += MIN_GAP_S
    for _ in range(20):  # a key every 0.1 s: never idle for IDLE_S
        collector.input_seen()
        clock.now += 0.1
        collector.tick()
    assert collections == []
    clock.now += IDLE_S
    collector.tick()
    assert collections == [2] and collector.full_collections == 1


def test_idle_collections_come_at_most_every_min_gap(collections):
    clock = Clock()
    collector = IdleCollector(clock)
    for _ in range(int(3 * MIN_GAP_S)):
        clock.now += 1.0
        collector.tick()
    assert len(collections) == 3


def test_collection_turned_off_by_someone_else_stays_off(collections):
    clock = Clock()
    collector = IdleCollector(clock)
    clock.now += MIN_GAP_S + IDLE_S
    gc.disable()
    try:
        collector.tick()
    finally:
        gc.enable()
    assert collections == []


def test_python_full_collections_are_rare_while_started_and_restored_after():
    before = gc.get_threshold()
    collector = IdleCollector()
    collector.start()
    collector.start()  # a second start changes nothing
    try:
        assert gc.get_threshold() == (before[0], before[1], before[2] * RARE)
    finally:
        collector.stop()
    assert gc.get_threshold() == before
