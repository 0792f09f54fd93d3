"""`kstui new NAME`: a kernel, its spec and its reference that pass `kstui eval --check-only` as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.build import BuildInputError, find_nvcc
from harness.poison import guarded_empty
from harness.taskfile import load_task_file
from harness.tasks import get_task
from harness.tasks.spec_outputs import declared
from kstui.new_task import main

ROOT = Path(__file__).resolve().parents[1]


def _new(tmp_path: Path, name: str = "my_op") -> int:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return main([name])
    finally:
        os.chdir(cwd)


def test_writes_the_kernel_its_spec_and_its_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _new(tmp_path) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_op.cu", "my_op.toml", "my_op_ref.py"]
    out = capsys.readouterr().out
    assert "kstui eval my_op.cu --check-only" in out and "kstui my_op.cu" in out
    cu, toml, ref = ((tmp_path / f).read_text() for f in ("my_op.cu", "my_op.toml", "my_op_ref.py"))
    assert 'extern "C" int my_op(const void* x, void* y, int64_t n, int dtype, cudaStream_t stream)' in cu
    assert 'symbol = "my_op"' in toml and 'reference = "my_op_ref.py:my_op"' in toml
    assert "def my_op(x: torch.Tensor) -> torch.Tensor:" in ref
    assert "$" not in cu + toml + ref  # every placeholder filled
    spec = load_task_file(tmp_path / "my_op.cu").spec
    assert spec is not None
    # The template shows every kind of key a spec has.
    kinds = {type(a).__name__ for a in spec.args} | {"dtype_code" for a in spec.scalars if a.dtype_code}
    assert kinds == {"TensorArg", "ScalarArg", "dtype_code"}
    assert spec.dtype_vars and spec.flops and spec.inputs and spec.timed and spec.check and spec.quick


def test_a_name_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    assert _new(tmp_path, "ops/fused_router") == 0
    assert (tmp_path / "ops" / "fused_router.cu").is_file()
    assert 'symbol = "fused_router"' in (tmp_path / "ops" / "fused_router.toml").read_text()


def test_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_op_ref.py").write_text("# mine\n")
    assert _new(tmp_path) == 2
    err = capsys.readouterr().err
    assert err == "kstui new: my_op_ref.py: already exists (kstui new never overwrites a file)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_op_ref.py"]
    assert (tmp_path / "my_op_ref.py").read_text() == "# mine\n"


@pytest.mark.parametrize("name, message", [
    ("1op", "'1op': the name should be a C identifier"),
    ("my-op", "'my-op': the name should be a C identifier"),
    ("int", "'int': the name should be a C identifier (letters, digits, _), not a keyword"),
    ("lambda", "'lambda': the name should be a C identifier"),
    ("nowhere/op", "nowhere: no such folder"),
])
def test_bad_names_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                           message: str) -> None:
    assert _new(tmp_path, name) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not list(tmp_path.iterdir())


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "kstui new: the following arguments are required: NAME" in capsys.readouterr().err


def test_the_reference_and_the_kernels_arithmetic_agree_on_every_check_scenario(tmp_path: Path) -> None:
    """What the kernel computes (fp32, one rounding) passes the generated spec's judgement on CPU tensors."""
    assert _new(tmp_path) == 0
    tf = load_task_file(tmp_path / "my_op.cu")
    task = get_task(tf.task, tf.options)
    cpu = torch.device("cpu")
    for s in task.correctness_grid():
        gen = torch.Generator(device=cpu)
        gen.manual_seed(3)
        inputs = task.make_inputs(s, gen, cpu)
        outs = {n: guarded_empty(shape, dt, cpu) for n, (shape, dt) in task.output_shapes(s, inputs).items()}
        ref = task.reference(s, inputs)
        x = inputs["x"].float()
        declared(outs["y"].tensor, (s.params["rows"], s.params["cols"]), s.params["T"]).copy_(x / (1 + torch.exp(-x)))
        cmp = task.compare(s, ref, {n: b.tensor for n, b in outs.items()}, task.output_names)
        assert cmp.verdict == "ok", (s.id, cmp.detail)


def _nvcc() -> None:
    try:
        find_nvcc()
    except BuildInputError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("command", [["-m", "harness", "eval"], ["-m", "kstui", "eval"]], ids=["harness", "kstui"])
def test_the_generated_trio_passes_check_only(tmp_path: Path, command: list[str]) -> None:
    _nvcc()
    assert _new(tmp_path) == 0
    env = dict(os.environ, KSTUI_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, *command, str(tmp_path / "my_op.cu"), "--check-only"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BUILD AND CHECKS OK" in proc.stdout
    assert "my_op@" in proc.stdout  # the spec task judged it


def test_the_console_script_runs_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "kstui", "new", "scaled"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaled.cu", "scaled.toml", "scaled_ref.py"]
    again = subprocess.run([sys.executable, "-m", "kstui", "new", "scaled"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == 2 and again.stderr.count("\n") == 1
