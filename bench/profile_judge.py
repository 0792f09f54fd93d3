"""Where a worker's time goes, scenario group by group (GPU; torch alone).

Builds a kernel, sets the worker's Judge up in this process and judges the correctness grid and the
timed scenarios of a selection in passes (two by default; the second is what a prepared worker pays),
printing per-group seconds, the Judge's phases, and cProfile's heaviest functions for the last pass;
with three or more, how far the last two passes' per-scenario medians agree.

`--stand-in flash|cudnn` judges a library kernel in place of the kernel (bench/stand_in.py): what the
harness itself costs when the kernel is fast. With the cuDNN stand-in and bf16 d=128 s=8192 in the
selection, the harness's TFLOP/s for cuDNN there (as the candidate and as the baseline beside it) are
printed against triton.testing.do_bench's in the same process. `--json` writes the second pass's
results.
cProfile runs only when --top asks for its table, so the phase figures are not inflated by it.
Usage: python bench/profile_judge.py [KERNEL] [--selection quick|full] [--stand-in flash|cudnn] [--top 25] [--json PATH] [--passes N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_harness import CROSS_CHECK_ID, do_bench_cudnn_tflops  # noqa: E402 (bench/ is this script's folder)
from stand_in import stand_in_judge  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", nargs="?", type=Path, default=ROOT / "workspace" / "flash_fwd.cu")
    ap.add_argument("--selection", default="quick")
    ap.add_argument("--stand-in", choices=["flash", "cudnn"], help="judge a library kernel in place of the kernel")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, help="write every pass's scenario results here")
    ap.add_argument("--passes", type=int, default=2, help="passes over the selection (the last is profiled)")
    ap.add_argument("--noise-target", type=float, help="the task file's noise_target_pct, overridden (0: off)")
    args = ap.parse_args()

    import torch

    from harness.baselines import BaselineCache, fingerprint
    from harness.build import BuildOptions, build
    from harness.runner import EvalOptions, resolve
    from harness.timing import Timer, measure_peaks
    from harness.worker import Judge, device_info, judging_device, load_entry

    task, tf, scenarios = resolve(args.kernel, EvalOptions(selection=args.selection))
    report, library = build(args.kernel, [task.entry_symbol], BuildOptions())
    assert library is not None, report
    device = judging_device(0)
    cache = BaselineCache(Path(tempfile.mkdtemp()) / "baselines.json", fingerprint(device_info(device), task.name))
    cache.peaks = measure_peaks(device)
    judge_class = stand_in_judge(args.stand_in) if args.stand_in else Judge
    judge = judge_class(task, device, Timer(device, torch.cuda.Stream(device)), cache, cache.peaks)
    judge.entry = load_entry(task, str(library))
    noise = tf.noise_target_pct if args.noise_target is None else args.noise_target
    judge.job = {"seed": 1, "baseline": None, "retime": False, "time_budget_s": tf.time_budget_ms / 1000.0,
                 "noise_target_pct": noise}
    groups = {"correctness grid": [s for s in scenarios if not s.timed],
              f"{args.selection} timed": [s for s in scenarios if s.timed]}

    who = {"flash": "FA2 stand-in", "cudnn": "cuDNN stand-in"}.get(args.stand_in, args.kernel.name) + f" noise {noise}"

    def judge_all(tag: str) -> list:
        judged = []
        for name, group in groups.items():
            judge.profile.clear()
            t0 = time.perf_counter()
            results = [judge.run(s) for s in group]
            judged += results
            wall = time.perf_counter() - t0
            bad = [f"{r.id}: {r.verdict} {r.detail[:80]}" for r in results if not r.correct]
            speedups = [r.speedup for r in results if r.speedup]
            geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
            phases = " ".join(f"{k[:-2]} {v:.2f}" for k, v in judge.profile.items())
            print(f"PROFILE {who} {tag} {name}: {len(group)} scenarios {wall:.2f} s ({1e3 * wall / len(group):.1f} ms each; "
                  f"{len(bad)} wrong{f', geomean {geomean:.3f}' if geomean else ''}) {phases}", flush=True)
            for line in bad[:3]:
                print("  wrong:", line, flush=True)
        if getattr(judge, "refused", None):
            print(f"  cuDNN's op refused {len(judge.refused)} scenarios, FA2 stood in: {sorted(judge.refused)[:5]}")
        return judged

    passes = [judge_all(f"pass {i + 1}") for i in range(args.passes - 1)]
    prof = cProfile.Profile() if args.top else None
    if prof:
        prof.enable()
    results = judge_all(f"pass {args.passes}")
    if prof:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.top)
        print(text.getvalue())
    passes.append(results)
    if args.json:
        args.json.write_text(json.dumps([[asdict(r) for r in p] for p in passes], indent=1))
    if len(passes) >= 3:  # the first pass times every baseline (a cold cache), so it is not compared
        a, b = ({r.id: r.time_us for r in p if r.timed and r.time_us} for p in passes[-2:])
        diffs = sorted(100 * abs(a[i] - b[i]) / a[i] for i in a if i in b)
        print(f"PROFILE {who} repeatability, last two passes: per-scenario medians within 2%: "
              f"{sum(d <= 2 for d in diffs)}/{len(diffs)}, max {diffs[-1]:.2f}%, p90 {diffs[int(0.9 * len(diffs))]:.2f}%",
              flush=True)
    cross = next((r for r in results if r.id == CROSS_CHECK_ID and r.correct), None)
    if args.stand_in == "cudnn" and cross is not None and "cudnn" in cross.baselines:
        plain = do_bench_cudnn_tflops()
        for what, us in (("candidate (cuDNN stand-in)", cross.time_us), ("baseline cudnn", cross.baselines["cudnn"])):
            tflops = cross.gflop * 1e3 / us
            print(f"PROFILE {CROSS_CHECK_ID} {what}: {tflops:.0f} TFLOP/s vs do_bench {plain:.0f} "
                  f"({100 * (tflops - plain) / plain:+.1f}%)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
