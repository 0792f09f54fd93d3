"""A worker's private directory: its home, temporary files, Triton cache and the files it judges.

Made by the parent before the worker starts (mode 0700, under the system's temporary directory) and
removed when it ends. The worker sees nothing it judges at a path the agent can still change: the
candidate library and the task's judge files are copied in here by the parent and their copies'
hashes checked against what the parent checked; `eval/` is read-only inside the sandbox.

  home/     HOME (and the XDG cache and config), writable
  tmp/      TMPDIR and the working directory, writable
  triton/   TRITON_CACHE_DIR: a copy of the trusted cache, writable (harness.trusted)
  eval/     the staged library (kernel.so) and judge files (judge/), read-only to the worker
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path


class StagingError(Exception):
    """A file to judge changed between the parent's check and its copy: one line."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class WorkerFiles:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kstui-worker-")).resolve()
        self.home, self.tmp, self.triton, self.eval = (self.root / n for n in ("home", "tmp", "triton", "eval"))
        for d in (self.home, self.tmp, self.triton, self.eval / "judge"):
            d.mkdir(parents=True)

    def stage(self, source: Path, sha256: str, name: str) -> Path:
        """Copy `source` into eval/ as `name`; StagingError unless the copy's hash is `sha256`."""
        target = self.eval / name
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.part")
        try:
            shutil.copyfile(source, staging)
        except OSError as exc:
            raise StagingError(f"cannot copy {source}: {exc.strerror or exc}") from None
        if sha256_file(staging) != sha256:
            staging.unlink()
            raise StagingError(f"{source} changed after it was checked: not judged")
        os.chmod(staging, 0o500 if name.endswith(".so") else 0o400)
        os.replace(staging, target)
        return target

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
