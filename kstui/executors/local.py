"""Evaluations on this machine: `python -m harness eval` per evaluation, or one `harness serve` with prepared workers."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import harness.result
from harness.result import EvalResult
from kstui.executors.devices import pool_for
from kstui.executors.harness_server import HarnessServer
from kstui.executors.process import run_process
from kstui.executors.protocol import DEFAULT_TIMEOUT_S, ProgressCallback
from kstui.executors.results import annotate, harness_args, parse_result, progress_of


def _harness_env() -> dict[str, str]:
    """The environment for a harness subprocess: ours, with our own harness package first on the path."""
    env = dict(os.environ)
    root = str(Path(harness.result.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


class LocalExecutor:
    """`python -m harness eval … --json -` in a subprocess on this machine.

    With warm=True the evaluations go to one long-lived `python -m harness serve` instead, which
    prepares each GPU's next worker (torch, CUDA, the baselines' first calls) while the agent works,
    so an evaluation starts judging at once (kstui.executors.harness_server).
    """

    def __init__(
        self,
        python: str = sys.executable,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        devices: Sequence[int] | None = None,
        warm: bool = False,
        workspace: Path | None = None,
    ) -> None:
        self.python = python
        # The agent's workspace, hidden from the harness's worker (`--workspace`): the kernel evaluated is
        # a copy outside it, so the harness cannot take the kernel's folder for it.
        self.workspace = workspace
        self.timeout_s = timeout_s
        self.devices = list(devices) if devices else None
        self._pool = pool_for(self.devices)
        self._host = socket.gethostname()
        self._server: HarnessServer | None = None
        if warm:
            self._server = HarnessServer(python, _harness_env())

    @property
    def parallelism(self) -> int:
        return self._pool.size

    def describe(self) -> str:
        return "local" + (f" GPUs {','.join(map(str, self.devices))}" if self.devices else "")

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = (),
        progress: ProgressCallback | None = None,
    ) -> EvalResult:
        asked = time.monotonic()
        async with self._pool.lease() as devices:
            waited = time.monotonic() - asked
            path = Path(kernel).resolve()
            args = harness_args(str(path), scenarios, extra_args, devices) + (["--progress"] if progress else [])
            if self.workspace is not None:
                args += ["--workspace", str(self.workspace)]
            if self._server is not None:
                done = await self._server.request(args[1:], self.timeout_s, progress)
            else:
                def on_line(line: str) -> None:
                    report = progress_of(line)
                    if report is not None and progress is not None:
                        progress(report)

                done = await run_process(
                    [self.python, "-m", "harness", *args], timeout_s=self.timeout_s, what="local harness",
                    env=_harness_env(), cwd=path.parent, on_stderr_line=on_line if progress else None,
                )
        return annotate(parse_result(done, "local harness"), host=self._host, queue_wait_s=waited)

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()
