"""What a remote evaluation sends: the kernel and the task's judge files, as content, in their layout.

The session hands an executor a private copy of the kernel beside the judge files it recorded at
start (kstui.engine.snapshots); a host gets exactly those bytes, each under its name in the layout
(harness.taskfile.judge_layout: `ops/op.cu`, `ops/op.toml`, `shared/base.py`), so a spec's reference
and baselines resolve there as they do here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.taskfile import judge_layout
from kstui.executors.protocol import ExecutorError


@dataclass(frozen=True)
class Bundle:
    kernel: str  # the kernel's name in the layout
    files: dict[str, bytes]  # every file by its name in the layout, the kernel's included

    @property
    def source(self) -> bytes:
        return self.files[self.kernel]

    def digest(self) -> str:
        """Names the bundle: the same names and contents, the same digest."""
        listing = {name: hashlib.sha256(data).hexdigest() for name, data in self.files.items()}
        return hashlib.sha256(json.dumps([self.kernel, listing], sort_keys=True).encode()).hexdigest()


def read_bundle(kernel: Path) -> Bundle:
    """The kernel and its judge files, read now (a task file the harness cannot read goes alone: the
    host's harness says what is wrong with it)."""
    layout = judge_layout(kernel, lenient=True)
    files: dict[str, bytes] = {}
    for name, path in [(layout.kernel, Path(kernel)), *layout.files.items()]:
        try:
            files[name] = path.read_bytes()
        except OSError as exc:
            raise ExecutorError(f"cannot read {path}: {exc.strerror or exc}") from None
    return Bundle(layout.kernel, files)


def safe_name(name: str) -> bool:
    """A name that stays inside the folder it is laid out in (what a host checks before writing)."""
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts and "\\" not in name
