"""A spec task's methods on CPU tensors: scenarios, inputs, the reference, tolerances and the comparison.

The worker needs CUDA; everything it asks of a task (make_inputs, refill_inputs, output_shapes,
call_args, reference, compare, baselines, exact_flops, min_bytes) is called here directly, with
outputs in harness.poison's guarded buffers as the worker gives them to a kernel.
"""

from __future__ import annotations

import ctypes
import math
import re
from pathlib import Path

import pytest
import torch

from harness.poison import guarded_empty
from harness.taskfile import load_task_file
from harness.tasks import get_task
from harness.tasks.base import ScenarioError
from harness.tasks.spec_modules import SpecRuntimeError
from harness.tasks.spec_outputs import declared
from harness.tasks.spec_task import SpecTask

CPU = torch.device("cpu")


def make_task(tmp_path: Path, entry: str, ref: str, extra: str = "", scenarios: str = "") -> SpecTask:
    (tmp_path / "ref.py").write_text("import torch\n\n\n" + ref)
    (tmp_path / "op.toml").write_text(
        f'reference = "ref.py:op"\n{extra}\n[entry]\nsymbol = "op"\nargs = [\n{entry}\n]\n\n'
        + (scenarios or '[scenarios]\ntimed = [{ n = 64 }]\ncheck = [{ n = 1 }, { n = 7 }]\n'))
    tf = load_task_file(tmp_path / "op.cu")
    task = get_task(tf.task, tf.options)
    assert isinstance(task, SpecTask)
    return task


class Run:
    """One scenario as the worker runs it: inputs from a seed, guarded outputs, the reference."""

    def __init__(self, task: SpecTask, index: int = 0, seed: int = 1, timed: bool = False) -> None:
        self.task = task
        self.s = (task.timed_grid() if timed else task.correctness_grid())[index]
        self.gen = torch.Generator(device=CPU)
        self.gen.manual_seed(seed)
        self.inputs = task.make_inputs(self.s, self.gen, CPU)
        self.outs = {n: guarded_empty(shape, dt, CPU) for n, (shape, dt) in task.output_shapes(self.s, self.inputs).items()}
        self.ref = task.reference(self.s, self.inputs)

    def view(self, name: str) -> torch.Tensor:
        """The output buffer as the kernel sees it: its declared dtype and shape."""
        a = next(a for a in self.task.spec.output_args if a.name == name)
        return declared(self.outs[name].tensor, self.task.spec.shape_of(a, self.s.params),
                        self.task.spec.dtype_of(a, self.s.params))

    def compare(self):
        return self.task.compare(self.s, self.ref, {n: b.tensor for n, b in self.outs.items()}, self.task.output_names)


SILU_ENTRY = '''  { tensor = "x", role = "in", dtype = "T", shape = ["n"] },
  { tensor = "y", role = "out", dtype = "T", shape = ["n"] },
  { scalar = "n", type = "int64" },
  { scalar = "dtype", type = "int32", dtype_code = "T" },'''
SILU_REF = "def op(x):\n    return x * torch.sigmoid(x)\n"
SILU_DTYPES = '[dtypes]\nT = ["bf16", "fp16", "fp32"]\n'


@pytest.fixture
def silu(tmp_path: Path) -> SpecTask:
    return make_task(tmp_path, SILU_ENTRY, SILU_REF, SILU_DTYPES,
                     '[scenarios]\ntimed = [{ n = 4096, T = "bf16" }]\ncheck = [{ n = 1 }, { n = 1000 }]\n')


def _silu_rounded_once(x: torch.Tensor) -> torch.Tensor:
    xf = x.double()
    return (xf * torch.sigmoid(xf)).to(x.dtype)


@pytest.mark.parametrize("index", range(6))
def test_a_kernel_that_rounds_once_passes_every_dtype(silu: SpecTask, index: int) -> None:
    run = Run(silu, index)
    run.view("y").copy_(_silu_rounded_once(run.inputs["x"]))
    cmp = run.compare()
    assert cmp.verdict == "ok", cmp.detail
    assert cmp.errors["y"] <= cmp.tolerances["y"]


def test_the_tolerance_is_twice_the_input_dtype_error_plus_one_ulp(silu: SpecTask) -> None:
    run = Run(silu, 3)  # bf16, n = 1000
    x = run.inputs["x"]
    truth = (x.float() * torch.sigmoid(x.float()))
    same_dtype = (x * torch.sigmoid(x)).float()
    ulp = math.ldexp(torch.finfo(torch.bfloat16).eps, math.floor(math.log2(truth.abs().max().item() + 0.3)))
    assert run.ref["y"].tol == pytest.approx(2 * (same_dtype - truth).abs().max().item() + ulp)


