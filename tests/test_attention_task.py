"""The attention task on the CPU: grid, ids, exact FLOPs, the reference and the tolerance rule."""

import math

import pytest
import torch

from harness.poison import guarded_empty
from harness.tasks import get_task
from harness.tasks.attention import visible_pairs
from harness.tasks.attention_reference import chunked
from harness.tasks.base import ScenarioError

TASK = get_task("attention")


def brute_pairs(sq, sk, causal):
    return sum(1 for i in range(sq) for j in range(sk) if not causal or j <= i + sk - sq)


@pytest.mark.parametrize("sq,sk", [(1, 1), (5, 3), (3, 5), (239, 1), (799, 3), (113, 203), (64, 128), (17, 17), (1, 77)])
def test_visible_pairs_match_brute_force(sq, sk):
    for causal in (False, True):
        assert visible_pairs(sq, sk, causal) == brute_pairs(sq, sk, causal)


def test_grid_sizes_and_unique_stable_ids():
    timed, check = TASK.timed_grid(), TASK.correctness_grid()
    assert len(timed) == 180
    ids = [s.id for s in timed + check]
    assert len(ids) == len(set(ids))
    assert "bf16-d128-b4-h32x8-s4096x4096-causal" in ids
    assert 14 <= len(TASK.quick_ids()) <= 20
    # the correctness grid covers every FA3 pair, head dim, head layout and dtype
    pairs = {(s.params["sq"], s.params["sk"]) for s in check}
    assert len(pairs) == 20
    assert {s.params["d"] for s in check} == {64, 96, 128, 192, 256}
    assert {(s.params["hq"], s.params["hkv"]) for s in check} == {(6, 6), (6, 2), (6, 1)}
    assert {s.params["dtype"] for s in check} == {"bf16", "fp16"}
    assert any(s.params["hot"] for s in check) and any(s.params["hot"] for s in timed)


def test_the_exhaustive_grid_is_the_whole_cross_product():
    check, every = TASK.correctness_grid(), TASK.exhaustive_grid()
    plain = [s for s in every if not s.params["hot"]]
    combos = {(s.params["sq"], s.params["sk"], s.params["d"], s.params["causal"], s.params["hq"], s.params["hkv"],
               s.params["dtype"]) for s in plain}
    assert len(plain) == len(combos) == 20 * 5 * 2 * 3 * 2
    assert {s.id for s in check} <= {s.id for s in every}
    assert all(s.params["b"] <= 9 for s in every)  # small batch
    chosen = TASK.scenarios("exhaustive")
    assert [s for s in chosen if s.timed] == TASK.timed_grid()
    timed_ids = {s.id for s in TASK.timed_grid()}
    assert [s for s in chosen if not s.timed] == [s for s in every if s.id not in timed_ids]
    assert len(TASK.scenarios("full")) == len(check) + 180


def test_a_scenario_in_both_grids_runs_once_timed():
    # The cross product holds timed row I (bf16-d128-b9-h6x6-s1x1): on the H200 it ran twice under one
    # id, and the exhaustive run reported 181/181 timed and 1214/1214 untimed.
    for selection in ("quick", "full", "exhaustive"):
        ids = [s.id for s in TASK.scenarios(selection)]
        assert len(ids) == len(set(ids)), selection
    chosen = TASK.scenarios("exhaustive")
    assert len(chosen) == 1394 and sum(s.timed for s in chosen) == 180
    assert [s.timed for s in chosen if s.id == "bf16-d128-b9-h6x6-s1x1"] == [True]
    check = next(s for s in TASK.correctness_grid() if not s.params["hot"])
    spec = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in check.params.items()
                    if k in ("dtype", "d", "b", "hq", "hkv", "sq", "sk", "causal"))
    assert [s.timed for s in TASK.scenarios("none", (spec,)) if s.id == check.id] == [True]


