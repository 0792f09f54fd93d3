"""A cgroup of its own for each bash command, where kstui may make one: a bound on tasks and memory
that holds for root too (the kernel exempts the host's root from RLIMIT_NPROC, and rlimits bound each
process, not their sum).

The group is made inside kstui's own cgroup (so whatever bounds kstui bounds it too): cgroup v2,
where kstui's cgroup delegates the pids and memory controllers to its children, or v1 (one directory
in each of the pids and memory hierarchies). Without write access (an unprivileged user, a read-only
/sys/fs/cgroup) or those controllers there is none, and the sandbox's rlimits are the only bound.
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
    own = _own_cgroups()
    if "" in own:  # cgroup v2
        parent = ROOT / own[""].lstrip("/")
        try:
            delegated = set((parent / "cgroup.subtree_control").read_text().split())
        except OSError:
            return None
        if not {"pids", "memory"} <= delegated:
            return None
        return _made([(parent / name, {"pids.max": tasks, "memory.max": memory_bytes})])
    if "pids" in own and "memory" in own:
        return _made(
            [
                (ROOT / "pids" / own["pids"].lstrip("/") / name, {"pids.max": tasks}),
                (ROOT / "memory" / own["memory"].lstrip("/") / name, {"memory.limit_in_bytes": memory_bytes}),
            ]
        )
    return None


def _own_cgroups() -> dict[str, str]:
    """{controller: kstui's cgroup path} from /proc/self/cgroup; "" is the v2 hierarchy (only where
    there is no v1 hierarchy for pids, as a hybrid system keeps its limits in v1)."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    if "pids" in found:
        found.pop("", None)
    return found


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
