"""The real `kstui` entry point in a real terminal (tmux): the agent (loopback Messages server through
ANTHROPIC_BASE_URL) edits, the evaluation (a command printing a real-schema EvalResult) accepts, the
history screen shows the commit, q leaves git and the trace consistent."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakes import make_workspace  # noqa: E402
from messages_server import MessagesServer, reply, text, tool_use  # noqa: E402

from kstui.engine import events as ev  # noqa: E402
from kstui.engine.history import History  # noqa: E402
from kstui.engine.trace import latest_session, read_trace, trace_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KSTUI = Path(sys.executable).with_name("kstui")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or not KSTUI.exists(), reason="needs tmux and kstui")


# A private server with no config: another tmux server on the machine (its sizes, its options) must
# not decide this terminal's size.
SERVER = ["tmux", "-L", f"kstui-test-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]


def tmux(*args: str) -> str:
    return subprocess.run([*SERVER, *args], capture_output=True, text=True, check=True).stdout


def screen_of(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_for(name: str, needle: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = screen_of(name)
        if needle in screen:
            return screen
        if time.monotonic() > deadline:
            size = tmux("display", "-p", "-t", name, "#{window_width}x#{window_height}").strip()
            raise AssertionError(f"{needle!r} never appeared; the {size} terminal shows:\n{screen}")
        time.sleep(0.2)


def test_kstui_in_tmux_edits_accepts_and_shows_the_commit(tmp_path):
    kernel = make_workspace(tmp_path / "ws", speedup=1.0)
    script = [
        reply(text("Editing the kernel."),
              tool_use("edit_file", {"path": "k.cu", "old_string": "speedup=1.0", "new_string": "speedup=1.4"})),
        reply(tool_use("evaluate", {})),
        reply(text("The new version is accepted.")),
    ]
    name = f"kstui-test-{uuid.uuid4().hex[:8]}"
    eval_cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'tests' / 'fakes.py'))} {{file}} --json -"
    with MessagesServer(script) as server:
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-test-tmux-0123456789",
               "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
        command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()),
                              str(KSTUI), str(kernel), "--eval-cmd", eval_cmd])
        tmux("new-session", "-d", "-s", name, "-x", "140", "-y", "40", "-c", str(tmp_path),
             # tmux may size a new detached pane after its first process has started; a short wait
             # lets kstui see the final 140x40 rather than the 80x24 default.
             f"sleep 0.5; {command}; echo KSTUI-EXIT=$?; sleep 60")
        try:
            screen = wait_for(name, "ACCEPTED")
            assert "The new version is accepted." in wait_for(name, "The new version is accepted.")
            history = History(kernel)
            tip = history.entries()[0]
            assert "speedup=1.4" in history.content_at(tip.sha)
            screen = wait_for(name, f"best {tip.geomean:.3f}×")
            tmux("send-keys", "-t", name, "h")
            screen = wait_for(name, tip.sha[:8])
            assert "history" in screen
            tmux("send-keys", "-t", name, "Escape")
            wait_for(name, "transcript")
            tmux("send-keys", "-t", name, "q")
            screen = wait_for(name, "KSTUI-EXIT=0")
        finally:
            subprocess.run([*SERVER, "kill-server"], capture_output=True)
    trace = trace_path(latest_session(kernel.parent, kernel))
    events = list(read_trace(trace))
    assert isinstance(events[-1], ev.SessionEnded)
    assert "sk-ant-test-tmux-0123456789" not in trace.read_text()
    assert [e.commit for e in events if isinstance(e, ev.Accepted)][-1] == History(kernel).entries()[0].sha
    assert "speedup=1.4" in kernel.read_text()
