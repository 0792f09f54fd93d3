"""The processes kstui starts for evaluations never outlive it, even when kstui is SIGKILLed.

Each such process runs in a session of its own (so one kill reaches its whole group), which also cuts
it off from the terminal's Ctrl-C and from any tidy-up when kstui dies. Two ties make up for that:

- the kernel's parent-death signal (PR_SET_PDEATHSIG): the child is SIGKILLed as soon as kstui's
  thread that started it is gone, whatever killed kstui;
- a reaper: one small process per kstui, told over a pipe which groups are alive. The pipe's end of
  file (kstui gone, however) makes it kill every group still listed, which reaches what the child
  started too (a shell's `sleep`, an ssh, a compiler).

A hurried exit (kstui.stopping) kills the listed groups itself as well. The harness's workers die with
their parent in turn (harness/orphan.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

_PR_SET_PDEATHSIG = 1

# The reaper: reads "+PID" / "-PID" lines; at end of input it SIGKILLs every group still listed.
_REAPER = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[:1] in "+-" and line[1:].isdigit():
        (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for pid in groups:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
"""

_groups: set[int] = set()
_lock = threading.Lock()
_reaper: subprocess.Popen[bytes] | None = None


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the reaper is the one tie
        return None


_prctl = _libc_prctl()  # looked up once, here: the child between fork and exec must not import or load


def tie_to_parent() -> Callable[[], None]:
    """A preexec_fn (beside start_new_session=True) for a child that must die with this process: it asks
    the kernel for SIGKILL once its parent is gone (checked again after asking, for a parent already gone)."""
    parent = os.getpid()

    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def _tell(line: str) -> None:
    """One line to the reaper, started on first use (and again if it died)."""
    global _reaper
    if _reaper is None or _reaper.poll() is not None:
        _reaper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _REAPER], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for pid in _groups:
            _write(_reaper.stdin, f"+{pid}\n")
    _write(_reaper.stdin, line)


def _write(pipe: IO[bytes] | None, line: str) -> None:
    try:
        assert pipe is not None
        pipe.write(line.encode())
        pipe.flush()
    except (BrokenPipeError, OSError):
        pass  # the reaper is gone; the next line starts another


def track(pid: int) -> None:
    """A child started with start_new_session (its pid is its group's id): killed if kstui dies."""
    with _lock:
        _groups.add(pid)
        _tell(f"+{pid}\n")


def untrack(pid: int) -> None:
    with _lock:
        if pid in _groups:
            _groups.discard(pid)
            _tell(f"-{pid}\n")


def kill_all() -> None:
    """Kill every tracked group now (a hurried exit's last act: nothing of an evaluation outlives kstui)."""
    for pid in list(_groups):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _groups.discard(pid)
