"""A spec's Python files are part of the judge but sit in the agent's workspace: they are read by path.

Nothing planted beside them (torch.py, numpy.py, a harness/ package, a __pycache__ .pyc) is ever run,
and the parent reads them with ast only (harness.tasks.pysource).
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.tasks.pysource import SourceError, function_parameters, kernelbench_module
from harness.tasks.spec_modules import load_module

ROOT = Path(__file__).resolve().parents[1]


def test_planted_torch_numpy_and_harness_beside_a_reference_are_not_imported(tmp_path: Path) -> None:
    work = tmp_path / "workspace"
    work.mkdir()
    for name in ("torch.py", "numpy.py"):
        (work / name).write_text("raise SystemExit('planted module imported')\n")
    (work / "harness").mkdir()
    (work / "harness" / "__init__.py").write_text("raise SystemExit('planted harness imported')\n")
    uses_numpy = importlib.util.find_spec("numpy") is not None
    (work / "ref.py").write_text(textwrap.dedent(f"""\
        import torch
        {"import numpy" if uses_numpy else ""}
        import harness.tasks


        def where():
            return torch.__file__{" + '|' + numpy.__file__" if uses_numpy else ""} + "|" + harness.tasks.__file__
        """))
    elsewhere = tmp_path / "cwd"  # the worker's working folder is never the workspace
    elsewhere.mkdir()
    code = (f"from pathlib import Path; from harness.tasks.spec_modules import load_module; "
            f"print(load_module(Path({str(work / 'ref.py')!r})).where())")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=elsewhere, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for path in proc.stdout.strip().split("|"):
        assert not path.startswith(str(work)), path


def test_a_planted_pyc_is_never_run_in_place_of_the_source(tmp_path: Path) -> None:
    good, evil = tmp_path / "ref.py", tmp_path / "evil_src.py"
    good.write_text("def answer():\n    return 'good'\n")
    evil.write_text("def answer():\n    return 'evil'\n")  # the same size
    st = evil.stat()
    os.utime(good, ns=(st.st_atime_ns, st.st_mtime_ns))
    py_compile.compile(str(evil), cfile=importlib.util.cache_from_source(str(good)), doraise=True)
    # An import would take the bytecode: its recorded size and time match the source's.
    spec = importlib.util.spec_from_file_location("probe_import", good)
    assert spec and spec.loader
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.answer() == "evil"
    assert load_module(good).answer() == "good"


def test_loading_writes_no_bytecode_beside_the_file(tmp_path: Path) -> None:
    ref = tmp_path / "clean_ref.py"
    ref.write_text("VALUE = 3\n")
    assert load_module(ref).VALUE == 3
    assert not (tmp_path / "__pycache__").exists()


def test_a_module_is_loaded_once_per_path(tmp_path: Path) -> None:
    ref = tmp_path / "once.py"
    ref.write_text("import itertools\nCOUNT = next(itertools.count())\n")
    assert load_module(ref) is load_module(ref)


def test_function_parameters_by_name_with_defaults(tmp_path: Path) -> None:
    ref = tmp_path / "f.py"
    ref.write_text("def f(x, w, eps=1e-6, *, scale, bias=None):\n    pass\n")
    params = [(p.name, p.has_default) for p in function_parameters(ref, "f")]
    assert params == [("x", False), ("w", False), ("eps", True), ("scale", False), ("bias", True)]


def test_kernelbench_module_sizes_are_its_whole_number_constants(tmp_path: Path) -> None:
    path = tmp_path / "kb.py"
    path.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return x

        batch_size = 16
        N = 2048 * 2
        half = N // 2
        kernel_size = (3, 5)
        eps = 1e-5
        dim = 7
        dim = torch.rand(1)
        shape = some_call()

        def get_inputs():
            return [torch.rand(batch_size, N)]

        def get_init_inputs():
            return []
        """))
    assert kernelbench_module(path).sizes == {"batch_size": 16, "N": 4096, "half": 2048}


@pytest.mark.parametrize("source, missing", [
    ("def get_inputs():\n    return []\n", "no class Model"),
    ("class Model:\n    pass\n", "no def get_inputs()"),
    ("x = 1\n", "no class Model and no def get_inputs()"),
])
def test_a_file_without_model_or_get_inputs_is_not_kernelbench(tmp_path: Path, source: str, missing: str) -> None:
    path = tmp_path / "kb.py"
    path.write_text(source)
    with pytest.raises(SourceError, match=missing):
        kernelbench_module(path)


def test_the_published_kernelbench_files_parse() -> None:
    sizes = {p.name: kernelbench_module(p).sizes for p in (ROOT / "examples" / "kernelbench").glob("*/*.py")}
    assert sizes["1_Square_matrix_multiplication_.py"] == {"N": 4096}
    assert sizes["19_ReLU.py"] == {"batch_size": 4096, "dim": 393216}
    assert sizes["40_LayerNorm.py"] == {"batch_size": 16, "features": 64, "dim1": 256, "dim2": 256}
    assert sizes["82_conv_depthwise_2D_square_input_square_kernel.py"] == {
        "batch_size": 16, "in_channels": 64, "kernel_size": 3, "width": 512, "height": 512, "stride": 1, "padding": 0}
