"""One GPU's share of an evaluation: its worker, a fresh worker after each fault, and the gate to timing.

Correctness comes first on every GPU; the parts meet at a `TimingGate` and time only if every part
passed, so a kernel wrong anywhere is never timed. A worker that dies of a fault in the correctness
pass (a crash, or a call past its hang budget) takes only its scenario with it: a fresh worker checks
the scenarios it left, so the verdict still lists the other failures. Each fresh worker costs its
start (torch, the CUDA context: seconds), so after MAX_FAULTS faults the rest are left unchecked.
A part that faulted is rejected, so its fresh workers only check, never time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from typing import Any, Callable

from harness.result import ScenarioResult
from harness.started_worker import Hooks, StartedWorker, WorkerOutcome
from harness.tasks.base import Scenario

MAX_FAULTS = 2  # workers a part may lose to faults; a kernel that hangs on every odd length would cost one each
FAULT_VERDICTS = ("crash", "timeout")


class TimingGate:
    """Where an evaluation's parts meet between correctness and timing: all time if every part passed;
    a part that failed decides for all at once, so no part waits for the others' correctness in vain."""

    def __init__(self, parts: int) -> None:
        self._cond = threading.Condition()
        self._waiting = parts
        self._open: bool | None = None
        self.stopped = False  # a timed scenario failed somewhere: timing stops everywhere

    def arrive(self, ok: bool) -> bool:
        with self._cond:
            if self._open is None:
                self._waiting -= 1
                if not ok or self._waiting == 0:
                    self._open = ok
                    self._cond.notify_all()
            while self._open is None:
                self._cond.wait()
            return self._open

    def stop(self) -> None:
        self.stopped = True


class _PartHooks(Hooks):
    def __init__(self, gate: TimingGate | None, listener: Callable[[dict[str, Any]], None]) -> None:
        self.gate, self.listener = gate, listener
        self.arrived = False

    def decide(self, ok: bool) -> bool:
        if self.gate is None or self.arrived:
            return False  # a fresh worker after a fault only checks
        self.arrived = True
        return self.gate.arrive(ok)

    def stopping(self) -> bool:
        return self.gate is not None and self.gate.stopped

    def heard(self, msg: dict[str, Any]) -> None:
        if self.gate is not None and msg["kind"] == "result" and msg.get("phase") == "timing" \
                and not msg["scenario"]["correct"]:
            self.gate.stop()
        self.listener(msg)


def judge_part(first: Callable[[], StartedWorker], fresh: Callable[[list[Scenario]], StartedWorker],
               job: dict[str, Any], scenarios: list[Scenario], scenario_timeout_s: float, total_timeout_s: float,
               gate: TimingGate, listener: Callable[[dict[str, Any]], None]) -> WorkerOutcome:
    """Every scenario of this part judged: by `first()` (a prepared worker, or a new one), then by fresh
    workers (`fresh(rest)`) after faults."""
    began = time.monotonic()
    hooks = _PartHooks(gate, listener)
    try:
        worker = first()
        outcome = worker.run({**job, "library": worker.library, "time": any(s.timed for s in scenarios)}, scenarios,
                             scenario_timeout_s, total_timeout_s, hooks)
    finally:
        if not hooks.arrived:  # died before the end of correctness, or never started: the others go on
            hooks.decide(False)
    results = {r.id: r for r in outcome.results}
    profile, device = dict(outcome.profile), outcome.device
    faults = 0
    while not outcome.checked and outcome.error is None:
        faults += 1
        rest = [s for s in scenarios if results[s.id].verdict == "skipped"]
        left_s = total_timeout_s - (time.monotonic() - began)
        if not rest or faults >= MAX_FAULTS or left_s <= 0:
            _give_up(rest, results, faults, listener)
            break
        worker = fresh(rest)
        outcome = worker.run({**job, "library": worker.library, "time": False}, rest, scenario_timeout_s, left_s,
                             _PartHooks(None, listener))
        results.update({r.id: r for r in outcome.results})
        device = device or outcome.device
        for name, seconds in outcome.profile.items():
            profile[name] = profile.get(name, 0.0) + seconds
    if outcome.error:
        for s in scenarios:
            if results[s.id].verdict == "skipped":
                listener({"kind": "result", "phase": "correctness", "scenario": asdict(results[s.id])})
    profile["worker_s"] = time.monotonic() - began
    return WorkerOutcome([results[s.id] for s in scenarios], device, outcome.error, profile, outcome.checked)


def _give_up(rest: list[Scenario], results: dict[str, ScenarioResult], faults: int,
             listener: Callable[[dict[str, Any]], None]) -> None:
    faulted = [r.id for r in results.values() if r.verdict in FAULT_VERDICTS]
    why = (f"not run: the kernel brought down {faults} workers ({', '.join(faulted)}); "
           "no more are started for this evaluation")
    for s in rest:
        results[s.id].detail = why
        listener({"kind": "result", "phase": "correctness", "scenario": asdict(results[s.id])})
