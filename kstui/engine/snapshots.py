"""Copies of kernel versions for re-evaluation, kept where the agent cannot reach them.

A borderline candidate and the best version are re-evaluated from copies, so the file the agent edits
can change meanwhile. The copies live in a private directory outside the workspace (mode 0700), each
beside a copy of the kernel's task file so it resolves to the same task: nothing the agent writes (a
symlink in place of a copy, say) is ever written through.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


class Snapshots:
    def __init__(self, kernel: Path) -> None:
        self.kernel = kernel
        self._dir: Path | None = None

    def write(self, label: str, content: str) -> Path:
        """A copy of `content` named like the kernel (its name is part of the build), in its own folder."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="kstui-versions-"))
        folder = self._dir / label
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / self.kernel.name
        path.write_text(content, encoding="utf-8", errors="surrogateescape")
        task = self.kernel.with_suffix(".toml")
        if task.is_file():
            shutil.copyfile(task, path.with_suffix(".toml"))
        return path

    def remove(self, path: Path) -> None:
        shutil.rmtree(path.parent, ignore_errors=True)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
