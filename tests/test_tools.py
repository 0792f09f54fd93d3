"""The agent's tools: confinement, hostile calls, bounded bash, the sandbox."""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest
from fakes import FakeExecutor, make_workspace

from kstui.engine import sandbox as sandbox_mod
from kstui.engine.config import SessionConfig
from kstui.engine.secrets import shell_environment
from kstui.engine.session import Session
from kstui.engine.tools import Toolbox, ToolOutcome

KERNEL = "__global__ void k() {}\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "k.cu").write_text(KERNEL)
    (ws / "k.toml").write_text('task = "attention"\n')
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".kstui").mkdir()
    (ws / "harness").mkdir()
    (ws / "harness" / "checks.py").write_text("OK = True\n")
    (ws / "notes").mkdir()
    (tmp_path / "outside.txt").write_text("secret outside\n")
    (ws / "out_file").symlink_to(tmp_path / "outside.txt")
    (ws / "out_dir").symlink_to(tmp_path)
    (ws / "to_git").symlink_to(ws / ".git")
    return ws


def make_box(ws: Path, **kw) -> Toolbox:
    async def evaluate(scenarios: str) -> str:
        return f"evaluated {scenarios}: 12/12 correct, geomean 1.10x"

    kw.setdefault("unconfined_shell", kw.get("sandbox") is None and "shell_off" not in kw)
    return Toolbox(ws, Path("k.cu"), evaluate=kw.pop("evaluate", evaluate), **kw)


async def run(box: Toolbox, name: str, **input) -> ToolOutcome:
    return await box.run(name, input)


def assert_refused(out: ToolOutcome, *words: str) -> None:
    assert out.is_error and "\n" not in out.text, out.text
    for w in words:
        assert w in out.text, out.text


# ---- confinement ----


@pytest.mark.parametrize("tool", ["read_file", "write_file", "edit_file"])
@pytest.mark.parametrize(
    "path, words",
    [
        ("../outside.txt", "outside the workspace"),
        ("notes/../../outside.txt", "outside the workspace"),
        ("/etc/passwd", "outside the workspace"),
        ("out_file", "symlink"),
        ("out_dir/outside.txt", "symlink"),
    ],
)
async def test_paths_out_of_the_workspace_are_refused(workspace, tool, path, words):
    box = make_box(workspace)
    out = await run(box, tool, path=path, content="x", old_string="secret", new_string="x")
    assert_refused(out, words)
    assert (workspace.parent / "outside.txt").read_text() == "secret outside\n"


@pytest.mark.parametrize(
    "path, guarded",
    [
        (".git/config", ".git"),
        (".git/hooks/pre-commit", ".git"),
        ("to_git/config", ".git"),  # a symlink inside the workspace that leads into .git
        ("harness/checks.py", "harness"),
        (".kstui/sessions/x.jsonl", ".kstui"),
        ("k.toml", "k.toml"),
        ("notes/../.git/config", ".git"),
    ],
)
async def test_protected_paths_are_never_written(workspace, path, guarded):
    box = make_box(workspace)
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file() and not p.is_symlink()}
    for out in (
        await run(box, "write_file", path=path, content="pwned"),
        await run(box, "edit_file", path=path, old_string="[core]", new_string="pwned"),
    ):
        assert_refused(out, guarded, "may not")
    after = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before


async def test_extra_protected_paths_and_git_reads(workspace):
    box = make_box(workspace, protected=[Path("notes")])
    assert_refused(await run(box, "write_file", path="notes/a.md", content="x"), "notes")
    assert_refused(await run(box, "read_file", path=".git/config"), ".git")
    assert (await run(box, "read_file", path="k.toml")).text == 'task = "attention"\n'  # readable, not writable


