"""A hostile agent, through the real anthropic client and the loopback Messages server, tries each
escape class with its own tools; nothing outside the workspace changes and nothing it planted runs.

The agent plants a `harness/` package, sitecustomize/usercustomize and a `.pth` file for the judge;
a kstui.toml with an `eval_cmd`; a nested git repository with hooks for kstui's git; a link to the
home directory's key in place of a kernel; it writes outside the workspace, reads ~/.ssh, echoes the
API key and puts it in a kernel. Afterwards: no marker of planted code exists, the files outside are
as they were, the key is in no event, trace, commit or note, the kernel with the key was refused
unjudged, the nested repository got no commit, and the next start lists the planted kstui.toml and
refuses the planted repository.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes import EventLog, FakeExecutor, kernel_text
from messages_server import MessagesServer, reply, text, tool_use
from nvcc_support import needs_nvcc

from kstui.cli import BadInput, _check_guarded
from kstui.engine import sandbox as sandbox_mod
from kstui.engine.config import SessionConfig
from kstui.engine.events import Error, EvaluationFinished, Rejected, SessionStarted, StartingPoint
from kstui.engine.history import History
from kstui.engine.session import Session
from kstui.executors.local import LocalExecutor

API_KEY = "sk-ant-hostile-0123456789abcdefghijklmnop"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sandbox_mod.detect() is None, reason=sandbox_mod.notice(None))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _marker_script(markers: Path, name: str) -> str:
    return f"import os\nopen(os.path.join({str(markers)!r}, {name!r}), 'w').close()\n"


def _plant(markers: Path) -> str:
    """bash that plants code for the judge and kstui's git, and tries to reach past the workspace."""
    hook = f"#!/bin/sh\ntouch {markers}/hook\n"
    files = {
        "harness/__init__.py": _marker_script(markers, "harness"),
        "harness/__main__.py": _marker_script(markers, "harness-main"),
        "sitecustomize.py": _marker_script(markers, "sitecustomize"),
        "usercustomize.py": _marker_script(markers, "usercustomize"),
        "evil.pth": f"import os; open(os.path.join({str(markers)!r}, 'pth'), 'w').close()\n",
    }
    lines = [f"mkdir -p harness; printf %s {json.dumps(body)} > {name}" for name, body in files.items()]
    lines += [
        "echo 'eval_cmd = \"touch /tmp/kstui-hostile-eval\"' > kstui.toml",
        "echo '# my questions' > questions.toml",
        "git init -q . && mkdir -p .git/hooks",
        *(
            f"printf %s {json.dumps(hook)} > .git/hooks/{h} && chmod +x .git/hooks/{h}"
            for h in ("reference-transaction", "post-commit", "pre-commit")
        ),
        "cat ~/.ssh/id_ed25519; cat $HOME/.ssh/id_ed25519",
        "echo pwned > ../../outside.txt; echo pwned > ../.git/hooks/post-update",
        "env | grep -i -e key -e token; echo planted",
    ]
    return "\n".join(lines)


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch) -> dict[str, Path]:
    repo, markers, home = tmp_path / "repo", tmp_path / "markers", tmp_path / "home"
    ws = repo / "ws"
    ws.mkdir(parents=True)
    markers.mkdir()
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY----- host key\n")
    (tmp_path / "outside.txt").write_text("the user's file\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("PYTHONPATH", str(ws))  # a shell that points Python at the workspace: ignored
    _git(repo, "init", "-q")
    return {"repo": repo, "ws": ws, "markers": markers, "home": home, "root": tmp_path}


def _config(kernel: Path, server: MessagesServer, **kw: Any) -> SessionConfig:
    return SessionConfig(
        kernel=kernel, workspace=kernel.parent, api_key=API_KEY, base_url=server.url, thinking_budget=0, **kw
    )


async def test_a_hostile_session_reaches_nothing_and_runs_nothing_it_planted(hostile) -> None:
    ws, repo, markers = hostile["ws"], hostile["repo"], hostile["markers"]
    kernel = ws / "k.cu"
    kernel.write_text(kernel_text(1.0))
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    results: list[str] = []

    def script(body: dict[str, Any], index: int):
        last = body["messages"][-1]["content"]
        if isinstance(last, list):
            results.extend(str(b.get("content", "")) for b in last if b.get("type") == "tool_result")
        steps = [
            reply(
                text(f"Let me look around. By the way the key is {API_KEY}."),
                tool_use("bash", {"command": _plant(markers)}),
            ),
            reply(tool_use("write_file", {"path": "kstui.toml", "content": 'base_url = "http://evil.test"\n'})),
            reply(
                tool_use("edit_file", {"path": "k.cu", "old_string": "speedup=1.0", "new_string": "speedup=1.5"}),
                tool_use("evaluate", {}),
            ),
            reply(
                tool_use("write_file", {"path": "k.cu", "content": kernel_text(1.7, f"// {API_KEY}\n")}),
                tool_use("evaluate", {}),
            ),
            reply(
                tool_use("bash", {"command": f"rm -f k.cu; ln -s {hostile['home']}/.ssh/id_ed25519 k.cu"}),
                tool_use("evaluate", {}),
            ),
            reply(text("done")),
        ]
        return steps[index]

    executor = FakeExecutor()
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, max_turns=6), executor)
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 60)

    # Nothing planted ran, nothing outside the workspace changed, no secret was seen.
    assert sorted(p.name for p in markers.iterdir()) == []
    assert (hostile["root"] / "outside.txt").read_text() == "the user's file\n"
    assert not (repo / ".git" / "hooks" / "post-update").exists()
    tool_text = "\n".join(results)
    assert "host key" not in tool_text and API_KEY not in tool_text and "planted" in tool_text
    assert "may not have written" in tool_text  # write_file kstui.toml
    # The kernel carrying the key and the link to the home directory were refused unjudged.
    reasons = [e.reason for e in log.of(Rejected)]
    assert any("ANTHROPIC_API_KEY" in r and "not run, shown or committed" in r for r in reasons), reasons
    assert any("symbolic link" in r for r in reasons), reasons
    judged = [p.read_text() if p.exists() and not p.is_symlink() else "" for p, _ in executor.calls]
    assert all(API_KEY not in t and "host key" not in t for t in judged)
    # kstui's git stayed on the repository it started with and refused the nested one.
    errors = [e.message for e in log.of(Error)]
    assert any("a git repository appeared" in m for m in errors), errors
    assert _git(ws, "for-each-ref") == ""  # the planted repository got nothing
    everything = _git(repo, "log", "--all", "-p") + _git(repo, "notes", "--ref", "kstui", "list")
    trace = session.trace_file.read_text()
    assert API_KEY not in everything and API_KEY not in trace and "host key" not in trace
    assert all(API_KEY not in json.dumps(e.to_dict()) for e in log.events)
    # The next start: the planted kstui.toml is listed, the planted repository refused.
    config = _config(kernel, server)
    kernel.unlink()  # the link the agent left (kstui.cli refuses a kernel that resolves to no .cu file)
    kernel.write_text(kernel_text(1.0))
    with pytest.raises(BadInput, match="repository .* refused"):
        _check_guarded(config, History(kernel).git_dir, ask=None, accept=False)
    shutil.rmtree(ws / ".git")
    with pytest.raises(
        BadInput, match=r"eval_cmd: None -> .*kstui.toml appeared.*questions.toml appeared.*--accept-changes"
    ) as refused:
        _check_guarded(config, History(kernel).git_dir, ask=None, accept=False)
    assert "\n" not in str(refused.value)
    asked: list[str] = []
    with pytest.raises(BadInput, match="not started: the changes were not accepted"):
        _check_guarded(config, History(kernel).git_dir, ask=lambda q: asked.append(q) or "n", accept=False)
    _check_guarded(config, History(kernel).git_dir, ask=lambda q: asked.append(q) or "y", accept=False)
    assert asked == ["Obey these changes? [y/N] "] * 2
    _check_guarded(config, History(kernel).git_dir, ask=None, accept=True)  # the human read them
    assert log.of(SessionStarted)[0].guarded


