"""A worker outlives no parent: when the process that started it is gone, it ends itself and its children.

Workers run in their own session (so a kill reaches what they start), which also means that killing
the parent's group (a timed-out `harness eval`, a killed `harness serve`) does not reach them. A hung
kernel in an orphaned worker would hold the GPU forever; this watch ends it within a second.
"""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 1.0


def die_with_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()