async def test_workspace_files_are_read_written_and_edited(workspace):
    box = make_box(workspace)
    assert (await run(box, "read_file", path="k.cu")).text == KERNEL
    assert (await run(box, "read_file", path=str(workspace / "k.cu"))).text == KERNEL  # absolute inside: fine
    out = await run(box, "write_file", path="scratch/test.py", content="print(1)\n")
    assert not out.is_error and (workspace / "scratch" / "test.py").read_text() == "print(1)\n"
    out = await run(box, "edit_file", path="k.cu", old_string="void k()", new_string="void k2()")
    assert not out.is_error and (workspace / "k.cu").read_text() == "__global__ void k2() {}\n"
    (workspace / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    assert (await run(box, "read_file", path="lines.txt", start_line=3, end_line=4)).text == "line 3\nline 4\n"
    listing = (await run(box, "list_files")).text
    assert "k.cu" in listing and "scratch/test.py" in listing and ".git" not in listing and ".kstui" not in listing


async def test_edit_file_needs_exactly_one_match(workspace):
    (workspace / "dup.cu").write_text("a = 1;\na = 1;\n")
    box = make_box(workspace)
    assert_refused(await run(box, "edit_file", path="dup.cu", old_string="b = 2;", new_string="c"), "not found")
    assert_refused(await run(box, "edit_file", path="dup.cu", old_string="a = 1;", new_string="c"), "2 times")
    assert_refused(await run(box, "edit_file", path="dup.cu", old_string="", new_string="c"), "empty")
    assert (workspace / "dup.cu").read_text() == "a = 1;\na = 1;\n"


@pytest.mark.parametrize(
    "name, input, words",
    [
        ("read_file", {}, "path"),
        ("read_file", {"path": 42}, "path"),
        ("read_file", {"path": "nope.cu"}, "does not exist"),
        ("read_file", {"path": "notes"}, "not a file"),
        ("read_file", {"path": "k.cu", "start_line": "x"}, "integer"),
        ("write_file", {"path": "a.txt"}, "content"),
        ("write_file", {"path": "notes", "content": "x"}, "directory"),
        ("edit_file", {"path": "k.cu", "old_string": 1, "new_string": "x"}, "string"),
        ("bash", {}, "command"),
        ("bash", {"command": "true", "timeout_s": -1}, "timeout_s"),
        ("list_files", {"path": "k.cu"}, "not a directory"),
        ("evaluate", {"scenarios": 3}, "scenarios"),
        ("rm_rf", {}, "unknown tool"),
        ("read_file", {"path": "a\x00b"}, "NUL"),
    ],
)
async def test_bad_input_is_a_one_line_error_never_an_exception(workspace, name, input, words):
    assert_refused(await make_box(workspace).run(name, input), words)


async def test_non_dict_input_binary_files_and_symlink_loops(workspace):
    box = make_box(workspace)
    (workspace / "loop_a").symlink_to(workspace / "loop_b")
    (workspace / "loop_b").symlink_to(workspace / "loop_a")
    out = await run(box, "read_file", path="loop_a")
    assert out.is_error and "\n" not in out.text
    assert_refused(await box.run("read_file", ["k.cu"]), "JSON object")  # type: ignore[arg-type]
    (workspace / "blob.bin").write_bytes(b"\xff\xfe\x00abc")
    assert_refused(await run(box, "edit_file", path="blob.bin", old_string="abc", new_string="x"), "UTF-8")


def test_definitions_name_every_tool_with_a_schema(workspace):
    defs = make_box(workspace).definitions()
    assert [d["name"] for d in defs] == ["read_file", "edit_file", "write_file", "list_files", "bash", "evaluate"]
    for d in defs:
        assert d["input_schema"]["type"] == "object" and set(d["input_schema"]["required"]) <= set(
            d["input_schema"]["properties"]
        )


# ---- evaluate ----


async def test_evaluate_calls_the_session_and_contains_its_failures(workspace):
    assert (await run(make_box(workspace), "evaluate", scenarios="quick")).text.startswith("evaluated quick")

    async def broken(scenarios: str) -> str:
        raise RuntimeError("executor unreachable: ssh gpu1 timed out\nsecond line")

    assert_refused(await run(make_box(workspace, evaluate=broken), "evaluate"), "executor unreachable")


# ---- bash ----


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(params=["plain", "bubblewrap"])
def shell_box(request, workspace):
    if request.param == "plain":
        return make_box(workspace, bash_timeout_s=30, unconfined_shell=True)
    found = sandbox_mod.detect()
    if found is None:
        pytest.skip(sandbox_mod.notice(None))
    return make_box(workspace, bash_timeout_s=30, sandbox=found)


async def test_bash_runs_in_the_workspace_and_reports_the_exit_code(shell_box):
    out = await run(shell_box, "bash", command="pwd; ls k.cu; exit 3")
    assert out.is_error and out.text.startswith("exit code 3") and str(shell_box.workspace) in out.text
    assert "k.cu" in out.text


async def test_bash_environment_has_no_secrets(shell_box, monkeypatch):
    secrets = {
        "ANTHROPIC_API_KEY": "sk-ant-1",
        "ANTHROPIC_AUTH_TOKEN": "tok-2",
        "GITHUB_TOKEN": "ghp-3",
        "AWS_SECRET_ACCESS_KEY": "aws-4",
        "AWS_ACCESS_KEY_ID": "akid-5",
        "DB_PASSWORD": "pw-6",
        "my_service_key": "lower-7",
    }
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("KSTUI_HARMLESS", "visible")
    out = (await run(shell_box, "bash", command="env")).text
    assert "KSTUI_HARMLESS=visible" in out
    for value in secrets.values():
        assert value not in out
    assert shell_environment({"PATH": "/bin", "HF_TOKEN": "x"}) == {"PATH": "/bin"}


async def test_a_command_printing_100_mb_is_bounded(shell_box):
    tracemalloc.start()
    started = time.monotonic()
    try:
        out = await run(shell_box, "bash", command="head -c 100000000 /dev/zero | tr '\\0' x")
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 20
    assert peak_mb < 10, f"holding the output took {peak_mb:.0f} MB"
    assert len(out.text) < shell_box.output_cap + 500
    assert "bytes of output omitted (100,000,000 in all)" in out.text and out.text.rstrip().endswith("x")


async def test_a_command_that_never_ends_is_killed_with_its_children(shell_box):
    marker = f"31{uuid.uuid4().int % 10**6:06d}"
    started = time.monotonic()
    out = await run(shell_box, "bash", command=f"echo begun; sleep {marker} & sleep {marker}", timeout_s=1)
    assert time.monotonic() - started < 6
    assert_refused(ToolOutcome(out.text.splitlines()[0], out.is_error), "timed out after 1 s")
    assert "begun" in out.text
    await asyncio.sleep(0.2)
    assert _processes_with(f"sleep {marker}") == []


async def test_a_background_job_does_not_outlive_its_command(shell_box):
    marker = f"32{uuid.uuid4().int % 10**6:06d}"
    started = time.monotonic()
    out = await run(shell_box, "bash", command=f"sleep {marker} & echo started")
    assert not out.is_error and "started" in out.text and time.monotonic() - started < 5
    await asyncio.sleep(0.2)
    assert _processes_with(f"sleep {marker}") == []


async def test_confirm_shell_asks_before_each_command(workspace):
    asked: list[str] = []

    async def decline(command: str) -> bool:
        asked.append(command)
        return False

    box = make_box(workspace, confirm_shell=decline, unconfined_shell=True)
    out = await run(box, "bash", command="touch ran.txt")
    assert_refused(out, "declined")
    assert asked == ["touch ran.txt"] and not (workspace / "ran.txt").exists()

    async def accept(command: str) -> bool:
        return True

    assert not (
        await run(make_box(workspace, confirm_shell=accept, unconfined_shell=True), "bash", command="touch ran.txt")
    ).is_error
    assert (workspace / "ran.txt").exists()


# ---- the sandbox ----


@pytest.fixture
def sandboxed(workspace):
    found = sandbox_mod.detect()
    if found is None:
        pytest.skip(sandbox_mod.notice(None))
    return make_box(workspace, sandbox=found)


async def test_sandbox_lets_bash_write_only_the_workspace(sandboxed, workspace, tmp_path):
    out = await run(sandboxed, "bash", command="echo new > k.cu && echo made > scratch.txt && cat k.cu")
    assert not out.is_error and "new" in out.text and (workspace / "scratch.txt").read_text() == "made\n"
    for target in (".git/config", ".git/new", "k.toml", "harness/checks.py", ".kstui/x"):
        out = await run(sandboxed, "bash", command=f"echo pwned > {target}")
        assert out.is_error and "Read-only file system" in out.text, (target, out.text)
    assert (workspace / ".git" / "config").read_text() == "[core]\n"
    assert (workspace / "k.toml").read_text() == 'task = "attention"\n'
    assert not (workspace / ".git" / "new").exists() and not (workspace / ".kstui" / "x").exists()
    # Outside the workspace the system is read-only, and /tmp is a scratch space thrown away after.
    elsewhere = Path("/var/tmp") / f"kstui-escape-{uuid.uuid4().hex}"
    out = await run(sandboxed, "bash", command=f"echo pwned > {elsewhere}")
    assert out.is_error and ("Read-only file system" in out.text or "No such file or directory" in out.text)
    await run(sandboxed, "bash", command=f"echo pwned > {tmp_path / 'escape'}")
    assert not elsewhere.exists() and not (tmp_path / "escape").exists()


async def test_sandbox_has_no_network(sandboxed):
    out = await run(sandboxed, "bash", command="cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
    assert out.text.split("\n", 1)[1].split() == ["lo"]


def test_sandbox_detection_and_notice(tmp_path, monkeypatch):
    assert sandbox_mod.detect(str(tmp_path / "no-bwrap")) is None
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert sandbox_mod.detect(str(fake)) is None
    line = sandbox_mod.notice(None, str(fake))
    assert "No permissions to create new namespace" in line and "bash tool is off" in line and "\n" not in line
    assert "apt install bubblewrap" in line and "--unconfined-shell" in line
    assert "UNCONFINED" in sandbox_mod.notice(None, str(fake), unconfined=True)
    if sandbox_mod.detect() is not None:
        assert sandbox_mod.notice(sandbox_mod.detect()) == "bubblewrap"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sandbox_mod.probe.cache_clear()
    assert sandbox_mod.detect() is None and "not installed" in sandbox_mod.notice(None)


async def test_without_bubblewrap_bash_is_off_unless_turned_on_knowingly(workspace):
    off = make_box(workspace, shell_off="bubblewrap (bwrap) is not installed: the agent's bash tool is off")
    assert "bash" not in [d["name"] for d in off.definitions()]
    assert_refused(await run(off, "bash", command="touch ran.txt"), "bash tool is off")
    assert not (workspace / "ran.txt").exists()
    on = make_box(workspace, unconfined_shell=True)
    assert "bash" in [d["name"] for d in on.definitions()]
    assert not (await run(on, "bash", command="touch ran.txt")).is_error and (workspace / "ran.txt").exists()


@pytest.mark.parametrize("unconfined", [False, True])
def test_a_session_without_bubblewrap_turns_bash_off_and_says_how_to_install_it(tmp_path, monkeypatch, unconfined):
    monkeypatch.setenv("KSTUI_BWRAP", str(tmp_path / "no-bwrap"))
    kernel = make_workspace(tmp_path / "ws")
    config = SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, unconfined_shell=unconfined)
    session = Session(config, executor=FakeExecutor(), agent=None)
    offered = [d["name"] for d in session.toolbox.definitions()]
    line = session._sandbox_notice
    assert "\n" not in line and "bubblewrap cannot run here" in line
    if unconfined:
        assert "bash" in offered and "UNCONFINED" in line
    else:
        assert "bash" not in offered and "apt install bubblewrap" in line and "--unconfined-shell" in line


async def test_write_file_never_blocks_on_a_fifo_or_writes_through_a_device(workspace):
    os.mkfifo(workspace / "pipe.cu")
    out = await asyncio.wait_for(run(make_box(workspace), "write_file", path="pipe.cu", content="x"), 5)
    assert out.is_error and "\n" not in out.text, out.text
