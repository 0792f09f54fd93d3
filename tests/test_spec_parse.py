"""A spec task file: everything it may say, read without torch, and one line for each thing wrong.

Each error case is an edit of one valid spec; the message must name the file, the key and what is
wrong, and `kstui eval --check-only` must print it alone and exit 2 (no GPU, no build needed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.taskfile import TaskFileError, judge_files, judge_layout, load_task_file
from harness.tasks import get_task
from harness.tasks.spec_task import SpecTask

ROOT = Path(__file__).resolve().parents[1]

SPEC = '''\
name = "my_op"
reference = "ref.py:my_op"
baselines = ["eager", "compiled", "ref.py:fast"]
flops = "2 * rows * cols"
bytes = "4 * rows * cols"

[dtypes]
T = ["bf16", "fp16"]

[sizes]
cols = 128

[entry]
symbol = "my_op"
args = [
  { tensor = "x", role = "in", dtype = "T", shape = ["rows", "cols"] },
  { tensor = "idx", role = "in", dtype = "int32", shape = ["rows"] },
  { tensor = "y", role = "out", dtype = "T", shape = ["rows", "cols"] },
  { tensor = "lse", role = "out", dtype = "fp32", shape = ["rows"] },
  { scalar = "rows", type = "int32" },
  { scalar = "scale", type = "float32", value = "1 / sqrt(cols)" },
  { scalar = "dtype", type = "int32", dtype_code = "T" },
]

[inputs.x]
dist = "uniform"
low = -2
high = 2

[inputs.idx]
dist = "integers"
low = 0
high = "cols"

[scenarios]
timed = [{ rows = 1024, T = "bf16" }, { rows = 4096, cols = 256, T = "fp16" }]
check = [{ rows = 1 }, { rows = 3, cols = 7 }]
quick = ["bf16-cols128-rows1024"]

[tolerance]
rule = "reference"
factor = 2.0
reference_dtype = "fp32"

[tolerance.lse]
rule = "allclose"
rtol = 1e-5
atol = 1e-6

[eval]
scenario_timeout_s = 90
'''

REF = '''\
import torch


def my_op(x, idx, scale, cols, bias=0.0):
    y = x * scale + bias
    return y, torch.logsumexp(x.float(), -1) + idx.float() * 0


def fast(x, idx, scale):
    return my_op(x, idx, scale, x.shape[-1])
'''


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    (tmp_path / "ref.py").write_text(REF)
    (tmp_path / "my_op.toml").write_text(SPEC)
    path = tmp_path / "my_op.cu"
    path.write_text("// the kernel\n")
    return path


def _edit(kernel: Path, old: str, new: str, ref: tuple[str, str] | None = None) -> None:
    toml = kernel.with_suffix(".toml")
    text = toml.read_text()
    assert old in text, old
    toml.write_text(text.replace(old, new, 1))
    if ref:
        py = kernel.parent / "ref.py"
        assert ref[0] in py.read_text(), ref[0]
        py.write_text(py.read_text().replace(*ref))


def test_a_full_spec_is_read_into_a_task(kernel: Path) -> None:
    tf = load_task_file(kernel)
    assert tf.spec is not None and tf.task.startswith("my_op@") and tf.scenario_timeout_s == 90
    assert tf.options["dir"] == str(kernel.parent.resolve())
    assert "eval" not in tf.options["spec"]  # budgets are not part of the task
    task = get_task(tf.task, tf.options)
    assert isinstance(task, SpecTask) and task.name == tf.task and task.entry_symbol == "my_op"
    assert task.output_names == ("y", "lse")
    assert [s.id for s in task.timed_grid()] == ["bf16-cols128-rows1024", "fp16-cols256-rows4096"]
    # A row without T stands for each of T's types.
    assert [s.id for s in task.correctness_grid()] == ["bf16-cols128-rows1", "fp16-cols128-rows1",
                                                       "bf16-cols7-rows3", "fp16-cols7-rows3"]
    assert task.quick_ids() == ["bf16-cols128-rows1024"]
    spec = tf.spec
    assert [str(b) if isinstance(b, str) else b.function for b in spec.baselines] == ["eager", "compiled", "fast"]
    assert spec.tolerance["y"].rule == "reference" and spec.tolerance["lse"].rule == "allclose"
    assert spec.reference_dtype == "fp32"


def test_the_name_changes_with_the_reference_and_not_with_the_budgets(kernel: Path) -> None:
    first = load_task_file(kernel).task
    _edit(kernel, "scenario_timeout_s = 90", "scenario_timeout_s = 30")
    assert load_task_file(kernel).task == first
    (kernel.parent / "ref.py").write_text(REF + "\n# changed\n")
    assert load_task_file(kernel).task != first


def test_judge_files_are_the_task_file_and_every_python_file_it_names(kernel: Path, tmp_path: Path) -> None:
    (tmp_path / "other.py").write_text("def faster(x, idx, scale):\n    return x, x\n")
    _edit(kernel, '"ref.py:fast"]', '"ref.py:fast", "other.py:faster"]')
    assert judge_files(kernel) == [kernel.with_suffix(".toml").resolve(), (tmp_path / "ref.py").resolve(),
                                   (tmp_path / "other.py").resolve()]


def test_judge_files_of_a_builtin_task_is_the_task_file() -> None:
    kernel = ROOT / "workspace" / "rmsnorm.cu"
    assert judge_files(kernel) == [kernel.with_suffix(".toml").resolve()]


def test_the_judge_layout_names_each_file_where_the_spec_names_it(kernel: Path, tmp_path: Path) -> None:
    # A baseline one folder up and a reference reached through a link: the layout keeps the names the
    # spec uses (so a copy of it resolves the same), each read from the real file.
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "other.py").write_text("def faster(x, idx, scale):\n    return x, x\n")
    ops = tmp_path / "ops"
    ops.mkdir()
    for name in ("my_op.cu", "my_op.toml"):
        (kernel.parent / name).rename(ops / name)
    (ops / "ref.py").symlink_to(tmp_path / "ref.py")
    kernel = ops / "my_op.cu"
    _edit(kernel, '"ref.py:fast"]', '"ref.py:fast", "../shared/other.py:faster"]')
    layout = judge_layout(kernel)
    assert layout.kernel == "ops/my_op.cu" and layout.task_dir == "ops"
    assert layout.files == {"ops/my_op.toml": (ops / "my_op.toml").resolve(), "ops/ref.py": (tmp_path / "ref.py").resolve(),
                            "shared/other.py": (tmp_path / "shared" / "other.py").resolve()}


def test_the_judge_layout_of_a_builtin_task_is_the_kernel_and_its_task_file() -> None:
    layout = judge_layout(ROOT / "workspace" / "rmsnorm.cu")
    assert (layout.kernel, layout.task_dir) == ("rmsnorm.cu", ".")
    assert layout.files == {"rmsnorm.toml": (ROOT / "workspace" / "rmsnorm.toml").resolve()}


def test_judge_files_raises_on_a_bad_spec(kernel: Path) -> None:
    _edit(kernel, 'reference = "ref.py:my_op"', 'reference = "ref.py:gone"')
    with pytest.raises(TaskFileError, match="gone"):
        judge_files(kernel)


ERRORS = [
    # (old text, new text, the message after "my_op.toml: ")
    ('reference = "ref.py:my_op"\n', "", "reference: missing: the PyTorch reference"),
    ('"ref.py:my_op"', '"ref.py:nope"', "reference: ref.py defines no top-level function 'nope' (it defines: fast, my_op)"),
    ('"ref.py:my_op"', '"missing.py:f"', "reference: {dir}/missing.py: no such file"),
    ('"ref.py:my_op"', '"ref.txt"', "reference: 'ref.txt': expected \"file.py:function\""),
    ('"ref.py:my_op"', '"/abs/ref.py:my_op"',
     "reference: '/abs/ref.py:my_op': give the file relative to the task file's folder, not as an absolute path"),
    ('"ref.py:my_op"', '"ref.py"', "reference: ref.py is not a KernelBench module: no class Model and no def get_inputs()"),
    ('"ref.py:my_op"', "3", "reference: should be a Python file and function"),
    ('"ref.py:my_op"', '"ref.py:my-op"', "reference: should be file.py:function with a Python function name"),
    ('baselines = ["eager", "compiled", "ref.py:fast"]', 'baselines = "eager"', "baselines: should be a list"),
    ('["eager", "compiled", "ref.py:fast"]', '["eager", "eager"]', "baselines[1]: a second baseline named 'eager'"),
    ('["eager", "compiled", "ref.py:fast"]', '["ref.py:fast", "ref.py:fast"]', "baselines[1]: a second baseline named 'fast'"),
    ('["eager", "compiled", "ref.py:fast"]', '["ref.py"]', "baselines[0]: 'ref.py': name the function, \"ref.py:function\""),
    ('name = "my_op"', 'name = "my-op"', "name: should be a name"),
    ('name = "my_op"', 'name = "my_op"\nflop = 3', "flop: unknown key (known: name, reference"),
    ('flops = "2 * rows * cols"', 'flops = "2 * rows * colz"',
     "flops: unknown size 'colz' (sizes, from [sizes] and the scenario rows: cols, rows)"),
    ('flops = "2 * rows * cols"', 'flops = "rows.real"', "flops: 'rows.real': only numbers, sizes"),
    ('flops = "2 * rows * cols"', 'flops = "-rows"', "scenarios.timed[0]: flops: should not be negative"),
    ('T = ["bf16", "fp16"]', 'T = ["bf17"]', "dtypes.T: should be a list of dtypes from: bf16, fp16, fp32"),
    ('T = ["bf16", "fp16"]', 'T = ["bf16", "bf16"]', "dtypes.T: lists a dtype twice"),
    ('T = ["bf16", "fp16"]', 'T = ["bf16", "fp16"]\nfp32 = ["fp32"]', "dtypes.fp32: 'fp32' is a dtype name"),
    ("cols = 128", "cols = 1.5", "sizes.cols: should be a whole number"),
    ("cols = 128", "cols = 128\nunused = 3", "sizes.unused: size 'unused' is used nowhere"),
    ("cols = 128", "cols = 128\nT = 3", "sizes.T: is also a dtype variable"),
    ('symbol = "my_op"', "", "entry.symbol: should be the kernel's C entry point name"),
    ('symbol = "my_op"', 'symbol = "int"', "entry.symbol: 'int' is a C/C++ keyword"),
    ('symbol = "my_op"', 'symbol = "my_op"\nstream = 1', "entry.stream: unknown key (known: symbol, args)"),
    ('[entry]\nsymbol = "my_op"', '[entry]\nflops = "rows"\nsymbol = "my_op"',
     "entry.flops: unknown key (known: symbol, args); a top-level key goes above the first [table]"),
    ('{ tensor = "x", role = "in", dtype = "T", shape = ["rows", "cols"] }',
     '{ tensor = "x", scalar = "x", role = "in", dtype = "T", shape = ["rows", "cols"] }',
     "entry.args[0]: needs exactly one of 'tensor' (a pointer) or 'scalar' (a value)"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "inout", dtype = "T", shape = ["rows", "cols"]',
     'entry.args[0].role: should be "in" or "out"'),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "in", dtype = "U", shape = ["rows", "cols"]',
     "entry.args[0].dtype: should be a dtype (bf16,"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "in", dtype = "T", shape = "rows"',
     "entry.args[0].shape: should be a list of sizes"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "in", dtype = "T", shape = ["rows", "colz"]',
     "entry.args[0].shape[1]: unknown size 'colz'"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "in", dtype = "T", shape = ["rows", "T"]',
     "entry.args[0].shape[1]: unknown size 'T' (a dtype variable is not a number; use dtype_code)"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "in", dtype = "T", shape = ["rows / 2", "cols"]',
     "scenarios.check[0]: entry.args[0].shape[0]: evaluates to 0.5, not a whole number"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"]', 'role = "in", dtype = "T", shape = ["rows - 2", "cols"]',
     "scenarios.check[0]: entry.args[0].shape[0]: evaluates to -1 (should be 0 or more)"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"] }', 'role = "in", dtype = "T", shape = ["rows", "cols"], strides = [] }',
     "entry.args[0].strides: unknown key (known: tensor, role, dtype, shape, param)"),
    ('role = "in", dtype = "T", shape = ["rows", "cols"] }', 'role = "in", dtype = "T", shape = ["rows", "cols"], param = "w" }',
     "entry.args[0].param: only a KernelBench reference (a Model) has parameters"),
    ('{ tensor = "idx"', '{ tensor = "x"', "entry.args[1]: a second argument named 'x'"),
    ('{ scalar = "rows", type = "int32" }', '{ scalar = "rows", type = "int" }',
     "entry.args[4].type: should be one of int32, int64, float32, float64"),
    ('{ scalar = "rows", type = "int32" }', '{ scalar = "n", type = "int32" }', "entry.args[4].value: unknown size 'n'"),
    ('{ scalar = "rows", type = "int32" }', '{ scalar = "half", type = "int32", value = "cols / 3" }',
     "scenarios.timed[0]: entry.args[4].value: evaluates to 42.666666666666664, not a whole number"),
    ('dtype_code = "T" }', 'dtype_code = "T", value = 1 }', "entry.args[6]: either 'value' or 'dtype_code', not both"),
    ('dtype_code = "T" }', 'dtype_code = "U" }', "entry.args[6].dtype_code: should name a dtype variable (T)"),
    ('{ scalar = "dtype", type = "int32"', '{ scalar = "dtype", type = "float32"',
     "entry.args[6].type: a dtype code is a whole number (int32 or int64)"),
    ("[inputs.x]", "[inputs.z]\ndist = \"normal\"\n\n[inputs.x]", "inputs.z: not an input tensor (x, idx)"),
    ('dist = "uniform"', 'dist = "poisson"', "inputs.x.dist: should be one of normal, uniform, integers, spd"),
    ("low = -2\nhigh = 2", "low = -2", "inputs.x: uniform needs low and high"),
    ('dist = "uniform"\nlow = -2\nhigh = 2', 'dist = "normal"\nlow = -2', "inputs.x.low: unknown key (known: dist, mean, std)"),
    ('dist = "uniform"\nlow = -2\nhigh = 2', 'dist = "normal"\nstd = 0', "inputs.x.std: should be above 0"),
    ('dist = "uniform"\nlow = -2\nhigh = 2', 'dist = "spd"', "scenarios.timed[0]: inputs.x: spd needs square matrices"),
    ('[inputs.idx]\ndist = "integers"\nlow = 0\nhigh = "cols"\n', "",
     "inputs.idx: missing: an integer input needs its range"),
    ('low = 0\nhigh = "cols"', 'low = 5\nhigh = 3', "scenarios.timed[0]: inputs.idx: low (5) should be below high (3)"),
    ('low = 0\nhigh = "cols"', 'low = 0\nhigh = "cols / 3"', "scenarios.timed[0]: inputs.idx.high: evaluates to 42.666666666666664"),
    ("[scenarios]", "[scenarios]\ntests = []", "scenarios.tests: unknown key (known: timed, check, quick)"),
    ('timed = [{ rows = 1024, T = "bf16" }, { rows = 4096, cols = 256, T = "fp16" }]', "timed = 3",
     "scenarios.timed: should be a list of tables"),
    ('timed = [{ rows = 1024, T = "bf16" }, { rows = 4096, cols = 256, T = "fp16" }]', "timed = []",
     "scenarios.timed: at least one timed scenario is needed"),
    ('{ rows = 1024, T = "bf16" }', '{ rows = "big", T = "bf16" }', "scenarios.timed[0].rows: a size should be a whole number"),
    ('{ rows = 1024, T = "bf16" }', '{ rows = 1024, T = "fp32" }', "scenarios.timed[0].T: 'fp32' is not one of T's types (bf16, fp16)"),
    ("check = [{ rows = 1 }", "check = [{ rows = 1, colz = 3 }", "scenarios.check[0].colz: size 'colz' is used nowhere"),
    ("check = [{ rows = 1 }", "check = [{ cols = 1 }", "scenarios.check[0]: no value for size 'rows'"),
    ("check = [{ rows = 1 }, { rows = 3, cols = 7 }]", "check = [{ rows = 1 }, { rows = 1, T = \"fp16\" }]",
     "scenarios.check[1]: the same scenario as scenarios.check[0] (fp16-cols128-rows1)"),
    ('quick = ["bf16-cols128-rows1024"]', 'quick = ["nope"]',
     "scenarios.quick[0]: 'nope' is not a timed scenario (timed: bf16-cols128-rows1024, fp16-cols256-rows4096)"),
    ('quick = ["bf16-cols128-rows1024"]', "quick = []", "scenarios.quick: should be a non-empty list of timed scenario ids"),
    ('rule = "reference"\nfactor', 'rule = "loose"\nfactor', "tolerance.rule: should be one of reference, allclose, exact"),
    ('rule = "reference"\nfactor = 2.0', 'rule = "allclose"', "tolerance: allclose needs atol or rtol above 0"),
    ('rule = "reference"\nfactor = 2.0', 'rule = "exact"\nfactor = 2.0', "tolerance: exact takes no factor, atol or rtol"),
    ('rule = "reference"\nfactor = 2.0', 'rule = "reference"\nrtol = 0.1', 'tolerance.rtol: rtol belongs to rule = "allclose"'),
    ("factor = 2.0", "factor = -1.0", "tolerance: factor, atol and rtol should not be negative"),
    ("factor = 2.0", "factor = 2.0\nslack = 1", "tolerance.slack: unknown key (known: rule, factor, atol, rtol, reference_dtype)"),
    ('reference_dtype = "fp32"', 'reference_dtype = "fp16"', 'tolerance.reference_dtype: should be "fp32" or "fp64"'),
    ("[tolerance.lse]", "[tolerance.z]", "tolerance.z: not an output (y, lse)"),
    ('[tolerance.lse]\nrule = "allclose"', '[tolerance.lse]\nrule = "allclose"\nreference_dtype = "fp64"',
     "tolerance.lse.reference_dtype: unknown key (known: rule, factor, atol, rtol)"),
    ('name = "my_op"', 'task = "attention"\nname = "my_op"', "task: a task file names a built-in task or describes its own"),
]


@pytest.mark.parametrize("old, new, message", ERRORS, ids=[m.split(":")[0] + f"-{i}" for i, (_, _, m) in enumerate(ERRORS)])
def test_each_mistake_is_one_line_naming_the_key(kernel: Path, old: str, new: str, message: str) -> None:
    _edit(kernel, old, new)
    with pytest.raises(TaskFileError) as info:
        load_task_file(kernel)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{kernel.with_suffix('.toml')}: "), text
    assert message.format(dir=kernel.parent.resolve()) in text, text


REF_ERRORS = [
    ("def my_op(x, idx, scale, cols, bias=0.0):", "def my_op(x, idx, scale, cols, zz):",
     "reference: ref.py:my_op: parameter 'zz' names no input, scalar or size "
     "(inputs: x, idx; scalars: rows, scale, dtype; sizes: cols, rows)"),
    ("def my_op(x, idx, scale, cols, bias=0.0):", "def my_op(x, y):", "reference: ref.py:my_op: parameter 'y' is an output"),
    ("def my_op(x, idx, scale, cols, bias=0.0):", "def my_op(*tensors):",
     "reference: ref.py:4: my_op: parameters are bound by name, so neither / nor *args"),
    ("def my_op(x, idx, scale, cols, bias=0.0):", "async def my_op(x):", "reference: ref.py:4: my_op is async"),
    ("def my_op(x, idx, scale, cols, bias=0.0):", "def my_op(x idx):", "reference: {dir}/ref.py:4: not valid Python"),
    ("def fast(x, idx, scale):", "def fast(x, q):", "baselines: ref.py:fast: parameter 'q' names no input, scalar or size"),
]


@pytest.mark.parametrize("old, new, message", REF_ERRORS)
def test_a_reference_is_checked_by_reading_it(kernel: Path, old: str, new: str, message: str) -> None:
    py = kernel.parent / "ref.py"
    py.write_text(py.read_text().replace(old, new))
    with pytest.raises(TaskFileError) as info:
        load_task_file(kernel)
    assert message.format(dir=kernel.parent.resolve()) in str(info.value)


def test_an_entry_needs_arguments_and_an_output(kernel: Path) -> None:
    toml = kernel.with_suffix(".toml")
    text = toml.read_text()
    start, end = text.index("args = ["), text.index("]\n\n[inputs.x]") + 2
    toml.write_text(text[:start] + "args = []\n" + text[end:])
    with pytest.raises(TaskFileError, match=r"entry.args: should be a list of arguments in call order"):
        load_task_file(kernel)
    toml.write_text(text.replace('role = "out"', 'role = "in"'))
    with pytest.raises(TaskFileError, match='entry.args: no output: at least one tensor needs role = "out"'):
        load_task_file(kernel)


def test_an_integer_output_is_judged_exactly(kernel: Path) -> None:
    _edit(kernel, '{ tensor = "lse", role = "out", dtype = "fp32"', '{ tensor = "lse", role = "out", dtype = "int64"')
    with pytest.raises(TaskFileError, match='tolerance.lse.rule: an integer or bool output is judged exactly'):
        load_task_file(kernel)
    _edit(kernel, '[tolerance.lse]\nrule = "allclose"\nrtol = 1e-5\natol = 1e-6\n', "")
    assert load_task_file(kernel).spec.tolerance["lse"].rule == "exact"


def test_a_missing_task_key_says_both_ways(tmp_path: Path) -> None:
    (tmp_path / "k.toml").write_text("[build]\nfast_math = false\n")
    with pytest.raises(TaskFileError, match=r"missing 'task': name a built-in task .* or describe your own"):
        load_task_file(tmp_path / "k.cu")


def test_check_only_prints_the_one_line_and_exits_2(kernel: Path) -> None:
    _edit(kernel, 'shape = ["rows", "cols"] },\n  { tensor = "idx"', 'shape = ["rows", "colz"] },\n  { tensor = "idx"')
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(kernel), "--check-only"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"kstui eval: {kernel.with_suffix('.toml')}: entry.args[0].shape[1]: unknown size "
                                   "'colz' (sizes, from [sizes] and the scenario rows: cols, rows)")
    assert proc.stdout == ""


def test_the_parent_never_imports_torch_or_the_reference(kernel: Path) -> None:
    (kernel.parent / "ref.py").write_text(REF + "\nraise SystemExit('the reference was imported')\n")
    code = ("import sys; from pathlib import Path; from harness.runner import EvalOptions, resolve; "
            f"task, tf, sc = resolve(Path({str(kernel)!r}), EvalOptions()); "
            "print(len(sc), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "False"]
