"""Judging one output against the reference, by its tolerance rule.

- reference (the default, FlashAttention's test rule): |out − ref| ≤ factor × max |ref in the input
  dtype − ref in higher precision| + atol, where atol defaults to one unit in the last place of the
  output dtype at the reference's largest magnitude (plus 0.3, as FlashAttention's tests add).
- allclose: |out − ref| ≤ atol + rtol·|ref|, element by element.
- exact: equal to the higher-precision reference or to the one computed in the input dtype, element by
  element; integer and bool outputs are always judged so.
Where the reference is NaN or ±inf the output must be the same; where it is finite the output must be
finite. Large outputs are judged in chunks, with one host sync per output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.tasks.base import Comparison
from harness.tasks.spec import DTYPES, Tolerance
from harness.tasks.spec_outputs import declared, is_reliable, padding_written, unwritten

CHUNK = 1 << 26  # elements per step: bounds the temporaries of a multi-gigabyte output


@dataclass
class OutputReference:
    hp: torch.Tensor  # the reference computed in higher precision, in the declared shape
    lp: torch.Tensor | None  # computed in the input dtype, kept for the exact rule
    tol: float | None  # the reference rule's absolute tolerance
    rule: Tolerance


def ulp(dtype: torch.dtype, magnitude: float) -> float:
    """One unit in the last place of dtype at this magnitude."""
    return math.ldexp(torch.finfo(dtype).eps, math.floor(math.log2(magnitude)))


def reference_tolerance(rule: Tolerance, hp: torch.Tensor, lp: torch.Tensor, dtype: torch.dtype) -> float:
    err = torch.zeros((), dtype=hp.dtype, device=hp.device)
    amax = torch.zeros((), dtype=hp.dtype, device=hp.device)
    h_flat, l_flat = hp.reshape(-1), lp.reshape(-1)
    for i in range(0, h_flat.numel(), CHUNK):
        h, lo = h_flat[i:i + CHUNK], l_flat[i:i + CHUNK].to(hp.dtype)
        hf = torch.isfinite(h)
        both = hf & torch.isfinite(lo)
        err = torch.maximum(err, torch.where(both, (lo - h).abs(), 0).max())
        amax = torch.maximum(amax, torch.where(hf, h.abs(), 0).max())
    err_v, amax_v = torch.stack([err, amax]).tolist()
    atol = rule.atol if rule.atol is not None else ulp(dtype, amax_v + 0.3)
    return rule.factor * err_v + atol


def compare_output(name: str, out: torch.Tensor, ref: OutputReference, shape: tuple[int, ...], dtype_name: str
                   ) -> Comparison:
    if padding_written(out, shape, dtype_name):
        return Comparison("wrong", f"wrote outside {name} (the byte after its end)")
    cand = declared(out, shape, dtype_name).reshape(-1)
    poison = unwritten(out, shape, dtype_name).reshape(-1)
    hp = ref.hp.reshape(-1)
    lp = ref.lp.reshape(-1) if ref.lp is not None else None
    floating, reliable, rule = DTYPES[dtype_name][2] == "float", is_reliable(dtype_name), ref.rule.rule
    dev = hp.device
    zero = torch.zeros((), dtype=torch.float64, device=dev)
    counts = {k: torch.zeros((), dtype=torch.int64, device=dev) for k in ("unwritten", "nan", "special", "bad")}
    worst: list[torch.Tensor] = []  # per chunk: (ratio, error, bound) at its worst element
    err = zero
    for i in range(0, cand.numel(), CHUNK):
        c, h, p = cand[i:i + CHUNK], hp[i:i + CHUNK], poison[i:i + CHUNK]
        lo = lp[i:i + CHUNK] if lp is not None else None
        if floating:
            c = c.to(h.dtype)
            hf, cf = torch.isfinite(h), torch.isfinite(c)
            nan = hf & ~cf
            special = ~hf & ~((torch.isnan(h) & torch.isnan(c)) | (c == h))
            d = torch.where(hf & cf, (c - h).abs(), 0).double()
            if rule == "allclose":
                bound = ref.rule.atol or 0.0
                bound = bound + ref.rule.rtol * h.abs().double()
                ratio = torch.where(d == 0, 0, d / bound)
                k = ratio.argmax()
                worst.append(torch.stack([ratio[k], d[k], bound[k]]))
                bad = d > bound
            elif rule == "exact":
                bad = d != 0
                if lo is not None:
                    bad &= c != lo.to(h.dtype)
            else:
                bad = d > ref.tol
            bad = bad | nan | special
            counts["nan"] += nan.sum()
            counts["special"] += special.sum()
        else:
            bad = _differs(c, h)
            if lo is not None:
                bad &= _differs(c, lo)
            d = torch.where(bad, (c.double() - h.double()).abs(), 0)
        err = torch.maximum(err, d.max())
        counts["bad"] += bad.sum()
        counts["unwritten"] += (p & (bad | reliable)).sum()
    stats = torch.cat([torch.stack([err, *(v.double() for v in counts.values())]), *worst]).tolist()
    err_v = stats[0]
    unwritten_n, nan_n, special_n, bad_n = (int(v) for v in stats[1:5])
    if rule == "allclose" and worst:
        triples = [stats[j:j + 3] for j in range(5, len(stats), 3)]
        _, err_v, tol_v = max(triples, key=lambda t: t[0])
    else:
        tol_v = ref.tol if rule == "reference" and ref.tol is not None else 0.0
    errors, tolerances = {name: err_v}, {name: tol_v}
    n = cand.numel()
    if unwritten_n:
        return Comparison("unwritten", f"{name}: {unwritten_n} of {n} elements never written", errors, tolerances)
    if nan_n:
        return Comparison("nan", f"{name}: {nan_n} NaN/Inf elements where the reference is finite", errors, tolerances)
    if special_n:
        return Comparison("wrong", f"{name}: {special_n} elements differ where the reference is NaN/Inf", errors,
                          tolerances)
    if bad_n:
        if rule == "exact" or not floating:
            return Comparison("wrong", f"{name}: {bad_n} of {n} elements differ from the reference (exact rule; "
                                       f"max abs difference {err_v:.3g})", errors, tolerances)
        return Comparison("wrong", f"{name}: max abs error {err_v:.3g} > tolerance {tol_v:.3g} "
                                   f"({bad_n} of {n} elements out of tolerance)", errors, tolerances)
    return Comparison("ok", "", errors, tolerances)


def _differs(c: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Integer outputs: compared as integers (a float reference, as the doubles both are close to)."""
    return c.double() != ref.double() if ref.is_floating_point() else c != ref.to(c.dtype)
