"""The Session through the real anthropic client talking to the loopback Messages server."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes import EventLog, FakeExecutor, kernel_text, make_workspace
from messages_server import MessagesServer, reply, text, tool_use

from harness.result import EvalResult
from kstui.engine.config import SessionConfig
from kstui.engine.events import (
    Accepted,
    AssistantMessage,
    Error,
    EvaluationFinished,
    EvaluationStarted,
    ExternalEdit,
    LimitClaimed,
    QuestionAsked,
    QueueChanged,
    Rejected,
    SessionEnded,
    StartingPoint,
    TextDelta,
    ToolCallFinished,
    TurnStarted,
)
from kstui.engine.session import Session
from kstui.engine.trace import read_trace

API_KEY = "sk-ant-test-0123456789abcdef"
LIMIT_CLAIM = "The kernel is now at the hardware limit: it is memory-bound and there is nothing left to gain."


def _config(kernel: Path, server: MessagesServer | None, **kw: Any) -> SessionConfig:
    return SessionConfig(kernel=kernel, workspace=kernel.parent, api_key=API_KEY if server else None,
                         base_url=server.url if server else None, thinking_budget=0,
                         no_agent=server is None, **kw)


def _edit(old: float, new: float) -> Any:
    return tool_use("edit_file", {"path": "k.cu", "old_string": f"speedup={old}", "new_string": f"speedup={new}"})


def _last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") if b.get("type") == "text" else str(b.get("content", "")) for b in content)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


async def test_scripted_session_edits_evaluates_is_asked_and_commits(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    seen: dict[str, str] = {}

    def script(body: dict[str, Any], index: int):
        if index == 4:
            seen["question"] = _last_user_text(body)
        steps = [
            reply(text("I'll measure the starting point."), tool_use("evaluate", {})),
            reply(_edit(1.0, 1.3)),
            reply(tool_use("evaluate", {})),
            reply(text(LIMIT_CLAIM)),
            reply(text("Fair point, trying another layer."), _edit(1.3, 1.8), tool_use("evaluate", {})),
            reply(text("Done for now.")),
        ]
        return steps[index]

    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, self_ask=True, max_turns=6), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        summary = await asyncio.wait_for(session.run(), 60)

    (start,) = log.of(StartingPoint)
    accepted = log.of(Accepted)
    assert round(start.geomean, 1) == 1.0 and [round(a.geomean, 1) for a in accepted] == [1.3, 1.8]
    assert accepted[0].previous == start.geomean and accepted[1].previous == accepted[0].geomean
    assert summary.accepted == 2 and summary.evals == 4 and summary.best_commit == accepted[-1].commit
    # The agent's own evaluation of the unchanged kernel is no gain over the start: never a commit.
    assert "not faster" in log.of(Rejected)[0].reason and log.of(Rejected)[0].eval_no == 2

    claims = log.of(LimitClaimed)
    assert claims and "hardware limit" in claims[0].sentence
    asked = log.of(QuestionAsked)
    assert asked and asked[0].source == "self" and asked[0].question_id
    assert asked[0].text in seen["question"]  # delivered as user text at the turn boundary

    entries = session.history.entries()
    assert [e.sha for e in entries] == [a.commit for a in reversed(accepted)] + [start.commit]
    assert entries[-1].start and not entries[0].start
    assert entries[0].question == asked[0].text and entries[0].question_source == "self"
    assert "speedup=1.8" in session.history.content_at(entries[0].sha)
    assert session.history.result_of(entries[0].sha).geomean_speedup == pytest.approx(accepted[-1].geomean)

    trace = list(read_trace(summary.trace))
    assert isinstance(trace[-1], SessionEnded) and trace[-1].best_commit == accepted[-1].commit
    assert [e.commit for e in trace if isinstance(e, Accepted)] == [a.commit for a in accepted]
    streamed = "".join(e.text for e in trace if isinstance(e, TextDelta))
    assert "trying another layer" in streamed and LIMIT_CLAIM in streamed  # deltas joined, no text lost
    assert API_KEY not in summary.trace.read_text()
    results = [e.result for e in trace if isinstance(e, EvaluationFinished) and e.error is None]
    assert results and all(isinstance(r, EvalResult) for r in results)  # read back typed from the trace


async def test_rejections_reach_the_agent_and_nothing_is_committed(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    kernel.write_text(kernel_text(1.0, "// fake: wrong=fp16-d128-b1-h32x8-s4096x4096\n"))
    with MessagesServer([reply(tool_use("evaluate", {})), reply(text("I see."))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        summary = await asyncio.wait_for(session.run(), 30)
        tool_result = server.requests[1].body["messages"][-1]["content"][0]
    assert summary.accepted == 0 and summary.reason == "agent finished"
    assert "3/4 correct" in log.of(Rejected)[0].reason and "fp16-d128-b1-h32x8-s4096x4096: wrong" in log.of(Rejected)[0].reason
    assert tool_result["type"] == "tool_result" and "REJECTED" in tool_result["content"]
    assert session.history.entries() == []


async def test_executor_failure_is_reported_and_the_session_goes_on(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    kernel.write_text(kernel_text(1.0, "// fake: executor-error\n"))
    script = [
        reply(tool_use("evaluate", {})),
        reply(tool_use("edit_file", {"path": "k.cu", "old_string": "// fake: executor-error\n", "new_string": ""})),
        reply(tool_use("evaluate", {})),
        reply(text("Works now.")),
    ]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        summary = await asyncio.wait_for(session.run(), 30)
        first_result = server.requests[1].body["messages"][-1]["content"][0]["content"]
    failed = [e for e in log.of(EvaluationFinished) if e.error]
    assert len(failed) == 2 and all("unreachable" in e.error and e.result is None for e in failed)  # start too
    assert not any("unreachable" in e.message for e in log.of(Error))  # said once, by the evaluation itself
    assert "unreachable" in first_result
    (start,) = log.of(StartingPoint)
    assert start.geomean is None and "unreachable" in start.reason
    (accepted,) = log.of(Accepted)  # so the first version that passes is the start
    assert accepted.previous is None and summary.accepted == 1 and len(server.requests) == 4


async def test_ask_with_interrupt_stops_the_stream_and_delivers_at_once(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    long_text = "Let me think about the memory layout in great detail. " * 20
    script = [reply(text(long_text, chunks=60), delay_s=0.05), reply(text("Tensor cores, then."))]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)

        def on_event(event: Any) -> None:
            if isinstance(event, TextDelta) and len(log.of(TextDelta)) == 3:
                session.ask("Why not tensor cores?", interrupt=True)

        session.subscribe(on_event)
        await asyncio.wait_for(session.run(), 30)
        second = server.requests[1].body["messages"]
    partial = [e for e in log.of(AssistantMessage) if e.interrupted]
    assert partial, "the stream was not interrupted"
    kept = partial[0].content[0]["text"]
    assert 0 < len(kept) < len(long_text)
    assert second[-2]["role"] == "assistant" and second[-2]["content"][0]["text"] == kept  # partial reply kept
    assert "Why not tensor cores?" in _last_user_text({"messages": second})
    assert [q.source for q in log.of(QuestionAsked)] == ["human"]


async def test_queue_is_editable_and_delivers_one_question_per_boundary(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    script = [reply(text("answer 0"), delay_s=0.02), reply(text("answer 1")), reply(text("answer 2"))]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)

        def on_event(event: Any) -> None:  # runs on the session's loop, while turn 1 streams
            if isinstance(event, TurnStarted) and event.turn == 1:
                session.ask("first question")
                session.ask("second question")
                session.ask("third question")
                first, second, _ = session.queue
                assert session.edit_queued(first.id, "first question, edited")
                assert session.remove_queued(second.id)

        session.subscribe(on_event)
        await asyncio.wait_for(session.run(), 30)
        bodies = [r.body for r in server.requests]
    assert [q.text for q in log.of(QuestionAsked)] == ["first question, edited", "third question"]
    assert "first question, edited" in _last_user_text(bodies[1]) and "third" not in _last_user_text(bodies[1])
    assert "third question" in _last_user_text(bodies[2])
    states = [[q["text"] for q in c.queue] for c in log.of(QueueChanged)]
    assert states == [
        ["first question"], ["first question", "second question"],
        ["first question", "second question", "third question"],
        ["first question, edited", "second question", "third question"],
        ["first question, edited", "third question"], ["third question"], [],
    ]


async def test_external_edit_is_told_to_the_agent_with_its_diff(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    script = [reply(text("Reading the code slowly and carefully. " * 5, chunks=30), delay_s=0.04),
              reply(text("I see your edit."))]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        task = asyncio.create_task(session.run())
        await log.wait_for(TextDelta)
        tmp = kernel.with_name(".k.cu.swp")  # an editor's atomic save
        tmp.write_text(kernel_text(1.0, "// human: try a wider tile\n"))
        tmp.replace(kernel)
        await asyncio.wait_for(task, 30)
        told = _last_user_text(server.requests[1].body)
    edits = log.of(ExternalEdit)
    assert len(edits) == 1 and "+// human: try a wider tile" in edits[0].diff
    assert "edited outside your tools" in told and "+// human: try a wider tile" in told


async def test_agents_own_edits_are_not_external(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    script = [reply(_edit(1.0, 1.2)), reply(tool_use("bash", {"command": "sed -i s/1.2/1.4/ k.cu"})),
              reply(text("ok"), delay_s=0.1)]
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 30)
    assert "speedup=1.4" in kernel.read_text()
    assert log.of(ExternalEdit) == []
    assert all(not e.is_error for e in log.of(ToolCallFinished))


async def test_stop_mid_evaluation_leaves_git_and_trace_consistent(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    with MessagesServer([reply(tool_use("evaluate", {}))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor(delay_s=30))
        log = EventLog()
        session.subscribe(log)
        task = asyncio.create_task(session.run())
        await log.wait_for(TurnStarted)
        await asyncio.sleep(0.3)
        await asyncio.wait_for(session.stop(), 10)
        summary = await asyncio.wait_for(task, 10)
    assert summary.reason == "stopped"
    trace = list(read_trace(summary.trace))
    assert isinstance(trace[-1], SessionEnded)
    finished = [e for e in trace if isinstance(e, EvaluationFinished)]
    assert finished and finished[0].error and "cancelled" in finished[0].error
    assert session.history.entries() == [] and not any(isinstance(e, Accepted) for e in trace)


async def test_user_repository_is_untouched(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    kernel = make_workspace(repo, speedup=1.0)
    (repo / "notes.txt").write_text("mine\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "add", "notes.txt")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "user commit")
    (repo / "notes.txt").write_text("mine, dirty\n")
    (repo / "staged.txt").write_text("staged\n")
    _git(repo, "add", "staged.txt")
    head, status = _git(repo, "rev-parse", "HEAD"), _git(repo, "status", "--porcelain")
    with MessagesServer([reply(_edit(1.0, 1.5), tool_use("evaluate", {})), reply(text("done"))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        summary = await asyncio.wait_for(session.run(), 30)
    assert summary.accepted == 1
    assert _git(repo, "rev-parse", "HEAD") == head
    after = _git(repo, "status", "--porcelain")
    assert "A  staged.txt" in after and " M notes.txt" in after
    assert (repo / "notes.txt").read_text() == "mine, dirty\n"
    assert [line for line in after.splitlines() if "k." not in line] == \
        [line for line in status.splitlines() if "k." not in line]
    assert _git(repo, "log", "--format=%s", session.history.branch).splitlines()[0].startswith("k: ")


async def test_human_edit_during_an_evaluation_is_external_and_the_result_is_not_accepted(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    with MessagesServer([reply(tool_use("evaluate", {})), reply(text("noted"))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor(delay_s=1.0))
        log = EventLog()
        session.subscribe(log)
        task = asyncio.create_task(session.run())
        await log.wait_for(EvaluationStarted, 2)  # the agent's, after the start's
        await asyncio.sleep(0.5)  # inside the evaluation
        kernel.write_text(kernel_text(1.0, "// human was here\n"))
        await asyncio.wait_for(task, 30)
        told = _last_user_text(server.requests[1].body)
    assert log.of(Accepted) == [] and "changed on disk while it was being evaluated" in log.of(Rejected)[0].reason
    assert len(log.of(ExternalEdit)) == 1 and "+// human was here" in told


async def test_evaluate_runs_the_sessions_own_set_and_a_narrower_one_is_information_only(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    script = [
        reply(_edit(1.0, 1.3), tool_use("evaluate", {"scenarios": "full"})),
        reply(tool_use("evaluate", {})),
        reply(text("Done.")),
    ]
    executor = FakeExecutor()
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, scenarios="quick"), executor)
        log = EventLog()
        session.subscribe(log)
        summary = await asyncio.wait_for(session.run(), 30)
        tools = server.requests[0].body["tools"]
        other_set = server.requests[1].body["messages"][-1]["content"][-1]["content"]
        own_set = server.requests[2].body["messages"][-1]["content"][-1]["content"]
    (evaluate,) = [t for t in tools if t["name"] == "evaluate"]
    assert "session's set ('quick')" in evaluate["description"]
    # The start, then 'full' as asked, then the session's 'quick' when the agent names none.
    assert [s for _, s in executor.calls] == ["quick", "full", "quick"]
    assert "NOT A CANDIDATE" in other_set and "for information only" in other_set
    assert "ACCEPTED" in own_set, own_set
    assert summary.accepted == 1 and [a.eval_no for a in log.of(Accepted)] == [3]
