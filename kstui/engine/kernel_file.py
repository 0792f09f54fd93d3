"""The kernel file as the agent last saw it, and the edits made to it by anyone else.

The agent's own tools write the kernel; so may the human, in an editor, at any time. What a kernel-
writing tool leaves is the agent's own; any other change is an external edit that the agent must be
told about (as a diff), so it never works on a file it has not seen.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path

MAX_BYTES = 16 << 20  # a kernel's source is kilobytes; more is an attack on kstui's memory


def unified_diff(old: str, new: str, name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{name}", f"b/{name}"))


class KernelFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.known = ""  # the text the agent last saw or wrote
        self.tool_writing = False  # one of the agent's kernel-writing tools is running

    def read(self) -> str:
        """The file's text; never through a link put in its place (kstui would read, judge and commit
        whatever it points to, ~/.ssh included), never a FIFO or device (a read would hang or never
        end), never more than MAX_BYTES: any of those reads as empty (`problem` says why)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return ""  # mid-save (an editor's rename), deleted, or a link: treated as empty until it is back
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
                return ""
            return f.read(MAX_BYTES).decode("utf-8", "surrogateescape")

    def problem(self) -> str | None:
        """Why the file on disk is not a kernel kstui may judge (a link, not a regular file, too big), or None."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return None  # absent: judged as the empty text it reads as
        if stat.S_ISLNK(info.st_mode):
            return "the kernel file was replaced by a symbolic link: kstui judges only a regular file"
        if not stat.S_ISREG(info.st_mode):
            return "the kernel file is not a regular file: kstui judges only a regular file"
        if info.st_size > MAX_BYTES:
            return f"the kernel file is larger than {MAX_BYTES >> 20} MiB"
        return None

    def take_as_known(self) -> str:
        """What is on disk now is what the agent has seen (its own tool wrote it, or it was told)."""
        self.known = self.read()
        return self.known

    def external_edit(self) -> str | None:
        """The diff of a change the agent has not seen, now taken as seen; None when there is none."""
        text = self.read()
        if text == self.known:
            return None
        diff = unified_diff(self.known, text, self.path.name)
        self.known = text
        return diff
