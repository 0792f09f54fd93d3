"""A session protects a spec task's judge files (the task file, the reference) as it found them.

Every evaluation judges a copy of the kernel beside the judge files as recorded at the session's
start; a judge file changed mid-session (by bash or by the user) refuses each evaluation while it
differs, said in one line; the agent's file tools refuse to write any of them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakes import EventLog, FakeExecutor, kernel_text

from kstui.engine.config import SessionConfig
from kstui.engine.events import Error, SessionStarted, StartingPoint
from kstui.engine.integrity import JudgeFingerprint, TaskFiles, judge_paths
from kstui.engine.session import Session
from kstui.engine.tools import Toolbox
from kstui.new_task import render

HARNESS = Path(__file__).resolve().parents[1] / "harness"


def _spec_workspace(root: Path) -> Path:
    """A workspace with `kstui new op`'s spec and reference, and the fake's kernel as op.cu."""
    root.mkdir(parents=True)
    for name, text in render("op").items():
        (root / name).write_text(text)
    kernel = root / "op.cu"
    kernel.write_text(kernel_text(1.0))
    return kernel


async def _manual(kernel: Path, executor: FakeExecutor) -> tuple[Session, asyncio.Task, EventLog]:
    session = Session(SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True), executor=executor,
                      agent=None)
    log = EventLog()
    session.subscribe(log)
    task = asyncio.create_task(session.run())
    await log.wait_for(SessionStarted)
    await log.wait_for(StartingPoint)
    return session, task, log


async def _finish(session: Session, task: asyncio.Task) -> Any:
    await session.stop()
    return await asyncio.wait_for(task, 10)


async def test_every_evaluation_judges_the_judge_files_recorded_at_start(tmp_path: Path) -> None:
    kernel = _spec_workspace(tmp_path / "ws")
    ref, toml = kernel.with_name("op_ref.py"), kernel.with_suffix(".toml")
    recorded = {toml.name: toml.read_bytes(), ref.name: ref.read_bytes()}
    fake = FakeExecutor()
    session, task, log = await _manual(kernel, fake)
    try:
        ref.write_text(ref.read_text() + "\n# changed by the user mid-session\n")
        await session.evaluate_now()
        errors = [e for e in log.of(Error) if e.where == "task"]
        assert len(fake.calls) == 1  # the start only: the changed reference refused the evaluation
        assert [e.message for e in errors] == [(
            "the task's judge files changed during the session (op_ref.py): evaluation refused; restore them, "
            "or start a new session to judge against the new ones")]
        await session.evaluate_now()
        assert len([e for e in log.of(Error) if e.where == "task"]) == 1  # said once per change, not per try
        ref.write_bytes(recorded[ref.name])
        # While the evaluation runs the task file changes: the copy judged is still the recorded one.
        kernel.write_text(kernel_text(2.0))
        fake.delay_s = 0.5
        run = asyncio.ensure_future(session.evaluate_now())
        await asyncio.sleep(0.2)
        assert len(fake.calls) == 2  # under way
        toml.write_text(toml.read_text() + "\n# changed again\n")
        await run
    finally:
        await _finish(session, task)
    assert len(fake.calls) == 2
    for (path, _), beside in zip(fake.calls, fake.beside):
        assert not path.is_relative_to(kernel.parent) and path.name == "op.cu"
        assert {n: beside[n] for n in recorded} == recorded


async def test_a_builtin_task_file_is_recorded_too(tmp_path: Path) -> None:
    from fakes import make_workspace

    kernel = make_workspace(tmp_path / "ws", 1.0)
    fake = FakeExecutor()
    session, task, log = await _manual(kernel, fake)
    try:
        kernel.with_suffix(".toml").write_text('task = "rmsnorm"\n')
        await session.evaluate_now()
    finally:
        await _finish(session, task)
    assert len(fake.calls) == 1 and fake.beside[0]["k.toml"] == b'task = "attention"\n'
    assert any(e.where == "task" and "(k.toml)" in e.message for e in log.of(Error))


def test_the_fingerprint_names_added_removed_and_edited_judge_files(tmp_path: Path) -> None:
    kernel = _spec_workspace(tmp_path / "ws")
    fingerprint = JudgeFingerprint(HARNESS, kernel)
    assert fingerprint.task_changed() == []
    toml = kernel.with_suffix(".toml")
    original = toml.read_text()
    toml.write_text(original.replace('baselines = ["eager", "compiled"]', 'baselines = ["eager", "extra.py:f"]'))
    (kernel.parent / "extra.py").write_text("def f(x):\n    return x\n")
    assert fingerprint.task_changed() == ["extra.py", "op.toml"]
    toml.write_text(original)
    kernel.with_name("op_ref.py").unlink()  # the task no longer loads: its file alone is compared
    assert fingerprint.task_changed() == ["op_ref.py"]


def test_recorded_judge_files_are_laid_out_as_the_spec_names_them(tmp_path: Path) -> None:
    kernel = _spec_workspace(tmp_path / "ws" / "ops")
    shared = tmp_path / "ws" / "shared"
    shared.mkdir()
    (shared / "base.py").write_text("def slow(x):\n    return x\n")
    toml = kernel.with_suffix(".toml")
    toml.write_text(toml.read_text().replace('baselines = ["eager", "compiled"]',
                                             'baselines = ["eager", "../shared/base.py:slow"]'))
    record = TaskFiles.record(kernel)
    assert record.kernel_name == "ops/op.cu"
    copy = record.lay_out(tmp_path / "copy", "// the candidate\n")
    assert copy == tmp_path / "copy" / "ops" / "op.cu" and copy.read_text() == "// the candidate\n"
    assert (tmp_path / "copy" / "shared" / "base.py").read_bytes() == (shared / "base.py").read_bytes()
    assert (tmp_path / "copy" / "ops" / "op_ref.py").read_bytes() == kernel.with_name("op_ref.py").read_bytes()
    assert set(judge_paths(kernel)) >= {toml, kernel.with_name("op_ref.py"), shared / "base.py"}


async def test_the_agent_may_not_write_a_judge_file(tmp_path: Path) -> None:
    kernel = _spec_workspace(tmp_path / "ws")

    async def evaluate(scenarios: str) -> str:
        return ""

    box = Toolbox(kernel.parent, kernel, evaluate=evaluate)
    for name in ("op_ref.py", "op.toml"):
        out = await box.run("write_file", {"path": name, "content": "def op(x):\n    return x\n"})
        assert out.is_error and "may not have written" in out.text, out.text
        out = await box.run("edit_file", {"path": name, "old": "def", "new": "def"})
        assert out.is_error
    assert (await box.run("read_file", {"path": "op_ref.py"})).is_error is False
    assert (await box.run("write_file", {"path": "notes.py", "content": "x = 1\n"})).is_error is False


async def test_bash_cannot_write_a_judge_file_in_its_sandbox(tmp_path: Path) -> None:
    from kstui.engine import sandbox as sandbox_mod

    found = sandbox_mod.detect()
    if found is None:
        pytest.skip(sandbox_mod.notice(None))
    kernel = _spec_workspace(tmp_path / "ws")
    before = kernel.with_name("op_ref.py").read_bytes()

    async def evaluate(scenarios: str) -> str:
        return ""

    box = Toolbox(kernel.parent, kernel, evaluate=evaluate, sandbox=found)
    out = await box.run("bash", {"command": "echo 'def op(x): return x' > op_ref.py"})
    assert out.is_error and "Read-only file system" in out.text, out.text
    assert kernel.with_name("op_ref.py").read_bytes() == before
    assert not (await box.run("bash", {"command": "echo ok > scratch.txt"})).is_error
