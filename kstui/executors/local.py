"""Evaluations on this machine: `harness eval` per evaluation, or one `harness serve` with prepared workers.

The judge must be the installed one whatever the agent left in its workspace, so the harness runs
`python -I` (no current directory or script directory on sys.path, every PYTHON* variable ignored,
no user site directory) with the package `harness` bound by path to the one kstui loaded (`BOOT`),
in a private working directory outside the workspace, with the secret policy's environment (no key
reaches the judge, so none can reach a kernel), and told the workspace (`--workspace`), which it
hides from the worker and refuses to trust anything inside.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import harness.result
from harness import secret_env
from harness.result import EvalResult
from kstui.executors.devices import pool_for
from kstui.executors.harness_server import HarnessServer
from kstui.executors.process import run_process
from kstui.executors.protocol import DEFAULT_TIMEOUT_S, ProgressCallback
from kstui.executors.results import annotate, harness_args, parse_result, progress_of

HARNESS_DIR = Path(harness.result.__file__).resolve().parent
# `python -I -c BOOT DIR ARGS…` runs DIR's harness as `python -m harness ARGS…` would, whatever sys.path holds.
BOOT = """\
import importlib.util, runpy, sys
pkg = sys.argv[1]
spec = importlib.util.spec_from_file_location("harness", pkg + "/__init__.py", submodule_search_locations=[pkg])
module = importlib.util.module_from_spec(spec)
sys.modules["harness"] = module
spec.loader.exec_module(module)
sys.argv = [pkg + "/__main__.py", *sys.argv[2:]]
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""


def harness_command(python: str, harness_dir: Path, *args: str) -> list[str]:
    """The command line of `python -m harness ARGS`, isolated and bound to `harness_dir`."""
    return [python, "-I", "-c", BOOT, str(harness_dir), *args]


def _harness_env() -> dict[str, str]:
    """The environment for a harness subprocess: ours without any secret (harness.secret_env)."""
    return secret_env.scrubbed()


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
        harness_dir: Path = HARNESS_DIR,
    ) -> None:
        self.python = python
        # The agent's workspace, hidden from the harness's worker (`--workspace`): the kernel evaluated is
        # a copy outside it, so the harness cannot take the kernel's folder for it.
        self.workspace = workspace
        self.harness_dir = harness_dir
        self._cwd: Path | None = None  # the server's working directory, outside the workspace
        self.timeout_s = timeout_s
        self.devices = list(devices) if devices else None
        self._pool = pool_for(self.devices)
        self._host = socket.gethostname()
        self._server: HarnessServer | None = None
        if warm:
            self._cwd = Path(tempfile.mkdtemp(prefix="kstui-harness-"))
            self._server = HarnessServer(harness_command(python, harness_dir, "serve"), _harness_env(), self._cwd)

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
            args += ["--workspace", str(self.workspace)] if self.workspace is not None else []
            if self._server is not None:
                done = await self._server.request(args[1:], self.timeout_s, progress)
            else:
                def on_line(line: str) -> None:
                    report = progress_of(line)
                    if report is not None and progress is not None:
                        progress(report)

                with tempfile.TemporaryDirectory(prefix="kstui-harness-") as cwd:  # outside the workspace
                    done = await run_process(
                        harness_command(self.python, self.harness_dir, *args),
                        timeout_s=self.timeout_s,
                        what="local harness",
                        env=_harness_env(),
                        cwd=Path(cwd),
                        on_stderr_line=on_line if progress else None,
                    )
        return annotate(parse_result(done, "local harness"), host=self._host, queue_wait_s=waited)

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()
        if self._cwd is not None:
            shutil.rmtree(self._cwd, ignore_errors=True)
