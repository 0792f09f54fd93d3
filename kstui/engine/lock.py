"""One kstui per kernel: a second one on the same kernel is refused in one line.

The lock is an flock on a file in the repository's git directory (outside the workspace, where the
agent's tools cannot reach it), named for the kernel's path. The operating system releases it when
the process ends, however it ends, so a crashed kstui never leaves it stuck.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path


class KernelBusy(Exception):
    """Another kstui holds the kernel; one line for the user."""


class KernelLock:
    def __init__(self, directory: Path, kernel: Path) -> None:
        self.kernel = kernel
        self.path = directory / f"{hashlib.sha256(str(kernel).encode()).hexdigest()[:16]}.lock"
        self._fd: int | None = None

    def acquire(self) -> KernelLock:
        """Take the lock or raise KernelBusy naming the holder's pid; held until release or exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise KernelBusy(f"{self.kernel}: another kstui{who} is already running on this kernel") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None
