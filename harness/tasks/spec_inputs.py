"""Fresh input draws for a spec's tensors, in place (the same buffers, the same pointers).

normal (mean, std; the default for floating tensors), uniform [low, high), integers [low, high) and
spd (symmetric positive definite: X·Xᵀ/n + I per matrix). Drawn in fp32 (fp64 for fp64 tensors) from
the scenario's generator, then copied into the tensor's own dtype.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.tasks.spec import Distribution

NORMAL = Distribution("normal")


def fill(t: torch.Tensor, dist: Distribution | None, row: dict[str, Any], gen: torch.Generator) -> None:
    dist = dist or NORMAL
    draw_dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    if dist.kind == "integers":
        assert dist.low is not None and dist.high is not None
        t.copy_(torch.randint(int(dist.low(row)), int(dist.high(row)), t.shape, generator=gen, device=t.device))
    elif dist.kind == "uniform":
        assert dist.low is not None and dist.high is not None
        low, high = float(dist.low(row)), float(dist.high(row))
        x = torch.rand(t.shape, generator=gen, device=t.device, dtype=draw_dtype)
        t.copy_(x.mul_(high - low).add_(low))
    elif dist.kind == "spd":
        n = t.shape[-1]
        x = torch.randn(t.shape, generator=gen, device=t.device, dtype=draw_dtype)
        spd = x @ x.mT / n
        spd.diagonal(dim1=-2, dim2=-1).add_(1.0)
        t.copy_(spd)
    else:
        x = torch.randn(t.shape, generator=gen, device=t.device, dtype=draw_dtype)
        t.copy_(x.mul_(dist.std).add_(dist.mean))
