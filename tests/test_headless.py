"""The headless printer: compact lines, streamed text joined into whole lines, the best result last."""

from __future__ import annotations

import io
from pathlib import Path

from fakes import FakeExecutor, kernel_text, make_workspace
from messages_server import MessagesServer, reply, text, tool_use

from kstui.engine.config import SessionConfig
from kstui.engine.events import Accepted, Rejected, TextDelta, ThinkingDelta, ToolCallStarted
from kstui.engine.session import Session
from kstui.views.headless import HeadlessPrinter, run_headless


def test_deltas_are_joined_into_lines() -> None:
    out = io.StringIO()
    p = HeadlessPrinter(out)
    for chunk in ["Hel", "lo wo", "rld\nsecond ", "line"]:
        p(TextDelta(turn=1, text=chunk))
    p(ThinkingDelta(turn=1, text="hmm"))
    p(ToolCallStarted(turn=1, call_id="c", name="read_file", input={"path": "k.cu"}))
    assert out.getvalue().splitlines() == ["  Hello world", "  second line", "  ~ hmm", "tool read_file path=k.cu"]


def test_accepted_and_rejected_lines() -> None:
    out = io.StringIO()
    p = HeadlessPrinter(out)
    p(Accepted(eval_no=3, commit="0123456789abcdef", geomean=0.57, previous=0.41, correct=180, total=180,
               message="k: 0.41x -> 0.57x geomean (180/180 correct)"))
    p(Rejected(eval_no=4, reason="179/180 correct; s1: wrong", geomean=None))
    assert out.getvalue().splitlines() == [
        "ACCEPTED #3 01234567: 0.57x (was 0.41x) — k: 0.41x -> 0.57x geomean (180/180 correct)",
        "rejected #4: 179/180 correct; s1: wrong",
    ]


def _config(kernel: Path, server: MessagesServer) -> SessionConfig:
    return SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="sk-ant-headless-test",
                         base_url=server.url, thinking_budget=0)


async def test_headless_session_prints_and_exits_zero_when_accepted(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    faster = tool_use("edit_file", {"path": "k.cu", "old_string": "speedup=1.0", "new_string": "speedup=1.3"})
    script = [reply(text("Making it faster.\nThen measuring it.", chunks=9), faster, tool_use("evaluate", {})),
              reply(text("Done."))]
    with MessagesServer(script) as server:
        out = io.StringIO()
        code = await run_headless(Session.build(_config(kernel, server), FakeExecutor()), out)
    lines = out.getvalue().splitlines()
    assert code == 0
    assert "  Making it faster." in lines and "  Then measuring it." in lines
    assert any(line.startswith("start: ") and "x geomean (4/4 correct), commit " in line for line in lines)
    assert any(line.startswith("ACCEPTED #2 ") for line in lines)
    progress = [i for i, line in enumerate(lines) if line.startswith("eval #1: correctness 1/4")]
    assert len(progress) == 1 and lines[progress[0] - 1].startswith("eval #1 started")  # while it runs
    assert lines[-2] == "session ended: agent finished"
    assert lines[-1].startswith("best: 1.3x geomean (4/4 correct), commit ")
    assert "1 accepted in this session, 2 evaluations" in lines[-1]


async def test_headless_exit_code_is_one_when_nothing_was_accepted(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    kernel.write_text(kernel_text(1.0, "// fake: build-error\n"))
    with MessagesServer([reply(tool_use("evaluate", {})), reply(text("It does not build."))]) as server:
        out = io.StringIO()
        code = await run_headless(Session.build(_config(kernel, server), FakeExecutor()), out)
    text_out = out.getvalue()
    assert code == 1
    assert "start: your kernel does not pass as brought (build failed: k.cu:4: expected a ';')" in text_out
    assert "rejected #2: build failed: k.cu:4: expected a ';'" in text_out
    assert text_out.splitlines()[-1] == "best: nothing accepted (2 evaluations)"


async def test_headless_output_holds_no_secret_and_no_terminal_control(tmp_path: Path, monkeypatch) -> None:
    key = "sk-ant-printed-0123456789abcdefgh"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("DEPLOY_TOKEN", "tok-abcdefghijklmnop")
    kernel = make_workspace(tmp_path / "ws", 1.0)
    hostile = f"the key is {key[:12]}" + f"{key[12:]} and tok-abcdefghijklmnop \x1b]52;c;cHduZWQ=\x07\x1b[2J done"
    script = [reply(text(hostile, chunks=7), tool_use("read_file", {"path": f"{key}.cu"})), reply(text("Done."))]
    with MessagesServer(script) as server:
        out = io.StringIO()
        await run_headless(Session.build(_config(kernel, server), FakeExecutor()), out)
    printed = out.getvalue()
    assert key not in printed and "tok-abcdefghijklmnop" not in printed and "[redacted]" in printed
    assert "\x1b" not in printed and "\x07" not in printed and "\\x1b]52;c;" in printed


def test_one_evaluation_is_singular_and_the_sandbox_line_is_labelled() -> None:
    from types import SimpleNamespace

    from kstui.engine.events import SessionStarted
    from kstui.views.headless import best_line, format_event

    session = SimpleNamespace(history=SimpleNamespace(best=lambda: None), state=SimpleNamespace(evals=1))
    assert best_line(session) == "best: nothing accepted (1 evaluation)"  # type: ignore[arg-type]
    line = format_event(SessionStarted(session_id="s", kernel="k.cu", mode="agent", model=None, branch="kstui/k",
                                       sandbox="bubblewrap"))
    assert line is not None and line.splitlines()[1] == "  agent's shell: bubblewrap"


async def test_meta_json_names_the_model_of_an_agent_session(tmp_path: Path) -> None:
    import json

    kernel = make_workspace(tmp_path / "ws", 1.0)
    with MessagesServer([reply(text("Nothing to do."))]) as server:
        session = Session.build(_config(kernel, server), FakeExecutor())
        await run_headless(session, io.StringIO())
    meta = json.loads((session.trace_file.parent / "meta.json").read_text())
    assert meta["model"] == session.agent.config.model and meta["model"]
