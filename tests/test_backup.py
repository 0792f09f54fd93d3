"""Nothing kstui writes over the kernel is lost: uncommitted content is saved under refs/kstui/backups first."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from fakes import EventLog, FakeExecutor, kernel_text, make_workspace
from test_history import make_result, user_repo

from kstui.engine.config import SessionConfig
from kstui.engine.events import Notice, StartingPoint
from kstui.engine.history import History
from kstui.engine.session import Session


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_restore_saves_uncommitted_edits_first_and_only_once(tmp_path: Path) -> None:
    repo = user_repo(tmp_path)
    kernel = repo / "src" / "flash_fwd.cu"
    h = History(kernel)
    s1 = h.commit_accepted("one\n", make_result([0.5]), previous=None, turn=1, question=None,
                           question_source=None, eval_no=1).sha
    kernel.write_text("a day of hand edits\n")
    head, status = git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")
    h.restore(s1)
    assert kernel.read_text() == "one\n"
    backup = h.last_backup
    assert backup is not None
    assert git(repo, "show", "refs/kstui/backups/kstui/flash_fwd:src/flash_fwd.cu") == "a day of hand edits\n"
    assert git(repo, "rev-parse", "refs/kstui/backups/kstui/flash_fwd").strip() == backup
    assert "saved as " + backup[:8] in (h.backup_said() or "")
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == status
    h.restore(s1)  # the file now holds an accepted version: nothing to save
    assert h.last_backup is None and h.backup_said() is None
    kernel.write_text("more edits\n")
    h.restore(s1)
    assert git(repo, "rev-parse", f"{h.last_backup}^").strip() == backup  # backups form a chain
    git(repo, "checkout", "-q", "--", "src/flash_fwd.cu")  # the user's HEAD version needs no backup
    h.restore(s1)
    assert h.last_backup is None


async def test_a_rewind_over_unsaved_edits_says_where_they_went(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    session = Session(SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, wait_for_human=False),
                      executor=FakeExecutor(), agent=None)
    log = EventLog()
    session.subscribe(log)
    task = asyncio.ensure_future(session.run())
    start = (await log.wait_for(StartingPoint))[0].commit
    session.file.path.write_text(kernel_text(1.0, "// my edit, not evaluated yet\n"))
    await session.rewind(start)
    await session.stop()
    await task
    notices = [n for n in log.of(Notice) if "held changes in no commit" in n.message]
    assert len(notices) == 1
    assert "// my edit" in git(kernel.parent, "show", f"refs/kstui/backups/{session.history.branch}:k.cu")
