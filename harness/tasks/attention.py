"""Attention forward (FlashAttention convention), per DESIGN.md's kernel ABI.

o = softmax(scale · q kᵀ + mask) v and lse = logsumexp(scale · q kᵀ + mask), with q [B, Sq, Hq, D],
k, v [B, Sk, Hkv, D], o [B, Sq, Hq, D], lse [B, Hq, Sq] fp32. GQA/MQA: query head h reads kv head
h // (Hq / Hkv). Causal is bottom-right aligned: query i sees key j iff j <= i + (Sk - Sq); a row that
sees no key has o = 0 and lse = -inf.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.tasks import attention_reference
from harness.tasks.attention_grid import FA3_PAIRS, HOT_GRID, QUICK_ROWS, TIMED_GRID
from harness.tasks.base import Baseline, Comparison, Scenario, ScenarioError, Task, parse_kv_spec

if TYPE_CHECKING:
    import torch

DTYPES = {"bf16": 0, "fp16": 1}
ELEMENT_BYTES = 2
# Input standard deviation of q and k in the stability scenarios: scores have std HOT_SCALE² (with the
# default 1/sqrt(d) scale), so the row maxima reach hundreds and exp() without a running max overflows.
HOT_SCALE = 8.0


def scenario_id(p: dict[str, Any]) -> str:
    sid = f"{p['dtype']}-d{p['d']}-b{p['b']}-h{p['hq']}x{p['hkv']}-s{p['sq']}x{p['sk']}"
    if p["causal"]:
        sid += "-causal"
    if p.get("hot"):
        sid += "-hot"
    if p.get("scale") is not None:
        sid += f"-scale{p['scale']:g}"
    return sid


def visible_pairs(sq: int, sk: int, causal: bool) -> int:
    """Number of (query, key) pairs the mask keeps: exact, from the bottom-right rule."""
    if not causal:
        return sq * sk
    offset = sk - sq
    # Row i keeps clamp(i + offset + 1, 0, sk) keys.
    total = 0
    first_full = max(0, sk - 1 - offset)  # rows from here on see every key
    lo = max(0, -offset)  # rows below this see no key
    hi = min(sq, first_full)
    if hi > lo:
        # sum_{i=lo}^{hi-1} (i + offset + 1)
        n = hi - lo
        total += n * (offset + 1) + (lo + hi - 1) * n // 2
    total += max(0, sq - max(first_full, lo)) * sk
    return total


def _params(row: tuple[str, int, int, int, int, int, int, int, str], hot: bool = False) -> dict[str, Any]:
    block, b, hq, hkv, sq, sk, d, causal, dtype = row
    return {"block": block, "b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk, "d": d,
            "causal": bool(causal), "dtype": dtype, "hot": hot, "scale": None}


def _validate(p: dict[str, Any]) -> None:
    for key in ("b", "hq", "hkv", "sq", "sk", "d"):
        if p[key] < 1:
            raise ScenarioError(f"scenario {key}={p[key]}: must be at least 1")
    if p["hq"] % p["hkv"]:
        raise ScenarioError(f"scenario hq={p['hq']}, hkv={p['hkv']}: hq must be a multiple of hkv")
    if p["dtype"] not in DTYPES:
        raise ScenarioError(f"scenario dtype={p['dtype']!r}: expected one of {', '.join(DTYPES)}")


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "t", "y"):
        return True
    if value.lower() in ("0", "false", "no", "f", "n"):
        return False
    raise ValueError(value)


_SPEC_KEYS = {"dtype": str, "d": int, "b": int, "hq": int, "hkv": int, "sq": int, "sk": int,
              "causal": _bool, "hot": _bool, "scale": float}


@dataclass
class Reference:
    o: "torch.Tensor"  # fp32
    lse: "torch.Tensor"  # fp32, -inf where a row sees no key
    o_tol: float
    lse_tol: float
    empty_rows: int  # leading query rows that see no key (causal with Sq > Sk)


HEAD_LAYOUTS = ((6, 6), (6, 2), (6, 1))  # MHA, GQA, MQA


def _fa3_sweep() -> list[tuple[int, int, int, bool]]:
    return [(sq, sk, d, causal) for sq, sk in FA3_PAIRS for d in (64, 96, 128, 192, 256) for causal in (False, True)]


def _check_scenario(sq: int, sk: int, d: int, causal: bool, heads: tuple[int, int], dtype: str) -> Scenario:
    p = {"block": "check", "b": 9 if sq * sk <= 1024 * 1024 else 2, "hq": heads[0], "hkv": heads[1], "sq": sq,
         "sk": sk, "d": d, "causal": causal, "dtype": dtype, "hot": False, "scale": None}
    return Scenario(scenario_id(p), False, p, "check")


def _hot_checks() -> list[Scenario]:
    out = []
    for d in (64, 96, 128, 192, 256):
        for (sq, sk), causal in (((113, 203), False), ((1024, 1023), True), ((799, 3), True)):
            p = {"block": "check-hot", "b": 3, "hq": 6, "hkv": 2, "sq": sq, "sk": sk, "d": d,
                 "causal": causal, "dtype": "bf16", "hot": True, "scale": None}
            out.append(Scenario(scenario_id(p), False, p, "check-hot"))
    return out


class AttentionTask(Task):
    name = "attention"
    entry_symbol = "kstui_attention_fwd"
    output_names = ("o", "lse")
    argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]

    # --- scenario sets ---
    def timed_grid(self) -> list[Scenario]:
        rows = [(_params(r), r[0]) for r in TIMED_GRID] + [(_params(r, hot=True), r[0]) for r in HOT_GRID]
        return [Scenario(scenario_id(p), True, p, group) for p, group in rows]

    def correctness_grid(self) -> list[Scenario]:
        """FA3's 20 (Sq, Sk) pairs x 5 head dims x causal, cycling MHA/GQA/MQA and bf16/fp16 so every
        pair and head dim meets every head layout and both dtypes; plus stability rows. Run on every
        evaluation: the whole cross product (exhaustive_grid) costs about six times as long, which
        `quick`'s few seconds cannot hold."""
        out = []
        for i, (sq, sk, d, causal) in enumerate(_fa3_sweep()):
            out.append(_check_scenario(sq, sk, d, causal, HEAD_LAYOUTS[i % 3], ("bf16", "fp16")[(i // 3) % 2]))
        return out + _hot_checks()

    def exhaustive_grid(self) -> list[Scenario]:
        """The cross product: FA3's pairs x head dims x causal x MHA/GQA/MQA x dtypes (1,200), plus the
        stability rows; a superset of the correctness grid."""
        out = [_check_scenario(sq, sk, d, causal, heads, dtype)
               for sq, sk, d, causal in _fa3_sweep() for heads in HEAD_LAYOUTS for dtype in ("bf16", "fp16")]
        return out + _hot_checks()

    def quick_ids(self) -> list[str]:
        grid = self.timed_grid()
        return [grid[i].id for i in QUICK_ROWS] + [grid[len(TIMED_GRID) + 1].id]

    def parse_spec(self, spec: str) -> Scenario:
        given = parse_kv_spec(spec, _SPEC_KEYS)
        if "sq" not in given:
            raise ScenarioError(f"scenario spec {spec!r}: sq is required")
        p = {"block": "custom", "dtype": "bf16", "d": 128, "b": 1, "hq": 8, "causal": False, "hot": False,
             "scale": None, **given}
        p.setdefault("hkv", p["hq"])
        p.setdefault("sk", p["sq"])
        _validate(p)
        return Scenario(scenario_id(p), True, p, "custom")

    def exact_flops(self, s: Scenario) -> float:
        p = s.params
        return 4.0 * p["b"] * p["hq"] * p["d"] * visible_pairs(p["sq"], p["sk"], p["causal"])

    def min_bytes(self, s: Scenario) -> float:
        p = s.params
        q = p["b"] * p["sq"] * p["hq"] * p["d"]
        kv = 2 * p["b"] * p["sk"] * p["hkv"] * p["d"]
        return (2 * q + kv) * ELEMENT_BYTES + 4 * p["b"] * p["hq"] * p["sq"]

    # --- worker side ---
    def _torch_dtype(self, s: Scenario) -> "torch.dtype":
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}[s.params["dtype"]]

    def make_inputs(self, s, gen, device):
        import torch

        p = s.params
        dt = self._torch_dtype(s)
        inputs = {
            "q": torch.empty(p["b"], p["sq"], p["hq"], p["d"], dtype=dt, device=device),
            "k": torch.empty(p["b"], p["sk"], p["hkv"], p["d"], dtype=dt, device=device),
            "v": torch.empty(p["b"], p["sk"], p["hkv"], p["d"], dtype=dt, device=device),
        }
        self._draw(s, inputs, gen, first=True)
        return inputs

    def refill_inputs(self, s, inputs, gen):
        self._draw(s, inputs, gen, first=False)

    def _draw(self, s: Scenario, inputs: dict, gen: "torch.Generator", first: bool) -> None:
        import torch

        p = s.params
        sigma = HOT_SCALE if p["hot"] else 1.0
        for name in ("q", "k", "v"):
            t = inputs[name]
            noise = torch.randn(t.shape, generator=gen, device=t.device, dtype=torch.float32)
            t.copy_(noise * (sigma if name != "v" else 1.0))
        base = p["scale"] if p["scale"] is not None else 1.0 / math.sqrt(p["d"])
        # Later draws jitter the scale: a kernel must use the softmax_scale it is given.
        jitter = 1.0 if first else 0.75 + 0.5 * float(torch.rand((), generator=gen, device=gen.device))
        inputs["scale"] = base * jitter

    def output_shapes(self, s, inputs):
        import torch

        p = s.params
        return {
            "o": ((p["b"], p["sq"], p["hq"], p["d"]), self._torch_dtype(s)),
            "lse": ((p["b"], p["hq"], p["sq"]), torch.float32),
        }

    def call_args(self, s, inputs, outputs, stream):
        p = s.params
        return [inputs["q"].data_ptr(), inputs["k"].data_ptr(), inputs["v"].data_ptr(),
                outputs["o"].data_ptr(), outputs["lse"].data_ptr(),
                p["b"], p["sq"], p["sk"], p["hq"], p["hkv"], p["d"],
                float(inputs["scale"]), int(p["causal"]), DTYPES[p["dtype"]], stream]

    def reference(self, s: Scenario, inputs: dict) -> Reference:
        import torch

        p = s.params
        scale = float(inputs["scale"])
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        o32, lse32 = attention_reference.attention(q, k, v, scale, p["causal"], lowp=False)
        olp, lselp = attention_reference.attention(q, k, v, scale, p["causal"], lowp=True)
        empty = _empty_rows(p["sq"], p["sk"], p["causal"])
        dt = inputs["q"].dtype
        # FlashAttention's atol: twice the rounding of a round trip through the output dtype.
        ref_lp = o32.to(dt)
        lse_kept = lse32[:, :, empty:]
        stats = torch.stack([
            _max_abs(olp, o32, empty, row_dim=1),
            _max_abs(lselp, lse32, empty, row_dim=2),
            _amax(((ref_lp + 0.3 - 0.3).float() - ref_lp.float()).abs()),
            _amax(lse_kept.abs()),
        ]).tolist()  # one host sync for all four
        o_err_lp, lse_err_lp, rounding, lse_max = stats
        lse_atol = 1e-4 * max(1.0, lse_max)
        return Reference(o32, lse32, 2 * o_err_lp + 2 * rounding, 2 * lse_err_lp + lse_atol, empty)

    def compare(self, s: Scenario, ref: Reference, outputs: dict, only: tuple[str, ...] = ("o", "lse")) -> Comparison:
        import torch

        from harness.poison import is_poison

        o = outputs["o"]
        lse = outputs["lse"] if "lse" in only else None
        e = ref.empty_rows
        zero = torch.zeros((), device=o.device)
        # Every statistic the verdict needs, fetched in one host sync; judged in the order below.
        names = ["unwritten_" + n for n in only] + ["o_nonfinite", "lse_nan", "lse_inf_early",
                                                    "o_empty_nonzero", "lse_empty_finite", "o_err", "lse_err"]
        values = [is_poison(outputs[n]).sum() for n in only] + [
            (~torch.isfinite(o)).sum(),
            (torch.isnan(lse) | torch.isposinf(lse)).sum() if lse is not None else zero,
            torch.isneginf(lse[:, :, e:]).sum() if lse is not None else zero,
            (o[:, :e] != 0).sum(),
            (~torch.isneginf(lse[:, :, :e])).sum() if lse is not None else zero,
            _max_abs(o, ref.o, e, row_dim=1),
            _max_abs(lse, ref.lse, e, row_dim=2) if lse is not None else zero,
        ]
        got = dict(zip(names, torch.stack([v.float() for v in values]).tolist()))
        for n in only:
            if got["unwritten_" + n]:
                t = outputs[n]
                return Comparison("unwritten", f"{n}: {int(got['unwritten_' + n])} of {t.numel()} elements never written")
        if got["o_nonfinite"]:
            return Comparison("nan", f"o: {int(got['o_nonfinite'])} NaN/Inf elements")
        if got["lse_nan"]:
            return Comparison("nan", "lse: NaN or +Inf")
        if got["lse_inf_early"]:
            return Comparison("wrong", f"lse: {int(got['lse_inf_early'])} rows are -inf but see at least one key")
        if got["o_empty_nonzero"]:
            return Comparison("no-key-rows", f"o: rows that see no key ({e} per head) are not 0")
        if got["lse_empty_finite"]:
            return Comparison("no-key-rows", "lse: rows that see no key are not -inf")
        errors = {"o": got["o_err"]}
        if lse is not None:
            errors["lse"] = got["lse_err"]
        tols = {"o": ref.o_tol, "lse": ref.lse_tol}
        for name, err in errors.items():
            if not err <= tols[name]:
                return Comparison("wrong", f"{name}: max abs error {err:.3g} > tolerance {tols[name]:.3g}", errors, tols)
        return Comparison("ok", "", errors, tols)

    def baselines(self) -> list[Baseline]:
        from harness.tasks import attention_baselines

        return attention_baselines.available()


def _empty_rows(sq: int, sk: int, causal: bool) -> int:
    """How many leading query rows see no key: row i sees key j iff j <= i + (sk - sq)."""
    return max(0, sq - sk) if causal else 0


def _amax(t: "torch.Tensor") -> "torch.Tensor":
    """The largest element, 0 for an empty tensor; a device scalar (no host sync)."""
    import torch

    return t.amax().float() if t.numel() else torch.zeros((), device=t.device)


def _max_abs(a: "torch.Tensor", b: "torch.Tensor", empty: int, row_dim: int) -> "torch.Tensor":
    """max |a - b| in fp32 over the rows that see a key (those after the first `empty` on row_dim)."""
    a, b = a.narrow(row_dim, empty, a.shape[row_dim] - empty), b.narrow(row_dim, empty, b.shape[row_dim] - empty)
    return _amax((a.float() - b.float()).abs())
