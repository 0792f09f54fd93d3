"""The copies of kernel versions that are evaluated, kept where the agent cannot reach them.

Every evaluation judges a copy: the kernel's text as read once, in a private directory outside the
workspace (mode 0700), beside the task's judge files as the session recorded them at start
(integrity.TaskFiles), laid out as the spec names them so the copy resolves to the same task. The
file the agent edits, and a task file or reference changed since, can change meanwhile without
changing what is judged; nothing the agent writes (a symlink in place of a copy, say) is ever
written through.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from kstui.engine.integrity import TaskFiles


class Snapshots:
    def __init__(self, kernel: Path) -> None:
        self.kernel = kernel
        self.judge: TaskFiles | None = None  # recorded at the session's start; until then, at the first copy
        self._dir: Path | None = None

    def write(self, label: str, content: str) -> Path:
        """A copy of `content` named like the kernel (its name is part of the build) with the recorded judge
        files, in a folder of its own; the copy's path."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="kstui-versions-"))
        if self.judge is None:
            self.judge = TaskFiles.record(self.kernel)
        folder = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self._dir))
        return self.judge.lay_out(folder, content)

    def remove(self, path: Path) -> None:
        if self._dir is not None and path.is_relative_to(self._dir):
            shutil.rmtree(self._dir / path.relative_to(self._dir).parts[0], ignore_errors=True)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
