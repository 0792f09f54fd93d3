"""Nothing kstui writes over the kernel file is lost: what was there, if no commit holds it, is saved first.

A restore (the history screen's, a rewind) replaces the kernel file. When its content is neither the
user's HEAD version nor any accepted version, it exists nowhere else, so it becomes a commit under
`refs/kstui/backups/<branch>` (each backup's parent is the one before it) and the caller says so.
Nothing else changes: no branch, no index, no working tree.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kstui.engine.history import History

BACKUP_PREFIX = "refs/kstui/backups/"


def backup_ref(branch: str) -> str:
    return BACKUP_PREFIX + branch


def save_unsaved(history: History) -> str | None:
    """Save the kernel file's content as a backup commit when no commit holds it; its sha, or None."""
    try:
        data = Path(history.kernel).read_bytes()
    except FileNotFoundError:
        return None
    if _blob_sha(data) in _known_blobs(history):
        return None
    return history.commit_backup(data)


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's object name for these bytes


def _known_blobs(history: History) -> set[str]:
    """Every version of the kernel on kstui's branch, at the user's HEAD and in the last backup."""
    out: set[str] = set()
    revs = [r for r in (history.tip(), history.rev(backup_ref(history.branch))) if r]
    if revs:
        # one call: the kernel's blob after each change along the branch (and the backups)
        log = history.repo.git.log("--format=", "--raw", "--no-abbrev", *revs, "--", history.relpath)
        out.update(line.split()[3] for line in log.splitlines() if line.startswith(":"))
    if history.repo.head.is_valid():
        listing = history.repo.git.ls_tree("HEAD", "--", history.relpath)
        if listing:
            out.add(listing.split()[2])
    return out
