"""Bad input and odd situations get one line: an unknown scenario set, a kernel in no repository, a
history with nothing accepted, a reader that stops early."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from fakes import FakeExecutor, make_workspace

from kstui.cli import main
from kstui.engine.config import SessionConfig
from kstui.engine.session import Session
from kstui.views.headless import run_headless

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = ROOT / "workspace"


def _kstui(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(f"{sys.executable} -m kstui {' '.join(args)}", shell=True, capture_output=True, text=True,
                          cwd=cwd, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_an_unknown_scenario_set_is_refused_before_the_session_starts(tmp_path: Path, capsys) -> None:
    kernel = tmp_path / "rmsnorm.cu"
    for suffix in (".cu", ".toml"):
        kernel.with_suffix(suffix).write_text((WORKSPACE / f"rmsnorm{suffix}").read_text())
    assert main(["run", str(kernel), "--headless", "--no-agent", "--scenarios", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kstui: --scenarios bogus: unknown scenario id 'bogus'") and err.count("\n") == 1
    assert not (tmp_path / ".kstui").exists() and not (tmp_path / ".git").exists()


def test_log_print_reads_and_never_makes_a_repository(tmp_path: Path, capsys) -> None:
    kernel = make_workspace(tmp_path / "ws")
    assert main(["log", str(kernel), "--print"]) == 2
    assert capsys.readouterr().err == f"kstui: {kernel.parent} is in no git repository: no accepted versions yet\n"
    assert not (kernel.parent / ".git").exists()
    subprocess.run(["git", "init", "-q"], cwd=kernel.parent, check=True)
    assert main(["log", str(kernel), "--print"]) == 0
    assert capsys.readouterr().out == "no accepted version of k.cu yet (branch kstui/k)\n"


async def test_a_kernel_in_no_repository_gets_one_and_one_line_saying_so(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws")
    config = SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, max_evals=1)
    out = io.StringIO()
    await run_headless(Session(config, executor=FakeExecutor(), agent=None), out)
    lines = [line for line in out.getvalue().splitlines() if "kstui made one" in line]
    assert lines == [f"warning: {kernel.parent} was in no git repository: kstui made one there for its history "
                     f"(branch kstui/k)"]
    assert (kernel.parent / ".git").is_dir()


def test_replay_print_into_head_exits_quietly(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    line = '{"type": "notice", "ts": 1.0, "message": "%s", "level": "info"}\n'
    trace.write_text("".join(line % i for i in range(20000)))
    done = _kstui("replay", "--print", str(trace), "| head -1", cwd=tmp_path)
    assert done.stdout == "note: 0\n" and done.stderr == ""


async def test_an_evaluation_error_at_the_start_is_said_once(tmp_path: Path) -> None:
    from kstui.executors.template import TemplateExecutor

    kernel = make_workspace(tmp_path / "ws")
    line = "kstui eval: no CUDA GPU here (CPU build of torch): use --check-only, or --gpu ssh://… / --eval-cmd"
    executor = TemplateExecutor(f"echo '{line}' >&2; exit 2; echo {{file}}")
    config = SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, max_evals=1)
    out = io.StringIO()
    await run_headless(Session(config, executor=executor, agent=None), out)
    said = [x for x in out.getvalue().splitlines() if "no CUDA GPU here" in x and " started (" not in x]
    assert len(said) == 1 and said[0].startswith("eval #1 failed: ")
    assert "start: your kernel does not pass as brought (its evaluation failed)" in out.getvalue()
