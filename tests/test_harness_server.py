"""The warm local executor: one `harness serve`, each next worker prepared before it is asked for, and
nothing left running after a timeout, a cancellation or close().

The server and the harness parent are real; the workers are the stand-in of fake_worker.py, so this
runs without a GPU (nvcc builds the rmsnorm kernel as in a real evaluation).
"""

import asyncio
import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from fake_worker import fake_python  # noqa: F401 (a fixture)
from nvcc_support import needs_nvcc

from harness.serve import serve
from kstui.executors.local import LocalExecutor
from kstui.executors.protocol import ExecutorError

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and _alive(int(entry.name)):
                out.add(int(entry.name))
    return out


async def _until(predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        await asyncio.sleep(0.05)


@pytest.fixture
def setup(tmp_path, monkeypatch, fake_python):  # noqa: F811
    kernel = tmp_path / "rmsnorm.cu"
    shutil.copy(ROOT / "workspace" / "rmsnorm.cu", kernel)
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", kernel.with_suffix(".toml"))
    log = tmp_path / "workers.log"
    Path(f"{log}.mode").write_text("none")
    monkeypatch.setenv("FAKE_WORKER_LOG", str(log))
    monkeypatch.setenv("KSTUI_CACHE_DIR", str(tmp_path / "cache"))
    return kernel, ["--worker-python", fake_python], log


def _pids(log: Path) -> list[int]:
    return [int(x) for x in log.read_text().split()] if log.exists() else []


@needs_nvcc
async def test_every_evaluation_after_the_first_is_judged_by_a_worker_prepared_before_it(setup):
    kernel, args, _ = setup
    ex = LocalExecutor(warm=True)
    try:
        first = await ex.evaluate(kernel, scenarios="quick", extra_args=args)
        server = ex._server._proc.pid
        for _ in range(2):
            await _until(lambda: len(_children(server)) == 1)  # the next worker, prepared and waiting
            (prepared,) = _children(server)
            result = await ex.evaluate(kernel, scenarios="quick", extra_args=args)
            assert result.passed and result.device["pid"] == prepared and ex._server._proc.pid == server
            assert not _alive(prepared)  # one evaluation per process
        assert first.passed and first.device["pid"] != prepared
    finally:
        await ex.close()
    await _until(lambda: not _alive(server) and not _children(server))


@needs_nvcc
async def test_close_ends_the_server_and_its_prepared_worker(setup):
    kernel, args, _ = setup
    ex = LocalExecutor(warm=True)
    await ex.evaluate(kernel, scenarios="quick", extra_args=args)
    server = ex._server._proc.pid
    await _until(lambda: len(_children(server)) == 1)
    (prepared,) = _children(server)
    await ex.close()
    await _until(lambda: not _alive(server) and not _alive(prepared))


@needs_nvcc
async def test_a_timeout_kills_the_server_and_the_hung_worker_and_the_next_request_starts_afresh(setup):
    kernel, args, log = setup
    ex = LocalExecutor(warm=True)
    try:
        # A first evaluation builds the kernel and starts the server, so the short timeout below is spent
        # on the hung worker alone and not on a cold nvcc build, whose length varies with the machine.
        assert (await ex.evaluate(kernel, scenarios="quick", extra_args=args)).passed
        before = len(_pids(log))
        Path(f"{log}.mode").write_text("hang")
        ex.timeout_s = 4.0
        with pytest.raises(ExecutorError, match="timed out after 4 s"):
            await ex.evaluate(kernel, scenarios="quick", extra_args=args)
        (hung,) = _pids(log)[before:]
        await _until(lambda: not _alive(hung), timeout=5.0)  # orphaned, it ends itself
        Path(f"{log}.mode").write_text("none")
        ex.timeout_s = 120.0
        result = await ex.evaluate(kernel, scenarios="quick", extra_args=args)
        assert result.passed and result.device["pid"] not in _pids(log)[: before + 1]
    finally:
        await ex.close()


@needs_nvcc
async def test_a_cancelled_evaluation_leaves_nothing_running(setup):
    kernel, args, log = setup
    Path(f"{log}.mode").write_text("hang")
    ex = LocalExecutor(warm=True)
    task = asyncio.ensure_future(ex.evaluate(kernel, scenarios="quick", extra_args=args))
    await _until(lambda: len(_pids(log)) == 1, timeout=60.0)
    server = ex._server._proc.pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (hung,) = _pids(log)
    await _until(lambda: not _alive(server) and not _alive(hung), timeout=5.0)
    await ex.close()


async def test_a_server_that_cannot_start_is_one_line(tmp_path):
    ex = LocalExecutor(python=str(tmp_path / "no-such-python"), warm=True)
    with pytest.raises(ExecutorError, match="cannot start"):
        await ex.evaluate(tmp_path / "k.cu")


def _serve(*lines: str) -> list[dict]:
    out = io.StringIO()
    assert serve(io.StringIO("".join(line + "\n" for line in lines)), out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_serve_answers_bad_requests_with_a_reason_and_goes_on(tmp_path):
    replies = _serve("not json", json.dumps({"id": 7, "argv": "x"}),
                     json.dumps({"id": 8, "argv": ["k.cu", "--no-such-flag"]}),
                     json.dumps({"id": 9, "argv": [str(tmp_path / "missing.cu"), "--json", "-"]}))
    by_id = {r["id"]: r for r in replies}
    assert by_id[None]["rc"] == 2 and "a request is" in by_id[None]["stderr"]
    assert by_id[7]["rc"] == 2 and "a request is" in by_id[7]["stderr"]
    assert by_id[8]["rc"] == 2 and "unrecognized arguments: --no-such-flag" in by_id[8]["stderr"]
    assert by_id[9]["rc"] == 2 and "missing.cu: no such file" in by_id[9]["stderr"]
    assert all(r["stdout"] == "" for r in replies)
