"""Full garbage collections at moments when nobody is waiting on the screen.

With text streaming, a full collection walks the 120,000-odd objects that Textual's render caches keep
alive (strips, regions, caches; kstui's own state is frozen at the first frame): 28-42 ms, about one a
second, started by the allocations of whatever ran, a key's frame included (3 of the 4 slowest of 40
presses of `a` held one; bench/bench_keys.py, docs/BENCHMARKS.md). Python keeps collecting the young
generations as it likes; a full collection is left to `tick`, which runs it once the person has not
pressed a key or used the mouse for IDLE_S, at most every MIN_GAP_S. Python's own full collections
come RARE times less often meanwhile, so garbage still cannot pile up for long while someone types.
UI-free: the app calls `input_seen` and `tick`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

IDLE_S = 1.0
MIN_GAP_S = 10.0
RARE = 100  # Python's full collections come this many times less often (about every two minutes here)


class IdleCollector:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last_input = self.last_full = clock()
        self.full_collections = 0
        self._thresholds: tuple[int, int, int] | None = None

    def start(self) -> None:
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            young, middle, old = self._thresholds
            gc.set_threshold(young, middle, old * RARE)

    def stop(self) -> None:
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def input_seen(self) -> None:
        self.last_input = self.clock()

    def tick(self) -> None:
        now = self.clock()
        if now - self.last_input >= IDLE_S and now - self.last_full >= MIN_GAP_S and gc.isenabled():
            gc.collect()
            self.last_full = self.clock()
            self.full_collections += 1
