"""The attention references, with the explicit bottom-right mask: o and lse in fp32 (the reference)
and in the inputs' own dtype (the same-dtype computation whose error sets the tolerance).

On a CUDA device with Triton installed, one fused kernel computes each (`fused`, in
attention_triton.py); elsewhere, or for head dims past what the kernel's tiles hold, torch ops
compute the same arithmetic chunk by chunk (`chunked`). tests/test_reference_accuracy.py holds both
to float64 and to each other.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch

# fp32 elements per score chunk in the torch path (~512 MB), so the largest scenario fits.
CHUNK_ELEMENTS = 1 << 27
# The widest head the fused kernel's tiles hold (its fp32 accumulator is BLOCK_M x D per program).
FUSED_MAX_D = 256


def attention(q, k, v, scale: float, causal: bool, lowp: bool) -> tuple["torch.Tensor", "torch.Tensor"]:
    """(o, lse) in fp32, [B, Sq, Hq, D] and [B, Hq, Sq]; lowp rounds as a same-dtype computation does."""
    triton_path = _triton()
    config = (q.dtype, q.shape[-1], lowp)
    if q.is_cuda and q.shape[-1] <= FUSED_MAX_D and triton_path is not None and config not in _unbuildable:
        try:
            return fused(q, k, v, scale, causal, lowp)
        except triton_path.KernelUnavailable as e:  # a Triton that cannot build this tile: torch ops instead
            _unbuildable.add(config)
            warnings.warn(f"fused attention reference unavailable for {config}: {type(e).__name__}; "
                          "using torch ops", RuntimeWarning, stacklevel=2)
    return chunked(q, k, v, scale, causal, lowp)


# (dtype, head dim, lowp) configurations the installed Triton could not build.
_unbuildable: set[tuple] = set()


@functools.cache
def _triton() -> Any:
    """The fused kernel's module, or None where Triton is not installed."""
    try:
        from harness.tasks import attention_triton
    except ImportError:
        return None
    return attention_triton


def fused(q, k, v, scale: float, causal: bool, lowp: bool) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The fused kernel: a program per (batch x head, block of query rows); tiles from the head dim."""
    import torch

    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty(b, sq, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.empty(b, hq, sq, dtype=torch.float32, device=q.device)
    block_d = max(16, 1 << (d - 1).bit_length())
    block_m, block_n, warps, stages = _tiles(sq, block_d, lowp)
    grid = (b * hq, -(-sq // block_m))
    kernel = _triton().attention_kernel
    kernel[grid](q, k, v, o, lse, sq, sk, hq, hq // hkv, d, float(scale), sk - sq, int(causal),
                 q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                 o.stride(0), o.stride(1), o.stride(2),
                 LOWP=lowp, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=warps, num_stages=stages)
    return o, lse


def _tiles(sq: int, block_d: int, lowp: bool) -> tuple[int, int, int, int]:
    """(rows, keys per block, warps, pipeline stages): per head-dim tile, the fastest of those tried on
    the H200 (docs/BENCHMARKS.md); a decode-sized query takes the smallest row block a dot allows."""
    block_n = 64 if block_d <= 128 else 32
    if sq <= 16:
        return 16, block_n, 4, 2
    if lowp:
        return (128, block_n, 8, 2) if block_d > 128 else (64, block_n, 4, 3)
    return (128, block_n, 8, 2) if block_d >= 128 else (64, block_n, 4, 2)


@contextmanager
def _tf32_matmul() -> Iterator[None]:
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def chunked(q, k, v, scale: float, causal: bool, lowp: bool) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Plain attention in torch ops, chunked over query rows.

    lowp=False gives the reference; lowp=True the same-dtype computation (scores and P·V in the
    inputs' dtype, softmax in fp32). This path is bound by passes over the score matrix, so each
    chunk makes as few as it can: one matmul, the mask where the chunk needs one, a row max, one
    fused softmax, the softmax's row max (lse = max - log(max p)) and the P·V matmul.

    The fp32 scores run on TF32 tensor cores without losing anything: bf16 and fp16 values are exact
    in TF32, so every product q·k is exact in fp32 and the sum accumulates in fp32, as a plain fp32
    matmul would; the scale is applied in fp32 in the matmul's epilogue, not folded into q (q·scale
    would not be exact in TF32). P·V stays in IEEE fp32, since P is not exact in TF32.
    """
    import torch

    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    compute_dtype = q.dtype if lowp else torch.float32
    exact_tf32 = compute_dtype == torch.float32 and q.dtype in (torch.bfloat16, torch.float16)
    kt = k.permute(0, 2, 1, 3).to(compute_dtype).contiguous()  # [B, Hkv, Sk, D]
    vt = v.permute(0, 2, 1, 3).to(compute_dtype).contiguous()
    o = torch.empty(b, sq, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.empty(b, hq, sq, dtype=torch.float32, device=q.device)
    chunk = max(1, min(sq, CHUNK_ELEMENTS // max(1, b * hq * sk)))
    cols = torch.arange(sk, device=q.device)
    offset = sk - sq
    for i0 in range(0, sq, chunk):
        i1 = min(sq, i0 + chunk)
        c = i1 - i0
        # Keys past the last one this chunk's last row sees contribute nothing: leave them out.
        n = min(sk, i1 + offset) if causal else sk
        if n <= 0:
            o[:, i0:i1] = 0
            lse[:, :, i0:i1] = float("-inf")
            continue
        if exact_tf32:
            qc = q[:, i0:i1].float()
        else:
            qc = (q[:, i0:i1].float() * scale).to(compute_dtype)
        qc = qc.reshape(b, c, hkv, g, d).permute(0, 2, 3, 1, 4).reshape(b * hkv, g * c, d)
        keys = kt[:, :, :n].reshape(b * hkv, n, d).transpose(-1, -2)
        if exact_tf32:
            with _tf32_matmul():  # beta=0: the (unallocated) input is never read
                s = torch.baddbmm(qc.new_empty(()).expand(b * hkv, g * c, n), qc, keys, beta=0.0, alpha=scale)
        else:
            s = torch.bmm(qc, keys)
        s = s.view(b, hkv, g * c, n)  # [B, Hkv, G*c, n]
        if causal and i0 + offset + 1 < n:  # the chunk's first row sees fewer than n keys
            hidden = cols[None, :n] > (torch.arange(i0, i1, device=q.device) + offset)[:, None]  # [c, n]
            s.view(b, hkv, g, c, n).masked_fill_(hidden, float("-inf"))
        row_max = s.amax(dim=-1).float()
        p = torch.softmax(s, dim=-1, dtype=torch.float32)
        del s
        empty = min(c, max(0, -offset - i0)) if causal else 0  # leading rows of the chunk that see no key
        if empty:
            # Softmax of a row of -inf is NaN. Zeroed before P·V, not after: a CPU bf16 matmul (torch
            # 2.13, oneDNN) let a NaN row spill into the row beside it.
            p.view(b, hkv, g, c, n)[:, :, :, :empty] = 0
        lse_c = row_max - torch.log(p.amax(dim=-1))
        out = torch.matmul(p.to(compute_dtype), vt[:, :, :n]).float()  # [B, Hkv, G*c, D]
        del p
        if empty:
            lse_c.view(b, hkv, g, c)[:, :, :, :empty] = float("-inf")
        o[:, i0:i1] = out.reshape(b, hkv, g, c, d).permute(0, 3, 1, 2, 4).reshape(b, c, hq, d)
        lse[:, :, i0:i1] = lse_c.reshape(b, hq, c)
        del out
    return o, lse
