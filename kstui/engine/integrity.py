"""The judge's fingerprint: the harness's files as the session found them, so a change mid-session stops it.

The agent must never be able to change what decides. Its tools and sandbox keep it away from the
harness; this is the second wall: every evaluation first checks that the installed harness still holds
the bytes it held at start, and the session stops evaluating if it does not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root (bytecode caches excluded)."""
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class JudgeFingerprint:
    def __init__(self, harness_dir: Path) -> None:
        self.harness_dir = harness_dir
        self._hashes = hash_tree(harness_dir)
        if not self._hashes:
            raise ValueError(f"no harness files under {harness_dir}: nothing to judge with")

    def changed(self) -> list[str]:
        """The files that differ from the session's start (added, removed or edited), sorted."""
        now = hash_tree(self.harness_dir)
        return sorted(k for k in set(now) | set(self._hashes) if now.get(k) != self._hashes.get(k))
