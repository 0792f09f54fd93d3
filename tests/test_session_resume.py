"""Resume: a headless `kstui run` process is SIGKILLed mid-stream and continued with --resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import make_workspace
from messages_server import MessagesServer, reply, text, tool_use

from kstui.engine.events import (
    Accepted,
    EvaluationStarted,
    Rejected,
    SessionStarted,
    StartingPoint,
    ToolCallFinished,
)
from kstui.engine.trace import read_trace

ROOT = Path(__file__).resolve().parent.parent
FAKES = Path(__file__).resolve().parent / "fakes.py"
KEY = "sk-ant-resume-test-key-0000"


def _env(tmp_path: Path, server: MessagesServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "KSTUI_"))}
    env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=server.url, KSTUI_THINKING="0",
               HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"),
               PYTHONPATH=str(ROOT))
    return env


def _kstui(kernel: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kstui", "run", str(kernel), "--headless",
            "--eval-cmd", f"{sys.executable} {FAKES} {{file}}", *extra]


def test_sigkilled_session_resumes_from_its_trace(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    first = [
        reply(text("Baseline first."), tool_use("evaluate", {})),
        reply(tool_use("edit_file", {"path": "k.cu", "old_string": "speedup=1.0", "new_string": "speedup=1.3"})),
        reply(text("Now I will think for a very long time about what to do next. " * 40, chunks=200), delay_s=0.05),
    ]
    with MessagesServer(first) as server:
        proc = subprocess.Popen(_kstui(kernel), env=_env(tmp_path, server), cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while len(server.requests) < 3 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            time.sleep(1.0)  # mid-stream of the third reply
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            proc.stdout.close()  # type: ignore[union-attr]
    traces = list((kernel.parent / ".kstui" / "sessions").glob("*/trace.jsonl"))
    assert len(traces) == 1
    before = list(read_trace(traces[0]))
    assert [type(e) for e in before].count(StartingPoint) == 1
    assert [type(e) for e in before].count(Rejected) == 1  # the agent's unchanged kernel does not beat the start
    assert "speedup=1.3" in kernel.read_text()

    seen: list[dict[str, Any]] = []

    def second(body: dict[str, Any], index: int):
        seen.append(body)
        return [reply(tool_use("evaluate", {})), reply(text("Done."))][index]

    with MessagesServer(second) as server:
        done = subprocess.run(_kstui(kernel, "--resume"), env=_env(tmp_path, server), cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(resumed)" in done.stdout and "best: " in done.stdout

    messages = seen[0]["messages"]
    assert messages[0]["role"] == "user" and "k.cu" in messages[0]["content"][0]["text"]
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in zip(roles, roles[1:])), roles  # a valid, alternating conversation
    results = [b for m in messages if m["role"] == "user" for b in m["content"] if b.get("type") == "tool_result"]
    assert len(results) == 2 and "REJECTED" in results[0]["content"] and not results[1]["is_error"]

    after = list(read_trace(traces[0]))  # the same trace continues
    starts = [e for e in after if isinstance(e, SessionStarted)]
    assert [s.resumed for s in starts] == [False, True]
    assert [e.eval_no for e in after if isinstance(e, EvaluationStarted)] == [1, 2, 3]
    assert len([e for e in after if isinstance(e, StartingPoint)]) == 1  # the resumed run keeps its start
    (accepted,) = [e for e in after if isinstance(e, Accepted)]
    assert accepted.eval_no == 3 and accepted.previous == pytest.approx(1.0, rel=0.01)
    assert len([e for e in after if isinstance(e, ToolCallFinished)]) == 3
    assert KEY not in traces[0].read_text()
