"""The attention references agree with a float64 computation to fp32 accuracy, on the GPU and the CPU.

Two paths compute them (harness/tasks/attention_reference.py): the fused Triton kernel on CUDA, and
torch ops chunk by chunk elsewhere. Each is held to float64 with the same explicit bottom-right mask:
its error must be far below the tolerance it sets, or the tolerance would be judging the reference.
The same-dtype computations of the two paths, whose error sets that tolerance, must err alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.tasks import attention_reference, get_task
from harness.tasks.attention import _empty_rows

SPECS = [
    "dtype=bf16,d=128,b=2,hq=8,hkv=2,sq=300,sk=1029,causal=1",  # GQA, Sq < Sk, bottom-right
    "dtype=fp16,d=96,b=1,hq=6,hkv=6,sq=777,sk=200,causal=1",  # rows that see no key
    "dtype=bf16,d=256,b=1,hq=4,hkv=1,sq=513,sk=513,causal=0",  # MQA, the widest head
    "dtype=bf16,d=64,b=2,hq=4,hkv=4,sq=256,sk=4099,causal=0,hot=1",  # scores in the hundreds
    "dtype=fp16,d=80,b=3,hq=4,hkv=2,sq=5,sk=3000,causal=1",  # decode-sized, a head dim off the grid
]
ROOT = Path(__file__).resolve().parents[1]


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


def _inputs(spec: str, device: str):
    task = get_task("attention")
    s = task.parse_spec(spec)
    gen = torch.Generator(device=device)
    gen.manual_seed(7)
    inputs = task.make_inputs(s, gen, torch.device(device))
    task.refill_inputs(s, inputs, gen)  # a jittered scale, as later draws have
    return task, s, inputs


def _errors_against_float64(spec: str, device: str) -> dict[str, float]:
    """The reference's error against float64, the tolerance it sets and its rows that see no key."""
    task, s, inputs = _inputs(spec, device)
    ref = task.reference(s, inputs)
    o64, lse64 = _float64_attention(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], s.params["causal"])
    e = ref.empty_rows
    return {
        "o_err": (ref.o.double() - o64)[:, e:].abs().max().item(),
        "lse_err": (ref.lse.double() - lse64)[:, :, e:].abs().max().item(),
        "o_tol": ref.o_tol,
        "lse_tol": ref.lse_tol,
        "empty_rows_exact": bool((ref.o[:, :e] == 0).all() and torch.isneginf(ref.lse[:, :, :e]).all()),
    }


def _assert_accurate(got: dict[str, float]) -> None:
    # fp32's own rounding grows with the scores (about 1e-4 at scores in the hundreds, 1e-6 at unit
    # scale): judged against the tolerance the reference sets, which grows faster.
    assert got["o_err"] < got["o_tol"] / 100, got
    assert got["lse_err"] < got["lse_tol"] / 10, got
    assert got["empty_rows_exact"], got


@pytest.mark.parametrize("path", [
    pytest.param(("cpu", "chunked"), id="cpu-chunked"),
    pytest.param(("cuda", "fused"), id="cuda-fused", marks=pytest.mark.gpu),
    pytest.param(("cuda", "chunked"), id="cuda-chunked", marks=pytest.mark.gpu),
])
@pytest.mark.parametrize("spec", SPECS)
def test_the_reference_is_as_accurate_as_fp32(spec, path, monkeypatch):
    device, kind = path
    if kind == "chunked":
        monkeypatch.setattr(attention_reference, "FUSED_MAX_D", 0)
    elif attention_reference._triton() is None:
        pytest.fail("the fused reference needs Triton, which CUDA builds of torch bring")
    _assert_accurate(_errors_against_float64(spec, device))


