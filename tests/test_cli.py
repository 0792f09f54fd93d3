"""`kstui` command line: bad input is one line and exit 2 before anything starts; eval delegates exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import kernel_text, make_workspace

from kstui.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "KSTUI_MODEL", "KSTUI_MAX_TOKENS", "KSTUI_THINKING"):
        monkeypatch.delenv(var, raising=False)


def _bad(argv: list[str], capsys: pytest.CaptureFixture[str], needle: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_missing_file(tmp_path: Path, capsys) -> None:
    _bad([str(tmp_path / "nope.cu"), "--headless"], capsys, "no such file")


def test_folder(tmp_path: Path, capsys) -> None:
    _bad(["run", str(tmp_path), "--headless"], capsys, "is a folder")


def test_not_a_cu_file(tmp_path: Path, capsys) -> None:
    other = tmp_path / "k.py"
    other.write_text("x = 1\n")
    _bad([str(other)], capsys, "not a CUDA source")


def test_missing_task_file(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    kernel.with_suffix(".toml").unlink()
    _bad([str(kernel), "--headless"], capsys, "no task file k.toml")


def test_malformed_questions_file(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    bad = tmp_path / "q.toml"
    bad.write_text('[[question]]\nid = "x"\ntext = "Why?"\nkind = "layer"\nwhen = "sometimes"\n')
    _bad([str(kernel), "--headless", "--questions", str(bad)], capsys, "q.toml")


def test_missing_questions_file(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    _bad([str(kernel), "--headless", "--questions", str(tmp_path / "none.toml")], capsys, "no such questions file")


def test_malformed_kstui_toml(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    (kernel.parent / "kstui.toml").write_text("max_evals = 'ten'\n")
    _bad([str(kernel), "--headless"], capsys, "field 'max_evals'")


def test_unwritable_workspace(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    (kernel.parent / ".kstui").write_text("a file where kstui keeps its state\n")
    _bad([str(kernel), "--headless"], capsys, "workspace is not writable")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_workspace(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    kernel.parent.chmod(0o555)
    try:
        _bad([str(kernel), "--headless"], capsys, "workspace is not writable")
    finally:
        kernel.parent.chmod(0o755)


@pytest.mark.parametrize("flags, needle", [
    (["--max-evals", "-1"], "--max-evals"),
    (["--max-cost", "lots"], "--max-cost"),
    (["--bogus"], "unrecognized arguments"),
    (["--eval-cmd", "ssh gpu1 kstui eval"], "{file}"),
    (["--gpu", "local", "--eval-cmd", "x {file}"], "exclude each other"),
    (["--resume"], "no earlier session"),
])
def test_bad_flags(tmp_path: Path, capsys, flags: list[str], needle: str) -> None:
    kernel = make_workspace(tmp_path / "ws")
    _bad([str(kernel), "--headless", *flags], capsys, needle)


def test_bad_input_starts_nothing(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    _bad([str(kernel), "--headless", "--resume"], capsys, "no earlier session")
    assert not (kernel.parent / ".kstui" / "sessions").exists() or not any((kernel.parent / ".kstui" / "sessions").iterdir())
    assert not (kernel.parent / ".git").exists()


def test_log_and_replay_bad_input(tmp_path: Path, capsys) -> None:
    _bad(["log", str(tmp_path / "none.cu")], capsys, "no such file")
    _bad(["replay", str(tmp_path / "none.jsonl")], capsys, "no such trace")
    torn = tmp_path / "t.jsonl"
    torn.write_text("not json\n")
    _bad(["replay", str(torn), "--print"], capsys, "t.jsonl:1")


def test_manual_headless_run_then_log_and_replay(tmp_path: Path, capsys) -> None:
    """A whole CLI round: run in manual mode with a budget of two evaluations (the start and one save)."""
    kernel = make_workspace(tmp_path / "ws", 1.2)
    fakes = Path(__file__).resolve().parent / "fakes.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kstui", "run", str(kernel), "--headless", "--no-agent", "--max-evals", "2",
         "--eval-cmd", f"{sys.executable} {fakes} {{file}}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until the session is up and watching, then save the kernel
            if line.startswith("session "):
                break
        kernel.write_text(kernel_text(1.5))
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert "start: 1.2x geomean (4/4 correct)" in out and "ACCEPTED #2" in out and "best: 1.499x" in out

    assert main(["log", str(kernel), "--print"]) == 0
    logged = capsys.readouterr().out
    assert "k: 1.20x -> 1.50x" in logged and "k: start, 1.20x geomean (4/4 correct)" in logged
    trace = next((kernel.parent / ".kstui" / "sessions").glob("*/trace.jsonl"))
    assert main(["replay", str(trace), "--print"]) == 0
    replayed = capsys.readouterr().out
    assert "ACCEPTED #2" in replayed and "session ended: max evals reached" in replayed
    assert main(["replay", str(trace.parent), "--analysis"]) == 0
    assert capsys.readouterr().out.strip()


def test_eval_delegates_to_the_harness_cli_exactly(tmp_path: Path) -> None:
    kernel = tmp_path / "broken.cu"
    kernel.write_text('extern "C" int kstui_attention_fwd( { return 0 }\n')
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    args = ["eval", str(kernel), "--check-only", "--json", "-"]
    ours = subprocess.run([sys.executable, "-m", "kstui", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    theirs = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert ours.returncode == theirs.returncode == 1, ours.stderr
    a, b = json.loads(ours.stdout), json.loads(theirs.stdout)
    assert a["build"]["ok"] is False and a["build"]["errors"]
    assert (a["kernel_sha256"], a["build"]["ok"], a["build"]["errors"]) == (b["kernel_sha256"], b["build"]["ok"], b["build"]["errors"])
    missing = subprocess.run([sys.executable, "-m", "kstui", "eval", str(tmp_path / "none.cu")], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