def test_an_error_beyond_the_tolerance_is_wrong_with_its_numbers(silu: SpecTask) -> None:
    run = Run(silu, 5)  # fp32, n = 1000
    good = _silu_rounded_once(run.inputs["x"])
    bad = good.clone()
    bad[17] += 1e-3
    run.view("y").copy_(bad)
    cmp = run.compare()
    assert cmp.verdict == "wrong"
    assert cmp.errors["y"] == pytest.approx(1e-3, rel=1e-2) and cmp.errors["y"] > cmp.tolerances["y"]
    assert "1 of 1000 elements out of tolerance" in cmp.detail


def test_unwritten_nan_and_guard_damage_are_told_apart(silu: SpecTask) -> None:
    run = Run(silu, 5)
    good = _silu_rounded_once(run.inputs["x"])
    run.view("y")[:990].copy_(good[:990])
    cmp = run.compare()
    assert (cmp.verdict, cmp.detail) == ("unwritten", "y: 10 of 1000 elements never written")
    run.view("y").copy_(good)
    run.view("y")[3] = float("nan")
    assert run.compare().verdict == "nan"
    run.view("y")[3] = float("inf")
    assert run.compare().verdict == "nan"
    run.view("y").copy_(good)
    assert run.compare().verdict == "ok"
    run.outs["y"].base[-1] = 0  # past the end: the worker's guard check sees it
    assert int(run.outs["y"].guard_damage()) == 1


def test_a_fresh_draw_refills_the_same_buffers(silu: SpecTask) -> None:
    run = Run(silu, 5)
    before = run.inputs["x"].clone()
    pointer = run.inputs["x"].data_ptr()
    silu.refill_inputs(run.s, run.inputs, run.gen)
    assert run.inputs["x"].data_ptr() == pointer
    assert not torch.equal(before, run.inputs["x"])


def test_inputs_come_from_the_seed(silu: SpecTask) -> None:
    a, b, c = Run(silu, 4, seed=7), Run(silu, 4, seed=7), Run(silu, 4, seed=8)
    assert torch.equal(a.inputs["x"], b.inputs["x"]) and not torch.equal(a.inputs["x"], c.inputs["x"])


def test_the_abi_is_the_spec_order_with_the_stream_last(silu: SpecTask) -> None:
    run = Run(silu, 3)  # the check rows: n = 1 in bf16, fp16, fp32, then n = 1000 in bf16, ...
    assert silu.argtypes == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p]
    args = silu.call_args(run.s, run.inputs, {n: b.tensor for n, b in run.outs.items()}, 1234)
    assert args == [run.inputs["x"].data_ptr(), run.outs["y"].tensor.data_ptr(), 1000, 0, 1234]


def test_scenario_sets_ids_and_ad_hoc_scenarios(silu: SpecTask) -> None:
    assert [s.id for s in silu.scenarios("quick")] == ["bf16-n1", "fp16-n1", "fp32-n1", "bf16-n1000", "fp16-n1000",
                                                      "fp32-n1000", "bf16-n4096"]
    custom = silu.parse_spec("n=77,T=fp16")
    assert (custom.id, custom.timed, custom.group, custom.params) == ("fp16-n77", True, "custom", {"n": 77, "T": "fp16"})
    assert silu.parse_spec("n=5").id == "bf16-n5"  # a dtype variable left out takes its first type
    for bad, message in (("n=5,T=fp8e4m3", "'fp8e4m3' is not one of T's types"), ("m=5", "unknown key 'm'"),
                         ("T=fp16", "no value for size 'n'"), ("n=-1", "evaluates to -1"), ("n=x", "bad value")):
        with pytest.raises(ScenarioError, match=message):
            silu.parse_spec(bad)
    with pytest.raises(ScenarioError, match="unknown scenario id 'fp16-n3'"):
        silu.scenarios("fp16-n3")


def test_flops_and_bytes_from_the_spec_or_every_tensor_once(tmp_path: Path, silu: SpecTask) -> None:
    s = silu.parse_spec("n=1000,T=fp16")
    assert silu.exact_flops(s) == 0.0 and silu.min_bytes(s) == 2 * 1000 * 2
    (tmp_path / "other").mkdir()
    other = make_task(tmp_path / "other", SILU_ENTRY, SILU_REF, 'flops = "4 * n"\nbytes = "n * 3"\n' + SILU_DTYPES,
                      '[scenarios]\ntimed = [{ n = 10, T = "fp32" }]\n')
    assert other.exact_flops(other.timed_grid()[0]) == 40.0 and other.min_bytes(other.timed_grid()[0]) == 30.0


