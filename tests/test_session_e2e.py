"""End to end through the real harness CLI (`kstui eval --check-only`) via LocalExecutor: no GPU needed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fakes import EventLog
from nvcc_support import needs_nvcc

from harness.result import EvalResult
from kstui.engine.config import SessionConfig
from kstui.engine.events import Accepted, EvaluationFinished, Rejected, SessionStarted, StartingPoint
from kstui.engine.session import Session
from kstui.executors.local import LocalExecutor


@needs_nvcc
async def test_kernel_that_fails_to_build_is_rejected_with_the_compiler_error(tmp_path: Path) -> None:
    kernel = tmp_path / "ws" / "broken.cu"
    kernel.parent.mkdir()
    kernel.write_text('#include <cuda_runtime.h>\nextern "C" int kstui_attention_fwd() {\n  return 0\n}\n')
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    config = SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, eval_args=("--check-only",))
    session = Session(config, executor=LocalExecutor(timeout_s=600), agent=None)
    log = EventLog()
    session.subscribe(log)
    task = asyncio.create_task(session.run())
    await log.wait_for(SessionStarted)
    (start,) = await log.wait_for(StartingPoint, timeout=300)  # the kernel as brought is judged first
    await session.evaluate_now()
    await session.stop()
    await asyncio.wait_for(task, 30)

    assert start.geomean is None and start.reason.startswith("build failed: ")
    finished = log.of(EvaluationFinished)
    assert len(finished) == 2 and finished[1].error is None and finished[1].where == "local"
    result = finished[1].result
    assert isinstance(result, EvalResult)
    assert result.build.ok is False and result.build.errors and not result.passed
    assert result.build.errors[0].line in (3, 4)
    rejected = log.of(Rejected)
    assert len(rejected) == 1 and rejected[0].reason.startswith("build failed: ")
    assert log.of(Accepted) == [] and session.history.entries() == []
