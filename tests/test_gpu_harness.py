"""The harness on a real GPU: the starting kernels pass everything, every deliberately wrong kernel is
rejected with the right verdict, and the harness stays healthy after crashes and hangs.

Runs through the real CLI (`python -m harness eval … --json -`), one fresh process per evaluation, and
through `python -m harness serve`, where each worker is prepared before the kernel arrives.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kernels.suite import STANDALONE, load_mutations, read_standalone, wrong_kernels

from harness.result import EvalResult

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = ROOT / "workspace"
# Two timed scenarios (a long causal prefill and a decode) beside the correctness grid, which always runs:
# enough for the timing-side cheats (hidden work, caching by pointer) to show.
WRONG_KERNEL_SCENARIOS = "bf16-d128-b8-h16x16-s2048x2048-causal,bf16-d128-b32-h32x8-s1x8192"


def harness_eval(kernel: Path, *args: str, timeout: float = 900) -> tuple[int, EvalResult | None, str]:
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(kernel), "--json", "-", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    result = EvalResult.from_json(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, result, proc.stderr


@pytest.mark.parametrize("kernel", ["flash_fwd.cu", "rmsnorm.cu"])
def test_starting_kernel_passes_the_full_evaluation(kernel):
    rc, result, err = harness_eval(WORKSPACE / kernel)
    assert result is not None, err
    failed = [(s.id, s.verdict, s.detail) for s in result.scenarios if not s.correct]
    assert rc == 0 and result.passed, (failed[:5], [c for c in result.checks if not c.ok], result.error)
    assert all(s.speedup and s.speedup > 0 for s in result.timed)
    assert result.geomean_speedup is not None and result.build.spills == 0


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    dst = tmp_path_factory.mktemp("wrong")
    cases = wrong_kernels(dst)
    for case in cases:
        shutil.copy(WORKSPACE / "flash_fwd.toml", case.path.with_suffix(".toml"))
    _build_all([c.path for c in cases])
    return {c.name: c for c in cases}


def _build_all(kernels: list[Path]) -> None:
    """The suite's builds at once (nvcc runs on the CPUs): each evaluation then finds its kernel in the
    build cache, with the flags its task file gives, instead of compiling while the GPU waits. A kernel
    that fails to build fails again in its evaluation, which is what its test judges."""
    from harness.build import BuildInputError, BuildOptions, build
    from harness.taskfile import load_task_file

    def one(kernel: Path) -> None:
        tf = load_task_file(kernel)
        try:
            build(kernel, ["kstui_attention_fwd"],
                  BuildOptions(fast_math=tf.fast_math, extra_flags=tf.build_flags, timeout_s=tf.build_timeout_s))
        except BuildInputError:
            pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, kernels))


def _observed(result: EvalResult) -> set[str]:
    seen = {f"verdict:{s.verdict}" for s in result.scenarios if not s.correct}
    seen |= {f"check:{c.name}" for c in result.checks if not c.ok}
    if not result.build.ok:
        seen.add("build")
    return seen


CASES = [m.name for m in load_mutations()] + [read_standalone(p).name for p in sorted(STANDALONE.glob("*.cu"))]


# Verdicts the timing pass gives (a kernel that passed every correctness check may still earn them there).
TIMING_VERDICTS = {"too-fast", "hidden-work", "stale-result"}


@pytest.mark.parametrize("name", CASES)
def test_wrong_kernel_is_rejected_with_the_right_verdict(name, suite_dir):
    case = suite_dir[name]
    rc, result, err = harness_eval(case.path, "--scenarios", WRONG_KERNEL_SCENARIOS, "--scenario-timeout", "20")
    assert rc == 1, (rc, err[-2000:])
    assert result is not None and not result.passed
    observed = _observed(result)
    assert observed & set(case.expect), f"{case.why}: expected one of {case.expect}, saw {sorted(observed)}"
    failed = [s for s in result.scenarios if not s.correct and s.verdict != "skipped"]
    if any(s.verdict not in TIMING_VERDICTS for s in failed):  # wrong before any timing: never timed
        assert all(s.time_us is None for s in result.scenarios), [s.id for s in result.scenarios if s.time_us]


def test_a_hang_is_seen_from_its_expected_time_and_the_rest_still_checked(suite_dir):
    """No --scenario-timeout: the task's 60 s per scenario would make each hang cost a minute."""
    from harness.part import MAX_FAULTS

    rc, result, err = harness_eval(suite_dir["infinite-loop"].path, "--scenarios", "quick")
    assert rc == 1 and result is not None, err[-2000:]
    hung = [s for s in result.scenarios if s.verdict == "timeout"]
    assert 1 <= len(hung) <= MAX_FAULTS and all("did not return within" in s.detail for s in hung)
    assert result.seconds < 45, result.profile  # two hangs of a few seconds and one fresh worker


def test_harness_is_healthy_after_the_suite():
    rc, result, err = harness_eval(WORKSPACE / "flash_fwd.cu", "--scenarios", "quick")
    assert rc == 0 and result is not None and result.passed, err[-2000:]


def test_a_prepared_worker_judges_as_strictly_as_a_fresh_one(suite_dir):
    """Through `harness serve`: the worker of each request after the first was started and warmed up
    beforehand; a cheat is still caught and the starting kernel still passes after it."""
    server = subprocess.Popen([sys.executable, "-m", "harness", "serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)

    def ask(rid: int, kernel: Path, *args: str) -> tuple[int, EvalResult]:
        assert server.stdin and server.stdout
        server.stdin.write(json.dumps({"id": rid, "argv": [str(kernel), "--json", "-", *args]}) + "\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        assert reply["id"] == rid and reply["stdout"], reply["stderr"][-2000:]
        return reply["rc"], EvalResult.from_json(reply["stdout"])

    try:
        rc, first = ask(1, WORKSPACE / "flash_fwd.cu", "--scenarios", "quick")
        assert rc == 0 and first.passed
        time.sleep(15)  # the agent's turn: the next worker starts and warms up
        cheat = suite_dir["cached-by-pointer"]
        rc, caught = ask(2, cheat.path, "--scenarios", WRONG_KERNEL_SCENARIOS, "--scenario-timeout", "20")
        assert rc == 1 and _observed(caught) & set(cheat.expect), sorted(_observed(caught))
        assert caught.profile["worker_wait_s"] < 1.0, caught.profile
        time.sleep(15)
        rc, again = ask(3, WORKSPACE / "flash_fwd.cu", "--scenarios", "quick")
        assert rc == 0 and again.passed and again.profile["worker_wait_s"] < 1.0, again.profile
    finally:
        assert server.stdin
        server.stdin.close()
        server.wait(timeout=60)
