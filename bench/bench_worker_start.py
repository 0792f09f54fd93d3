"""What bubblewrap adds to a worker's start, on a machine without a CUDA GPU.

The real worker (`python -I`, its private directory, the Triton cache seeded) is started through
harness.started_worker and runs until its CUDA check stops it (exit 4 or 5): torch and the harness
imported, nothing judged. Confined and unconfined alternate; the first pair is dropped.
Usage: python bench/bench_worker_start.py [--starts N]   (where torch has no GPU; a GPU worker would wait for a job)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.started_worker import EXIT_NO_CUDA, StartedWorker  # noqa: E402

MODES = {"bubblewrap": "require", "unconfined": "off"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=9)
    args = ap.parse_args()
    prep = {"cache_path": str(Path(tempfile.mkdtemp()) / "judge" / "baselines.json"), "task": "rmsnorm", "warm": []}
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    for i in range(args.starts):
        for mode, setting in MODES.items():
            os.environ["KSTUI_WORKER_SANDBOX"] = setting
            t0 = time.monotonic()
            worker = StartedWorker(prep, sys.executable)
            rc = worker.proc.wait()
            elapsed = time.monotonic() - t0
            worker.kill()
            if rc not in EXIT_NO_CUDA:
                raise SystemExit(f"the worker exited with {rc}, not at its CUDA check: run this where torch has no GPU")
            if i:
                seconds[mode].append(elapsed)
    for mode, v in seconds.items():
        print(f"BENCH worker start, {mode}: median {statistics.median(v):.3f} s, {min(v):.3f}-{max(v):.3f} (n={len(v)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
