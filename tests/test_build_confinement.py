"""The build reads the agent's code: it runs without secrets and, where bubblewrap works, confined.

A kernel that includes a file is compiled with that file's lines quoted in the compiler's errors,
and the build log goes back to the agent: confined, nvcc cannot open a file outside the system's and
the toolkit's; unconfined, the log of a kernel that includes anything but the toolkit's and the
standard headers is withheld.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvcc_support import NVCC, needs_nvcc

from harness import confine
from harness.build import BuildOptions, build

ROOT = Path(__file__).resolve().parents[1]
CONTENT = "PRIVATE-KEY-CONTENT-7f3a9c"
needs_bwrap = pytest.mark.skipif(confine.detect()[0] is None, reason="bubblewrap does not work here")


@pytest.fixture
def leaking_kernel(tmp_path):
    secret = tmp_path / "home" / ".ssh" / "id_ed25519"
    secret.parent.mkdir(parents=True)
    secret.write_text(f"{CONTENT} more text\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", ws / "k.toml")
    (ws / "k.cu").write_text(f'#include "{secret}"\nextern "C" int kstui_rmsnorm() {{ return 0; }}\n')
    return ws / "k.cu"


def _check_only(kernel: Path, cache: Path, sandbox: str) -> dict:
    env = {**__import__("os").environ, "KSTUI_CACHE_DIR": str(cache), "KSTUI_WORKER_SANDBOX": sandbox}
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(kernel), "--check-only", "--json", "-"],
                          capture_output=True, text=True, env=env, timeout=300)
    return json.loads(proc.stdout)


@needs_nvcc
@needs_bwrap
def test_confined_the_compiler_cannot_read_a_file_outside_the_system(leaking_kernel, tmp_path):
    result = _check_only(leaking_kernel, tmp_path / "cache", "")
    assert CONTENT not in json.dumps(result)
    assert "No such file" in result["build"]["log"] or "cannot open" in result["build"]["log"]


@needs_nvcc
def test_unconfined_the_log_of_a_kernel_that_includes_a_file_is_withheld(leaking_kernel, tmp_path):
    result = _check_only(leaking_kernel, tmp_path / "cache", "off")
    assert CONTENT not in json.dumps(result)
    assert result["build"]["log"].startswith("withheld: ")
    assert not next(c for c in result["checks"] if c["name"] == "single-file")["ok"]


@needs_nvcc
@pytest.mark.parametrize("sandbox", ["", "off"])
def test_the_compiler_runs_without_secrets(tmp_path, monkeypatch, sandbox):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-build-env-test-0123456789")
    monkeypatch.setenv("KSTUI_HARMLESS", "visible")
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", sandbox)
    shim = tmp_path / "bin" / "nvcc"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\ncase " $* " in *" -o "*) env;; esac\nexec "{NVCC}" "$@"\n')
    shim.chmod(0o755)
    source = tmp_path / "k.cu"
    source.write_text('extern "C" int f() { return 0; }\n')
    report, _ = build(source, ["f"], BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache", nvcc=str(shim)))
    assert "KSTUI_HARMLESS=visible" in report.log
    assert "build-env-test" not in report.log and "ANTHROPIC_API_KEY" not in report.log
