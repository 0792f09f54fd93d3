"""Real kstui processes for tests of stopping, locking and killing."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from fakes import make_workspace

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def start_hanging_eval(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path, int]:
    """A manual-mode headless kstui whose start evaluation hangs (a shell sleeping, its pid in a file)."""
    kernel = make_workspace(tmp_path / "ws", 1.0)
    pidfile = tmp_path / f"eval-{time.monotonic_ns()}.pid"
    eval_cmd = f"echo $$ > {shlex.quote(str(pidfile))}; sleep 300; echo {{file}}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kstui", "run", str(kernel), "--headless", "--no-agent", "--eval-cmd", eval_cmd,
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the evaluation never started"
        time.sleep(0.05)
    return proc, kernel, int(pidfile.read_text())