def test_the_baselines_are_eager_compiled_and_the_fallback(silu: SpecTask) -> None:
    baselines = silu.baselines()
    assert [(b.name, b.fallback, b.checks) for b in baselines] == [
        ("eager", False, ("y",)), ("compiled", False, ("y",)), ("reference", True, ("y",))]
    run = Run(silu, 3)  # bf16
    for b in (baselines[0], baselines[2]):
        out = b.prepare(run.s, run.inputs)()
        assert out["y"].dtype == torch.bfloat16 and silu.compare(run.s, run.ref, out, b.checks).verdict == "ok"


def test_a_user_baseline_is_bound_by_its_own_parameters(tmp_path: Path) -> None:
    task = make_task(tmp_path, SILU_ENTRY, SILU_REF + "\n\ndef fused(x, n):\n    return torch.nn.functional.silu(x)\n",
                     'baselines = ["eager", "ref.py:fused"]\n' + SILU_DTYPES,
                     '[scenarios]\ntimed = [{ n = 64 }]\ncheck = [{ n = 100 }]\n')
    assert [b.name for b in task.baselines()] == ["eager", "fused", "reference"]
    run = Run(task, 2)
    fused = task.baselines()[1]
    assert task.compare(run.s, run.ref, fused.prepare(run.s, run.inputs)(), fused.checks).verdict == "ok"


TWO_OUT_ENTRY = '''  { tensor = "x", role = "in", dtype = "fp32", shape = ["n"] },
  { tensor = "y", role = "out", dtype = "fp32", shape = ["n"] },
  { tensor = "idx", role = "out", dtype = "int64", shape = [] },'''


def test_allclose_reports_the_worst_element_and_exact_integers(tmp_path: Path) -> None:
    ref = "def op(x):\n    return {'idx': x.argmax(), 'y': x * 3}\n"
    task = make_task(tmp_path, TWO_OUT_ENTRY, ref, "", "[scenarios]\ntimed = [{ n = 64 }]\ncheck = [{ n = 100 }]\n"
                     '\n[tolerance]\nrule = "allclose"\nrtol = 1e-3\natol = 1e-6\n')
    run = Run(task)
    x = run.inputs["x"]
    assert task.spec.tolerance["idx"].rule == "exact"
    run.view("y").copy_(x * 3)
    run.view("idx").fill_(int(x.argmax()))
    assert run.compare().verdict == "ok"
    y = (x * 3).clone()
    worst = int(y.abs().argmin())
    y[worst] += 1e-3
    run.view("y").copy_(y)
    cmp = run.compare()
    assert cmp.verdict == "wrong"
    assert cmp.errors["y"] == pytest.approx(1e-3, rel=1e-3)
    assert cmp.tolerances["y"] == pytest.approx(1e-6 + 1e-3 * abs(float(x[worst] * 3)), rel=1e-3)
    run.view("y").copy_(x * 3)
    run.view("idx").fill_(int(x.argmax()) + 1)
    cmp = run.compare()
    assert (cmp.verdict, cmp.detail) == ("wrong", "idx: 1 of 1 elements differ from the reference (exact rule; "
                                                  "max abs difference 1)")


@pytest.mark.parametrize("dtype, carrier", [("int64", torch.int32), ("fp64", torch.int32), ("int8", torch.int16),
                                            ("bool", torch.int16), ("uint8", torch.int16), ("int32", torch.int32)])
def test_every_output_dtype_is_poisoned_and_judged(tmp_path: Path, dtype: str, carrier: torch.dtype) -> None:
    entry = f'''  {{ tensor = "x", role = "in", dtype = "fp32", shape = ["n"] }},
  {{ tensor = "y", role = "out", dtype = "{dtype}", shape = ["n"] }},'''
    ref = {"int64": "(x * 100).round().long()", "fp64": "x.double() * 2", "int8": "(x * 30).clamp(-127, 127).round().to(torch.int8)",
           "bool": "x > 0", "uint8": "(x.abs() * 50).clamp(0, 255).to(torch.uint8)", "int32": "(x * 100).int()"}[dtype]
    task = make_task(tmp_path, entry, f"def op(x):\n    return {ref}\n")
    run = Run(task, 1)  # n = 7: odd, so a 1-byte output leaves one byte of its carrier over
    assert run.outs["y"].tensor.dtype == carrier
    fn = eval(f"lambda x: {ref}", {"torch": torch})
    expect = fn(run.inputs["x"].double() if dtype == "fp64" else run.inputs["x"])
    assert run.compare().verdict == "unwritten"
    run.view("y")[:6].copy_(expect[:6])
    cmp = run.compare()
    assert cmp.verdict == "unwritten" or (dtype in ("bool", "uint8", "int8") and cmp.verdict == "wrong"), cmp.detail
    run.view("y").copy_(expect)
    assert run.compare().verdict == "ok", run.compare().detail
    if carrier == torch.int16:
        run.outs["y"].tensor.view(torch.uint8)[7] = 0  # the byte after the output, inside its carrier
        assert run.compare().detail == "wrote outside y (the byte after its end)"
        run.outs["y"].repoison()
        run.view("y").copy_(expect)
    changed = expect.clone()
    changed[2] = ~changed[2] if dtype == "bool" else changed[2] + 1
    run.view("y").copy_(changed)
    assert run.compare().verdict == "wrong"


