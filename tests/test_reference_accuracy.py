"""The attention reference agrees with a float64 computation to fp32 accuracy, on the GPU and the CPU.

The reference runs its scores on TF32 tensor cores (exact for bf16/fp16 inputs) and its P·V in IEEE
fp32; a float64 computation with the same explicit bottom-right mask bounds what that costs. Its
error must be far below the tolerance it sets, or the tolerance would be judging the reference.
"""

from __future__ import annotations

import pytest
import torch

from harness.tasks import get_task

SPECS = [
    "dtype=bf16,d=128,b=2,hq=8,hkv=2,sq=300,sk=1029,causal=1",  # GQA, Sq < Sk, bottom-right
    "dtype=fp16,d=96,b=1,hq=6,hkv=6,sq=777,sk=200,causal=1",  # rows that see no key
    "dtype=bf16,d=256,b=1,hq=4,hkv=1,sq=513,sk=513,causal=0",  # MQA, the widest head
    "dtype=bf16,d=64,b=2,hq=4,hkv=4,sq=256,sk=4099,causal=0,hot=1",  # scores in the hundreds
]


def _float64_attention(q, k, v, scale, causal):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    q64 = q.double().permute(0, 2, 1, 3)
    k64 = k.double().permute(0, 2, 1, 3).repeat_interleave(hq // hkv, dim=1)
    v64 = v.double().permute(0, 2, 1, 3).repeat_interleave(hq // hkv, dim=1)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        hidden = torch.arange(sk, device=q.device)[None, :] > (torch.arange(sq, device=q.device) + sk - sq)[:, None]
        s = s.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.nan_to_num(torch.softmax(s, dim=-1)) @ v64
    return o.permute(0, 2, 1, 3), lse


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("spec", SPECS)
def test_the_reference_is_as_accurate_as_fp32(spec, device):
    task = get_task("attention")
    s = task.parse_spec(spec)
    gen = torch.Generator(device=device)
    gen.manual_seed(7)
    inputs = task.make_inputs(s, gen, torch.device(device))
    task.refill_inputs(s, inputs, gen)  # a jittered scale, as later draws have
    ref = task.reference(s, inputs)
    o64, lse64 = _float64_attention(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], s.params["causal"])
    e = ref.empty_rows
    o_err = (ref.o.double() - o64)[:, e:].abs().max().item()
    lse_err = (ref.lse.double() - lse64)[:, :, e:].abs().max().item()
    # fp32's own rounding grows with the scores (about 1e-4 at scores in the hundreds, 1e-6 at unit
    # scale): judged against the tolerance the reference sets, which grows faster.
    assert o_err < ref.o_tol / 100, (o_err, ref.o_tol)
    assert lse_err < ref.lse_tol / 10, (lse_err, ref.lse_tol)
    if e:
        assert (ref.o[:, :e] == 0).all() and torch.isneginf(ref.lse[:, :, :e]).all()
