"""One kstui per kernel: a second one gets one line and exit 2; a SIGKILLed holder leaves no stuck lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from process_support import ROOT, start_hanging_eval


def _second(kernel: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kstui", "run", str(kernel), "--headless", "--no-agent",
                           "--eval-cmd", "false {file}", "--max-evals", "0"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_second_kstui_on_the_same_kernel_is_refused_until_the_first_is_gone(tmp_path: Path) -> None:
    first, kernel, _ = start_hanging_eval(tmp_path)
    try:
        second = _second(kernel)
        assert second.returncode == 2
        assert second.stderr == f"kstui: {kernel}: another kstui (pid {first.pid}) is already running on this kernel\n"
        assert second.stdout == ""
    finally:
        first.kill()
        first.wait()
    again = _second(kernel)  # the dead holder's lock went with it
    assert again.returncode in (0, 1), again.stderr
    assert "another kstui" not in again.stderr
