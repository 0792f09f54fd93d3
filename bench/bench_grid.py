"""Every timed scenario's baseline of record, and the starting kernel's speedup against it (GPU).

Evaluates the starting kernel on the full grid with --retime-baselines, so every baseline the machine
has (FlashAttention-4 and -3 where installed, cuDNN, SDPA's flash and efficient backends) is checked
and timed beside it in this one run and the record of each scenario is the fastest valid one. Prints
`GRID` lines: per scenario, the record, every baseline's time (or `invalid: why`), the kernel's time
and speedup; then how many scenarios each baseline holds the record on, and the geomean (also against
cuDNN alone, the figure of earlier sessions). `--site DIR` names DIR in $KSTUI_WORKER_SITE, the
worker's opt-in for extra site directories (added with their .pth files, bound into its sandbox), so
FlashAttention-4 unpacked there imports.
Usage: python bench/bench_grid.py [--site /tmp/site] [--scenarios full] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.result import EvalResult  # noqa: E402

KERNEL = ROOT / "workspace" / "flash_fwd.cu"


def invalid_reasons(cache_dir: Path) -> dict[tuple[str, str], str]:
    """(scenario, baseline) -> why the baseline was refused, from the baseline cache."""
    try:
        data = json.loads((cache_dir / "baselines.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for entry in data.values():
        for sid, names in entry.get("scenarios", {}).items():
            for name, e in names.items():
                if not e.get("valid"):
                    out[(sid, name)] = e.get("detail", "")
    return out


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", type=Path, help="a site directory for the worker (FA4's wheels unpacked there)")
    ap.add_argument("--scenarios", default="full")
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(os.environ.get("KSTUI_CACHE_DIR") or tempfile.mkdtemp(prefix="kstui-grid-"))
    site = {"KSTUI_WORKER_SITE": str(args.site.resolve())} if args.site else {}
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(KERNEL), "--scenarios", args.scenarios,
                           "--retime-baselines", "--json", "-"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "KSTUI_CACHE_DIR": str(cache_dir), **site})
    (args.out / "grid.json").write_text(proc.stdout)
    (args.out / "grid.txt").write_text(proc.stderr)
    if not proc.stdout.strip():
        print(f"GRID no result (rc {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
        return 1
    result = EvalResult.from_json(proc.stdout)
    why = invalid_reasons(cache_dir)
    libraries = result.device.get("libraries") or {}
    print(f"GRID device {result.device.get('name')}, libraries {libraries or 'none (no FlashAttention package)'}, "
          f"cuDNN {result.device.get('cudnn')}, verdict {'CORRECT' if result.passed else 'REJECTED'}, "
          f"{result.seconds:.1f} s")
    records: Counter[str] = Counter()
    vs_cudnn = []
    for s in result.timed:
        cells = []
        for name, us in sorted(s.baselines.items()):
            cells.append(f"{name} {us:.1f}" if us is not None else f"{name} invalid: {why.get((s.id, name), '?')[:60]}")
        if s.baseline:
            records[s.baseline] += 1
        if s.time_us and s.baselines.get("cudnn"):
            vs_cudnn.append(s.baselines["cudnn"] / s.time_us)
        speedup = f"{s.speedup:.3f}" if s.speedup else "-"
        kernel_us = f"{s.time_us:.1f}" if s.time_us else "-"
        print(f"GRID {s.id:<46} record {s.baseline or '-'}; kernel {kernel_us} us, speedup {speedup}; "
              + "; ".join(cells))
    print("GRID records: " + ", ".join(f"{name} {n}" for name, n in records.most_common()))
    g = result.geomean_speedup
    gc = geomean(vs_cudnn) if len(vs_cudnn) == len(result.timed) else None
    print(f"GRID geomean {g:.4f} against each scenario's record" if g else "GRID geomean -",
          f"(against cuDNN alone: {gc:.4f})" if gc else "")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