def test_where_the_reference_is_nan_or_inf_the_output_must_be_too(tmp_path: Path) -> None:
    entry = TWO_OUT_ENTRY.split("\n")[0] + "\n" + TWO_OUT_ENTRY.split("\n")[1]
    task = make_task(tmp_path, entry, "def op(x):\n    return torch.log(x)\n")
    run = Run(task, 1)
    expect = torch.log(run.inputs["x"].double()).float()
    assert torch.isnan(expect).any()
    run.view("y").copy_(expect)
    assert run.compare().verdict == "ok"
    finite = torch.nan_to_num(expect, nan=0.0)
    run.view("y").copy_(finite)
    cmp = run.compare()
    assert cmp.verdict == "wrong" and "differ where the reference is NaN/Inf" in cmp.detail
    run.outs["y"].repoison()
    assert run.compare().verdict == "unwritten"  # our NaN is never the reference's NaN


def test_the_reference_in_higher_precision(tmp_path: Path, silu: SpecTask) -> None:
    assert silu.runtime.hp_dtype({"T": "bf16"}) == torch.float32
    assert silu.runtime.hp_dtype({"T": "fp32"}) == torch.float64
    task = make_task(tmp_path, SILU_ENTRY, SILU_REF, SILU_DTYPES + '\n[tolerance]\nreference_dtype = "fp32"\n')
    assert task.runtime.hp_dtype({"T": "fp32"}) == torch.float32


@pytest.mark.parametrize("ref, message", [
    ("def op(x):\n    return x, x\n", "ref.py:op returned 2 outputs; the spec has 1 (y)"),
    ("def op(x):\n    return x[:3]\n", "ref.py:op: output y is [3]; the spec's entry.args[1].shape gives [7]"),
    ("def op(x):\n    return 'y'\n", "ref.py:op returned str, not tensors"),
    ("def op(x):\n    return {'z': x}\n", "ref.py:op returned a dict without 'y'"),
])
def test_a_reference_that_disagrees_with_the_spec_says_so(tmp_path: Path, ref: str, message: str) -> None:
    entry = TWO_OUT_ENTRY.split("\n")[0] + "\n" + TWO_OUT_ENTRY.split("\n")[1]
    task = make_task(tmp_path, entry, ref)
    with pytest.raises(SpecRuntimeError, match=re.escape(message)):
        Run(task, 1)


def test_input_distributions(tmp_path: Path) -> None:
    entry = '''  { tensor = "u", role = "in", dtype = "fp32", shape = ["n", "n"] },
  { tensor = "k", role = "in", dtype = "int32", shape = ["n", "n"] },
  { tensor = "a", role = "in", dtype = "fp64", shape = [2, "n", "n"] },
  { tensor = "z", role = "in", dtype = "bf16", shape = ["n", "n"] },
  { tensor = "y", role = "out", dtype = "fp32", shape = ["n"] },'''
    extra = ('\n[inputs.u]\ndist = "uniform"\nlow = -3\nhigh = "n - 60"\n\n[inputs.k]\ndist = "integers"\nlow = 5\n'
             'high = "n"\n\n[inputs.a]\ndist = "spd"\n\n[inputs.z]\nmean = 10.0\nstd = 0.5\n')
    task = make_task(tmp_path, entry, "def op(u, k, a, z):\n    return u.sum(0)\n", "", "[scenarios]\ntimed = [{ n = 64 }]\n"
                     + extra)
    run = Run(task, 0, timed=True)
    u, k, a, z = (run.inputs[n] for n in "ukaz")
    assert -3 <= u.min() and u.max() < 4 and u.std() > 1.5
    assert k.dtype == torch.int32 and k.min() == 5 and k.max() == 63
    assert torch.allclose(a, a.mT) and torch.linalg.eigvalsh(a).min() >= 1.0 - 1e-9
    assert abs(z.float().mean().item() - 10.0) < 0.1 and abs(z.float().std().item() - 0.5) < 0.05
