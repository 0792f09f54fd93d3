"""Session control through the real client: rewind with context truncation, pause/resume, stall self-ask,
context compaction, cost limit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakes import EventLog, FakeExecutor, kernel_text, make_workspace
from messages_server import MessagesServer, ServerUsage, reply, text, tool_use

from kstui.engine.agent import Agent, AgentConfig
from kstui.engine.config import SessionConfig
from kstui.engine.conversation import COMPACTED_MARK
from kstui.engine.events import (
    Accepted,
    ContextTrimmed,
    EvaluationFinished,
    PauseChanged,
    QuestionAsked,
    Rewound,
    Stalled,
    StartingPoint,
    StatusChanged,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
)
from kstui.engine.session import Session

KEY = "sk-ant-control-test"


def _config(kernel: Path, server: MessagesServer, **kw: Any) -> SessionConfig:
    return SessionConfig(kernel=kernel, workspace=kernel.parent, api_key=KEY, base_url=server.url,
                         thinking_budget=0, **kw)


def _user_text(message: dict[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")


async def test_rewind_truncates_the_context_at_the_next_boundary(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    script = [
        reply(tool_use("edit_file", {"path": "k.cu", "old_string": "speedup=1.0", "new_string": "speedup=1.2"}),
              tool_use("evaluate", {})),
        reply(tool_use("edit_file", {"path": "k.cu", "old_string": "speedup=1.2", "new_string": "speedup=1.5"}),
              tool_use("evaluate", {})),
        reply(text("Pondering the next step at some length. " * 4, chunks=20), delay_s=0.03),
        reply(text("Back at the first version.")),
    ]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        jobs: list[asyncio.Task] = []

        def on_event(event: Any) -> None:
            if isinstance(event, TurnStarted) and event.turn == 3:
                first = log.of(Accepted)[0].commit
                jobs.append(asyncio.ensure_future(session.rewind(first, truncate_context=True)))

        session.subscribe(on_event)
        await asyncio.wait_for(session.run(), 30)
        await asyncio.gather(*jobs)
        last = server.requests[3].body["messages"]
    rewound = log.of(Rewound)
    assert len(rewound) == 1 and rewound[0].truncated_to_turn == 1
    assert kernel.read_text() == kernel_text(1.2)
    assert len(last) == 3  # the brief, turn 1's edit and evaluate calls, their results (+ the notice)
    assert "restored the kernel" in _user_text(last[-1]) and "-// fake: speedup=1.5" in _user_text(last[-1])
    assert session.history.entries()[0].restores == log.of(Accepted)[0].commit


async def test_pause_holds_the_next_turn_until_resume(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    with MessagesServer([reply(tool_use("list_files", {})), reply(text("done"))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        session.subscribe(lambda e: session.pause() if isinstance(e, TurnStarted) and e.turn == 1 else None)
        task = asyncio.create_task(session.run())
        await log.wait_for(StatusChanged, where=lambda e: e.status == "paused")
        await asyncio.sleep(0.5)
        assert len(server.requests) == 1 and not task.done()
        session.resume()
        summary = await asyncio.wait_for(task, 30)
    assert summary.reason == "agent finished" and len(server.requests) == 2


def _pausing_at_its_tool(kernel: Path, server: MessagesServer) -> tuple[Session, EventLog]:
    """A session whose human asks for a pause as the agent's first tool starts, mid-turn."""
    session = Session.build(_config(kernel, server), FakeExecutor())
    log = EventLog()
    session.subscribe(log)
    session.subscribe(lambda e: session.pause() if isinstance(e, ToolCallStarted) else None)
    return session, log


