"""KernelBench files as references, as published: their shapes are a scenario, their Model's parameters
can be the kernel's inputs, and every draw (get_inputs and the Model's initialisation) comes from the
scenario's seed. The examples under examples/kernelbench are judged here on CPU tensors (their check
scenarios, with the eager baseline standing in for a kernel); tests/test_spec_gpu.py runs their kernels.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from harness.poison import guarded_empty
from harness.taskfile import load_task_file
from harness.tasks import get_task
from harness.tasks.spec_modules import SpecRuntimeError
from harness.tasks.spec_outputs import declared
from harness.tasks.spec_task import SpecTask

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "kernelbench").glob("*/*.cu"))
CPU = torch.device("cpu")


def task_of(kernel: Path) -> SpecTask:
    tf = load_task_file(kernel)
    task = get_task(tf.task, tf.options)
    assert isinstance(task, SpecTask)
    return task


def draw(task: SpecTask, s, seed: int = 1) -> tuple[torch.Generator, dict[str, torch.Tensor]]:
    gen = torch.Generator(device=CPU)
    gen.manual_seed(seed)
    return gen, task.make_inputs(s, gen, CPU)


def test_there_are_seven_examples_each_with_its_kernelbench_file() -> None:
    assert [k.stem for k in EXAMPLES] == ["argmax", "depthwise_conv", "layernorm", "matmul", "relu", "softmax", "sum_dim"]
    for kernel in EXAMPLES:
        task = task_of(kernel)
        assert task.spec.kernelbench is not None and task.spec.reference.function is None
        # The file's own shapes are the first timed scenario.
        assert {k: task.timed_grid()[0].params[k] for k in task.spec.kernelbench.sizes} == task.spec.kernelbench.sizes


@pytest.mark.parametrize("kernel", EXAMPLES, ids=lambda k: k.stem)
def test_each_example_judges_its_check_scenarios_on_cpu(kernel: Path) -> None:
    task = task_of(kernel)
    eager = next(b for b in task.baselines() if b.name == "eager")
    for s in task.correctness_grid():
        gen, inputs = draw(task, s)
        outs = {n: guarded_empty(shape, dt, CPU) for n, (shape, dt) in task.output_shapes(s, inputs).items()}
        ref = task.reference(s, inputs)
        assert task.compare(s, ref, {n: b.tensor for n, b in outs.items()}, task.output_names).verdict == "unwritten"
        expected = eager.prepare(s, inputs)()
        for a in task.spec.output_args:
            declared(outs[a.name].tensor, task.spec.shape_of(a, s.params), task.spec.dtype_of(a, s.params)).copy_(
                expected[a.name])
        cmp = task.compare(s, ref, {n: b.tensor for n, b in outs.items()}, task.output_names)
        assert cmp.verdict == "ok", (s.id, cmp.detail)
        task.refill_inputs(s, inputs, gen)
        fresh = task.reference(s, inputs)
        if any(not torch.equal(fresh[n].hp, ref[n].hp) for n in task.output_names):  # (softmax of one element: 1)
            assert task.compare(s, fresh, expected, task.output_names).verdict == "wrong", s.id


def test_a_parameter_input_is_the_models_own_tensor_drawn_afresh() -> None:
    task = task_of(ROOT / "examples/kernelbench/depthwise_conv/depthwise_conv.cu")
    s = task.correctness_grid()[1]  # kernel_size 5, stride 2, padding 2
    gen, inputs = draw(task, s)
    model = task.runtime.kernelbench.models[s.id]
    assert model.conv2d.weight.data_ptr() == inputs["weight"].data_ptr()
    assert tuple(inputs["weight"].shape) == (3, 1, 5, 5)
    bound = 1 / (5 * 5) ** 0.5  # nn.Conv2d's initialisation: uniform within 1/sqrt(fan_in)
    assert 0 < inputs["weight"].abs().max() <= bound
    before = inputs["weight"].clone()
    task.refill_inputs(s, inputs, gen)
    assert not torch.equal(before, inputs["weight"]) and model.conv2d.weight.data_ptr() == inputs["weight"].data_ptr()
    # The module's sizes follow the scenario: the reference is a 5 x 5, stride 2, padding 2 convolution.
    ref = task.reference(s, inputs)["y"].hp
    expected = torch.nn.functional.conv2d(inputs["x"].double(), inputs["weight"].double(), stride=2, padding=2, groups=3)
    assert torch.allclose(ref, expected)


def test_the_spec_can_draw_what_kernelbench_leaves_constant() -> None:
    relu = task_of(ROOT / "examples/kernelbench/relu/relu.cu")
    _, inputs = draw(relu, relu.correctness_grid()[2])
    assert inputs["x"].min() < 0 < inputs["x"].max()  # torch.rand alone: all in [0, 1)
    layernorm = task_of(ROOT / "examples/kernelbench/layernorm/layernorm.cu")
    s = layernorm.correctness_grid()[1]
    _, inputs = draw(layernorm, s)
    assert not torch.equal(inputs["weight"], torch.ones_like(inputs["weight"]))
    assert not torch.equal(inputs["bias"], torch.zeros_like(inputs["bias"]))
    assert 0 <= inputs["x"].min() and inputs["x"].max() < 1  # x as get_inputs() draws it
    model = layernorm.runtime.kernelbench.models[s.id]
    assert model.ln.weight.data_ptr() == inputs["weight"].data_ptr()
    assert torch.equal(model.ln.weight.detach(), inputs["weight"])


def _kernelbench_spec(tmp_path: Path, entry: str) -> SpecTask:
    source = (ROOT / "examples/kernelbench/depthwise_conv/82_conv_depthwise_2D_square_input_square_kernel.py").read_text()
    (tmp_path / "kb.py").write_text(source)
    (tmp_path / "op.toml").write_text(f'reference = "kb.py"\n\n[entry]\nsymbol = "op"\nargs = [\n{entry}\n]\n\n'
                                      "[scenarios]\ncheck = [{ batch_size = 1, in_channels = 2, height = 5, width = 5 }]\n")
    return task_of(tmp_path / "op.cu")


X = '{ tensor = "x", role = "in", dtype = "fp32", shape = ["batch_size", "in_channels", "height", "width"] },'
Y = ('{ tensor = "y", role = "out", dtype = "fp32", shape = ["batch_size", "in_channels", "height - kernel_size + 1",'
     ' "width - kernel_size + 1"] },\n  { scalar = "stride", type = "int32" }, { scalar = "padding", type = "int32" },')


@pytest.mark.parametrize("entry, message", [
    (f'{X}\n  {{ tensor = "w", role = "in", dtype = "fp32", shape = ["in_channels", 1, 3, 3], param = "conv.weight" }},\n  {Y}',
     "kb.py: Model has no parameter or buffer 'conv.weight' (it has: conv2d.weight)"),
    (f'{X}\n  {{ tensor = "w", role = "in", dtype = "fp32", shape = ["in_channels", 3, 3], param = "conv2d.weight" }},\n  {Y}',
     "kb.py: conv2d.weight has shape [2, 1, 3, 3]; the spec's entry.args[1].shape gives [2, 3, 3]"),
    (f'{X}\n  {X.replace(chr(34) + "x" + chr(34), chr(34) + "x2" + chr(34))}\n  {Y}',
     "kb.py: get_inputs() gives 1 tensors; the spec's entry has 2 input tensors that are not parameters (x, x2)"),
    (f'{X.replace(chr(34) + "width" + chr(34) + "]", chr(34) + "width + 1" + chr(34) + "]")}\n  {Y}',
     "kb.py: get_inputs() gives x of shape [1, 2, 5, 5]; the spec's entry.args[0].shape gives [1, 2, 5, 6]"),
])
def test_a_kernelbench_spec_that_disagrees_with_its_module_says_so(tmp_path: Path, entry: str, message: str) -> None:
    task = _kernelbench_spec(tmp_path, entry)
    with pytest.raises(SpecRuntimeError, match=re.escape(message)):
        draw(task, task.timed_grid()[-1] if not task.correctness_grid() else task.correctness_grid()[0])


def test_a_kernelbench_draw_comes_from_the_seed_and_leaves_the_global_rng_alone() -> None:
    task = task_of(ROOT / "examples/kernelbench/sum_dim/sum_dim.cu")
    s = task.correctness_grid()[1]
    torch.manual_seed(123)
    state = torch.get_rng_state()
    _, a = draw(task, s, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    _, b = draw(task, s, seed=5)
    _, c = draw(task, s, seed=6)
    assert torch.equal(a["x"], b["x"]) and not torch.equal(a["x"], c["x"])
