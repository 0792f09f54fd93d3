"""No input from the model breaks the session or its resume: a tool input that is a JSON array, string or
number gets an error result, is sent back to the API as an object, and survives compaction and --resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakes import EventLog, FakeExecutor, make_workspace
from messages_server import MessagesServer, reply, text, tool_use_raw

from kstui.engine.config import SessionConfig
from kstui.engine.events import ContextTrimmed, Error, EvaluationStarted, SessionEnded, ToolCallFinished
from kstui.engine.session import Session


def _config(kernel: Path, server: MessagesServer, **kw: Any) -> SessionConfig:
    return SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="sk-ant-input-test", base_url=server.url,
                         thinking_budget=0, **kw)


async def _run(config: SessionConfig, *, compact: bool = False) -> EventLog:
    session = Session.build(config, FakeExecutor())
    log = EventLog()
    session.subscribe(log)
    if compact:
        real = session._make_agent

        async def small_window() -> None:
            await real()
            session.agent.context_window = 1000  # every boundary compacts

        session._make_agent = small_window  # type: ignore[method-assign]
    await asyncio.wait_for(session.run(), 30)
    return log


@pytest.mark.parametrize("raw", ["[1, 2]", '"a string"', "42"])
async def test_a_tool_input_that_is_not_an_object_is_an_error_and_never_breaks_compaction_or_resume(
        tmp_path: Path, raw: str) -> None:
    kernel = make_workspace(tmp_path / "ws")
    script = [reply(tool_use_raw("evaluate", [raw])), reply(text("Sorry."))]
    with MessagesServer(script) as server:
        log = await _run(_config(kernel, server), compact=True)
        sent = [b for r in server.requests[1:] for m in r.body["messages"] for b in m["content"]
                if isinstance(m["content"], list) and b.get("type") == "tool_use"]
    (finished,) = log.of(ToolCallFinished)
    assert finished.is_error and finished.output.startswith("evaluate: the input must be a JSON object")
    assert len(log.of(EvaluationStarted)) == 1  # the start only: the bad call evaluated nothing
    assert sent and all(isinstance(b["input"], dict) for b in sent)
    assert log.of(ContextTrimmed) and not log.of(Error)
    assert log.of(SessionEnded)[0].reason == "agent finished"
    with MessagesServer([reply(text("Resumed and fine."))]) as server:
        resumed = await _run(_config(kernel, server, resume=True), compact=True)
        sent = [b for r in server.requests for m in r.body["messages"] for b in m["content"]
                if isinstance(m["content"], list) and b.get("type") == "tool_use"]
    assert not resumed.of(Error) and resumed.of(SessionEnded)[0].reason == "agent finished"
    assert sent and all(isinstance(b["input"], dict) for b in sent)
