"""The judge's fingerprint: the harness's files and the task's judge files as the session found them.

The agent must never be able to change what decides. Its tools and sandbox keep it away from the
harness and the task's files (the task file, the reference, the baselines a spec names); this is the
second wall: every evaluation first checks that they still hold the bytes they held at start. A
changed harness stops the session's evaluations; a changed task file or reference refuses each
evaluation while it differs, and the copy evaluated is always the one recorded at start
(`TaskFiles.lay_out`), never the file the agent or the user can still change.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from harness.taskfile import judge_layout


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root (bytecode caches excluded)."""
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def judge_paths(kernel: Path) -> list[Path]:
    """Where the task's judge files are, as named beside the kernel and as resolved (what tools protect)."""
    layout = judge_layout(kernel, lenient=True)
    return [p for name, source in layout.files.items() for p in (layout.root / name, source)]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


@dataclass(frozen=True)
class TaskFiles:
    """The kernel's judge files as recorded: the kernel's name in their layout and each file's bytes
    (None: named but unreadable)."""

    kernel_name: str
    contents: dict[str, bytes | None]

    @classmethod
    def record(cls, kernel: Path) -> TaskFiles:
        layout = judge_layout(kernel, lenient=True)
        return cls(layout.kernel, {n: _read(p) for n, p in layout.files.items()})

    def changed(self, kernel: Path) -> list[str]:
        """The judge files that differ now from the record (edited, added, removed), sorted."""
        now = TaskFiles.record(kernel).contents
        return sorted(n for n in set(now) | set(self.contents) if now.get(n) != self.contents.get(n))

    def lay_out(self, folder: Path, kernel_text: str) -> Path:
        """The kernel's text and the recorded judge files written under `folder` in their layout (which the
        harness reads as the task); the kernel's path there."""
        kernel = folder / self.kernel_name
        for name, data in self.contents.items():
            if data is not None:
                (folder / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                (folder / name).write_bytes(data)
        kernel.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        kernel.write_text(kernel_text, encoding="utf-8", errors="surrogateescape")
        return kernel


class JudgeFingerprint:
    def __init__(self, harness_dir: Path, kernel: Path | None = None) -> None:
        self.harness_dir = harness_dir
        self._hashes = hash_tree(harness_dir)
        if not self._hashes:
            raise ValueError(f"no harness files under {harness_dir}: nothing to judge with")
        self.kernel = kernel
        self.task = TaskFiles.record(kernel) if kernel is not None else None

    def changed(self) -> list[str]:
        """The harness files that differ from the session's start (added, removed or edited), sorted."""
        now = hash_tree(self.harness_dir)
        return sorted(k for k in set(now) | set(self._hashes) if now.get(k) != self._hashes.get(k))

    def task_changed(self) -> list[str]:
        """The task's judge files that differ from the session's start, by their names beside the kernel."""
        return self.task.changed(self.kernel) if self.task is not None and self.kernel is not None else []
