"""Local and command-template executors, the device pool, and make_executor."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
from executor_support import ECHO_HARNESS, executable, fake_harness, fake_python, write_kernel, write_spec_kernel

from harness.result import EvalResult
from kstui.executors.devices import DevicePool, parse_devices
from kstui.executors.factory import make_executor
from kstui.executors.local import LocalExecutor
from kstui.executors.protocol import Executor, ExecutorError
from kstui.executors.template import TemplateExecutor


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    return write_kernel(tmp_path / "work dir's")  # a space and a quote: quoting must hold


@pytest.fixture
def echo_python(tmp_path: Path) -> Path:
    return fake_python(tmp_path / "echo", ECHO_HARNESS)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- local ---------------------------------------------------------------------------------------


async def test_local_runs_harness_and_validates(kernel: Path, echo_python: Path) -> None:
    ex = LocalExecutor(python=str(echo_python), harness_dir=fake_harness(echo_python))
    assert isinstance(ex, Executor) and ex.parallelism == 1 and ex.describe() == "local"
    result = await ex.evaluate(kernel, scenarios="quick", extra_args=["--seed", "7"])
    assert isinstance(result, EvalResult)
    assert result.kernel_sha256 == _sha(kernel)
    assert result.device["argv"] == [str(kernel), "--scenarios", "quick", "--json", "-", "--seed", "7"]
    assert result.device["host"] and result.device["queue_wait_s"] >= 0
    assert result.passed and result.correct_count == 4


async def test_nonzero_exit_with_valid_result_is_a_rejection(kernel: Path, tmp_path: Path) -> None:
    main = (
        ECHO_HARNESS.replace('"verdict": "ok"', '"verdict": "wrong"')
        .replace('"correct": True', '"correct": False')
        .replace('"all_correct": bool(scen), "geomean_speedup": 1.5 if scen else None', '"all_correct": False')
    )
    py = fake_python(tmp_path / "rej", main + "\nsys.exit(1)\n")
    result = await LocalExecutor(python=str(py), harness_dir=fake_harness(py)).evaluate(kernel)
    assert not result.passed and result.correct_count == 0


@pytest.mark.parametrize(
    ("main", "expected"),
    [
        ("print('Segmentation fault (core dumped)')\nraise SystemExit(139)", "no valid EvalResult"),
        ("import sys; print('harness: unknown scenario id zz', file=sys.stderr); sys.exit(2)", "unknown scenario id zz"),
        ("import os; os.kill(os.getpid(), 9)", "killed by signal 9"),
        ("print('{\"schema\": 1}')", "missing field"),
        (
            "import json; print(json.dumps({'schema': 7, 'task': 't', 'kernel_sha256': 'x', 'build': {'ok': True},"
            " 'checks': [], 'scenarios': [], 'all_correct': False}))",
            "schema 7 (this kstui reads schema 1)",
        ),
    ],
    ids=["garbage", "bad-input", "signal", "partial-json", "other-schema"],
)
async def test_failures_are_one_line_errors(kernel: Path, tmp_path: Path, main: str, expected: str) -> None:
    py = fake_python(tmp_path / "bad", main)
    with pytest.raises(ExecutorError) as info:
        await LocalExecutor(python=str(py), harness_dir=fake_harness(py)).evaluate(kernel)
    message = str(info.value)
    assert expected in message and "\n" not in message


async def test_a_wrapper_line_before_the_json_is_tolerated(kernel: Path, tmp_path: Path) -> None:
    py = fake_python(tmp_path / "chatty", "print('srun: job 4242 queued and waiting for resources')\n" + ECHO_HARNESS)
    result = await LocalExecutor(python=str(py), harness_dir=fake_harness(py)).evaluate(kernel)
    assert result.kernel_sha256 == _sha(kernel)


async def test_huge_garbage_output_is_bounded_and_rejected(kernel: Path, tmp_path: Path) -> None:
    py = fake_python(tmp_path / "flood", "import sys\nsys.stdout.write('x' * 80_000_000)\n")
    with pytest.raises(ExecutorError, match="no valid EvalResult"):
        await LocalExecutor(python=str(py), harness_dir=fake_harness(py)).evaluate(kernel)


def _alive(pid: int) -> bool:
    """Whether pid still runs, allowing a second for a SIGKILL to land (a zombie counts as dead)."""
    deadline = time.monotonic() + 1.0
    while True:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (ProcessLookupError, FileNotFoundError):
            return False
        if stat.rsplit(") ", 1)[-1].startswith("Z"):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.02)


def _sleeper(pids: Path) -> str:
    # The harness and a worker child it starts (as the real runner does) both record their pids.
    return (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(60)\n"
    )


async def _wait_for(path: Path) -> list[int]:
    for _ in range(200):
        if path.exists() and path.read_text():
            return [int(p) for p in path.read_text().split()]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never written")


async def test_timeout_kills_the_whole_process_group(kernel: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    py = fake_python(tmp_path / "slow", _sleeper(pids))
    start = time.monotonic()
    with pytest.raises(ExecutorError, match=r"timed out after 3 s"):
        await LocalExecutor(python=str(py), harness_dir=fake_harness(py), timeout_s=3).evaluate(kernel)
    assert time.monotonic() - start < 8
    for pid in await _wait_for(pids):
        assert not _alive(pid)


async def test_cancelling_an_evaluation_kills_it(kernel: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    py = fake_python(tmp_path / "slow", _sleeper(pids))
    task = asyncio.create_task(LocalExecutor(python=str(py), harness_dir=fake_harness(py)).evaluate(kernel))
    running = await _wait_for(pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for pid in running:
        assert not _alive(pid)


async def test_gathered_evaluations_split_the_gpus(kernel: Path, echo_python: Path) -> None:
    ex = LocalExecutor(python=str(echo_python), harness_dir=fake_harness(echo_python), devices=[0, 1])
    assert ex.parallelism == 2 and ex.describe() == "local GPUs 0,1"
    alone = await ex.evaluate(kernel)
    assert alone.device["argv"][-2:] == ["--devices", "0,1"]
    a, b = await asyncio.gather(ex.evaluate(kernel), ex.evaluate(kernel))
    assert {a.device["argv"][-1], b.device["argv"][-1]} == {"0", "1"}


# --- device pool ---------------------------------------------------------------------------------


async def test_pool_waits_when_every_gpu_is_taken_and_survives_cancellation() -> None:
    pool = DevicePool([0, 1, 2], split=True)
    order: list[str] = []

    async def use(tag: str, hold: float) -> list[int]:
        async with pool.lease() as got:
            order.append(f"{tag}+")
            await asyncio.sleep(hold)
            order.append(f"{tag}-")
            return got

    first, second = await asyncio.gather(use("a", 0.05), use("b", 0.05))
    assert sorted(first + second) == [0, 1, 2] and not set(first) & set(second)

    holder = asyncio.create_task(use("c", 0.2))
    await asyncio.sleep(0.01)
    waiter = asyncio.create_task(use("d", 0))
    cancelled = asyncio.create_task(use("e", 0))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    assert await holder == [0, 1, 2]
    assert await waiter == [0, 1, 2]  # it waited for c, then had every GPU: e's cancellation leaked none
    assert order.index("d+") > order.index("c-")


async def test_anonymous_slots_give_one_each() -> None:
    pool = DevicePool([None, None], split=False)
    inside = 0
    peak = 0

    async def use() -> None:
        nonlocal inside, peak
        async with pool.lease() as got:
            assert got == []
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.02)
            inside -= 1

    await asyncio.gather(*(use() for _ in range(5)))
    assert peak == 2


# --- command template ----------------------------------------------------------------------------


def test_template_quotes_every_placeholder(kernel: Path) -> None:
    ex = TemplateExecutor("srun --gres=gpu:1 kstui eval {file} --scenarios {scenarios} --json - {args}")
    cmd = ex.command(kernel, "a;rm -rf x", ["--scenario", "b=1 c=$(x)"])
    words = shlex.split(cmd)
    assert words[4] == str(kernel.resolve())
    assert words[6] == "a;rm -rf x"
    assert words[-2:] == ["--scenario", "b=1 c=$(x)"]
    docker = TemplateExecutor("docker run --rm --gpus all -v {dir}:/w -w /w img kstui eval {name} --json -")
    words = shlex.split(docker.command(kernel, "quick", []))
    assert f"{kernel.parent}:/w" in words
    assert words[words.index("eval") + 1] == kernel.name
    assert words[-2:] == ["--scenarios", "quick"]


async def test_template_runs_the_command_and_parses(kernel: Path, echo_python: Path) -> None:
    ex = TemplateExecutor(f"{shlex.quote(str(echo_python))} -m harness eval {{file}} --json - {{args}}")
    result = await ex.evaluate(kernel, scenarios="quick", extra_args=["--check-only"])
    assert result.kernel_sha256 == _sha(kernel)
    assert result.device["argv"] == [str(kernel), "--json", "-", "--check-only", "--scenarios", "quick"]
    assert result.device["queue_wait_s"] >= 0


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("no-such-command-kstui {file}", "no-such-command-kstui: not found"),
        ("echo hello {file}", "no valid EvalResult"),
        ("exit 3 {file}", "printed no result (exit status 3)"),
    ],
)
async def test_failing_template_is_an_error(kernel: Path, template: str, expected: str) -> None:
    with pytest.raises(ExecutorError) as info:
        await TemplateExecutor(template).evaluate(kernel)
    assert expected in str(info.value) and "\n" not in str(info.value)


async def test_template_timeout_kills_the_command(kernel: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = executable(tmp_path / "slow.sh", f"#!/bin/sh\nsleep 60 &\necho $$ $! > {shlex.quote(str(pids))}\nwait\n")
    with pytest.raises(ExecutorError, match="--eval-cmd timed out"):
        await TemplateExecutor(f"{script} {{file}}", timeout_s=1).evaluate(kernel)
    for pid in await _wait_for(pids):
        assert not _alive(pid)


def test_template_validation() -> None:
    with pytest.raises(ExecutorError, match=r"\{file\}"):
        TemplateExecutor("ssh gpu1 kstui eval --json -")
    with pytest.raises(ExecutorError, match="not a valid shell command"):
        TemplateExecutor("ssh gpu1 'kstui eval {file}")


# --- make_executor -------------------------------------------------------------------------------


def test_make_executor_choices() -> None:
    assert isinstance(make_executor(None, None, None), LocalExecutor)
    assert make_executor("local", None, "0,2").parallelism == 2
    assert isinstance(make_executor(None, "srun kstui eval {file} --json -", None), TemplateExecutor)
    assert parse_devices("3, 1") == [3, 1] and parse_devices("") is None


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"gpu": "ssh://h", "eval_cmd": "x {file}", "devices": None}, "exclude each other"),
        ({"gpu": None, "eval_cmd": None, "devices": "0,a"}, "GPU indices"),
        ({"gpu": None, "eval_cmd": None, "devices": "1,1"}, "distinct"),
        ({"gpu": "gpu7", "eval_cmd": None, "devices": None}, "not understood"),
        ({"gpu": None, "eval_cmd": None, "devices": None, "shards": 2}, "--shards needs --gpu ray"),
        ({"gpu": None, "eval_cmd": None, "devices": None, "shards": 0}, "at least 1"),
    ],
)
def test_make_executor_rejects_bad_flags(kwargs: dict, expected: str) -> None:
    with pytest.raises(ExecutorError, match=expected):
        make_executor(**kwargs)


def test_no_textual_or_torch_import() -> None:
    import subprocess

    code = "import sys, kstui.executors.factory; print(any(m.split('.')[0] in ('torch', 'textual', 'ray') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


async def test_a_template_that_copies_root_takes_every_judge_file_along(tmp_path: Path) -> None:
    # As a template that ships files to another machine would: {root} copied elsewhere, the kernel judged
    # there by {relfile} with the real harness, which reads the reference and the baseline one folder up.
    kernel = write_spec_kernel(tmp_path / "ws")
    far = tmp_path / "far"
    ex = TemplateExecutor(f"cp -r {{root}} {shlex.quote(str(far))} && cd {shlex.quote(str(far))} && "
                          f"{shlex.quote(sys.executable)} -m harness eval {{relfile}} --json - {{args}}")
    assert shlex.split(ex.command(kernel, "quick", []))[2:3] == [str(tmp_path / "ws")]
    result = await ex.evaluate(kernel, extra_args=["--check-only"])
    assert result.error is None and result.build.ok and result.task.startswith("op@")
    assert (far / "shared" / "base.py").read_bytes() == (tmp_path / "ws" / "shared" / "base.py").read_bytes()


async def test_the_local_harness_is_told_the_workspace(tmp_path: Path) -> None:
    # The session evaluates a copy outside the workspace, so the harness is told which folder to hide:
    # one holding the harness itself is the harness's bad input, which shows the flag went through.
    kernel = write_spec_kernel(tmp_path / "ws")
    ok = await LocalExecutor(workspace=tmp_path / "ws").evaluate(kernel, extra_args=["--check-only"])
    assert ok.error is None and ok.build.ok
    repo = Path(__file__).resolve().parents[1]
    with pytest.raises(ExecutorError, match="inside"):
        await LocalExecutor(workspace=repo).evaluate(kernel, extra_args=["--check-only"])


async def test_local_harness_gets_no_secret_and_is_told_the_workspace(kernel: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-local-0123456789abcdef")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_0123456789abcdef")
    main = ECHO_HARNESS.replace(
        '"visible": os.environ.get("CUDA_VISIBLE_DEVICES")',
        '"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "secrets": sorted(k for k in os.environ '
        'if "KEY" in k or "TOKEN" in k), "isolated": sys.flags.isolated',
    )
    py = fake_python(tmp_path / "env", main)
    ex = LocalExecutor(python=str(py), harness_dir=fake_harness(py), workspace=kernel.parent)
    try:
        result = await ex.evaluate(kernel)
    finally:
        await ex.close()
    assert result.device["secrets"] == [] and result.device["isolated"] == 1
    assert result.device["argv"][-2:] == ["--workspace", str(kernel.parent)]


async def test_the_users_transport_gets_their_environment_without_the_model_key(kernel: Path, echo_python: Path,
                                                                                 monkeypatch) -> None:
    # --eval-cmd (and ssh) are the user's own transports: their credentials stay, kstui's model key goes.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-transport-0123456789")
    monkeypatch.setenv("KUBECONFIG", "/home/u/.kube/config")
    ex = TemplateExecutor(f"{shlex.quote(str(echo_python))} -m harness eval {{file}} --json - {{args}} "
                          f"--env-seen \"${{ANTHROPIC_API_KEY:-none}} ${{KUBECONFIG:-none}}\"")
    result = await ex.evaluate(kernel, extra_args=["--check-only"])
    assert "none /home/u/.kube/config" in result.device["argv"]
