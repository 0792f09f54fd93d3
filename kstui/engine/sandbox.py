"""bubblewrap confinement for the agent's bash tool: only the workspace writable, nothing of the user's.

What the sandbox sees is harness.confine's allowlist (the same as the evaluation worker's): /usr,
/etc without anything unreadable by everyone, a new /dev with only the GPU's nodes (and a private
/dev/shm), a new /proc, /sys read-only, a private /tmp; plus, read-only, the toolchains bash needs
(the Python environment, CUDA, the directories of PATH and LD_LIBRARY_PATH outside the home); and
the workspace, writable except the protected paths (.git, .kstui, the task file, the judge files,
kstui.toml, the question bank), which are bound read-only over it. The home directory, /run, other
users' files and every credential directory are absent; a workspace that holds the home directory
still does not show its credential folders.

The process gets its own user (every capability dropped, also as root; no nested user namespaces),
pid, network, ipc, uts and cgroup namespaces, a new session (no terminal injection) and dies with
kstui; a prelude inside lowers its limits for good: tasks, memory per process, file size, no core;
where kstui may make one (as root), a cgroup of its own bounds the command's tasks and memory whole
(kstui.engine.cgroup), which also holds where the kernel exempts root from the task limit.

`detect()` probes once ($KSTUI_BWRAP, else bwrap on PATH, as for the worker); where bubblewrap is missing or cannot make namespaces it returns None and
`notice()` says so in one line, with how to install it: bash is then off unless the user turns on
the unconfined shell knowingly.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import confine
from harness.worker_launch import python_roots
from kstui.engine.cgroup import CommandGroup

_PROBE_TIMEOUT_S = 20
FLAGS = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
)
NPROC = 1024  # tasks (threads included) of the sandbox's user: a fork bomb stops there
FSIZE_BLOCKS = 8 << 20  # ulimit -f counts 1 KiB blocks: no file over 8 GiB
# Half the machine's memory: for each process (RLIMIT_DATA, private writable memory, so CUDA's
# address-space reservations are not counted) and for the command whole, where it has a cgroup.
MEMORY_BYTES = max(1 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
DATA_KB = MEMORY_BYTES // 1024
# Folders of credentials under the home directory, hidden should the workspace hold them.
CREDENTIALS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".anthropic",
    ".local/share/keyrings",
    ".password-store",
    ".bash_history",
)
# Never bound as a toolchain, whatever PATH says: runtime sockets and scratch space shared with the host.
_NEVER = ("/run", "/var/run", "/tmp", "/var/tmp", "/dev", "/proc", "/sys")
INSTALL = "install bubblewrap (apt install bubblewrap / dnf install bubblewrap)"
# The limits, lowered hard so nothing inside can raise them again; then the command itself.
_PRELUDE = f'ulimit -HS -u {NPROC} -f {FSIZE_BLOCKS} -d {DATA_KB} -c 0 && exec bash -c "$1"'


@dataclass(frozen=True)
class Sandbox:
    bwrap: str  # path of the bwrap executable

    def wrap(
        self, command: str, *, workspace: Path, read_only: Sequence[Path] = (), group: CommandGroup | None = None
    ) -> list[str]:
        """`bash -c command` run confined, with only `workspace` writable (minus `read_only`), in `group`."""
        mounts = confine.Mounts(ro=tuple(toolchains(workspace)), rw=(workspace,), hide=tuple(_credentials(workspace)))
        cmd = [self.bwrap, *FLAGS, *confine.mount_args(mounts)]
        cmd += ["--size", str(confine.TMP_BYTES), "--tmpfs", "/dev/shm"]
        ws = Path(os.path.realpath(workspace))
        for path in read_only:  # after the workspace: bubblewrap applies mounts in order
            real = os.path.realpath(path)  # what lies outside the workspace is absent or read-only already
            if os.path.exists(real) and _within(Path(real), ws):
                cmd += ["--ro-bind", real, real]
        cmd += ["--chdir", str(workspace), "--", "bash", "-c", _PRELUDE, "kstui-bash", command]
        if group is None:
            return cmd
        return ["sh", "-c", f'{group.join_command()} && exec "$@"', "kstui-cgroup", *cmd]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _home() -> Path:
    return Path(os.path.realpath(os.path.expanduser("~")))


def _credentials(workspace: Path) -> list[Path]:
    home = _home()
    if not _within(home, workspace):
        return []
    return [home / name for name in CREDENTIALS if os.path.lexists(home / name)]


def toolchains(workspace: Path) -> list[Path]:
    """Read-only directories bash needs beyond the system: the Python environment (even in the home
    directory), CUDA, and PATH's and LD_LIBRARY_PATH's directories outside the home and the workspace."""
    home, ws = _home(), Path(os.path.realpath(workspace))
    # kstui's own Python environment is bound wherever it lies, a venv under /tmp too (as a CI checkout
    # may be): bash runs the Python kstui runs.
    python = [Path(os.path.realpath(p)) for p in python_roots(sys.executable)]
    found = list(python)
    searched = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    for name in ("PATH", "LD_LIBRARY_PATH"):
        searched += os.environ.get(name, "").split(os.pathsep)
    found += [
        Path(os.path.realpath(p)) for p in searched if os.path.isabs(p) and not _within(Path(os.path.realpath(p)), home)
    ]
    out: list[Path] = []
    for path in found:
        real = Path(os.path.realpath(path))
        if (
            not os.path.isdir(real)
            or real == Path("/")
            or _within(ws, real)
            or _within(home, real)
            or any(real == Path(n) or (_within(real, Path(n)) and real not in python) for n in _NEVER)
            or _within(real, ws)
        ):
            continue
        out.append(real)
    return list(dict.fromkeys(out))


def detect(bwrap: str | None = None) -> Sandbox | None:
    """A working bubblewrap, or None (not installed, or namespaces are not allowed here)."""
    found = bwrap or os.environ.get("KSTUI_BWRAP") or shutil.which("bwrap")
    if found is None:
        return None
    return Sandbox(found) if probe(found) is None else None


@functools.lru_cache(maxsize=4)
def probe(bwrap: str) -> str | None:
    """Run a trivial sandbox with bash's flags; None when it works, else why not (one line). Once per binary."""
    try:
        done = subprocess.run(
            [bwrap, *FLAGS, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
            check=False,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[0] if lines else f"exit code {done.returncode}"
    return None


def notice(sandbox: Sandbox | None, bwrap: str | None = None, *, unconfined: bool = False) -> str:
    """What bash runs in: "bubblewrap" when confined, else one line saying bash is off (or, turned on
    knowingly, unconfined), why, and how to install bubblewrap."""
    if sandbox is not None:
        return "bubblewrap"
    found = bwrap or os.environ.get("KSTUI_BWRAP") or shutil.which("bwrap")
    why = (
        "bubblewrap (bwrap) is not installed"
        if found is None
        else f"bubblewrap cannot run here ({probe(found) or 'it failed its probe'})"
    )
    if unconfined:
        return f"{why}: the agent's bash runs UNCONFINED, as you, because --unconfined-shell is on"
    return f"{why}: the agent's bash tool is off ({INSTALL}, or pass --unconfined-shell to run it unconfined)"
