"""Where a worker's time goes, scenario group by group (GPU; torch alone).

Builds a kernel, sets the worker's Judge up in this process and judges the correctness grid and the
timed scenarios of a selection twice (the second pass is what a prepared worker pays), printing
per-group seconds, the Judge's phases, and cProfile's heaviest functions for the second pass.

`--stand-in flash` judges FlashAttention-2 (torch's own `_flash_attention_forward`, which writes o and
lse with the bottom-right causal mask and native GQA) in place of the kernel: a candidate near
baseline speed, for what the harness itself costs when the kernel is fast. FA2 runs at about 0.6x the
cuDNN baseline of record on long shapes, so the figure it gives is an upper bound.
Usage: python bench/profile_judge.py [KERNEL] [--selection quick|full] [--stand-in flash] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _stand_in_class():
    import torch

    from harness.worker import Judge

    class FlashStandIn(Judge):
        """The Judge with FA2 as the candidate: same checks, same timing, same buffers."""

        def _call(self, s, inputs, outs):
            o, lse = outs["o"].tensor, outs["lse"].tensor
            p = s.params

            def call() -> None:
                with torch.cuda.stream(self.timer.stream):
                    out, l_, *_ = torch.ops.aten._flash_attention_forward(
                        inputs["q"], inputs["k"], inputs["v"], None, None, p["sq"], p["sk"], 0.0, bool(p["causal"]),
                        False, scale=float(inputs["scale"]))
                    o.copy_(out)
                    lse.copy_(l_.masked_fill(l_ == float("inf"), float("-inf")))  # FA2 marks rows with no key +inf

            return call

    return FlashStandIn


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", nargs="?", type=Path, default=ROOT / "workspace" / "flash_fwd.cu")
    ap.add_argument("--selection", default="quick")
    ap.add_argument("--stand-in", choices=["flash"], help="judge FA2 in place of the kernel")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    import torch

    from harness.baselines import BaselineCache, fingerprint
    from harness.build import BuildOptions, build
    from harness.runner import resolve, EvalOptions
    from harness.timing import Timer, measure_peaks
    from harness.worker import Judge, device_info, judging_device, load_entry

    task, tf, scenarios = resolve(args.kernel, EvalOptions(selection=args.selection))
    report, library = build(args.kernel, [task.entry_symbol], BuildOptions())
    assert library is not None, report
    device = judging_device(0)
    cache = BaselineCache(Path(tempfile.mkdtemp()) / "baselines.json", fingerprint(device_info(device), task.name))
    cache.peaks = measure_peaks(device)
    judge_class = _stand_in_class() if args.stand_in else Judge
    judge = judge_class(task, device, Timer(device, torch.cuda.Stream(device)), cache, cache.peaks)
    judge.entry = load_entry(task, str(library))
    judge.job = {"seed": 1, "baseline": None, "retime": False, "time_budget_s": tf.time_budget_ms / 1000.0}
    groups = {"correctness grid": [s for s in scenarios if not s.timed],
              f"{args.selection} timed": [s for s in scenarios if s.timed]}

    who = "FA2 stand-in" if args.stand_in else args.kernel.name

    def judge_all(tag: str) -> None:
        for name, group in groups.items():
            judge.profile.clear()
            t0 = time.perf_counter()
            results = [judge.run(s) for s in group]
            wall = time.perf_counter() - t0
            bad = [f"{r.id}: {r.verdict} {r.detail[:80]}" for r in results if not r.correct]
            speedups = [r.speedup for r in results if r.speedup]
            geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
            phases = " ".join(f"{k[:-2]} {v:.2f}" for k, v in judge.profile.items())
            print(f"PROFILE {who} {tag} {name}: {len(group)} scenarios {wall:.2f} s ({1e3 * wall / len(group):.1f} ms each; "
                  f"{len(bad)} wrong{f', geomean {geomean:.3f}' if geomean else ''}) {phases}", flush=True)
            for line in bad[:3]:
                print("  wrong:", line, flush=True)

    judge_all("first")
    prof = cProfile.Profile()
    prof.enable()
    judge_all("second")
    prof.disable()
    if args.top:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.top)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
