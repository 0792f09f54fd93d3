"""What an executor is: where evaluations run, behind one protocol.

Every executor hands back the harness's own EvalResult, validated against the schema. Anything else
(a crash, garbage on stdout, a timeout, an unreachable host) is an ExecutorError carrying one line for
the user; the session reports it and goes on. A nonzero exit with a valid EvalResult is a rejection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.result import EvalResult

DEFAULT_TIMEOUT_S = 1800.0
# Called with the harness's progress reports (`harness eval --progress`): {"phase", "done", "total",
# "elapsed_s", "eta_s", "failed": [{"id", "verdict", "detail"}]}. Executors that cannot stream them never call it.
ProgressCallback = Callable[[dict[str, Any]], None]


class ExecutorError(Exception):
    """One line for the user: what failed and what to do about it."""


@runtime_checkable
class Executor(Protocol):
    @property
    def parallelism(self) -> int:
        """How many evaluations can run at once without sharing a GPU (spare GPUs for re-timing)."""
        ...

    def describe(self) -> str: ...

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = (),
        progress: ProgressCallback | None = None,
    ) -> EvalResult: ...

    async def close(self) -> None: ...
