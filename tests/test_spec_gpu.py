"""Spec tasks on a real GPU: the KernelBench examples and `kstui new`'s kernel pass every scenario, every
counterpart of the attention wrong-kernel suite is rejected for its reason, and a prepared worker
(`harness serve`) judges a spec task as strictly as a fresh one.

Through the real CLI, one fresh process per evaluation, as tests/test_gpu_harness.py does for attention.
The wrong kernels are judged on the correctness grid and one light timed scenario (their example's
second), against the eager baseline only: enough for the timing-side cheats to show.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kernels.spec_suite import EXAMPLES, SPEC_MUTATIONS, SPEC_STANDALONE, SpecCase, example_files, spec_cases
from kernels.suite import load_mutations, read_standalone
from test_gpu_harness import _observed, harness_eval

from harness.result import EvalResult
from harness.taskfile import load_task_file
from harness.tasks import get_task

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_KERNELS = sorted(EXAMPLES.glob("*/*.cu"))
CASES = [m.name for m in load_mutations(SPEC_MUTATIONS)] + [read_standalone(p).name for p in sorted(SPEC_STANDALONE.glob("*.cu"))]


def light_scenario(kernel: Path) -> str:
    """The example's second timed scenario: smaller than a KernelBench file's own shapes."""
    tf = load_task_file(kernel)
    return get_task(tf.task, tf.options).timed_grid()[1].id


@pytest.mark.parametrize("kernel", EXAMPLE_KERNELS, ids=lambda k: k.stem)
def test_example_passes_the_full_evaluation(kernel: Path) -> None:
    rc, result, err = harness_eval(kernel, timeout=1500)
    assert result is not None, err[-3000:]
    failed = [(s.id, s.verdict, s.detail) for s in result.scenarios if not s.correct]
    assert rc == 0 and result.passed, (failed[:5], [c for c in result.checks if not c.ok], result.error)
    for s in result.timed:
        assert s.speedup and s.speedup > 0 and s.baseline, s
        assert isinstance(s.baselines.get("eager"), float), s.baselines  # the reference itself, timed
    assert result.build.spills == 0


def test_the_kernel_kstui_new_writes_passes_the_full_evaluation(tmp_path: Path) -> None:
    from kstui.new_task import main

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["my_op"]) == 0
    finally:
        os.chdir(cwd)
    rc, result, err = harness_eval(tmp_path / "my_op.cu", timeout=1500)
    assert result is not None, err[-3000:]
    failed = [(s.id, s.verdict, s.detail) for s in result.scenarios if not s.correct]
    assert rc == 0 and result.passed, (failed[:5], result.error)
    assert {s.baseline for s in result.timed} <= {"eager", "compiled"}


@pytest.fixture(scope="module")
def spec_suite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SpecCase]:
    cases = spec_cases(tmp_path_factory.mktemp("spec-wrong"))
    from harness.build import BuildInputError, BuildOptions, build

    def one(case: SpecCase) -> None:
        tf = load_task_file(case.kernel.path)
        assert tf.spec is not None
        try:
            build(case.kernel.path, [tf.spec.symbol],
                  BuildOptions(fast_math=tf.fast_math, extra_flags=tf.build_flags, timeout_s=tf.build_timeout_s))
        except BuildInputError:
            pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, cases))
    # Each example once on the scenarios its cases are judged on: it passes there, and the references'
    # first calls are behind us.
    for example in sorted({c.example for c in cases}):
        kernel, _, _ = example_files(example)
        rc, result, err = harness_eval(kernel, "--scenarios", light_scenario(kernel), "--baseline", "eager")
        assert rc == 0 and result is not None and result.passed, err[-3000:]
    return {c.kernel.name: c for c in cases}


@pytest.mark.parametrize("name", CASES)
def test_spec_wrong_kernel_is_rejected_with_the_right_verdict(name: str, spec_suite: dict[str, SpecCase]) -> None:
    case = spec_suite[name]
    kernel, _, _ = example_files(case.example)
    rc, result, err = harness_eval(case.kernel.path, "--scenarios", light_scenario(kernel), "--baseline", "eager",
                                   "--scenario-timeout", "30")
    assert rc == 1, (rc, err[-2000:])
    assert result is not None and not result.passed
    observed = _observed(result)
    assert observed & set(case.kernel.expect), (f"{case.kernel.why} (counterpart of {', '.join(case.counterparts)}): "
                                                f"expected one of {case.kernel.expect}, saw {sorted(observed)}")


def test_a_prepared_worker_judges_a_spec_task_as_strictly(spec_suite: dict[str, SpecCase]) -> None:
    """Through `harness serve`: the second request's worker was prepared (the spec in its preparation) while
    the first was judged; the cheat is caught, and the example passes after it."""
    cheat = spec_suite["spec-cached-by-pointer"]
    example, task_file, _ = example_files("softmax")
    # The example beside the cheat: the same task (a spec task is its file's folder and content).
    kernel = cheat.kernel.path.with_name("softmax.cu")
    shutil.copy(example, kernel)
    shutil.copy(task_file, kernel.with_suffix(".toml"))
    light = light_scenario(kernel)
    server = subprocess.Popen([sys.executable, "-m", "harness", "serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)

    def ask(rid: int, path: Path, *args: str) -> tuple[int, EvalResult]:
        assert server.stdin and server.stdout
        server.stdin.write(json.dumps({"id": rid, "argv": [str(path), "--json", "-", *args]}) + "\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        assert reply["id"] == rid and reply["stdout"], reply["stderr"][-2000:]
        return reply["rc"], EvalResult.from_json(reply["stdout"])

    try:
        rc, first = ask(1, kernel, "--scenarios", light, "--baseline", "eager")
        assert rc == 0 and first.passed
        time.sleep(15)  # the next worker starts and warms up
        rc, caught = ask(2, cheat.kernel.path, "--scenarios", light, "--baseline", "eager", "--scenario-timeout", "30")
        assert rc == 1 and _observed(caught) & set(cheat.kernel.expect), sorted(_observed(caught))
        assert caught.profile["worker_wait_s"] < 1.0, caught.profile
        time.sleep(15)
        rc, again = ask(3, kernel, "--scenarios", light, "--baseline", "eager")
        assert rc == 0 and again.passed and again.profile["worker_wait_s"] < 1.0, again.profile
    finally:
        assert server.stdin
        server.stdin.close()
        server.wait(timeout=60)
