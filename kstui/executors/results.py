"""The harness's answer as an EvalResult: the arguments every executor passes and how its output is read."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from harness.progress import PROGRESS_PREFIX
from harness.result import EvalResult, SchemaError
from kstui.executors.process import Completed, last_line
from kstui.executors.protocol import ExecutorError


def progress_of(line: str) -> dict[str, Any] | None:
    """The progress report a `harness eval --progress` stderr line carries, or None for any other line."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        report = json.loads(line[len(PROGRESS_PREFIX):])
    except ValueError:
        return None
    return report if isinstance(report, dict) and isinstance(report.get("phase"), str) else None


def decode_result(text: str) -> EvalResult:
    """The EvalResult in text: the whole of it, or the last JSON object that starts a line.

    Wrappers (srun, kubectl, docker) sometimes print a line of their own before the harness's JSON.
    """
    try:
        return EvalResult.from_json(text)
    except SchemaError as whole:
        first_error = whole
    for match in reversed(list(re.finditer(r"^\{", text, re.MULTILINE))):
        if match.start() == 0:
            continue
        try:
            return EvalResult.from_json(text[match.start() :])
        except SchemaError:
            continue
    raise first_error


def parse_result(done: Completed, what: str) -> EvalResult:
    """An EvalResult from a finished harness invocation, or an ExecutorError saying why there is none."""
    text = done.stdout.decode("utf-8", "replace")
    err = last_line(done.stderr)
    status = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    try:
        return decode_result(text)
    except SchemaError as exc:
        reason = str(exc)
    if done.returncode == 2 and err:  # the harness's "bad input" line
        raise ExecutorError(f"{what}: {err}")
    if not text.strip():
        raise ExecutorError(f"{what} printed no result ({status})" + (f": {err}" if err else ""))
    if reason.startswith("schema "):
        raise ExecutorError(f"{what} speaks result {reason}: install the same kstui version on both sides")
    raise ExecutorError(
        f"{what} printed no valid EvalResult ({reason}; {status})" + (f"; stderr: {err}" if err else "")
    )


def harness_args(kernel: str, scenarios: str, extra_args: Sequence[str], devices: Sequence[int]) -> list[str]:
    """The `harness eval` argument list every executor runs (after `python -m harness`)."""
    args = ["eval", kernel, "--scenarios", scenarios, "--json", "-"]
    if devices:
        args += ["--devices", ",".join(str(d) for d in devices)]
    return args + list(extra_args)


def annotate(result: EvalResult, *, host: str, queue_wait_s: float) -> EvalResult:
    """Record where the evaluation ran and how long it waited for a GPU (the TUI shows both)."""
    result.device["host"] = host
    result.device["queue_wait_s"] = round(queue_wait_s, 3)
    return result
