"""Workers prepared ahead of the evaluation that will use them, one per GPU.

Starting a worker (torch, the CUDA context), the baselines' first calls (cuDNN builds a plan per
shape) and the references' take several seconds and do not depend on the kernel. A long-lived
caller (`harness serve`, which the session's local executor talks to) prepares the next worker as
soon as an evaluation ends, while the agent writes its next kernel. Each worker still judges exactly one evaluation, in a fresh
process; only its start moves earlier. A prepared worker is waiting, not working, once it is ready:
it never runs on a GPU while another evaluation of ours is timing there, because the next evaluation
on that GPU takes it (its job cuts a warm-up still under way short) or kills it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from harness.started_worker import StartedWorker


def _key(prep: dict[str, Any], python: str) -> str:
    """What a worker must match to be reused; the scenarios it warmed are only a hint."""
    return json.dumps({k: v for k, v in prep.items() if k != "warm"} | {"python": python}, sort_keys=True)


class WorkerPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[Any, tuple[str, StartedWorker]] = {}  # by device index

    def take(self, prep: dict[str, Any], python: str) -> StartedWorker:
        """The prepared worker for this GPU if it matches and lives, else a fresh one."""
        device = prep.get("device_index")
        with self._lock:
            key, worker = self._workers.pop(device, (None, None))
        if worker is not None:
            if key == _key(prep, python) and worker.alive():
                return worker
            worker.kill()
        return StartedWorker(prep, python)

    def prepare(self, prep: dict[str, Any], python: str) -> None:
        """Start the worker the next evaluation on this GPU will take."""
        device = prep.get("device_index")
        with self._lock:
            old = self._workers.pop(device, (None, None))[1]
        if old is not None:
            old.kill()
        worker = StartedWorker(prep, python)
        with self._lock:
            self._workers[device] = (_key(prep, python), worker)

    def close(self) -> None:
        with self._lock:
            workers = [w for _, w in self._workers.values()]
            self._workers.clear()
        for w in workers:
            w.kill()