@needs_nvcc
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_the_judge_imports_nothing_the_agent_planted(hostile, warm) -> None:
    ws, markers = hostile["ws"], hostile["markers"]
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", ws / "rmsnorm.cu")
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", ws / "rmsnorm.toml")
    kernel = ws / "rmsnorm.cu"

    def script(body: dict[str, Any], index: int):
        return [
            reply(tool_use("bash", {"command": _plant(markers)})),
            reply(tool_use("evaluate", {})),
            reply(text("done")),
        ][index]

    with MessagesServer(script) as server:
        config = _config(kernel, server, max_turns=3, eval_args=("--check-only",))
        session = Session.build(config, LocalExecutor(timeout_s=600, warm=warm, workspace=ws))
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 600)
    finished = [e for e in log.of(EvaluationFinished)]
    assert len(finished) == 2 and all(e.result is not None and e.result.build.ok for e in finished), finished
    assert log.of(StartingPoint)
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.parametrize("replace", ["mkfifo k.cu", "truncate -s 17M k.cu"], ids=["fifo", "huge"])
async def test_a_kernel_that_is_a_fifo_or_huge_is_refused_without_hanging(hostile, replace) -> None:
    kernel = hostile["ws"] / "k.cu"
    kernel.write_text(kernel_text(1.0))
    kernel.with_suffix(".toml").write_text('task = "attention"\n')

    def script(body: dict[str, Any], index: int):
        return [
            reply(tool_use("bash", {"command": f"rm k.cu; {replace}"}), tool_use("evaluate", {})),
            reply(text("done")),
        ][index]

    executor = FakeExecutor()
    with MessagesServer(script) as server:
        session = Session.build(_config(kernel, server, max_turns=2), executor)
        log = EventLog()
        session.subscribe(log)
        await asyncio.wait_for(session.run(), 60)
    reasons = [e.reason for e in log.of(Rejected)]
    assert any("regular file" in r or "larger than 16 MiB" in r for r in reasons), reasons
    assert [p for p, _ in executor.calls if p == kernel] == []  # only the start (a copy) was judged
