"""The attention references as one fused Triton kernel (imported only where Triton is installed).

Each program takes a block of query rows of one head and walks the keys they can see; no score
matrix is ever stored, so an evaluation's references cost a few FlashAttention calls instead of many
passes over an fp32 score matrix.

LOWP=False is the fp32 reference: q·k on tensor cores from the bf16/fp16 inputs (every product is
exact in fp32, the sum accumulates in fp32), the scale applied in fp32, one pass with a running max,
and P·V from P split into a TF32 high part and the fp32 remainder, so P's only rounding beyond IEEE
fp32's is the remainder's (about 2^-21 of P). V needs no split: bf16 and fp16 are exact in TF32.

LOWP=True is the same-dtype computation whose error sets the tolerance, rounded where torch's
same-dtype ops round: q·scale and the scores to the input dtype, P to the input dtype after it is
normalised (so two passes over the keys), and o to the input dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.errors import TritonError as KernelUnavailable  # compile, ptxas, out of resources

# As an int32 mask, clears an fp32's 13 low mantissa bits: what remains is exact in TF32.
TF32_HIGH_BITS = tl.constexpr(-8192)


@triton.jit
def _scores(q, k_base, cols, dims, rows, sk, sks, d, scale, offset, causal, LOWP: tl.constexpr):
    kt = tl.load(k_base + cols[None, :].to(tl.int64) * sks + dims[:, None],
                 mask=(cols[None, :] < sk) & (dims[:, None] < d), other=0.0)
    s = tl.dot(q, kt)
    if LOWP:
        s = s.to(q.dtype).to(tl.float32)
    else:
        s = s * scale
    visible = (cols[None, :] < sk) & ((cols[None, :] <= rows[:, None] + offset) | (causal == 0))
    return tl.where(visible, s, float("-inf"))


@triton.jit
def _values(v_base, cols, dims, sk, sks, d):
    return tl.load(v_base + cols[:, None].to(tl.int64) * sks + dims[None, :],
                   mask=(cols[:, None] < sk) & (dims[None, :] < d), other=0.0)


# Shapes vary per scenario: left unspecialised, so each dtype, head-dim tile and row block compiles once.
@triton.jit(do_not_specialize=["sq", "sk", "hq", "group", "offset", "causal"])
def attention_kernel(Q, K, V, O, LSE, sq, sk, hq, group, d, scale, offset, causal,
                     sqb, sqs, sqh, skb, sks, skh, sob, sos, soh,
                     LOWP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(0)
    mb = tl.program_id(1)
    b = (bh // hq).to(tl.int64)
    h = bh % hq
    kvh = (h // group).to(tl.int64)
    h = h.to(tl.int64)
    rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < sq
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None].to(tl.int64) * sqs + dims[None, :],
                mask=row_ok[:, None] & (dims[None, :] < d), other=0.0)
    if LOWP:
        q = (q.to(tl.float32) * scale).to(Q.dtype.element_ty)
    k_base = K + b * skb + kvh * skh
    v_base = V + b * skb + kvh * skh
    # The block's last row sees keys up to (its index + offset); later keys add nothing.
    n_end = sk
    if causal != 0:
        n_end = tl.minimum(sk, (mb + 1) * BLOCK_M + offset)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if LOWP:
        # Two passes, as torch's softmax: P is normalised (and rounded) before it meets V.
        for n0 in range(0, n_end, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            s = _scores(q, k_base, cols, dims, rows, sk, sks, d, scale, offset, causal, LOWP)
            m_new = tl.maximum(m, tl.max(s, 1))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: exp(-inf) = 0
            total = total * tl.exp(m - shift) + tl.sum(tl.exp(s - shift[:, None]), 1)
            m = m_new
        shift = tl.where(m == float("-inf"), 0.0, m)
        inverse = 1.0 / tl.where(total > 0, total, 1.0)  # a row that sees no key gets o = 0
        for n0 in range(0, n_end, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            s = _scores(q, k_base, cols, dims, rows, sk, sks, d, scale, offset, causal, LOWP)
            p = tl.exp(s - shift[:, None]) * inverse[:, None]
            acc = tl.dot(p.to(V.dtype.element_ty), _values(v_base, cols, dims, sk, sks, d), acc)
    else:
        # One pass with a running max (the rescaling costs an fp32 rounding per key block). Each
        # block's P·V starts from zero and is added to the running sum in IEEE fp32: summed across
        # blocks inside the tensor cores, whose fp32 accumulation rounds coarser, it erred 3 to 50
        # times more against float64 on the H200 (docs/BENCHMARKS.md).
        for n0 in range(0, n_end, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            s = _scores(q, k_base, cols, dims, rows, sk, sks, d, scale, offset, causal, LOWP)
            m_new = tl.maximum(m, tl.max(s, 1))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m - shift)
            p = tl.exp(s - shift[:, None])
            total = total * alpha + tl.sum(p, 1)
            v32 = _values(v_base, cols, dims, sk, sks, d).to(tl.float32)
            high = (p.to(tl.int32, bitcast=True) & TF32_HIGH_BITS).to(tl.float32, bitcast=True)
            block = tl.dot(high, v32, input_precision="tf32")
            block = tl.dot(p - high, v32, block, input_precision="tf32")
            acc = acc * alpha[:, None] + block
            m = m_new
        acc = acc / tl.where(total > 0, total, 1.0)[:, None]

    if LOWP:
        acc = acc.to(Q.dtype.element_ty).to(tl.float32)
    tl.store(O + b * sob + h * soh + rows[:, None].to(tl.int64) * sos + dims[None, :], acc,
             mask=row_ok[:, None] & (dims[None, :] < d))
    lse = tl.where(total > 0, m + tl.log(total), float("-inf"))
    tl.store(LSE + (b * hq + h) * sq + rows, lse, mask=row_ok)
