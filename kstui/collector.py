"""Full garbage collections at moments when nobody is waiting on the screen.

With text streaming, the objects Textual's render caches keep alive (strips and their caches, regions)
grow to a quarter of a million in a few minutes, and Python's full collections, which walk all of
them, to 60 ms and more, about one a second, started by whatever allocates: a key's frame included
(3 of the 4 slowest of 40 presses of `a` held one; bench/bench_keys.py, docs/BENCHMARKS.md).
Deferring them instead let cyclic garbage pile up (the app's peak memory 208 -> 376 MB in the key
benchmark, and a 1.3 s collection when one finally came).

So `tick` collects everything once the person has not pressed a key or used the mouse for IDLE_S (at
most every MIN_GAP_S) and then freezes what is alive: Python's own collections, which go on as usual,
walk only what was made since. Garbage among the frozen objects waits for the next idle moment. And
for HOLD_S after an input, long enough for the frame that shows it, `hold` keeps Python from starting a
full collection (the young generations are still collected): one that the key's own allocations would
start runs after its frame instead. UI-free: the app calls `hold` on input, `release` HOLD_S later,
`tick` twice a second and `stop` when it exits.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

IDLE_S = 1.0
MIN_GAP_S = 10.0
HOLD_S = 0.1  # from an input, long enough for the frame that shows it (the slowest key's median: 50 ms)
HOLD_MAX_S = 0.5  # a hold whose release never came ends here
NO_FULL = 1 << 30  # gen-1 collections before a full one: never, while held


class IdleCollector:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last_input = self.last_full = clock()
        self.full_collections = 0
        self._held: tuple[int, int, int] | None = None  # Python's thresholds while a hold is on

    def hold(self) -> None:
        """An input arrived: no full collection starts until `release`."""
        self.last_input = self.clock()
        if self._held is None and gc.isenabled():
            self._held = gc.get_threshold()
            young, middle, _old = self._held
            gc.set_threshold(young, middle, NO_FULL)

    def release(self) -> None:
        if self._held is not None:
            gc.set_threshold(*self._held)
            self._held = None

    def tick(self) -> None:
        now = self.clock()
        if self._held is not None and now - self.last_input >= HOLD_MAX_S:
            self.release()
        if now - self.last_input >= IDLE_S and now - self.last_full >= MIN_GAP_S and gc.isenabled():
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self.last_full = self.clock()
            self.full_collections += 1

    def stop(self) -> None:
        self.release()
        gc.unfreeze()  # what was frozen and has died since can be collected again
