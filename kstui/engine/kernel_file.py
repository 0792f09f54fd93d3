"""The kernel file as the agent last saw it, and the edits made to it by anyone else.

The agent's own tools write the kernel; so may the human, in an editor, at any time. What a kernel-
writing tool leaves is the agent's own; any other change is an external edit that the agent must be
told about (as a diff), so it never works on a file it has not seen.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path


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
        whatever it points to, ~/.ssh included): a link reads as empty."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return ""  # mid-save (an editor's rename), deleted, or a link: treated as empty until it is back
        with os.fdopen(fd, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()

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
