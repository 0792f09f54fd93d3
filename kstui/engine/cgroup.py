"""A cgroup of its own for each bash command, where kstui may make one: a bound on tasks and memory
that holds for root too (the kernel exempts the host's root from RLIMIT_NPROC, and rlimits bound each
process, not their sum).

cgroup v2 (a directory under the unified hierarchy's root, with the pids and memory controllers) or
v1 (one directory in each of the pids and memory hierarchies). Without write access (an unprivileged
user, a read-only /sys/fs/cgroup) there is none and the sandbox's rlimits are the only bound.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_REMOVE_TRIES = 50  # rmdir waits for the last task of a killed command to be reaped


@dataclass(frozen=True)
class CommandGroup:
    dirs: tuple[Path, ...]  # one per hierarchy; each has a cgroup.procs the command's first process joins

    def join_command(self) -> str:
        """Shell that moves itself into the group (then `exec`s what follows)."""
        return " && ".join(f'echo $$ > "{d / "cgroup.procs"}"' for d in self.dirs)

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(_REMOVE_TRIES):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def make(tasks: int, memory_bytes: int) -> CommandGroup | None:
    """A fresh group bounded to `tasks` tasks and `memory_bytes` of memory, or None where none can be made."""
    if os.geteuid() != 0:
        return None
    name = f"kstui-bash-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    unified = _unified_root()
    if unified is not None:
        return _made([(unified / name, {"pids.max": tasks, "memory.max": memory_bytes})])
    v1 = [
        (ROOT / "pids" / name, {"pids.max": tasks}),
        (ROOT / "memory" / name, {"memory.limit_in_bytes": memory_bytes}),
    ]
    if all(p.parent.is_dir() for p, _ in v1):
        return _made(v1)
    return None


def _unified_root() -> Path | None:
    """The cgroup v2 root when it is mounted at /sys/fs/cgroup and delegates pids and memory."""
    try:
        controllers = (ROOT / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    return ROOT if {"pids", "memory"} <= set(controllers) else None


def _made(plan: list[tuple[Path, dict[str, int]]]) -> CommandGroup | None:
    made: list[Path] = []
    try:
        for path, limits in plan:
            path.mkdir()
            made.append(path)
            for key, value in limits.items():
                (path / key).write_text(str(value))
    except OSError:
        CommandGroup(tuple(made)).remove()
        return None
    return CommandGroup(tuple(made))