def _same_dtype_errors(spec: str, device: str) -> dict[str, float]:
    """max |same-dtype - fp32| of o and lse, from the fused and the chunked paths on the same inputs."""
    _, s, inputs = _inputs(spec, device)
    q, k, v, scale, causal = inputs["q"], inputs["k"], inputs["v"], inputs["scale"], s.params["causal"]
    e = _empty_rows(q.shape[1], k.shape[1], causal)
    out = {}
    for name, fn in (("fused", attention_reference.fused), ("chunked", attention_reference.chunked)):
        o32, lse32 = fn(q, k, v, scale, causal, False)
        olp, lselp = fn(q, k, v, scale, causal, True)
        out[name + "_o"] = (olp - o32)[:, e:].abs().max().item()
        out[name + "_lse"] = (lselp - lse32)[:, :, e:].abs().max().item()
    return out


def _assert_alike(got: dict[str, float]) -> None:
    # Both round where torch's same-dtype ops round, in a different order: their largest errors are of
    # one size (a factor of 2 is what 2 x that error in the tolerance already allows for).
    for part in ("o", "lse"):
        fused, chunked = got["fused_" + part], got["chunked_" + part]
        assert chunked / 2 <= fused <= 2 * chunked, (part, got)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS)
def test_both_paths_set_the_same_tolerance(spec):
    _assert_alike(_same_dtype_errors(spec, "cuda"))


# The fused kernel's masks, GQA and rows with no key, checked on the CPU by Triton's interpreter. Its
# bf16 matmul is wrong (numpy has no bf16), so these shapes use fp16; small, since it is slow. (The
# interpreter of Triton 3.6, which the GPU image has, cannot run a loop bounded per program.)
INTERPRETED = [
    "dtype=fp16,d=32,b=2,hq=4,hkv=2,sq=37,sk=29,causal=1",  # rows with no key, a partial key block
    "dtype=fp16,d=96,b=1,hq=3,hkv=1,sq=70,sk=131,causal=1",  # MQA, Sq < Sk, d not a power of 2
    "dtype=fp16,d=64,b=1,hq=2,hkv=2,sq=7,sk=200,causal=0",  # decode-sized block of rows
    "dtype=fp16,d=16,b=1,hq=2,hkv=1,sq=90,sk=3,causal=1",  # almost every row sees no key
    "dtype=fp16,d=64,b=1,hq=2,hkv=1,sq=65,sk=65,causal=0,hot=1",  # scores in the hundreds
]
_INTERPRETED_SCRIPT = """
import json, sys
from tests import test_reference_accuracy as t
for spec in t.INTERPRETED:
    print(json.dumps({"spec": spec, **t._errors_against_float64(spec, "cpu"), **t._same_dtype_errors(spec, "cpu")}))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, the compiled kernel's tests run instead")
def test_the_fused_kernel_under_the_interpreter():
    pytest.importorskip("triton")
    pytest.importorskip("numpy")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    # A reference on a CPU tensor takes the chunked path; the script asks for the fused one.
    script = "from harness.tasks import attention_reference as r; r.attention = r.fused\n" + _INTERPRETED_SCRIPT
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["spec"] for r in results] == INTERPRETED
    for got in results:
        _assert_accurate(got)
        _assert_alike(got)


@pytest.mark.gpu
def test_a_kernel_triton_cannot_build_falls_back_to_torch_ops(monkeypatch):
    triton_path = attention_reference._triton()
    _, s, inputs = _inputs(SPECS[0], "cuda")

    def unbuildable(*args):
        raise triton_path.KernelUnavailable("out of shared memory")

    monkeypatch.setattr(attention_reference, "fused", unbuildable)
    monkeypatch.setattr(attention_reference, "_unbuildable", set())
    args = (inputs["q"], inputs["k"], inputs["v"], inputs["scale"], True, False)
    with pytest.warns(RuntimeWarning, match="fused attention reference unavailable"):
        o, lse = attention_reference.attention(*args)
    expected_o, expected_lse = attention_reference.chunked(*args)
    assert torch.equal(o, expected_o) and torch.equal(lse, expected_lse)
    assert len(attention_reference._unbuildable) == 1
