"""kstui never advances a branch checked out in any worktree: it stops with one line (and --resume is refused)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import EventLog, FakeExecutor, kernel_text, make_workspace

from kstui.engine.config import SessionConfig
from kstui.engine.events import Accepted, Error, Rejected, StartingPoint
from kstui.engine.session import Session

ROOT = Path(__file__).resolve().parents[1]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _repo(tmp_path: Path) -> Path:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    git(kernel.parent, "init", "-q", "-b", "main")
    git(kernel.parent, "add", "-A")  # the kernel and its task file, as a user keeps them
    git(kernel.parent, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "init")
    return kernel


@pytest.mark.parametrize("how", ["switch", "worktree"])
async def test_a_session_stops_when_its_branch_is_checked_out(tmp_path: Path, how: str) -> None:
    kernel = _repo(tmp_path)
    session = Session(SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True), executor=FakeExecutor(),
                      agent=None)
    log = EventLog()
    session.subscribe(log)
    task = asyncio.ensure_future(session.run())
    start = (await log.wait_for(StartingPoint))[0].commit
    if how == "switch":
        git(kernel.parent, "stash", "-u", "-q")
        git(kernel.parent, "switch", "-q", "kstui/k")
    else:
        git(kernel.parent, "worktree", "add", "-q", str(tmp_path / "other"), "kstui/k")
    kernel.write_text(kernel_text(1.5))  # a faster version, saved: evaluated in manual mode
    summary = await asyncio.wait_for(task, 20)
    assert summary.reason == "branch checked out"
    assert git(kernel.parent, "rev-parse", "kstui/k").strip() == start  # the branch did not move
    assert log.of(Accepted) == [] and len(log.of(Rejected)) == 1
    errors = [e for e in log.of(Error) if e.where == "git"]
    assert len(errors) == 1 and "checked out" in errors[0].message and "\n" not in errors[0].message


def test_resume_is_refused_while_the_branch_is_checked_out_elsewhere(tmp_path: Path) -> None:
    kernel = _repo(tmp_path)
    git(kernel.parent, "branch", "kstui/k")
    git(kernel.parent, "worktree", "add", "-q", str(tmp_path / "other"), "kstui/k")
    done = subprocess.run([sys.executable, "-m", "kstui", "run", str(kernel), "--headless", "--no-agent"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert done.stderr.startswith("kstui: branch 'kstui/k' is checked out in ") and done.stderr.count("\n") == 1
