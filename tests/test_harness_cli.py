"""`python -m harness eval` / `kstui eval` on the CPU: exit codes, one-line errors, --check-only, JSON."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvcc_support import needs_nvcc

from harness.result import EvalResult

ROOT = Path(__file__).resolve().parents[1]


def harness(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "harness", "eval", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def one_line_error(proc):
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def kernel_dir(tmp_path):
    shutil.copy(ROOT / "workspace" / "flash_fwd.toml", tmp_path / "k.toml")
    return tmp_path


def test_bad_input_is_one_line_and_exit_2(kernel_dir):
    assert "no such file" in one_line_error(harness(kernel_dir / "missing.cu"))
    assert "not a file" in one_line_error(harness(kernel_dir))
    (kernel_dir / "notes.txt").write_text("hi")
    assert "CUDA source" in one_line_error(harness(kernel_dir / "notes.txt"))
    (kernel_dir / "lonely.cu").write_text("")
    assert "no task file" in one_line_error(harness(kernel_dir / "lonely.cu"))
    (kernel_dir / "k.cu").write_text("")
    assert "unknown scenario id" in one_line_error(harness(kernel_dir / "k.cu", "--scenarios", "nope"))
    assert "bad value" in one_line_error(harness(kernel_dir / "k.cu", "--scenario", "sq=abc"))
    assert "K/N" in one_line_error(harness(kernel_dir / "k.cu", "--shard", "3"))
    (kernel_dir / "bad.cu").write_text("")
    (kernel_dir / "bad.toml").write_text("task = [")
    assert "bad.toml" in one_line_error(harness(kernel_dir / "bad.cu"))
    (kernel_dir / "bad.toml").write_text('task = "gemm"')
    assert "unknown task" in one_line_error(harness(kernel_dir / "bad.cu"))
    assert proc_usage().returncode == 2


def proc_usage():
    return subprocess.run([sys.executable, "-m", "harness"], capture_output=True, text=True, cwd=ROOT)


def test_list_scenarios_covers_the_grids():
    proc = harness(ROOT / "workspace" / "flash_fwd.cu", "--list-scenarios")
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert proc.returncode == 0
    assert sum(r[1] == "timed" for r in rows) == 180 and sum(r[1] == "check" for r in rows) >= 200


@needs_nvcc
def test_check_only_passes_the_starting_kernels_and_rejects_a_compile_error(kernel_dir):
    for name in ("flash_fwd.cu", "rmsnorm.cu"):
        proc = harness(ROOT / "workspace" / name, "--check-only", "--json", "-")
        assert proc.returncode == 0, proc.stderr
        result = EvalResult.from_json(proc.stdout)
        assert result.build.ok and result.checks_ok and not result.scenarios
    (kernel_dir / "k.cu").write_text('extern "C" int kstui_attention_fwd() { return undefined_name; }\n')
    proc = harness(kernel_dir / "k.cu", "--check-only", "--json", str(kernel_dir / "r.json"))
    assert proc.returncode == 1
    result = EvalResult.from_json((kernel_dir / "r.json").read_text())
    assert not result.build.ok and result.build.errors[0].line == 1
    assert "undefined_name" in result.build.errors[0].message
    assert "k.cu:1:" in proc.stdout  # the table names file:line


@needs_nvcc
def test_a_failed_static_check_rejects_without_running(kernel_dir):
    (kernel_dir / "k.cu").write_text(
        '#include <dlfcn.h>\nextern "C" int kstui_attention_fwd() { return dlopen("libcudnn.so", 1) != 0; }\n')
    proc = harness(kernel_dir / "k.cu", "--json", "-")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert not data["all_correct"] and data["scenarios"] == []
    assert any(c["name"] == "forbidden-call" and not c["ok"] for c in data["checks"])
    assert "static checks" in data["error"]


def test_kstui_eval_is_the_same_cli():
    proc = subprocess.run([sys.executable, "-m", "kstui", "eval", "workspace/nope.cu"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2 and "no such file" in proc.stderr
