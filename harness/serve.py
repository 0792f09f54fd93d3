"""`python -m harness serve`: evaluations on request, each with a worker prepared before it was asked for.

A long-lived parent (torch-free, like `harness eval`) for a caller that evaluates again and again,
such as the session's local executor. Requests and replies are JSON lines:
  stdin   {"id": ..., "argv": ["FILE", "--scenarios", "quick", "--json", "-"]}   (`harness eval` arguments)
  stdout  {"id": ..., "rc": 0, "stdout": "...", "stderr": "..."}                 (what `harness eval` would give)
With `--progress` in a request's argv, its progress comes as lines {"id": ..., "progress": {...}}
(harness.progress's dicts) on stdout before its reply, instead of lines on its stderr.
Requests run concurrently (the caller keeps them on different GPUs). After each evaluation the next
worker for its GPU is started and prepared (harness.pool). End of input ends the server and kills the
prepared workers; so does the caller's death, which closes the pipe.
"""

from __future__ import annotations

import io
import json
import sys
import threading
from typing import Any, Callable, TextIO

from harness.cli import main as eval_main
from harness.pool import WorkerPool


def _answer(request: Any, pool: WorkerPool, write: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    if not isinstance(request, dict) or not isinstance(request.get("argv"), list) \
            or not all(isinstance(a, str) for a in request["argv"]):
        return {"id": request.get("id") if isinstance(request, dict) else None, "rc": 2, "stdout": "",
                "stderr": 'harness serve: a request is {"id": ..., "argv": [strings]}\n'}
    out, err = io.StringIO(), io.StringIO()
    rid = request.get("id")
    try:
        rc = eval_main(request["argv"], pool, out, err, lambda state: write({"id": rid, "progress": state}))
    except Exception as exc:  # a bug of ours must not end the server with requests in flight
        rc = 2
        err.write(f"harness serve: {type(exc).__name__}: {exc}\n")
    return {"id": rid, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def serve(stdin: TextIO, stdout: TextIO) -> int:
    pool = WorkerPool()
    lock = threading.Lock()
    threads: list[threading.Thread] = []

    def write(message: dict[str, Any]) -> None:
        with lock:
            stdout.write(json.dumps(message) + "\n")
            stdout.flush()

    def handle(line: str) -> None:
        try:
            request: Any = json.loads(line)
        except ValueError:
            request = None
        write(_answer(request, pool, write))

    try:
        for line in stdin:
            if line.strip():
                t = threading.Thread(target=handle, args=(line,), daemon=True)
                t.start()
                threads.append(t)
        for t in threads:
            t.join()
    finally:
        pool.close()
    return 0


def main() -> int:
    return serve(sys.stdin, sys.stdout)
