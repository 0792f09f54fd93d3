"""Output buffers filled with a NaN of our own bit pattern, with guard zones on both sides.

A kernel's own NaNs are canonical NaNs; ours carry a payload, so "never written" and "wrote NaN" are
told apart bit for bit. The guard zones catch writes just past either end of an output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

GUARD_ELEMENTS = 4096
_PATTERNS = {2: 0x7FA5, 4: 0x7FC5A5A5}  # bf16/fp16-width and fp32-width NaNs with a payload
_FP16_PATTERN = 0x7E5A


def _int_view(t: "torch.Tensor") -> "torch.Tensor":
    import torch

    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _pattern(t: "torch.Tensor") -> int:
    import torch

    return _FP16_PATTERN if t.dtype == torch.float16 else _PATTERNS[t.element_size()]


@dataclass
class GuardedBuffer:
    base: "torch.Tensor"
    tensor: "torch.Tensor"

    def repoison(self) -> None:
        _int_view(self.base).fill_(_pattern(self.base))

    def guard_damage(self) -> "torch.Tensor":
        """How many guard elements were overwritten: a device scalar, so callers batch the host sync."""
        flat = _int_view(self.base)
        pat = _pattern(self.base)
        n = self.tensor.numel()
        return (flat[:GUARD_ELEMENTS] != pat).sum() + (flat[GUARD_ELEMENTS + n:] != pat).sum()


def guarded_empty(shape: tuple[int, ...], dtype: "torch.dtype", device) -> GuardedBuffer:
    import torch

    n = 1
    for x in shape:
        n *= x
    base = torch.empty(n + 2 * GUARD_ELEMENTS, dtype=dtype, device=device)
    buf = GuardedBuffer(base, base[GUARD_ELEMENTS:GUARD_ELEMENTS + n].view(shape))
    buf.repoison()
    return buf


def is_poison(t: "torch.Tensor") -> "torch.Tensor":
    return _int_view(t.contiguous()) == _pattern(t)
