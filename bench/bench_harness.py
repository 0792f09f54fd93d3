"""Harness benchmarks on the GPU (run by bench/gpu_check.sh; needs CUDA, torch and triton).

Prints `BENCH <name> <value>` lines (the table gpu_check.sh shows) and writes the full EvalResults to
--out. Measures: the starting kernel's build from a cold cache; its full evaluation with a cold
baseline cache, then twice warm (repeatability of geomean and per-scenario medians); a quick
evaluation; the harness's own overhead (evaluation time minus the candidate's kernel time); and
the cuDNN TFLOP/s the harness reports against a plain triton.testing.do_bench measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "workspace" / "flash_fwd.cu"
CROSS_CHECK_ID = "bf16-d128-b2-h16x16-s8192x8192"


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


def evaluate(out: Path, tag: str, *args: str) -> tuple[dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(KERNEL), "--json", "-", *args],
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    (out / f"eval-{tag}.json").write_text(proc.stdout)
    (out / f"eval-{tag}.txt").write_text(proc.stderr)
    return json.loads(proc.stdout), wall


def cold_build() -> float:
    from harness.build import BuildOptions, build

    with tempfile.TemporaryDirectory() as cache:
        report, lib = build(KERNEL, ["kstui_attention_fwd"], BuildOptions(cache_dir=Path(cache)))
        assert lib is not None, report.log
        return report.seconds


def do_bench_cudnn_tflops() -> float:
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, d = 2, 16, 8192, 128
    # The harness's layout ([B, S, H, D] seen as [B, H, S, D]): cuDNN's speed depends on it.
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v)

    ms = triton.testing.do_bench(run, warmup=100, rep=500, return_mode="median")
    return 4 * b * h * s * s * d / (ms * 1e-3) / 1e12


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["KSTUI_CACHE_DIR"] = tempfile.mkdtemp(prefix="kstui-bench-")  # cold caches to start

    bench("build, cold cache (s)", f"{cold_build():.1f}")
    cold, cold_wall = evaluate(args.out, "full-cold")
    bench("full eval, cold baseline cache (s)", f"{cold_wall:.1f}  geomean {cold['geomean_speedup']}")
    runs = []
    for i in (1, 2):
        r, wall = evaluate(args.out, f"full-warm{i}")
        runs.append(r)
        prof = r.get("profile", {})
        cand = sum(s["time_us"] or 0 for s in r["scenarios"] if s["timed"]) / 1e6
        bench(f"full eval, warm caches, run {i} (s)", f"{wall:.1f}  geomean {r['geomean_speedup']:.4f}  "
              f"correct {sum(s['correct'] for s in r['scenarios'])}/{len(r['scenarios'])}")
        bench(f"  run {i}: worker startup / reference / timing (s)",
              f"{prof.get('worker_startup_s', 0):.1f} / {prof.get('reference_s', 0):.1f} / {prof.get('timing_s', 0):.1f}")
        bench(f"  run {i}: candidate time, one pass of the grid (s)", f"{cand:.2f}")
    a, b = runs
    ga, gb = a["geomean_speedup"], b["geomean_speedup"]
    bench("repeatability: geomean difference (%)", f"{100 * abs(ga - gb) / ga:.3f}")
    ta = {s["id"]: s["time_us"] for s in a["scenarios"] if s["timed"]}
    diffs = sorted(100 * abs(ta[s["id"]] - s["time_us"]) / ta[s["id"]] for s in b["scenarios"] if s["timed"])
    within = sum(d <= 2.0 for d in diffs)
    bench("repeatability: per-scenario median diff (%)",
          f"median {statistics.median(diffs):.2f}  p90 {diffs[int(0.9 * len(diffs))]:.2f}  max {diffs[-1]:.2f}  "
          f"within 2%: {within}/{len(diffs)}")
    quick, quick_wall = evaluate(args.out, "quick", "--scenarios", "quick")
    bench("quick eval, warm caches (s)", f"{quick_wall:.1f}  (worker startup {quick['profile'].get('worker_startup_s', 0):.1f})")
    sc = next(s for s in a["scenarios"] if s["id"] == CROSS_CHECK_ID)
    us = sc["baselines"].get("cudnn")
    harness_tflops = sc["gflop"] * 1e9 / (us * 1e-6) / 1e12 if us else float("nan")
    plain = do_bench_cudnn_tflops()
    bench("cuDNN d128 s8192: harness vs do_bench TFLOP/s",
          f"{harness_tflops:.0f} vs {plain:.0f} ({100 * (harness_tflops - plain) / plain:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
