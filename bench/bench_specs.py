"""Spec tasks on the GPU: the KernelBench examples' kernels and `kstui new`'s, each evaluated in full.

Run by `bash bench/gpu_check.sh specs-bench`. Prints `BENCH <name> <value>` lines and writes each
EvalResult (spec-<name>-<run>.json) and a markdown table for docs/BENCHMARKS.md (specs.md) to --out.
Per kernel: scenarios correct, wall seconds per evaluation (the first run of a fresh process pays
torch.compile's builds unless its on-disk cache is warm), and the geomean speedup of the kernel over
eager PyTorch (the reference itself) and over torch.compile of it, each over the timed scenarios
where that baseline was timed (speedup = baseline time / kernel time; above 1, the kernel is faster).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "kernelbench"


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


def geomean_over(result: dict, baseline: str) -> tuple[float | None, int]:
    ratios = [s["baselines"][baseline] / s["time_us"] for s in result["scenarios"]
              if s["timed"] and s.get("time_us") and isinstance(s.get("baselines", {}).get(baseline), float)]
    return (math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None), len(ratios)


def evaluate(kernel: Path, out: Path, tag: str) -> tuple[dict | None, float, int]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(kernel), "--json", "-"], capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    (out / f"spec-{tag}.json").write_text(proc.stdout)
    (out / f"spec-{tag}.txt").write_text(proc.stderr)
    return (json.loads(proc.stdout) if proc.stdout.strip() else None), wall, proc.returncode


def kernels(scratch: Path) -> list[tuple[str, str, Path]]:
    """(name, origin, kernel) for each example and for the kernel `kstui new` writes."""
    from kstui.new_task import main as new

    out = []
    for kernel in sorted(EXAMPLES.glob("*/*.cu")):
        (reference,) = kernel.parent.glob("*.py")
        out.append((kernel.stem, f"KernelBench L1 {reference.stem}", kernel))
    cwd = os.getcwd()
    os.chdir(scratch)
    try:
        new(["my_op"])
    finally:
        os.chdir(cwd)
    out.append(("kstui new", "SiLU (template)", scratch / "my_op.cu"))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    p.add_argument("--runs", type=int, default=1, help="evaluations per kernel (the first may compile)")
    p.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = ["| kernel | problem | scenarios correct | s / evaluation | geomean vs eager | geomean vs torch.compile |",
            "|---|---|---|---|---|---|"]
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        chosen = set(filter(None, args.only.split(",")))
        for name, origin, kernel in kernels(Path(scratch)):
            if chosen and name not in chosen:
                continue
            walls, result, rc = [], None, 1
            for run in range(args.runs):
                result, wall, rc = evaluate(kernel, args.out, f"{name.replace(' ', '_')}-{run + 1}")
                walls.append(wall)
            if result is None:
                bench(f"spec {name}", f"no result (rc {rc}); see spec-{name}-*.txt")
                failures += 1
                continue
            correct = sum(1 for s in result["scenarios"] if s["correct"])
            eager, n_eager = geomean_over(result, "eager")
            compiled, n_compiled = geomean_over(result, "compiled")
            failures += rc != 0
            seconds = " / ".join(f"{w:.0f}" for w in walls)
            fmt = lambda g, n: f"{g:.3f} ({n})" if g is not None else "- (refused)"  # noqa: E731
            total = len(result["scenarios"])
            vs_eager, vs_compiled = fmt(eager, n_eager), fmt(compiled, n_compiled)
            bench(f"spec {name} (rc {rc})",
                  f"{correct}/{total} correct, {seconds} s, x{vs_eager} vs eager, x{vs_compiled} vs compiled")
            rows.append(f"| {name} | {origin} | {correct}/{total} | {seconds} | {vs_eager} | {vs_compiled} |")
    (args.out / "specs.md").write_text("\n".join(rows) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
