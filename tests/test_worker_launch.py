"""How the worker is started (harness.worker_launch): isolated Python, an allowlisted environment without
secrets, private directories, and the files it judges copied where nothing else can change them."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvcc_support import needs_nvcc

from harness.build import BuildInputError, BuildOptions, build, private_copy
from harness.runner import BadInput, EvalOptions, evaluate
from harness.worker_files import StagingError, WorkerFiles, sha256_file
from harness.worker_launch import BOOT, launch, outside_workspace, worker_environment

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def files():
    f = WorkerFiles()
    yield f
    f.remove()


def test_the_environment_is_an_allowlist_without_secrets(files, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    parent = {
        "PATH": f"{ws}/bin:/usr/bin:relative/bin:.:/bin", "LD_LIBRARY_PATH": f"/usr/local/nvidia/lib64:{ws}/lib",
        "CUDA_VISIBLE_DEVICES": "1", "NVIDIA_DRIVER_CAPABILITIES": "compute", "LC_ALL": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-ant-x", "ANTHROPIC_BASE_URL": "http://x", "AWS_ACCESS_KEY_ID": "A", "HF_TOKEN": "h",
        "NVIDIA_API_KEY": "n", "SSH_AUTH_SOCK": "/tmp/agent", "PYTHONPATH": str(ws), "PYTHONSTARTUP": "x",
        "LD_PRELOAD": "/evil.so", "HOME": "/root", "TRITON_CACHE_DIR": "/shared", "CUDA_INJECTION64_PATH": "/x.so",
        "KSTUI_WORKER_ENV": "FOO,OPENAI_API_KEY", "FOO": "bar", "OPENAI_API_KEY": "o", "BAR": "baz",
    }
    env = worker_environment(parent, files, [ws])
    assert env["PATH"] == "/usr/bin:/bin" and env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute" and env["FOO"] == "bar"
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "AWS_ACCESS_KEY_ID", "HF_TOKEN", "NVIDIA_API_KEY",
                 "SSH_AUTH_SOCK", "PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "CUDA_INJECTION64_PATH",
                 "OPENAI_API_KEY", "BAR", "KSTUI_WORKER_ENV"):
        assert name not in env, name
    assert env["HOME"] == str(files.home) and env["TMPDIR"] == str(files.tmp)
    assert env["TRITON_CACHE_DIR"] == str(files.triton)
    assert all(v.startswith(str(files.root)) for k, v in env.items() if k.endswith(("_CACHE_DIR", "_CACHE_PATH", "HOME")))


def test_python_runs_isolated_in_a_private_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", "off")
    started = launch({"cache_path": str(tmp_path / "cache" / "judge" / "baselines.json")}, sys.executable)
    try:
        assert started.argv[:5] == [sys.executable, "-I", "-u", "-c", BOOT]
        assert started.cwd == started.files.tmp and started.cwd.is_relative_to(Path(os.path.realpath("/tmp")))
        assert oct(started.files.root.stat().st_mode & 0o777) == "0o700"
        assert started.sandbox.startswith("none: ")
    finally:
        started.files.remove()


def test_the_boot_binds_the_harness_by_path_and_honours_only_the_named_site_dirs(tmp_path):
    """BOOT up to the worker module, in a Python whose current directory holds another `harness`."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("raise SystemExit('planted harness imported')")
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (tmp_path / "from-pth").mkdir()
    (site_dir / "extra.pth").write_text(str(tmp_path / "from-pth") + "\n")
    probe = BOOT.replace("from harness.worker_boot import boot\nboot(sys.argv[2])\n",
                         "import harness, site, json\nsite.addsitedir(sys.argv[2])\n"
                         "print(json.dumps([harness.__file__, sys.path]))\n")
    pkg = Path(__file__).resolve().parents[1] / "harness"
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(pkg), str(site_dir)], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=True)
    harness_file, path = json.loads(out.stdout)
    assert harness_file == str(pkg / "__init__.py")
    assert str(tmp_path) not in path and "" not in path and str(tmp_path / "from-pth") in path


def test_a_staged_file_that_changed_after_its_check_is_refused(files, tmp_path):
    lib = tmp_path / "kernel.so"
    lib.write_bytes(b"checked")
    digest = sha256_file(lib)
    staged = files.stage(lib, digest, "kernel.so")
    assert staged.read_bytes() == b"checked" and staged.parent == files.eval
    lib.write_bytes(b"swapped")
    with pytest.raises(StagingError, match="changed after it was checked"):
        files.stage(lib, digest, "kernel.so")


@needs_nvcc
def test_a_build_cache_entry_changed_after_it_was_written_is_refused_and_discarded(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text('extern "C" int f() { return 0; }\n')
    options = BuildOptions(arch="sm_90a", cache_dir=tmp_path / "cache")
    _, library = build(source, ["f"], options)
    (tmp_path / "a").mkdir()
    copy, digest = private_copy(library, tmp_path / "a")
    assert digest == sha256_file(library) and copy.read_bytes() == library.read_bytes()
    library.write_bytes(library.read_bytes() + b"\0")
    (tmp_path / "b").mkdir()
    with pytest.raises(BuildInputError, match="changed after it was written"):
        private_copy(library, tmp_path / "b")
    assert not library.exists()
    report, rebuilt = build(source, ["f"], options)
    assert report.ok and not report.cached and rebuilt.is_file()


def test_nothing_the_judge_trusts_may_lie_in_a_named_workspace(tmp_path, monkeypatch):
    monkeypatch.delenv("KSTUI_WORKER_SITE", raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    assert outside_workspace(ws, sys.executable, tmp_path / "cache") is None
    assert "the cache" in outside_workspace(ws, sys.executable, ws / ".cache")
    monkeypatch.setenv("KSTUI_WORKER_SITE", str(ws))
    assert "KSTUI_WORKER_SITE" in outside_workspace(ws, sys.executable, tmp_path / "cache")
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", ws / "k.cu")
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", ws / "k.toml")
    monkeypatch.delenv("KSTUI_WORKER_SITE")
    with pytest.raises(BadInput, match="inside the workspace"):
        evaluate(ws / "k.cu", EvalOptions(check_only=True, workspace=ws, cache_dir=ws / "cache"))


def test_require_refuses_to_run_unconfined(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTUI_WORKER_SANDBOX", "require")
    monkeypatch.setenv("KSTUI_BWRAP", str(tmp_path / "missing-bwrap"))
    monkeypatch.setenv("PATH", "/nonexistent")
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", tmp_path / "k.cu")
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", tmp_path / "k.toml")
    with pytest.raises(BadInput, match=r"not installed.*KSTUI_WORKER_SANDBOX=require"):
        evaluate(tmp_path / "k.cu", EvalOptions(check_only=True, cache_dir=tmp_path / "cache"))