def test_exact_flops_of_the_fa3_causal_shape():
    s = next(s for s in TASK.timed_grid() if s.id == "bf16-d64-b32-h32x32-s512x512-causal")
    assert TASK.exact_flops(s) == 4 * 32 * 32 * 64 * (512 * 513 // 2)


def test_spec_parsing_defaults_and_errors():
    s = TASK.parse_spec("dtype=fp16,d=96,b=1,hq=6,hkv=2,sq=77,sk=4099,causal=1")
    assert s.id == "fp16-d96-b1-h6x2-s77x4099-causal" and s.timed
    assert TASK.parse_spec("sq=5").params["sk"] == 5
    for bad in ("d=64", "sq=5,hq=6,hkv=4", "sq=5,dtype=fp8", "sq=x", "sq=5,bogus=1", "sq"):
        with pytest.raises(ScenarioError):
            TASK.parse_spec(bad)
    with pytest.raises(ScenarioError):
        TASK.scenarios("no-such-id")


def _naive(q, k, v, scale, causal):
    """Row-by-row attention in float64: an independent check on the chunked reference."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    o = torch.zeros(b, sq, hq, d, dtype=torch.float64)
    lse = torch.full((b, hq, sq), -math.inf, dtype=torch.float64)
    for bi in range(b):
        for h in range(hq):
            kh = k[bi, :, h // (hq // hkv)].double()
            vh = v[bi, :, h // (hq // hkv)].double()
            for i in range(sq):
                n = min(sk, i + sk - sq + 1) if causal else sk
                if n <= 0:
                    continue
                s = (kh[:n] @ q[bi, i, h].double()) * scale
                lse[bi, h, i] = torch.logsumexp(s, 0)
                o[bi, i, h] = torch.softmax(s, 0) @ vh[:n]
    return o, lse


@pytest.mark.parametrize("sq,sk,causal,hq,hkv", [(7, 5, True, 4, 2), (5, 7, True, 2, 1), (6, 6, False, 3, 3), (9, 3, True, 2, 2)])
def test_chunked_reference_matches_naive(sq, sk, causal, hq, hkv, monkeypatch):
    monkeypatch.setattr("harness.tasks.attention_reference.CHUNK_ELEMENTS", 2 * hq * sk)  # force several chunks
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, h, 16, generator=g) for n, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    o, lse = chunked(q, k, v, 0.3, causal, lowp=False)
    on, lsen = _naive(q, k, v, 0.3, causal)
    assert torch.allclose(o.double(), on, atol=1e-5)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(lsen))
    fin = torch.isfinite(lsen)
    assert torch.allclose(lse.double()[fin], lsen[fin], atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rows_without_keys_leave_their_neighbours_finite(dtype):
    """GQA packs each kv head's query heads one after another, so a head's last row sits beside the
    next head's first, keyless, row: its NaN softmax must not reach the matmul."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 37, 4, 32, generator=g).to(dtype)
    k, v = (torch.randn(2, 29, 2, 32, generator=g).to(dtype) for _ in range(2))
    for lowp in (False, True):
        o, lse = chunked(q, k, v, 0.17, True, lowp=lowp)
        assert torch.isfinite(o).all()
        assert torch.isneginf(lse[:, :, :8]).all() and torch.isfinite(lse[:, :, 8:]).all()
        assert (o[:, :8] == 0).all()


def _judge(spec, make_output):
    s = TASK.parse_spec(spec)
    g = torch.Generator().manual_seed(1)
    inputs = TASK.make_inputs(s, g, torch.device("cpu"))
    ref = TASK.reference(s, inputs)
    outs = {n: guarded_empty(shape, dt, "cpu") for n, (shape, dt) in TASK.output_shapes(s, inputs).items()}
    make_output(s, inputs, ref, outs)
    return TASK.compare(s, ref, {n: b.tensor for n, b in outs.items()}, ("o", "lse"))


def _from_ref(s, inputs, ref, outs):
    outs["o"].tensor.copy_(ref.o)
    outs["lse"].tensor.copy_(ref.lse)


SPEC = "dtype=bf16,d=32,b=2,hq=4,hkv=2,sq=37,sk=29,causal=1"


def test_correct_output_passes_and_rows_without_keys_are_enforced():
    assert _judge(SPEC, _from_ref).verdict == "ok"

    def nonzero_empty_rows(s, inputs, ref, outs):
        _from_ref(s, inputs, ref, outs)
        outs["o"].tensor[:, 0] = 0.5  # row 0 sees no key when sq > sk, causal
    assert _judge(SPEC, nonzero_empty_rows).verdict == "no-key-rows"


def test_same_dtype_torch_error_sets_the_tolerance():
    def lowp(s, inputs, ref, outs):
        o, lse = chunked(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], True, lowp=True)
        outs["o"].tensor.copy_(o)
        outs["lse"].tensor.copy_(lse)
    assert _judge(SPEC, lowp).verdict == "ok"

    def top_left(s, inputs, ref, outs):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        o, lse = chunked(q, k[:, : q.shape[1]] if k.shape[1] >= q.shape[1] else k, v, inputs["scale"], False, lowp=False)
        _from_ref(s, inputs, ref, outs)
        outs["o"].tensor[:, -5:] = o[:, -5:].to(outs["o"].tensor.dtype)
    assert _judge(SPEC, top_left).verdict == "wrong"


def test_unwritten_and_nan_are_told_apart():
    def partial(s, inputs, ref, outs):
        outs["o"].tensor[:, :-1].copy_(ref.o[:, :-1])
        outs["lse"].tensor.copy_(ref.lse)
    assert _judge(SPEC, partial).verdict == "unwritten"

    def nan(s, inputs, ref, outs):
        _from_ref(s, inputs, ref, outs)
        outs["o"].tensor[1, 20, 0, 0] = float("nan")
    assert _judge(SPEC, nan).verdict == "nan"

    def lse_unwritten(s, inputs, ref, outs):
        outs["o"].tensor.copy_(ref.o)
    assert _judge(SPEC, lse_unwritten).verdict == "unwritten"


def test_hot_inputs_reach_hundreds():
    s = next(s for s in TASK.correctness_grid() if s.params["hot"] and s.params["d"] == 128)
    inputs = TASK.make_inputs(s, torch.Generator().manual_seed(0), torch.device("cpu"))
    q, k = inputs["q"].float(), inputs["k"].float()
    scores = torch.einsum("bqhd,bkhd->bhqk", q[:, :, :1], k[:, :, :1]) * inputs["scale"]
    assert scores.max().item() > 100


def test_later_draws_jitter_the_scale():
    s = TASK.parse_spec("sq=8,d=16,hq=1")
    g = torch.Generator().manual_seed(0)
    inputs = TASK.make_inputs(s, g, torch.device("cpu"))
    first = inputs["scale"]
    TASK.refill_inputs(s, inputs, g)
    assert first == 0.25 and inputs["scale"] != first
