"""Issue #16: `kstui eval` (= `python -m harness eval`) says what is wrong in one line."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nvcc_support import needs_nvcc

ROOT = Path(__file__).resolve().parents[1]


def _harness(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "harness", "eval", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, **kwargs)


@pytest.mark.parametrize("args", [(), ("--bogus",), ("k.cu", "--shard")])
def test_an_argument_error_is_one_line(args):
    proc = _harness(*args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("kstui eval: error: ") and "--help" in lines[0]


def test_listing_into_a_pipe_the_reader_closed_exits_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -1` long gone: every write fails
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", "eval", "--list-scenarios", "workspace/flash_fwd.cu"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and proc.stderr == ""


@needs_nvcc
@pytest.mark.skipif(importlib.util.find_spec("torch") is None or __import__("torch").cuda.is_available(),
                    reason="needs a torch without a CUDA GPU")
def test_without_a_gpu_the_evaluation_says_so_in_one_line(tmp_path):
    proc = _harness("workspace/rmsnorm.cu", "--scenarios", "quick", env={**os.environ, "KSTUI_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "kstui eval: no CUDA GPU here (CPU build of torch): use --check-only, or --gpu ssh://… / --eval-cmd"]
    assert proc.stdout == ""
