"""Ctrl-C and SIGTERM end kstui within 2 s with the evaluation's processes gone, the trace closed and
nothing printed from asyncio; a second signal ends it at once; a SIGKILLed kstui leaves no evaluation
behind. Real `kstui` processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from process_support import ROOT, start_hanging_eval, wait_gone

from kstui.engine import events as ev
from kstui.engine.trace import latest_session, read_trace, trace_path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_headless_stops_within_two_seconds_of_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    proc, kernel, eval_pid = start_hanging_eval(tmp_path)
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=2.0)
    finally:
        proc.kill()
    assert time.monotonic() - sent < 2.0
    assert wait_gone(eval_pid, 1.0), "the evaluation outlived kstui"
    assert "session ended: stopped" in out
    assert "Traceback" not in err and "RecursionError" not in err and "never retrieved" not in err, err
    events = list(read_trace(trace_path(latest_session(kernel.parent, kernel))))
    assert isinstance(events[-1], ev.SessionEnded) and events[-1].reason == "stopped"


_BLOCKED = textwrap.dedent("""
    import asyncio, sys, time
    from kstui.stopping import StopSignals

    async def main():
        # on_stop does nothing and the loop is then blocked: only the deadline or a second signal ends it
        StopSignals(asyncio.get_running_loop(), lambda: time.sleep(60), grace_s=float(sys.argv[1])).install()
        print("ready", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
""")


def _blocked(grace_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED, str(grace_s)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_a_stuck_stop_ends_at_the_deadline() -> None:
    proc = _blocked(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 128 + signal.SIGTERM
    assert 0.9 < time.monotonic() - sent < 2.0


def test_a_second_ctrl_c_exits_at_once() -> None:
    proc = _blocked(30.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None  # the first one waits for the session
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=5) == 128 + signal.SIGINT
    assert time.monotonic() - sent < 1.0


def test_a_sigkilled_kstui_leaves_no_evaluation_running(tmp_path: Path) -> None:
    proc, _, eval_pid = start_hanging_eval(tmp_path)
    proc.kill()
    proc.wait()
    assert wait_gone(eval_pid, 2.0), "the evaluation's shell outlived a SIGKILLed kstui"


def test_the_tui_leaves_within_two_seconds_of_sigterm_and_gives_the_terminal_back(tmp_path: Path) -> None:
    import shlex
    import shutil
    import uuid

    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    from fakes import make_workspace

    kernel = make_workspace(tmp_path / "ws", 1.0)
    pidfile = tmp_path / "eval.pid"
    eval_cmd = f"echo $$ > {shlex.quote(str(pidfile))}; sleep 300; echo {{file}}"
    server = ["tmux", "-L", f"kstui-stop-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    command = shlex.join(["env", "TERM=xterm-256color", f"PYTHONPATH={ROOT}", sys.executable, "-m", "kstui",
                          str(kernel), "--no-agent", "--eval-cmd", eval_cmd])
    subprocess.run([*server, "new-session", "-d", "-s", "t", "-x", "120", "-y", "30",
                    f"{command}; echo KSTUI-EXIT=$?; sleep 60"], check=True)
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline, "the evaluation never started"
            time.sleep(0.1)
        shell = subprocess.run([*server, "display", "-p", "-t", "t", "#{pane_pid}"], capture_output=True,
                               text=True, check=True).stdout.strip()
        kstui = int(subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True).stdout.split()[0])
        sent = time.monotonic()
        os.kill(kstui, signal.SIGTERM)
        while "KSTUI-EXIT=" not in (screen := subprocess.run([*server, "capture-pane", "-p", "-t", "t"],
                                                             capture_output=True, text=True).stdout):
            assert time.monotonic() - sent < 2.0, f"still running 2 s after SIGTERM:\n{screen}"
            time.sleep(0.05)
        assert "transcript" not in screen  # the alternate screen is gone: the shell's own lines show
        assert wait_gone(int(pidfile.read_text()), 1.0)
    finally:
        subprocess.run([*server, "kill-server"], capture_output=True)



@pytest.mark.parametrize("confined", [False, True], ids=["unconfined", "sandboxed"])
def test_a_sigkilled_kstui_leaves_no_bash_command_of_the_agent_running(tmp_path: Path, confined: bool) -> None:
    from fakes import make_workspace
    from messages_server import MessagesServer, reply, text, tool_use

    from kstui.engine.sandbox import detect

    if confined and detect() is None:
        pytest.skip("needs bubblewrap")
    kernel = make_workspace(tmp_path / "ws", 1.0)
    # A background job beside the shell, as an agent's `make &` would leave; found by its unusual argv.
    script = [reply(tool_use("bash", {"command": "sleep 301 & wait"})), reply(text("done"))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    if not confined:
        env["KSTUI_BWRAP"] = str(tmp_path / "no-bwrap")  # bubblewrap absent: bash only with --unconfined-shell
    with MessagesServer(script) as server:
        env.update(ANTHROPIC_API_KEY="sk-ant-stop-0000000000", ANTHROPIC_BASE_URL=server.url, KSTUI_THINKING="0",
                   PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"))
        proc = subprocess.Popen([sys.executable, "-m", "kstui", "run", str(kernel), "--headless", "--eval-cmd",
                                 "sleep 300; echo {file}", *([] if confined else ["--unconfined-shell"])],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
        try:
            deadline = time.monotonic() + 60
            while not (pids := _sleeping(kernel.parent)):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the agent's command never started"
                time.sleep(0.05)
            proc.kill()
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert all(wait_gone(pid, 2.0) for pid in pids), "the agent's command outlived a SIGKILLed kstui"


def _sleeping(workspace: Path) -> list[int]:
    """The host's pids of `sleep 301` running in the workspace."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes() == b"sleep\x00301\x00" \
                    and Path(os.readlink(p / "cwd")) == workspace:
                found.append(int(p.name))
        except OSError:
            continue
    return found
