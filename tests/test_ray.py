"""The Ray executor on a small local Ray instance (CPU only; two declared GPU slots for scheduling).

Ray is an optional extra (about 80 MB): without it these tests skip, except the one that checks the
error a user without Ray gets.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from executor_support import ECHO_HARNESS, fake_python, write_kernel, write_spec_kernel

from kstui.executors.factory import make_executor
from kstui.executors.protocol import ExecutorError

REPO = Path(__file__).resolve().parent.parent
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'kstui[ray]')")


def test_missing_ray_is_one_line_with_the_install_command(tmp_path: Path) -> None:
    kernel = write_kernel(tmp_path)
    code = (
        "import asyncio, sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
        "from kstui.executors.factory import make_executor\nfrom kstui.executors.protocol import ExecutorError\n"
        f"ex = make_executor('ray', None, None)\n"
        "try:\n"
        f"    asyncio.run(ex.evaluate({str(kernel)!r}, extra_args=['--check-only']))\n"
        "except ExecutorError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
    assert out == "--gpu ray needs Ray, which is not installed: pip install 'kstui[ray]'"


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    for suffix in (".cu", ".toml"):
        shutil.copy(REPO / "workspace" / f"rmsnorm{suffix}", tmp_path / f"rmsnorm{suffix}")
    return tmp_path / "rmsnorm.cu"


@needs_ray
async def test_check_only_through_the_real_harness(ray_instance: None, kernel: Path) -> None:
    ex = make_executor("ray", None, None)
    try:
        result = await ex.evaluate(kernel, extra_args=["--check-only"])
    finally:
        await ex.close()
    assert result.kernel_sha256 == hashlib.sha256(kernel.read_bytes()).hexdigest()
    assert result.kernel == str(kernel) and result.scenarios == [] and result.error is None
    assert result.device["host"] and result.device["queue_wait_s"] >= 0
    assert {c.name for c in result.checks} >= {"single-file"}


@needs_ray
async def test_shards_run_on_separate_gpus_and_merge(ray_instance: None, tmp_path: Path) -> None:
    from kstui.executors.ray import RayExecutor

    kernel = write_kernel(tmp_path / "k")
    ex = RayExecutor(shards=2, python=str(fake_python(tmp_path / "echo", ECHO_HARNESS)))
    try:
        merged = await ex.evaluate(kernel, scenarios="quick")
        assert ex.parallelism == 1 and ex.describe() == "ray (local) ×2 shards"
    finally:
        await ex.close()
    assert sorted(s.id for s in merged.scenarios) == ["s1", "s2", "s3", "s4"]
    assert merged.passed and merged.geomean_speedup == pytest.approx(1.5)
    assert merged.kernel == str(kernel)
    assert len(merged.device["gpus"]) == 2  # each part recorded where it ran


@needs_ray
async def test_each_shard_asked_for_its_part_on_one_gpu(ray_instance: None, tmp_path: Path) -> None:
    from kstui.executors import ray as ray_executor

    kernel = write_kernel(tmp_path / "k")
    echo = str(fake_python(tmp_path / "echo", ECHO_HARNESS))
    parts = []
    for k in (1, 2):
        ex = ray_executor.RayExecutor(python=echo)
        try:
            parts.append(await ex.evaluate(kernel, scenarios="quick", extra_args=["--shard", f"{k}/2"]))
        finally:
            await ex.close()
    assert [s.id for s in parts[0].scenarios] == ["s1", "s3"]
    assert all(p.device["visible"] in ("0", "1") for p in parts)  # Ray gave each task one GPU


@needs_ray
async def test_a_failing_harness_is_one_line(ray_instance: None, tmp_path: Path) -> None:
    from kstui.executors.ray import RayExecutor

    ex = RayExecutor(python=str(fake_python(tmp_path / "bad", "print('core dumped')\nraise SystemExit(134)\n")))
    try:
        with pytest.raises(ExecutorError) as info:
            await ex.evaluate(write_kernel(tmp_path / "k"), extra_args=["--check-only"])
    finally:
        await ex.close()
    assert "harness on Ray printed no valid EvalResult" in str(info.value) and "\n" not in str(info.value)


def test_scenario_order_is_the_harness_order(tmp_path: Path) -> None:
    from harness.runner import EvalOptions, resolve
    from kstui.executors.ray import scenario_order

    for suffix in (".cu", ".toml"):
        shutil.copy(REPO / "workspace" / f"rmsnorm{suffix}", tmp_path / f"rmsnorm{suffix}")
    kernel = tmp_path / "rmsnorm.cu"
    _, _, listed = resolve(kernel, EvalOptions(selection="quick"))
    assert scenario_order(kernel, "quick", ["--seed", "3"]) == [s.id for s in listed] and len(listed) > 1
    assert scenario_order(write_kernel(tmp_path / "other"), "quick", []) is None  # unknown task: no order


def test_a_node_lays_out_a_spec_task_with_its_judge_files(tmp_path: Path) -> None:
    # The task body alone, as a node runs it: the real harness reads the reference and the baseline one
    # folder up from the layout (a file not sent would be its bad input, "no such file").
    from harness.result import EvalResult
    from kstui.executors.bundle import read_bundle
    from kstui.executors.ray import run_on_node

    bundle = read_bundle(write_spec_kernel(tmp_path / "ws"))
    assert sorted(bundle.files) == ["ops/op.cu", "ops/op.toml", "ops/op_ref.py", "shared/base.py"]
    out = run_on_node(bundle.kernel, bundle.files, ["--check-only", "--json", "-"], sys.executable, 300)
    assert out["rc"] == 0, out["stderr"]
    result = EvalResult.from_json(out["stdout"].decode())
    assert result.error is None and result.build.ok and result.task.startswith("op@")
    with pytest.raises(ValueError, match="outside the work folder"):
        run_on_node(bundle.kernel, {**bundle.files, "../escape.py": b""}, ["--check-only"], sys.executable, 60)


@needs_ray
async def test_a_spec_task_through_ray(ray_instance: None, tmp_path: Path) -> None:
    kernel = write_spec_kernel(tmp_path / "ws")
    ex = make_executor("ray", None, None)
    try:
        result = await ex.evaluate(kernel, extra_args=["--check-only"])
    finally:
        await ex.close()
    assert result.error is None and result.build.ok and result.task.startswith("op@")
    assert result.kernel_sha256 == hashlib.sha256(kernel.read_bytes()).hexdigest()
