"""`--devices` and `--shard K/N` on the GPUs there are: same verdict as an unsharded evaluation, and
per-scenario medians within the measured noise. Prints `BENCH` lines for bench/gpu_check.sh.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.merge import merge_results  # noqa: E402
from harness.result import EvalResult  # noqa: E402

KERNEL = ROOT / "workspace" / "flash_fwd.cu"


def evaluate(*args: str) -> tuple[EvalResult, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(KERNEL), "--json", "-", *args],
                          capture_output=True, text=True, cwd=ROOT)
    return EvalResult.from_json(proc.stdout), time.monotonic() - t0


def compare(name: str, ref: EvalResult, other: EvalResult, wall: float) -> None:
    times = {s.id: s.time_us for s in ref.timed}
    diffs = [100 * abs(s.time_us - times[s.id]) / times[s.id] for s in other.timed if s.time_us and times.get(s.id)]
    spread = statistics.median(s.spread_pct for s in ref.timed if s.spread_pct is not None)
    gpus = sorted({s.gpu for s in other.scenarios})
    print(f"BENCH {name:<44} {wall:.1f} s, verdict {'same' if other.passed == ref.passed else 'DIFFERENT'} "
          f"({other.correct_count}/{len(other.scenarios)}), geomean {other.geomean_speedup:.4f} vs {ref.geomean_speedup:.4f}, "
          f"median |Δt| {statistics.median(diffs):.2f}% (median spread {spread:.2f}%), gpus {gpus}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    ap.add_argument("--scenarios", default="quick")
    ap.add_argument("--devices", default="0")
    args = ap.parse_args()
    ref, wall = evaluate("--scenarios", args.scenarios)
    print(f"BENCH {'unsharded ' + args.scenarios:<44} {wall:.1f} s, geomean {ref.geomean_speedup:.4f}", flush=True)
    dev, wall = evaluate("--scenarios", args.scenarios, "--devices", args.devices)
    compare(f"--devices {args.devices}", ref, dev, wall)
    t0 = time.monotonic()
    parts = [evaluate("--scenarios", args.scenarios, "--shard", f"{k}/2")[0] for k in (1, 2)]
    merged = merge_results(parts, order=[s.id for s in ref.scenarios])
    compare("--shard 1/2 + 2/2, merged", ref, merged, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
