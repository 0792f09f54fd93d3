"""A kill at each step of a commit (commit object, note, branch update, before the event) leaves git and
the trace consistent after --resume: every version on kstui's branch has its note and its event."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fakes import FakeExecutor, make_workspace

from kstui.engine import events as ev
from kstui.engine.config import SessionConfig
from kstui.engine.history import History
from kstui.engine.session import Session
from kstui.engine.trace import latest_session, read_trace, trace_path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = textwrap.dedent("""
    import asyncio, os, sys
    from pathlib import Path
    from fakes import FakeExecutor, kernel_text
    from kstui.engine import events as ev, history
    from kstui.engine.config import SessionConfig
    from kstui.engine.session import Session

    kernel, step, nth = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    seen = []

    def hook(name):
        seen.append(name)
        if name == step and seen.count(step) == nth:
            os._exit(137)  # as a SIGKILL would: no cleanup, no further event

    history.STEP_HOOK = hook

    async def main():
        session = Session(SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True), executor=FakeExecutor(),
                          agent=None)
        task = asyncio.ensure_future(session.run())
        while session.state.evals < 1 or session.evaluating:
            await asyncio.sleep(0.05)
        kernel.write_text(kernel_text(1.5))
        await session.evaluate_now()
        await session.stop()
        await task

    asyncio.run(main())
""")


@pytest.mark.parametrize("step", ["committed", "noted", "advanced"])
@pytest.mark.parametrize("nth", [1, 2], ids=["start", "accepted"])
def test_a_kill_between_the_steps_of_a_commit_is_reconciled_on_resume(tmp_path: Path, step: str, nth: int) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    child = subprocess.run([sys.executable, "-c", _CHILD, str(kernel), step, str(nth)], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    assert child.returncode == 137, child.stderr

    async def resume() -> None:
        session = Session(SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, resume=True),
                          executor=FakeExecutor(), agent=None)
        task = asyncio.ensure_future(session.run())
        await asyncio.sleep(0.3)
        await session.stop()
        await task

    asyncio.run(resume())
    history = History(kernel)
    events = list(read_trace(trace_path(latest_session(kernel.parent, kernel))))
    recorded = {e.commit for e in events if isinstance(e, (ev.Accepted, ev.StartingPoint)) if e.commit}
    entries = history.entries()
    on_branch = step == "advanced"
    assert len(entries) == (nth if on_branch else nth - 1)
    for entry in entries:
        assert entry.sha in recorded, f"{entry.short} has no event in the trace"
        assert history.result_of(entry.sha) is not None, f"{entry.short} has no note"
    if on_branch:
        assert any(isinstance(e, ev.Notice) and "no record in the trace" in e.message for e in events)
        if nth == 2:
            accepted = [e for e in events if isinstance(e, ev.Accepted)]
            assert len(accepted) == 1 and accepted[0].geomean == entries[0].geomean and accepted[0].eval_no == 2
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=kernel.parent, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
