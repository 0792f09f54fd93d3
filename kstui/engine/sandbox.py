"""bubblewrap confinement for the agent's bash tool: the whole system read-only, the workspace writable.

Inside the sandbox the protected paths of the workspace (.git, .kstui, the task file, the harness)
are bound read-only over the writable workspace, there is no network, and the command's processes
die with it. Where bubblewrap is missing or cannot create namespaces, `detect()` returns None and
`notice()` says so in one line, so that the session can tell the user at start.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_PROBE_TIMEOUT_S = 10


@dataclass(frozen=True)
class Sandbox:
    bwrap: str  # path of the bwrap executable

    def wrap(self, argv: Sequence[str], *, workspace: Path, read_only: Sequence[Path] = ()) -> list[str]:
        """argv run inside bubblewrap with only `workspace` writable (minus `read_only`)."""
        cmd = [
            self.bwrap,
            "--ro-bind", "/", "/",
            "--dev-bind", "/dev", "/dev",  # GPUs stay reachable for the agent's own experiments
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            "--bind", str(workspace), str(workspace),
        ]  # fmt: skip
        for path in read_only:
            if path.exists():
                cmd += ["--ro-bind", str(path), str(path)]
        cmd += [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--chdir", str(workspace),
            "--",
            *argv,
        ]  # fmt: skip
        return cmd


def detect(bwrap: str | None = None) -> Sandbox | None:
    """A working bubblewrap, or None (not installed, or namespaces are not allowed here)."""
    found = bwrap or shutil.which("bwrap")
    if found is None:
        return None
    return Sandbox(found) if probe(found) is None else None


def probe(bwrap: str) -> str | None:
    """Run a trivial sandbox; None when it works, else why not (one line)."""
    try:
        done = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-all", "--die-with-parent", "true"],
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            text=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[0] if lines else f"exit code {done.returncode}"
    return None


def notice(sandbox: Sandbox | None, bwrap: str | None = None) -> str:
    """"bubblewrap" when bash is confined, else a one-line notice that it is not, and why."""
    if sandbox is not None:
        return "bubblewrap"
    found = bwrap or shutil.which("bwrap")
    if found is None:
        return "bubblewrap (bwrap) is not installed: the agent's bash commands run unconfined in the workspace"
    reason = probe(found) or "it failed its probe"
    return f"bubblewrap cannot run here ({reason}): the agent's bash commands run unconfined in the workspace"
