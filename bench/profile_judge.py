"""Where a worker's time goes, scenario group by group (GPU; torch alone).

Builds a kernel, sets the worker's Judge up in this process and judges the correctness grid and the
timed scenarios of a selection twice (the second pass is what a prepared worker pays), printing
per-group seconds, the Judge's phases, and cProfile's heaviest functions for the second pass.

`--stand-in flash` judges FlashAttention-2 (torch's own `_flash_attention_forward`, which writes o and
lse with the bottom-right causal mask and native GQA) in place of the kernel: a candidate near
baseline speed, for what the harness itself costs when the kernel is fast. FA2 runs at about 0.6x the
cuDNN baseline of record on long shapes, so the figure it gives is an upper bound. `--stand-in cudnn`
judges cuDNN itself (`_scaled_dot_product_cudnn_attention`, o and lse in one call) where it computes
the scenario's mask natively (MHA, non-causal or Sq = Sk, Sk > 1) and FA2 elsewhere: a candidate at the
baseline's speed on the scenarios cuDNN holds the record for, plus the copy into the ABI's layout.
cProfile runs only when --top asks for its table, so the phase figures are not inflated by it.
Usage: python bench/profile_judge.py [KERNEL] [--selection quick|full] [--stand-in flash|cudnn] [--top 25]
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


def _stand_in_class(kind: str):
    import torch

    from harness.worker import Judge

    def flash(q, k, v, p, scale):
        out, lse, *_ = torch.ops.aten._flash_attention_forward(
            q, k, v, None, None, p["sq"], p["sk"], 0.0, bool(p["causal"]), False, scale=scale)
        return out, lse.masked_fill(lse == float("inf"), float("-inf"))  # FA2 marks rows with no key +inf

    def cudnn(q, k, v, p, scale):
        out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, True, 0.0, bool(p["causal"]), False,
            scale=scale)
        return out.transpose(1, 2), lse.reshape(p["b"], p["hq"], p["sq"])

    def native_to_cudnn(p) -> bool:
        return p["hq"] == p["hkv"] and p["sk"] > 1 and (not p["causal"] or p["sq"] == p["sk"])

    class StandIn(Judge):
        """The Judge with a library kernel as the candidate: same checks, same timing, same buffers."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.refused: set[str] = set()  # scenarios cuDNN's op would not run: FA2 stands in there
            self._picked: dict[str, object] = {}  # per scenario, tried once

        def _pick(self, s, q, k, v, scale):
            if s.id not in self._picked:
                self._picked[s.id] = self._try_cudnn(s, q, k, v, scale)
            return self._picked[s.id]

        def _try_cudnn(self, s, q, k, v, scale):
            p = s.params
            if kind != "cudnn" or not native_to_cudnn(p):
                return flash
            try:
                with torch.cuda.stream(self.timer.stream):
                    cudnn(q, k, v, p, scale)
            except RuntimeError:
                self.refused.add(s.id)
                return flash
            return cudnn

        def _call(self, s, inputs, outs):
            o, lse = outs["o"].tensor, outs["lse"].tensor
            p = s.params
            q, k, v, scale = inputs["q"], inputs["k"], inputs["v"], float(inputs["scale"])
            fn = self._pick(s, q, k, v, scale)

            def call() -> None:
                with torch.cuda.stream(self.timer.stream):
                    out, l_ = fn(q, k, v, p, scale)
                    o.copy_(out)
                    lse.copy_(l_)

            return call

    return StandIn


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", nargs="?", type=Path, default=ROOT / "workspace" / "flash_fwd.cu")
    ap.add_argument("--selection", default="quick")
    ap.add_argument("--stand-in", choices=["flash", "cudnn"], help="judge a library kernel in place of the kernel")
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
    judge_class = _stand_in_class(args.stand_in) if args.stand_in else Judge
    judge = judge_class(task, device, Timer(device, torch.cuda.Stream(device)), cache, cache.peaks)
    judge.entry = load_entry(task, str(library))
    judge.job = {"seed": 1, "baseline": None, "retime": False, "time_budget_s": tf.time_budget_ms / 1000.0}
    groups = {"correctness grid": [s for s in scenarios if not s.timed],
              f"{args.selection} timed": [s for s in scenarios if s.timed]}

    who = {"flash": "FA2 stand-in", "cudnn": "cuDNN stand-in"}.get(args.stand_in, args.kernel.name)

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
        if getattr(judge, "refused", None):
            print(f"  cuDNN's op refused {len(judge.refused)} scenarios, FA2 stood in: {sorted(judge.refused)[:5]}")

    judge_all("first")
    if not args.top:
        judge_all("second")
        return 0
    prof = cProfile.Profile()
    prof.enable()
    judge_all("second")
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.top)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
