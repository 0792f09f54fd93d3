"""A model stream silent for STREAM_STALL_S is said to have stalled (a notice, the status), and the person
can interrupt it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fakes import EventLog, FakeExecutor, make_workspace
from messages_server import MessagesServer, reply, text

from kstui.engine import session as session_mod
from kstui.engine.config import SessionConfig
from kstui.engine.events import Notice, StatusChanged, TurnFinished
from kstui.engine.session import Session


async def test_a_silent_stream_is_said_stalled_and_can_be_interrupted(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_mod, "STREAM_STALL_S", 0.4)
    kernel = make_workspace(tmp_path / "ws")
    with MessagesServer([reply(text("slow words", chunks=3), delay_s=5.0)]) as server:
        config = SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="sk-ant-stall-test",
                               base_url=server.url, thinking_budget=0)
        session = Session.build(config, FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        task = asyncio.ensure_future(session.run())
        for _ in range(100):
            if any("stream stalled" in n.message for n in log.of(Notice)):
                break
            await asyncio.sleep(0.05)
        assert any(s.status == "stalled" for s in log.of(StatusChanged))
        (notice,) = [n for n in log.of(Notice) if "stream stalled" in n.message]
        assert notice.level == "warning" and "interrupt it" in notice.message
        session.interrupt()
        (finished,) = await log.wait_for(TurnFinished)
        assert finished.interrupted
        await session.stop()
        await asyncio.wait_for(task, 10)
