"""An evaluation's progress while it runs: the phase, scenarios done of total, the time left, failures.

The runner feeds a `Progress` the phases it enters and the workers' messages; the caller's callback
gets (from a thread of ours) dicts
  {"phase": "build"|"checks"|"correctness"|"timing", "done": int, "total": int, "elapsed_s": float,
   "eta_s": float | None, "failed": [{"id", "verdict", "detail"}, ...]}
where `failed` holds the failures since the previous call. A call comes at once for a phase change or a
failure, at most every MIN_INTERVAL_S while scenarios finish, and every HEARTBEAT_S in any case.

The time left: correctness at the rate seen so far, each scenario weighed by its arithmetic (a large
one costs the candidate and the references more than a small one); timing from the worker's
prediction for each timed scenario (harness.budgets), scaled by how far the predictions have held.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

MIN_INTERVAL_S = 0.2
HEARTBEAT_S = 1.0
TICK_S = 0.05
# `harness eval --progress` writes each report on stderr as this prefix and its JSON (kstui reads them).
PROGRESS_PREFIX = "kstui-progress: "


class Progress:
    def __init__(self, callback: Callable[[dict[str, Any]], None], weights: dict[str, float], timed: int,
                 timing_prior_s: float, parts: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        """weights: per scenario id, its relative cost in the correctness pass; timed: how many scenarios
        the timing pass would time; timing_prior_s: a timed scenario's duration until the worker predicts
        it; parts: GPUs working side by side."""
        self._callback, self._clock = callback, clock
        self._weights, self._timed, self._prior, self._parts = weights, timed, timing_prior_s, max(1, parts)
        self._lock = threading.Lock()
        self._began = self._phase_began = clock()
        self._phase, self._done, self._total = "build", 0, 1
        self._weight_done = 0.0
        self._predicted: dict[str, float] = {}  # timed scenario -> predicted timing seconds
        self._predicted_done = 0.0
        self._rejected = False
        self._failed: list[dict[str, str]] = []
        self._last = -1e9
        self._dirty = self._urgent = False
        self._emit(self._began)  # the build phase, at once: every phase is seen at least once
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._ticker.start()

    def phase(self, name: str, total: int = 1) -> None:
        with self._lock:
            if name == self._phase:
                return
            self._phase, self._done, self._total = name, 0, total
            self._phase_began = self._clock()
            self._dirty = self._urgent = True
            self._emit_if_due()

    def heard(self, msg: dict[str, Any]) -> None:
        """A worker's "start", "result" or "checked" message."""
        with self._lock:
            if msg["kind"] == "start" and msg.get("phase") == "timing" and self._phase != "timing":
                self._phase, self._done, self._total = "timing", 0, self._timed
                self._phase_began = self._clock()
                self._urgent = True
            elif msg["kind"] == "result":
                self._result(msg)
            else:
                return
            self._dirty = True
            self._emit_if_due()

    def _result(self, msg: dict[str, Any]) -> None:
        s = msg["scenario"]
        self._done += 1
        if msg.get("phase") == "timing":
            self._predicted_done += self._predicted.get(s["id"], self._prior)
        else:
            self._weight_done += self._weights.get(s["id"], 1.0)
            if "timing_s" in msg:
                self._predicted[s["id"]] = float(msg["timing_s"])
        if not s["correct"] and s["verdict"] != "skipped":
            self._rejected = True
            self._failed.append({"id": s["id"], "verdict": s["verdict"], "detail": s.get("detail", "")})
            self._urgent = True

    def close(self) -> None:
        """Stop; the last state goes out if the caller has not seen it."""
        self._closed.set()
        self._ticker.join()
        with self._lock:
            if self._dirty:
                self._emit(self._clock())

    def _tick(self) -> None:
        while not self._closed.wait(TICK_S):
            with self._lock:
                self._emit_if_due()

    def _emit_if_due(self) -> None:
        now = self._clock()
        since = now - self._last
        if self._urgent or (self._dirty and since >= MIN_INTERVAL_S) or since >= HEARTBEAT_S:
            self._emit(now)

    def _emit(self, now: float) -> None:
        failed, self._failed = self._failed, []
        self._last, self._dirty, self._urgent = now, False, False
        self._callback({"phase": self._phase, "done": self._done, "total": self._total,
                        "elapsed_s": round(now - self._began, 3), "eta_s": self._eta(now), "failed": failed})

    def _eta(self, now: float) -> float | None:
        elapsed = now - self._phase_began
        if self._phase == "correctness":
            if not self._weight_done:
                return None
            left = sum(self._weights.values()) - self._weight_done
            eta = elapsed / self._weight_done * max(0.0, left)
            if not self._rejected and self._timed:
                known = list(self._predicted.values())
                per = sum(known) / len(known) if known else self._prior
                eta += (sum(known) + per * (self._timed - len(known))) / self._parts
            return round(eta, 1)
        if self._phase == "timing":
            total = sum(self._predicted.values()) + self._prior * (self._timed - len(self._predicted))
            pace = elapsed / self._predicted_done if self._predicted_done else 1.0 / self._parts
            return round(pace * max(0.0, total - self._predicted_done), 1)
        return None
