"""Every implementation of attention forward the machine has, as harness baselines.

Each `prepare` returns a zero-argument callable (what gets timed) or raises when the library refuses
the scenario; the worker then checks the callable's output against the same fp32 reference as the
candidate's, and only a baseline that passes counts for that scenario.

Layouts: our tensors are [B, S, H, D]; SDPA takes [B, H, S, D], so it gets transposed views (no copy;
its flash and cuDNN kernels read the strided layout natively). torch's `is_causal` is top-left
aligned, so for Sq != Sk the bottom-right mask goes in as `causal_lower_right`.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from harness.tasks.base import Baseline, Scenario

Prepared = Callable[[], dict[str, Any]]


def _sdpa(backend_name: str, expand_kv: bool) -> Callable[[Scenario, dict], Prepared]:
    def prepare(s: Scenario, inputs: dict) -> Prepared:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        p = s.params
        backend = getattr(SDPBackend, backend_name)
        q, k, v = (inputs[n].transpose(1, 2) for n in ("q", "k", "v"))
        kwargs: dict[str, Any] = {"scale": float(inputs["scale"])}
        if p["hq"] != p["hkv"]:
            if expand_kv:
                g = p["hq"] // p["hkv"]
                k, v = (t.repeat_interleave(g, dim=1) for t in (k, v))
            else:
                kwargs["enable_gqa"] = True
        if p["causal"]:
            if p["sq"] == p["sk"]:
                kwargs["is_causal"] = True
            else:
                from torch.nn.attention.bias import causal_lower_right

                kwargs["attn_mask"] = causal_lower_right(p["sq"], p["sk"])

        def run() -> dict[str, Any]:
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, k, v, **kwargs)
            return {"o": o.transpose(1, 2)}

        return run

    return prepare


def _flash_attn(module: str) -> Callable[[Scenario, dict], Prepared]:
    def prepare(s: Scenario, inputs: dict) -> Prepared:
        fn = importlib.import_module(module).flash_attn_func
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        scale, causal = float(inputs["scale"]), bool(s.params["causal"])

        def run() -> dict[str, Any]:
            out = fn(q, k, v, softmax_scale=scale, causal=causal)
            return {"o": out[0] if isinstance(out, tuple) else out}

        return run

    return prepare


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:  # a broken install is as good as none
        return False
    return True


def available() -> list[Baseline]:
    """Baselines in preference order; the `+kvexpand` variants only matter where the native GQA path
    of a backend is refused (they read Hq/Hkv times the K/V bytes, a handicap named in the id)."""
    out: list[Baseline] = []
    if _importable("flash_attn.cute.interface"):
        out.append(Baseline("fa4", _flash_attn("flash_attn.cute.interface"), ("o",)))
    if _importable("flash_attn_interface"):
        out.append(Baseline("fa3", _flash_attn("flash_attn_interface"), ("o",)))
    for name, backend in (("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION")):
        out.append(Baseline(name, _sdpa(backend, expand_kv=False), ("o",)))
    for name, backend in (("cudnn+kvexpand", "CUDNN_ATTENTION"), ("flash+kvexpand", "FLASH_ATTENTION")):
        out.append(Baseline(name, _sdpa(backend, expand_kv=True), ("o",), fallback=True))
    return out
