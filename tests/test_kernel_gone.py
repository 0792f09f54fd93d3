"""Manual mode: a deleted kernel is waited for, and said so; put back, it is evaluated again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fakes import EventLog, FakeExecutor, kernel_text, make_workspace

from kstui.engine.config import SessionConfig
from kstui.engine.events import EvaluationStarted, Notice, SessionEnded, StartingPoint
from kstui.engine.session import Session


async def _notice(log: EventLog, text: str) -> None:
    for _ in range(100):
        if any(text in n.message for n in log.of(Notice)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no notice {text!r}: {[n.message for n in log.of(Notice)]}")


async def test_a_deleted_kernel_is_waited_for_and_evaluated_when_back(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    session = Session(SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True), executor=FakeExecutor(),
                      agent=None)
    log = EventLog()
    session.subscribe(log)
    task = asyncio.ensure_future(session.run())
    await log.wait_for(StartingPoint)
    kernel.unlink()
    await _notice(log, "k.cu is gone: waiting for it to come back")
    assert not task.done()
    kernel.write_text(kernel_text(1.5))
    await _notice(log, "k.cu is back")
    await log.wait_for(EvaluationStarted, 2)
    await session.stop()
    await task
    assert log.of(SessionEnded)[0].reason == "stopped"