async def test_a_pause_asked_mid_turn_shows_paused_only_once_the_turn_is_over(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    with MessagesServer([reply(tool_use("list_files", {})), reply(text("done"))]) as server:
        session, log = _pausing_at_its_tool(kernel, server)
        task = asyncio.create_task(session.run())
        await log.wait_for(StatusChanged, where=lambda e: e.status == "paused")
        events = [e for e in log.events if isinstance(e, (PauseChanged, StatusChanged, TurnFinished))]
        asked = next(i for i, e in enumerate(events) if isinstance(e, PauseChanged))
        held = next(i for i, e in enumerate(events) if isinstance(e, StatusChanged) and e.status == "paused")
        # The turn's own statuses carry on after the pause was asked; "paused" comes after its end.
        assert events[asked].paused and events[asked + 1] == StatusChanged(status="tool", ts=events[asked + 1].ts)
        assert any(isinstance(e, TurnFinished) for e in events[asked:held])
        session.pause()  # a second request changes nothing
        assert len(log.of(PauseChanged)) == 1
        session.resume()
        summary = await asyncio.wait_for(task, 30)
    assert [e.paused for e in log.of(PauseChanged)] == [True, False]
    assert summary.reason == "agent finished" and len(server.requests) == 2


async def test_a_pause_taken_back_before_the_boundary_never_holds_the_agent(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    with MessagesServer([reply(tool_use("list_files", {})), reply(text("done"))]) as server:
        session, log = _pausing_at_its_tool(kernel, server)
        session.subscribe(lambda e: session.resume() if isinstance(e, ToolCallFinished) else None)
        summary = await asyncio.wait_for(session.run(), 30)
    assert [e.paused for e in log.of(PauseChanged)] == [True, False]
    assert "paused" not in [e.status for e in log.of(StatusChanged)]
    assert summary.reason == "agent finished" and len(server.requests) == 2


async def test_stall_puts_a_bank_question_to_the_agent_with_self_ask(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    kernel.write_text(kernel_text(1.0, "// fake: build-error\n"))
    script = [reply(tool_use("evaluate", {})), reply(tool_use("evaluate", {})), reply(text("Hmm.")), reply(text("Ok."))]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, self_ask=True, stall_evals=2, max_turns=4), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 30)
        third = server.requests[2].body["messages"][-1]
    stalls = log.of(Stalled)
    assert stalls and "2 evaluations" in stalls[0].reason
    asked = log.of(QuestionAsked)
    assert asked[0].source == "self" and session.bank.get(asked[0].question_id).when in ("stall", "any")
    assert asked[0].text in _user_text(third)
    assert len({q.question_id for q in asked}) == len(asked)  # never the same question twice running


async def test_long_context_is_compacted_and_restated(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    (kernel.parent / "big.txt").write_text("data line for the context\n" * 600)
    script = [reply(tool_use("read_file", {"path": "big.txt"})), reply(tool_use("read_file", {"path": "big.txt"})),
              reply(text("done"))]
    with MessagesServer(script) as server:
        session = Session(_config(kernel, server), executor=FakeExecutor(), agent=None)
        session.agent = Agent(AgentConfig(base_url=server.url, thinking_budget=0, context_window=6000),
                              "system", session.toolbox.definitions(), api_key=KEY)
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 30)
        bodies = [r.body for r in server.requests]
    assert log.of(ContextTrimmed)
    assert any(COMPACTED_MARK in _user_text(b["messages"][-1]) and "speedup=1.0" in _user_text(b["messages"][-1])
               for b in bodies[1:])


async def test_max_cost_ends_the_session(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    pricey = ServerUsage(input=2_000_000, output=200_000)
    script = [reply(tool_use("list_files", {}), usage=pricey), reply(tool_use("list_files", {}), usage=pricey)]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, max_cost=0.01, model="claude-fable-5-2"), FakeExecutor())
        summary = await asyncio.wait_for(session.run(), 30)
    assert summary.reason == "max cost reached" and summary.cost_usd >= 0.01 and len(server.requests) == 1


async def test_confirm_shell_asks_and_a_refusal_runs_nothing(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    script = [reply(tool_use("bash", {"command": "echo hi > out.txt"})), reply(tool_use("bash", {"command": "echo ok"})),
              reply(text("fine"))]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, confirm_shell=True), FakeExecutor())
        asked: list[str] = []

        async def confirm(command: str) -> bool:
            asked.append(command)
            return command == "echo ok"

        session.shell_confirmer = confirm
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 30)
    assert asked == ["echo hi > out.txt", "echo ok"]
    assert not (kernel.parent / "out.txt").exists()
    refused, ran = log.of(ToolCallFinished)
    assert refused.is_error and not ran.is_error and "ok" in ran.output


async def test_rejected_versions_before_any_baseline_keep_their_full_text(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    kernel.write_text(kernel_text(1.0, "// fake: build-error\n"))
    with MessagesServer([reply(tool_use("evaluate", {})), reply(text("no"))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 30)
    start, agents = log.of(EvaluationFinished)  # neither builds: there is no start to diff against
    for finished in (start, agents):
        added = [line[1:] for line in finished.diff.splitlines()[2:] if line.startswith("+")]
        assert "\n".join(added) + "\n" == kernel.read_text()


async def test_resume_in_process_continues_counters_cost_and_queue(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    usage = ServerUsage(input=100_000, output=10_000)
    with MessagesServer([reply(tool_use("evaluate", {}), usage=usage), reply(text("pause here"), usage=usage)]) as server:
        first = Session.build(_config(kernel, server, model="claude-fable-5-2", max_turns=2), FakeExecutor())
        first.subscribe(lambda e: first.ask("queued for later") if isinstance(e, TurnStarted) and e.turn == 2 else None)
        one = await asyncio.wait_for(first.run(), 30)
    assert one.cost_usd > 0 and [q.text for q in first.queue] == ["queued for later"]
    with MessagesServer([reply(text("resumed"), usage=usage)]) as server:
        second = Session.build(_config(kernel, server, model="claude-fable-5-2", resume=True), FakeExecutor())
        seen = EventLog()
        second.subscribe(seen)
        two = await asyncio.wait_for(second.run(), 30)
        body = server.requests[0].body
    # What a view is shown is the session's spending, resumed runs included: first what was spent
    # before, at once, then the total after the new reply; never the new process's own figure alone.
    shown = [u.cost_usd for u in seen.of(Usage)]
    assert shown == [pytest.approx(one.cost_usd), pytest.approx(two.cost_usd)]
    assert two.session_id == one.session_id and two.trace == one.trace
    assert two.cost_usd == pytest.approx(one.cost_usd * 1.5, rel=0.05)  # two replies before, one after
    assert two.turns == 3 and two.evals == 2 and two.accepted == 0  # the start and the agent's unchanged kernel
    assert len(seen.of(StartingPoint)) == 0  # a resumed session keeps its start
    assert "queued for later" in _user_text(body["messages"][-1])
