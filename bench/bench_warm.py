"""Evaluation latency with prepared workers: `harness serve`, as the session's local executor uses it.

Sends the starting kernel to one `python -m harness serve` the way a session does: a first
evaluation (its worker starts cold), a pause standing in for the agent's turn while the next worker
prepares, then evaluations that find a prepared worker. Prints `BENCH` lines: each request's wall
time as the client sees it, and where the time went (the worker's own profile). `--stand-in
flash|cudnn` has the workers judge a library kernel in place of the candidate (bench/stand_in.py),
for a fast kernel's figures end to end: the kernel file is still built and checked.
Usage: python bench/bench_warm.py [--out DIR] [--pause S] [--full] [--stand-in flash|cudnn]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "workspace" / "flash_fwd.cu"
sys.path.insert(0, str(ROOT / "bench"))

from stand_in_worker import wrapper  # noqa: E402

PHASES = ("worker_wait_s", "correctness_pass_s", "timing_pass_s", "candidate_calls_s", "reference_s", "compare_s",
          "baseline_checks_s", "timing_s", "wall_clock_check_s", "warmup_s", "worker_s")


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


class Server:
    def __init__(self, extra: list[str]) -> None:
        self.extra = extra
        self.proc = subprocess.Popen([sys.executable, "-m", "harness", "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.ids = itertools.count(1)

    def eval(self, *args: str) -> tuple[dict, float]:
        rid = next(self.ids)
        t0 = time.monotonic()
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"id": rid, "argv": [str(KERNEL), "--json", "-", *args, *self.extra]}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        wall = time.monotonic() - t0
        assert reply["id"] == rid and reply["stdout"], reply["stderr"][-2000:]
        return json.loads(reply["stdout"]), wall

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def report(tag: str, result: dict, wall: float, out: Path) -> None:
    (out / f"warm-{tag.split(' (')[0].replace(' ', '-')}.json").write_text(json.dumps(result, indent=1))
    prof = result.get("profile", {})
    ok = sum(1 for s in result["scenarios"] if s["correct"])
    parts = " ".join(f"{k[:-2]} {prof[k]:.2f}" for k in PHASES if k in prof)
    bench(f"{tag} wall", f"{wall:.2f} s ({ok}/{len(result['scenarios'])} correct, geomean "
                         f"{result.get('geomean_speedup') or 0:.3f}; {parts})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    ap.add_argument("--pause", type=float, default=20.0, help="seconds between requests (the agent's turn)")
    ap.add_argument("--full", action="store_true", help="also a full evaluation, cold then prepared")
    ap.add_argument("--stand-in", choices=["flash", "cudnn"], help="judge a library kernel in place of the kernel")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    extra = ["--worker-python", str(wrapper(args.stand_in, Path(tempfile.mkdtemp())))] if args.stand_in else []
    server = Server(extra)
    try:
        report("quick 1 (cold worker)", *server.eval("--scenarios", "quick"), args.out)
        for i in (2, 3):
            time.sleep(args.pause)
            report(f"quick {i} (prepared worker)", *server.eval("--scenarios", "quick"), args.out)
        if args.full:
            report("full 1 (worker warmed for quick)", *server.eval(), args.out)
            time.sleep(3 * args.pause)
            report("full 2 (prepared worker)", *server.eval(), args.out)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
