"""The attention references' two paths on every scenario of the full evaluation (GPU; torch alone).

For each scenario (the timed grid, then the correctness grid) it draws seed-0 inputs and computes the
fp32 reference and the same-dtype computation with the fused Triton kernel and with the chunked torch
ops, and prints:
- their agreement: the fused reference's largest difference from the chunked one, as a fraction of
  the o and lse tolerances the reference sets, and the ratio of the two paths' same-dtype errors;
- their time: seconds per path over the whole grid (the first call for each dtype, head dim and
  decode-sized or not, which is where Triton compiles or loads what it has not yet, is timed apart).
Usage: python bench/bench_reference.py [--ids ID ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(fn, *args):
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", nargs="*", help="only these scenario ids")
    args = ap.parse_args()

    import torch

    from harness.tasks import attention_reference as ref
    from harness.tasks import get_task

    task = get_task("attention")
    scenarios = task.timed_grid() + task.correctness_grid()
    if args.ids:
        scenarios = [s for s in scenarios if s.id in args.ids]
    device = torch.device("cuda")
    seconds = {"fused": 0.0, "chunked": 0.0, "fused_first_calls": 0.0}
    seen: set[tuple] = set()
    worst = {"o": (0.0, ""), "lse": (0.0, ""), "lowp_ratio_max": (0.0, ""), "lowp_ratio_min": (float("inf"), "")}
    for s in scenarios:
        p = s.params
        gen = torch.Generator(device=device)
        gen.manual_seed(0)
        inputs = task.make_inputs(s, gen, device)
        q, k, v, scale, causal = inputs["q"], inputs["k"], inputs["v"], float(inputs["scale"]), p["causal"]
        key = (p["dtype"], p["d"], p["sq"] <= 16)
        first = key not in seen
        if first:  # both references' first call for this dtype, head dim and row count
            seen.add(key)
            _, t = _timed(lambda: (ref.fused(q, k, v, scale, causal, False), ref.fused(q, k, v, scale, causal, True)))
            seconds["fused_first_calls"] += t
        (fo, flse), t_f32 = _timed(ref.fused, q, k, v, scale, causal, False)
        (fo_lp, flse_lp), t_lp = _timed(ref.fused, q, k, v, scale, causal, True)
        seconds["fused"] += t_f32 + t_lp
        (co, clse), t_f32 = _timed(ref.chunked, q, k, v, scale, causal, False)
        (co_lp, clse_lp), t_lp = _timed(ref.chunked, q, k, v, scale, causal, True)
        seconds["chunked"] += t_f32 + t_lp
        r = task.reference(s, inputs)
        e = r.empty_rows
        o_diff = (fo - co)[:, e:].abs().max().item() / r.o_tol
        lse_diff = (flse - clse)[:, :, e:].abs().max().item() / r.lse_tol
        lowp_f = (fo_lp - fo)[:, e:].abs().max().item()
        lowp_c = (co_lp - co)[:, e:].abs().max().item()
        ratio = lowp_f / lowp_c if lowp_c else (1.0 if not lowp_f else float("inf"))  # 0/0: both exact
        exact_empty = bool((fo[:, :e] == 0).all() and torch.isneginf(flse[:, :, :e]).all())
        if not exact_empty or not torch.isfinite(fo).all():
            print(f"BAD {s.id}: empty rows exact {exact_empty}, o finite {bool(torch.isfinite(fo).all())}")
        for name, value in (("o", o_diff), ("lse", lse_diff), ("lowp_ratio_max", ratio)):
            if value > worst[name][0]:
                worst[name] = (value, s.id)
        if ratio < worst["lowp_ratio_min"][0]:
            worst["lowp_ratio_min"] = (ratio, s.id)
        del inputs, fo, flse, fo_lp, flse_lp, co, clse, co_lp, clse_lp, r
    print(f"BENCH references over {len(scenarios)} scenarios (fp32 + same-dtype, seed 0): "
          f"fused {seconds['fused']:.2f} s, chunked {seconds['chunked']:.2f} s, "
          f"fused first calls {seconds['fused_first_calls']:.2f} s ({len(seen)} dtype x head dim x decode-or-not)")
    print(f"BENCH fused vs chunked fp32: max |o diff| {worst['o'][0]:.2e} of o_tol ({worst['o'][1]}), "
          f"max |lse diff| {worst['lse'][0]:.2e} of lse_tol ({worst['lse'][1]})")
    print(f"BENCH same-dtype error fused/chunked: {worst['lowp_ratio_min'][0]:.2f} ({worst['lowp_ratio_min'][1]}) "
          f"to {worst['lowp_ratio_max'][0]:.2f} ({worst['lowp_ratio_max'][1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
