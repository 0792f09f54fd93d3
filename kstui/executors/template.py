"""Evaluations through a shell command template (`--eval-cmd`): srun, ssh, kubectl, docker …."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from harness.result import EvalResult
from harness.taskfile import judge_layout
from kstui.executors.devices import pool_for
from kstui.executors.process import run_process
from kstui.executors.protocol import DEFAULT_TIMEOUT_S, ExecutorError, ProgressCallback
from kstui.executors.results import parse_result

_PLACEHOLDER = re.compile(r"\{(file|dir|name|stem|root|relfile|scenarios|args)\}")


class TemplateExecutor:
    """A shell command template (`ssh gpu1 kstui eval {file} --json -`, `srun --gres=gpu:1 …`).

    Placeholders, each replaced by one shell-quoted word (so they belong outside quotes): {file} the
    kernel's absolute path, {dir} its directory, {name} its file name, {stem} its name without suffix,
    {root} the folder holding the kernel and every judge file (task file, reference, baselines) as the
    spec names them, {relfile} the kernel's path under {root}, {scenarios} the scenario selection,
    {args} the extra harness arguments (several words). A template without {scenarios} gets
    `--scenarios S` appended; one without {args} gets the arguments appended. A session's kernel is a
    private copy beside the judge files it recorded at start: a template that copies the files elsewhere
    copies {root} (or {dir}, where the spec names nothing outside it).
    """

    def __init__(
        self,
        template: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        devices: Sequence[int] | None = None,
        parallelism: int = 1,
    ) -> None:
        if not re.search(r"\{(file|name|relfile)\}", template):
            raise ExecutorError("--eval-cmd needs a {file} (or {name}, {relfile}) placeholder where the kernel goes")
        try:
            shlex.split(_PLACEHOLDER.sub("x", template))
        except ValueError as exc:
            raise ExecutorError(f"--eval-cmd is not a valid shell command: {exc}") from None
        self.template = template
        self.timeout_s = timeout_s
        self.devices = list(devices) if devices else None
        self._pool = pool_for(self.devices, parallelism)

    @property
    def parallelism(self) -> int:
        return self._pool.size

    def describe(self) -> str:
        return self.template if len(self.template) <= 60 else self.template[:59] + "…"

    def command(self, kernel: Path, scenarios: str, extra_args: Sequence[str], devices: Sequence[int] = ()) -> str:
        """The shell command for one evaluation."""
        kernel = Path(kernel).resolve()
        layout = judge_layout(kernel, lenient=True)
        args = list(extra_args) + (["--devices", ",".join(map(str, devices))] if devices else [])
        values = {
            "file": shlex.quote(str(kernel)),
            "dir": shlex.quote(str(kernel.parent)),
            "name": shlex.quote(kernel.name),
            "stem": shlex.quote(kernel.stem),
            "root": shlex.quote(str(layout.root)),
            "relfile": shlex.quote(layout.kernel),
            "scenarios": shlex.quote(scenarios),
            "args": " ".join(shlex.quote(a) for a in args),
        }
        cmd = _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.template)
        if "{scenarios}" not in self.template:
            cmd += " --scenarios " + values["scenarios"]
        if "{args}" not in self.template and args:
            cmd += " " + values["args"]
        return cmd

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = (),
        progress: ProgressCallback | None = None,  # unused: the command may run any harness version
    ) -> EvalResult:
        asked = time.monotonic()
        async with self._pool.lease() as devices:
            waited = time.monotonic() - asked
            cmd = self.command(kernel, scenarios, extra_args, devices)
            done = await run_process(["/bin/sh", "-c", cmd], timeout_s=self.timeout_s, what="--eval-cmd")
        result = parse_result(done, "--eval-cmd")
        result.device.setdefault("host", self.describe())
        result.device["queue_wait_s"] = round(waited, 3)
        return result

    async def close(self) -> None:
        return None
