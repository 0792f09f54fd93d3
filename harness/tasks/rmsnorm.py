"""RMSNorm forward: y = x · rsqrt(mean(x²) + eps) · weight, computed in fp32.

A second, small task: it exists to prove that nothing in the harness is attention-specific.
ABI: extern "C" int kstui_rmsnorm_fwd(const void* x, const void* weight, void* y, int rows,
int cols, float eps, int dtype, cudaStream_t stream); x, y [rows, cols], weight [cols], dtype 0 = bf16,
1 = fp16.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.tasks.base import Baseline, Comparison, Scenario, Task, parse_kv_spec, ScenarioError

if TYPE_CHECKING:
    import torch

DTYPES = {"bf16": 0, "fp16": 1}
EPS = 1e-6
TIMED = ((4096, 4096, "bf16"), (16384, 8192, "bf16"), (65536, 1024, "bf16"), (8, 65536, "bf16"),
         (32768, 4096, "fp16"), (1024, 12288, "bf16"), (1, 4096, "bf16"), (4099, 5120, "fp16"))
CHECK = ((1, 1), (3, 7), (17, 129), (33, 1000), (256, 4097), (1000, 2048), (5, 65536), (7, 3))


def _id(rows: int, cols: int, dtype: str) -> str:
    return f"{dtype}-r{rows}-c{cols}"


def _scenario(rows: int, cols: int, dtype: str, timed: bool, group: str) -> Scenario:
    return Scenario(_id(rows, cols, dtype), timed, {"rows": rows, "cols": cols, "dtype": dtype}, group)


@dataclass
class Reference:
    y: "torch.Tensor"
    tol: float


class RMSNormTask(Task):
    name = "rmsnorm"
    entry_symbol = "kstui_rmsnorm_fwd"
    output_names = ("y",)
    argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_void_p]

    def timed_grid(self) -> list[Scenario]:
        return [_scenario(r, c, d, True, "timed") for r, c, d in TIMED]

    def correctness_grid(self) -> list[Scenario]:
        return [_scenario(r, c, d, False, "check") for r, c in CHECK for d in DTYPES]

    def quick_ids(self) -> list[str]:
        return [s.id for s in self.timed_grid()[:4]]

    def parse_spec(self, spec: str) -> Scenario:
        p = {"dtype": "bf16", **parse_kv_spec(spec, {"rows": int, "cols": int, "dtype": str})}
        if "rows" not in p or "cols" not in p:
            raise ScenarioError(f"scenario spec {spec!r}: rows and cols are required")
        if p["dtype"] not in DTYPES or p["rows"] < 1 or p["cols"] < 1:
            raise ScenarioError(f"scenario spec {spec!r}: rows, cols >= 1 and dtype in {', '.join(DTYPES)}")
        return _scenario(p["rows"], p["cols"], p["dtype"], True, "custom")

    def exact_flops(self, s: Scenario) -> float:
        return 4.0 * s.params["rows"] * s.params["cols"]  # square, accumulate, scale, weight

    def min_bytes(self, s: Scenario) -> float:
        return 2.0 * (2 * s.params["rows"] * s.params["cols"] + s.params["cols"])

    def _dtype(self, s: Scenario) -> "torch.dtype":
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}[s.params["dtype"]]

    def make_inputs(self, s, gen, device):
        import torch

        p = s.params
        inputs = {"x": torch.empty(p["rows"], p["cols"], dtype=self._dtype(s), device=device),
                  "weight": torch.empty(p["cols"], dtype=self._dtype(s), device=device)}
        self.refill_inputs(s, inputs, gen)
        return inputs

    def refill_inputs(self, s, inputs, gen):
        import torch

        for name, t in inputs.items():
            t.copy_(torch.randn(t.shape, generator=gen, device=t.device) * (3.0 if name == "x" else 1.0))

    def output_shapes(self, s, inputs):
        return {"y": ((s.params["rows"], s.params["cols"]), self._dtype(s))}

    def call_args(self, s, inputs, outputs, stream):
        p = s.params
        return [inputs["x"].data_ptr(), inputs["weight"].data_ptr(), outputs["y"].data_ptr(),
                p["rows"], p["cols"], EPS, DTYPES[p["dtype"]], stream]

    def reference(self, s, inputs) -> Reference:
        import torch

        x, w = inputs["x"], inputs["weight"]
        ref = _rmsnorm(x.float(), w.float())
        same = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)) * w  # torch in the input dtype
        err = (same.float() - ref).abs().max().item()
        ref_lp = ref.to(x.dtype)
        atol = 2 * ((ref_lp + 0.3 - 0.3).float() - ref_lp.float()).abs().max().item()
        return Reference(ref, 2 * err + atol)

    def compare(self, s, ref: Reference, outputs, only=("y",)) -> Comparison:
        import torch

        from harness.poison import is_poison

        y = outputs["y"]
        if is_poison(y).any():
            return Comparison("unwritten", f"y: {int(is_poison(y).sum())} of {y.numel()} elements never written")
        if not torch.isfinite(y).all():
            return Comparison("nan", "y: NaN/Inf elements")
        err = (y.float() - ref.y).abs().max().item()
        if not err <= ref.tol:
            return Comparison("wrong", f"y: max abs error {err:.3g} > tolerance {ref.tol:.3g}", {"y": err}, {"y": ref.tol})
        return Comparison("ok", "", {"y": err}, {"y": ref.tol})

    def baselines(self) -> list[Baseline]:
        return [Baseline("torch", _torch_baseline, ("y",))]


def _rmsnorm(x: "torch.Tensor", w: "torch.Tensor") -> "torch.Tensor":
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def _torch_baseline(s: Scenario, inputs: dict[str, Any]):
    import torch.nn.functional as F

    x, w = inputs["x"], inputs["weight"]

    def run():
        return {"y": F.rms_norm(x, (x.shape[-1],), w, EPS)}

    return run
