"""Escapes tried from the agent's bash, through the tool, in the real bubblewrap sandbox.

Each test is an attack that worked against an earlier sandbox or a class of it: write outside the
workspace, remount the protected paths writable, read the home directory's keys, reach a host
service over a unix socket under /run or TCP on 127.0.0.1, share /dev/shm with the host, signal a
host process, exhaust processes or the disk, keep capabilities as root. The last test runs the same
as an unprivileged user where the suite runs as root.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kstui.engine import cgroup
from kstui.engine import sandbox as sandbox_mod
from kstui.engine.tools import Toolbox

BOX = sandbox_mod.detect()
pytestmark = pytest.mark.skipif(BOX is None, reason=sandbox_mod.notice(None))


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".kstui").mkdir()
    (ws / "k.cu").write_text("__global__ void k() {}\n")
    (ws / "k.toml").write_text('task = "rmsnorm"\n')
    (ws / "kstui.toml").write_text('model = "m"\n')
    return ws


def _box(ws: Path) -> Toolbox:
    async def evaluate(scenarios: str) -> str:
        return "not used"

    return Toolbox(
        ws, Path("k.cu"), evaluate=evaluate, sandbox=BOX, protected=[ws / ".git", ws / ".kstui", ws / "kstui.toml"]
    )


async def bash(box: Toolbox, command: str) -> str:
    return (await box.run("bash", {"command": command, "timeout_s": 30})).text


def _forks(python: str) -> str:
    """A fork bomb that counts its children (bash itself exits at its first failed fork)."""
    return (
        f"{python} -c 'import os, time\nn = 0\ntry:\n    while n < {sandbox_mod.NPROC + 100}:\n"
        "        if os.fork() == 0:\n            time.sleep(20)\n            os._exit(0)\n        n += 1\n"
        'except OSError:\n    pass\nprint("started", n)\''
    )


def _no_cgroup() -> bool:
    group = cgroup.make(1, 1 << 30)
    if group is not None:
        group.remove()
    return group is None


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return _workspace(tmp_path)


async def test_protected_paths_stay_read_only_even_remounted(ws: Path) -> None:
    box = _box(ws)
    out = await bash(
        box,
        "mount -o remount,rw .git; mount -o remount,rw,bind .git .git; "
        "echo '#!/bin/sh' > .git/hooks/post-update; echo x >> kstui.toml; echo y > k.toml; "
        "echo z > .kstui/state; unshare -r true && echo NESTED; grep CapEff /proc/self/status",
    )
    assert not (ws / ".git" / "hooks" / "post-update").exists() and not (ws / ".kstui" / "state").exists()
    assert (ws / "kstui.toml").read_text() == 'model = "m"\n' and (ws / "k.toml").read_text() == 'task = "rmsnorm"\n'
    assert "NESTED" not in out and "CapEff:\t0000000000000000" in out, out


async def test_nothing_outside_the_workspace_is_written_or_seen(ws: Path, tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "sibling.txt").write_text("user file\n")
    out = await bash(
        _box(ws),
        f"cat {home}/.ssh/id_ed25519; ls {tmp_path}; echo pwned > {tmp_path}/sibling.txt; "
        "echo pwned > /usr/kstui-escape; ls /run /home /root/.ssh 2>&1 | head -3; echo done",
    )
    assert "PRIVATE KEY" not in out and "sibling" not in out and out.rstrip().endswith("done")
    assert (tmp_path / "sibling.txt").read_text() == "user file\n" and not Path("/usr/kstui-escape").exists()


async def test_a_workspace_holding_the_home_directory_hides_its_credentials(tmp_path: Path, monkeypatch) -> None:
    ws = _workspace(tmp_path)
    (ws / ".ssh").mkdir()
    (ws / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (ws / ".config" / "kstui").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(ws))
    out = await bash(_box(ws), "cat .ssh/id_ed25519; echo 'eval_cmd = \"sh\"' > .config/kstui/kstui.toml; echo done")
    assert "PRIVATE KEY" not in out and out.rstrip().endswith("done")
    assert not (ws / ".config" / "kstui" / "kstui.toml").exists()


async def test_host_services_are_unreachable(ws: Path) -> None:
    run_dir = Path("/run") if os.access("/run", os.W_OK) else None
    listeners = []
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    listeners.append(tcp)
    unix_path = None
    if run_dir is not None:
        unix_path = run_dir / f"kstui-test-{uuid.uuid4().hex[:8]}.sock"
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(str(unix_path))
        unix.listen()
        listeners.append(unix)
    probe = (
        f"import socket\nfor fam, addr in [(socket.AF_INET, ('127.0.0.1', {tcp.getsockname()[1]})),"
        f" (socket.AF_UNIX, {str(unix_path)!r})]:\n"
        "    s = socket.socket(fam)\n    try:\n        s.connect(addr); print('REACHED', addr)\n"
        "    except OSError as e:\n        print('BLOCKED', e)\n"
    )
    (ws / "probe.py").write_text(probe)
    try:
        for s in listeners:
            s.setblocking(False)
        out = await bash(_box(ws), f"{sys.executable} probe.py")
        assert "REACHED" not in out and out.count("BLOCKED") == 2, out
        for s in listeners:
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        for s in listeners:
            s.close()
        if unix_path is not None:
            unix_path.unlink(missing_ok=True)


async def test_dev_shm_and_tmp_are_private(ws: Path) -> None:
    name = f"kstui-test-{uuid.uuid4().hex[:8]}"
    host = Path("/dev/shm") / f"{name}-host"
    host.write_text("host secret\n")
    try:
        out = await bash(
            _box(ws), f"cat /dev/shm/{name}-host; echo x > /dev/shm/{name}-box; echo y > /tmp/{name}-box; echo done"
        )
        assert "host secret" not in out and out.rstrip().endswith("done")
        assert not (Path("/dev/shm") / f"{name}-box").exists() and not (Path("/tmp") / f"{name}-box").exists()
    finally:
        host.unlink()


async def test_host_processes_cannot_be_signalled(ws: Path) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        out = await bash(_box(ws), f"kill -9 {victim.pid}; echo done")
        assert victim.poll() is None and "done" in out
    finally:
        victim.kill()
        victim.wait()


async def test_processes_and_file_size_are_bounded(ws: Path) -> None:
    box = _box(ws)
    out = await bash(
        box,
        _forks(sys.executable),
    )
    started = int(out.split("started")[1].split()[0])
    # The kernel exempts the host's root from RLIMIT_NPROC: as root only a cgroup bounds the count.
    assert started <= sandbox_mod.NPROC + 2 or (os.geteuid() == 0 and _no_cgroup()), out
    out = await bash(box, "dd if=/dev/zero of=big bs=1M count=1 seek=8192 2>&1; ls -s big")
    assert "File size limit exceeded" in out and (ws / "big").stat().st_size <= 8 << 30


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root to switch user")
def test_the_same_escapes_fail_as_an_unprivileged_user(tmp_path: Path) -> None:
    user = "kstui-sandbox-test"
    known = subprocess.run(["id", user], capture_output=True, check=False).returncode == 0
    if not known and subprocess.run(["useradd", "--no-create-home", user], capture_output=True, check=False).returncode:
        pytest.skip("cannot add a user here")
    root = Path(f"/tmp/kstui-unpriv-{uuid.uuid4().hex[:8]}")  # reachable by that user, unlike pytest's tmp
    ws = _workspace(root)
    subprocess.run(["chown", "-R", user, str(root)], check=True)
    # This Python, or the system's with kstui from source where this one is root's alone (a root pyenv).
    python = sys.executable
    if subprocess.run(["runuser", "-u", user, "--", python, "-c", ""], capture_output=True, check=False).returncode:
        python = "/usr/bin/python3"
    command = (
        "echo x > .git/config; echo y > kstui.toml; mount -o remount,rw .git; unshare -r true && echo NESTED; "
        + _forks(python)
    )
    script = (  # the tool as _box makes it, without pytest (which that Python may not have)
        f"import asyncio, sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from pathlib import Path\nfrom kstui.engine.sandbox import detect\nfrom kstui.engine.tools import Toolbox\n"
        "async def evaluate(scenarios): return ''\n"
        f"ws = Path({str(ws)!r})\n"
        "box = Toolbox(ws, Path('k.cu'), evaluate=evaluate, sandbox=detect(), "
        "protected=[ws / '.git', ws / '.kstui', ws / 'kstui.toml'])\n"
        f"print(asyncio.run(box.run('bash', {{'command': {command!r}, 'timeout_s': 30}})).text)\n"
    )
    try:
        done = subprocess.run(
            ["runuser", "-u", user, "--", python, "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
            check=False,
        )
        if "failed to execute" in done.stderr or "ModuleNotFoundError" in done.stderr:
            pytest.skip(f"no Python the user {user} can run kstui with: {done.stderr.strip().splitlines()[-1]}")
        if "bubblewrap" in done.stderr and "namespace" in done.stderr:
            pytest.skip(done.stderr.strip().splitlines()[-1])
        assert done.returncode == 0, done.stderr
        assert "NESTED" not in done.stdout and "Read-only file system" in done.stdout, done.stdout
        assert int(done.stdout.split("started")[1].split()[0]) <= sandbox_mod.NPROC + 2, done.stdout
        assert (ws / ".git" / "config").read_text() == "[core]\n" and (ws / "kstui.toml").read_text() == 'model = "m"\n'
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_python_environment_under_tmp_is_bound_but_nothing_else_there(tmp_path: Path, monkeypatch) -> None:
    # A CI checkout's venv may lie under /tmp, whose other contents bash must not see.
    venv = Path("/tmp") / f"kstui-venv-{uuid.uuid4().hex}"
    other = Path("/tmp") / f"kstui-other-{uuid.uuid4().hex}"
    try:
        (venv / "bin").mkdir(parents=True)
        other.mkdir()
        monkeypatch.setattr(sandbox_mod, "python_roots", lambda python: (str(venv),))
        monkeypatch.setenv("PATH", f"{other}:{os.environ['PATH']}")
        chains = sandbox_mod.toolchains(tmp_path / "ws")
        assert venv in chains and other not in chains
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
