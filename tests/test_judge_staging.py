"""A worker judges a spec task from the copies of its judge files staged in its private directory.

The task file, the reference and a baseline one folder up are copied into the worker's `eval/judge/`
in the layout the spec names them (harness.taskfile.judge_layout); the worker builds the task from
those copies, so it works with the workspace hidden by the sandbox, and a reference the agent edits
after the parent hashed it is never what the worker reads. The worker here is a stand-in started
exactly as the real one (same launch, same sandbox, same preparation line), which builds the task the
way harness.worker does and prints what it read: the real worker stops at its CUDA check on this
machine before it gets there.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from harness import confine
from harness.runner import EvalOptions, judged, preparation, resolve
from harness.started_worker import StartedWorker
from harness.taskfile import judge_layout
from harness.worker_files import StagingError

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ["", pytest.param("off", id="unconfined")]
if confine.detect()[0] is None:
    SANDBOX = SANDBOX[1:]

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
prep = json.loads(sys.stdin.readline())
from harness.tasks import get_task
task = get_task(prep["task"], prep["options"])
files = task.spec.python_files()
print(json.dumps({"name": task.name, "folder": str(task.spec.folder), "files": [str(p) for p in files],
                  "texts": [p.read_text() for p in files]}))
"""


@pytest.fixture
def spec_kernel(tmp_path: Path) -> Path:
    """ws/ops/op.cu with its spec and reference; the spec's baseline lives in ws/shared."""
    ops, shared = tmp_path / "ws" / "ops", tmp_path / "ws" / "shared"
    ops.mkdir(parents=True)
    shared.mkdir()
    (shared / "base.py").write_text("def slow(x):\n    return x.clamp(min=0)\n")
    (ops / "op_ref.py").write_text("def op(x):\n    return x.clamp(min=0)\n")
    (ops / "op.toml").write_text(
        'reference = "op_ref.py:op"\nbaselines = ["eager", "../shared/base.py:slow"]\n'
        '[entry]\nsymbol = "op"\nargs = [\n  { tensor = "x", role = "in", dtype = "fp32", shape = ["n"] },\n'
        '  { tensor = "y", role = "out", dtype = "fp32", shape = ["n"] },\n  { scalar = "n", type = "int32" },\n]\n'
        '[scenarios]\ntimed = [{ n = 1024 }]\n')
    (ops / "op.cu").write_text("// the kernel\n")
    return ops / "op.cu"


def _probe_python(tmp_path: Path) -> str:
    """A 'python' that runs the probe with the real interpreter, whatever arguments it is given."""
    wrapper = tmp_path / "bin" / "probe-python"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -I -c '{PROBE}' {ROOT}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def _started(kernel: Path, ws: Path, python: str) -> StartedWorker:
    task, tf, scenarios = resolve(kernel, EvalOptions(selection="quick", workspace=ws))
    prep = preparation(task, tf.options, None, None, scenarios, hide=[ws], judge=judged(judge_layout(kernel)))
    return StartedWorker(prep, python)


@pytest.mark.parametrize("sandbox", SANDBOX)
def test_the_worker_builds_a_spec_task_from_its_staged_copies(spec_kernel, tmp_path, monkeypatch, sandbox):
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", sandbox)
    kernel, ws = spec_kernel, spec_kernel.parents[1]
    worker = _started(kernel, ws, _probe_python(tmp_path))
    try:
        assert worker.proc.wait(timeout=60) == 0, worker.proc.returncode
        worker._log.seek(0)
        seen = json.loads(worker._log.read().decode().strip().splitlines()[-1])
        judge = worker.launch.files.eval / "judge"
        assert seen["folder"] == str(judge / "ops")
        assert seen["files"] == [str(judge / "ops" / "op_ref.py"), str(judge / "shared" / "base.py")]
        assert seen["texts"] == [(ws / "ops" / "op_ref.py").read_text(), (ws / "shared" / "base.py").read_text()]
        # the same task as the parent's: the baseline cache is keyed by this name
        assert seen["name"] == resolve(kernel, EvalOptions(selection="quick"))[0].name
        if sandbox == "":  # the workspace was hidden: nothing was read from it
            assert worker.sandbox == "bubblewrap"
    finally:
        worker.kill()


def test_a_reference_changed_after_it_was_hashed_is_never_staged(spec_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", "off")
    kernel, ws = spec_kernel, spec_kernel.parents[1]
    task, tf, scenarios = resolve(kernel, EvalOptions(selection="quick", workspace=ws))
    prep = preparation(task, tf.options, None, None, scenarios, hide=[ws], judge=judged(judge_layout(kernel)))
    (ws / "shared" / "base.py").write_text("def slow(x):\n    return x\n")
    with pytest.raises(StagingError, match="base.py changed after it was checked"):
        StartedWorker(prep, _probe_python(tmp_path))
