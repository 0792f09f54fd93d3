"""Pilot tests of the TUI driving a real Session: the real anthropic client against the loopback
Messages server, the fake real-schema executor, real git history in a tmp workspace."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from fakes import EventLog, FakeExecutor, kernel_text, make_workspace  # noqa: E402
from messages_server import MessagesServer, reply, text, tool_use  # noqa: E402
from pilot_support import showing, until  # noqa: E402

from kstui.app import KstuiApp  # noqa: E402
from kstui.engine import events as ev  # noqa: E402
from kstui.engine.config import SessionConfig  # noqa: E402
from kstui.engine.session import Session  # noqa: E402
from kstui.engine.trace import read_trace  # noqa: E402
from kstui.screens.bank import BankScreen  # noqa: E402
from kstui.screens.confirm import ConfirmScreen  # noqa: E402
from kstui.screens.history import HistoryScreen  # noqa: E402
from kstui.widgets.footer import FooterKey  # noqa: E402

API_KEY = "sk-ant-test-tui-0123456789"


def edit(old: float, new: float) -> Any:
    return tool_use("edit_file", {"path": "k.cu", "old_string": f"speedup={old}", "new_string": f"speedup={new}"})


@asynccontextmanager
async def live(tmp_path: Path, script: list | None, *, executor: FakeExecutor | None = None,
               size: tuple[int, int] = (140, 40), kernel_extra: str = "", **config: Any):
    """An app on a real Session; yields (app, pilot, session, log). script None = manual mode."""
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    kernel.write_text(kernel.read_text() + kernel_extra)
    server = MessagesServer(script) if script is not None else None
    if server is not None:
        server.__enter__()
    try:
        cfg = SessionConfig(kernel=kernel, workspace=kernel.parent, api_key=API_KEY if server else None,
                            base_url=server.url if server else None, no_agent=server is None,
                            wait_for_human=True, **config)
        session = Session.build(cfg, executor or FakeExecutor())
        log = EventLog()
        session.subscribe(log)
        app = KstuiApp(kernel=kernel, session=session)
        async with app.run_test(size=size) as pilot:
            yield app, pilot, session, log
            if app.is_running:
                await session.stop()
    finally:
        if server is not None:
            server.__exit__(None, None, None)


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") if b.get("type") == "text" else str(b.get("content", "")) for b in content)


def numbered_replies(seen: list[str]):
    """A script answering "reply N" to every request, recording the last user text of each."""

    def script(body: dict[str, Any], index: int):
        seen.append(last_user_text(body))
        return reply(text(f"reply {index}"))

    return script


async def test_agent_edits_evaluation_accepts_every_pane_follows_and_quit_is_clean(tmp_path):
    script = [
        reply(text("Measuring the starting point."), tool_use("evaluate", {})),
        reply(text("Now the edit."), edit(1.0, 1.3)),
        reply(tool_use("evaluate", {})),
        reply(text("Done for now.")),
    ]
    async with live(tmp_path, script) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: len(log.of(ev.Accepted)) == 1 and session.state.status == "idle")
        # Deltas reach the screen merged, so wait for what the last events show, not for a count.
        await until(pilot, lambda: main.speedup.state.best_commit == log.of(ev.Accepted)[-1].commit
                    and any("Done for now." in b.body for b in main.transcript.state.blocks))
        accepted, (start,) = log.of(ev.Accepted), log.of(ev.StartingPoint)
        # The speedup panel shows what the session measured, nothing else: the start (the kernel as
        # brought), the agent's measurement of it (no gain, rejected) and the accepted edit.
        assert main.speedup.state.best == accepted[-1].geomean == session.state.best_geomean
        assert main.speedup.state.best_commit == accepted[-1].commit
        assert main.speedup.state.start == start.geomean and accepted[-1].previous == start.geomean
        assert [p.accepted for p in main.speedup.state.points] == [True, False, True]
        assert "start " in str(main.speedup.query_one("#summary").render())
        # The source pane reloaded the agent's edit; the accepted version is the new baseline.
        await until(pilot, lambda: "speedup=1.3" in main.source.state.text)
        assert main.source.state.changed == set()
        blocks = main.transcript.state.blocks
        assert [b.status for b in blocks if b.kind == "eval"] == ["accepted", "rejected", "accepted"]
        assert "START" in [b for b in blocks if b.kind == "eval"][0].title
        assert any(b.kind == "tool" and b.title.startswith("edit_file k.cu") and b.status == "ok" for b in blocks)
        assert any(b.kind == "text" and "Done for now." in b.body for b in blocks)
        # h shows the commit the session made.
        await pilot.press("h")
        await until(pilot, lambda: showing(app, HistoryScreen))
        assert app.screen.query_one("#commits").row_count == 2
        assert app.screen.shown == accepted[-1].commit
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is main
        # The agent is idle: q quits at once, after the session stopped.
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
    events = list(read_trace(session.trace_file))
    assert isinstance(events[-1], ev.SessionEnded)
    assert session.history.tip() == accepted[-1].commit


async def test_question_box_queues_for_the_boundary_and_letters_do_not_fire_keys(tmp_path):
    seen: list[str] = []

    def script(body: dict[str, Any], index: int):
        seen.append(last_user_text(body))
        return [reply(text("Ready.")), reply(text("Looking at the SASS now."))][index]

    async with live(tmp_path, script) as (app, pilot, session, log):
        await until(pilot, lambda: session.state.status == "idle" and len(seen) == 1)
        await pilot.press("a")
        assert app.main.box.has_focus
        # b h p e q ? typed into the box are text, not keys.
        await pilot.press(*"bhpeq?")
        await pilot.pause()
        assert app.screen is app.main and app.main.box.value == "bhpeq?" and not session.state.paused
        app.main.box.value = ""
        await pilot.press(*"what does the SASS say?", "enter")
        await until(pilot, lambda: len(log.of(ev.QuestionAsked)) == 1 and len(seen) == 2)
        asked = log.of(ev.QuestionAsked)[0]
        assert asked.source == "human" and asked.text == "what does the SASS say?"
        assert "what does the SASS say?" in seen[1]
        await until(pilot, lambda: any(b.kind == "question" for b in app.main.transcript.state.blocks))
        question = next(b for b in app.main.transcript.state.blocks if b.kind == "question")
        assert question.source == "human" and "you asked" in question.title


async def test_pause_then_queue_is_visible_editable_and_removable(tmp_path):
    seen: list[str] = []
    script = numbered_replies(seen)

    async with live(tmp_path, script) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: session.state.status == "idle" and len(seen) == 1)
        await pilot.press("p")
        await until(pilot, lambda: main.status == "paused")
        assert not main.check_action("pause", ()) and main.check_action("resume", ())
        await pilot.press("a", *"first", "enter")
        await pilot.press(*"second", "enter")
        await pilot.press(*"third", "enter")
        await until(pilot, lambda: main.queue.option_count == 3)
        assert main.queue.display and [q.text for q in session.queue] == ["first", "second", "third"]
        main.queue.focus()
        main.queue.highlighted = 0
        await pilot.press("x")
        await until(pilot, lambda: [q.text for q in session.queue] == ["second", "third"])
        await pilot.press("enter")  # edit "second" in the box
        assert main.box.has_focus and main.box.value == "second"
        main.box.value = "second, sharpened"
        await pilot.press("enter")
        await until(pilot, lambda: [q.text for q in session.queue] == ["second, sharpened", "third"])
        main.transcript.focus()
        await pilot.press("p")  # resume: the first queued question is delivered at the boundary
        await until(pilot, lambda: len(seen) >= 2)
        assert "second, sharpened" in seen[1]


async def test_ctrl_s_interrupts_the_stream_and_asks_now(tmp_path):
    seen: list[str] = []
    long_reply = "Let me think about the memory system in detail. " * 40

    def script(body: dict[str, Any], index: int):
        seen.append(last_user_text(body))
        if index == 0:
            return reply(text(long_reply, chunks=80), delay_s=0.05)
        return reply(text("Answering your question."))

    async with live(tmp_path, script) as (app, pilot, session, log):
        await until(pilot, lambda: len(log.of(ev.TextDelta)) >= 1)
        await pilot.press("a")
        app.main.box.value = "stop: is it compute-bound?"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(seen) >= 2)
        queued = log.of(ev.QuestionQueued)
        assert queued and queued[0].interrupt
        assert any(m.interrupted for m in log.of(ev.AssistantMessage))
        assert "is it compute-bound?" in seen[1]
        await until(pilot, lambda: any("interrupted" in b.title for b in app.main.transcript.state.blocks))


def long_reply_then_ok(body: dict[str, Any], index: int):
    """A first reply that streams for about 4 s (80 deltas, 50 ms apart), then short ones."""
    if index == 0:
        return reply(text("A long look at the loads. " * 60, chunks=80), delay_s=0.05)
    return reply(text("ok"))


async def test_escape_leaves_the_box_then_interrupts(tmp_path):
    async with live(tmp_path, long_reply_then_ok) as (app, pilot, session, log):
        await until(pilot, lambda: len(log.of(ev.TextDelta)) >= 1)
        await pilot.press("a")
        await pilot.press("escape")
        assert not app.main.box.has_focus and not log.of(ev.AssistantMessage)
        await pilot.press("escape")
        await until(pilot, lambda: bool(log.of(ev.AssistantMessage)))
        assert log.of(ev.AssistantMessage)[0].interrupted


async def test_bank_picker_filters_sends_and_edits_first(tmp_path):
    seen: list[str] = []
    script = numbered_replies(seen)

    async with live(tmp_path, script) as (app, pilot, session, log):
        await until(pilot, lambda: session.state.status == "idle" and len(seen) == 1)
        await pilot.press("b")
        await pilot.pause()
        bank = app.screen
        assert isinstance(bank, BankScreen)
        await pilot.press(*"sass")
        await pilot.pause()
        chosen = bank.selected()
        assert chosen is not None and "sass" in f"{chosen.text} {chosen.id}".lower()
        await pilot.press("enter")
        await until(pilot, lambda: len(log.of(ev.QuestionAsked)) == 1)
        asked = log.of(ev.QuestionAsked)[0]
        assert asked.source == "bank" and asked.question_id == chosen.id and asked.text == chosen.text
        # ctrl+e: into the box first, sent as a bank question once edited.
        await until(pilot, lambda: session.state.status == "idle")
        await pilot.press("b")
        await pilot.pause()
        second = app.screen.selected()
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert app.main.box.has_focus and app.main.box.value == second.text
        await pilot.press(*" Be specific.", "enter")
        await until(pilot, lambda: len(log.of(ev.QuestionAsked)) == 2)
        edited = log.of(ev.QuestionAsked)[1]
        assert edited.source == "bank" and edited.text == f"{second.text} Be specific."


async def test_stall_lights_up_b_and_the_bank_puts_stall_questions_first(tmp_path):
    script = [reply(tool_use("evaluate", {})) for _ in range(4)] + [reply(text("I am stuck."))]
    async with live(tmp_path, script, stall_evals=2) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: bool(log.of(ev.Stalled)))
        await until(pilot, lambda: main.speedup.state.stalled is not None)
        assert main.has_class("-stalled") and main.speedup.query_one("#stall").display
        # The footer rebuilds itself when bindings change: wait for its keys, then look at them.
        await until(pilot, lambda: any(k.key == "b" for k in main.footer.query(FooterKey)))
        keys = {k.key: k for k in main.footer.query(FooterKey)}
        assert keys["b"].has_class("-alert") and not keys["h"].has_class("-alert")
        await pilot.press("b")
        await pilot.pause()
        bank = app.screen
        assert isinstance(bank, BankScreen) and bank.trigger == "stall"
        assert bank.selected().when == "stall"
        await pilot.press("enter")
        await until(pilot, lambda: bool(log.of(ev.QuestionAsked)))
        await until(pilot, lambda: not main.has_class("-stalled"))


async def test_manual_mode_says_how_to_enable_the_agent_and_e_evaluates(tmp_path):
    executor = FakeExecutor()
    async with live(tmp_path, None, executor=executor) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: any("--no-agent" in b.title for b in main.transcript.state.blocks))
        assert "ANTHROPIC_API_KEY" in next(b.title for b in main.transcript.state.blocks if "--no-agent" in b.title)
        # The screen takes the mode from SessionStarted after the transcript has shown it.
        await until(pilot, lambda: main.mode == "manual")
        assert not main.check_action("bank", ()) and main.check_action("evaluate", ())
        await until(pilot, lambda: bool(log.of(ev.StartingPoint)))  # the kernel as brought, evaluated at start
        await pilot.press("e")
        await until(pilot, lambda: len(log.of(ev.EvaluationFinished)) == 2)
        # a copy of the kernel as saved, outside the workspace
        evaluated = executor.calls[1][0] if len(executor.calls) == 2 else None
        assert evaluated is not None and evaluated.name == session.kernel.name
        assert not evaluated.is_relative_to(session.kernel.parent)
        await until(pilot, lambda: main.speedup.state.latest is not None)


async def test_e_while_an_evaluation_runs_says_it_waits_and_then_runs(tmp_path):
    executor = FakeExecutor(delay_s=1.0)
    async with live(tmp_path, None, executor=executor) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: main.mode == "manual")
        await until(pilot, lambda: bool(log.of(ev.StartingPoint)), timeout=10)
        await pilot.press("e")
        await until(pilot, lambda: session.evaluating)
        assert not any("starts when it ends" in n.message for n in app._notifications)
        await pilot.press("e")
        await pilot.pause()
        assert any("starts when it ends" in n.message for n in app._notifications)
        await until(pilot, lambda: len(log.of(ev.EvaluationFinished)) == 3, timeout=10)
        assert len(executor.calls) == 3


async def test_the_kept_history_screen_shows_what_was_accepted_since_the_last_visit(tmp_path):
    async with live(tmp_path, None) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: main.mode == "manual" and bool(log.of(ev.StartingPoint)))
        await pilot.press("h")
        await until(pilot, lambda: showing(app, HistoryScreen))
        screen = app.screen
        await until(pilot, lambda: screen.query_one("#commits").row_count == 1)  # the start
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is main)
        session.kernel.write_text(kernel_text(1.4))  # manual mode: the save is evaluated
        await until(pilot, lambda: bool(log.of(ev.Accepted)))
        await pilot.press("h")
        await until(pilot, lambda: app.screen is screen)  # the same screen, kept
        await until(pilot, lambda: screen.query_one("#commits").row_count == 2)
        assert screen.shown == log.of(ev.Accepted)[0].commit


async def test_executor_failure_is_a_notification_and_a_transcript_entry(tmp_path):
    script = [reply(tool_use("evaluate", {})), reply(text("The evaluation failed."))]
    async with live(tmp_path, script, kernel_extra="\n// fake: executor-error\n") as (app, pilot, session, log):
        await until(pilot, lambda: any(e.error for e in log.of(ev.EvaluationFinished)))
        await until(pilot, lambda: any(b.kind == "eval" and b.status == "error" for b in app.main.transcript.state.blocks))
        assert any("unreachable" in n.message for n in app._notifications)
        assert app.is_running


async def test_quit_while_evaluating_asks_first(tmp_path):
    script = [reply(tool_use("evaluate", {})), reply(text("done"))]
    async with live(tmp_path, script, executor=FakeExecutor(delay_s=30)) as (app, pilot, session, log):
        await until(pilot, lambda: app.main.status == "evaluating")
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is app.main and app.is_running
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running)
    assert isinstance(list(read_trace(session.trace_file))[-1], ev.SessionEnded)


async def test_a_pause_asked_while_the_agent_streams_waits_for_the_turn_and_quit_still_asks(tmp_path):
    async with live(tmp_path, long_reply_then_ok) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: len(log.of(ev.TextDelta)) >= 1)
        await pilot.press("p")
        await until(pilot, lambda: "pausing after this step" in str(main.query_one("#status").render()))
        assert main.status == "thinking" and main.check_action("resume", ()) and not main.check_action("pause", ())
        await pilot.press("q")  # the agent is still working: quitting asks first
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.press("p")  # taken back before the turn ended
        await until(pilot, lambda: "pausing" not in str(main.query_one("#status").render()))
        assert main.check_action("pause", ()) and main.status == "thinking"
        await pilot.press("p")
        await until(pilot, lambda: main.status == "paused", timeout=30)  # held once the reply is in
        assert "pausing" not in str(main.query_one("#status").render())
        assert not log.of(ev.QuestionAsked) and len(log.of(ev.TurnStarted)) == 1


async def test_confirm_shell_asks_before_the_agents_command_runs(tmp_path):
    marker = tmp_path / "ws" / "ran.txt"
    script = [
        reply(tool_use("bash", {"command": f"touch {marker} [x]"})),
        reply(tool_use("bash", {"command": f"touch {marker}"})),
        reply(text("ok")),
    ]
    async with live(tmp_path, script, confirm_shell=True) as (app, pilot, session, log):
        await until(pilot, lambda: showing(app, ConfirmScreen))
        assert f"touch {marker} [x]" in str(app.screen.query_one("#question").render())
        await pilot.press("n")
        await until(pilot, lambda: len(log.of(ev.ToolCallFinished)) == 1)
        assert log.of(ev.ToolCallFinished)[0].is_error and not marker.exists()
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: len(log.of(ev.ToolCallFinished)) == 2)
        assert marker.exists()
