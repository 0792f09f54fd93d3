"""The SSH executor against a real OpenSSH server on loopback (tests/sshd_fixture.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest
from executor_support import ECHO_HARNESS, executable, fake_python, write_kernel, write_spec_kernel
from sshd_fixture import SshServer, free_port, sshd  # noqa: F401  (sshd is a fixture)

from kstui.executors.factory import make_executor
from kstui.executors.protocol import ExecutorError
from kstui.executors.ssh import SshExecutor, SshTarget

REPO = Path(__file__).resolve().parent.parent


def _real_harness_cli() -> bool:
    probe = subprocess.run([sys.executable, "-m", "harness", "eval", "--help"], capture_output=True, text=True)
    return probe.returncode == 0 and "--check-only" in probe.stdout


@pytest.fixture(scope="module")
def harness_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter the host runs: this venv (the real harness CLI) or, before it exists, a stand-in."""
    if _real_harness_cli():
        return sys.prefix if sys.prefix != sys.base_prefix else sys.executable  # the venv-directory form
    return str(fake_python(tmp_path_factory.mktemp("standin"), ECHO_HARNESS))


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    work = tmp_path / "ws"
    work.mkdir()
    for suffix in (".cu", ".toml"):
        shutil.copy(REPO / "workspace" / f"rmsnorm{suffix}", work / f"rmsnorm{suffix}")
    return work / "rmsnorm.cu"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_evaluates_on_the_host(sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path) -> None:
    ex = sshd.executor(harness_python, tmp_path / "remote")
    try:
        result = await ex.evaluate(kernel, scenarios="quick", extra_args=["--check-only"])
    finally:
        await ex.close()
    assert result.kernel_sha256 == _sha(kernel)
    assert result.kernel == str(kernel)
    assert result.device["host"] == "127.0.0.1"
    assert result.scenarios == [] and result.error is None
    assert set(ex.sent) == {_sha(kernel), _sha(kernel.with_suffix(".toml"))}
    assert ex.describe() == f"ssh://{sshd.user}@127.0.0.1:{sshd.port}"


async def test_reuses_the_connection_and_sends_only_new_content(
    sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "remote"
    ex = sshd.executor(harness_python, cache)
    try:
        before = sshd.connections()
        first = await ex.evaluate(kernel, extra_args=["--check-only"])
        assert sshd.connections() == before + 1
        sent_once = list(ex.sent)
        second = await ex.evaluate(kernel, extra_args=["--check-only"])
        assert sshd.connections() == before + 1  # multiplexed over the master: no new TCP connection
        assert ex.sent == sent_once  # unchanged content is not sent again
        assert first.kernel_sha256 == second.kernel_sha256

        # Only the task file changes (the build stays cached): it alone travels.
        task = kernel.with_suffix(".toml")
        task.write_text(task.read_text() + "\n# a change\n")
        third = await ex.evaluate(kernel, extra_args=["--check-only"])
        assert third.kernel_sha256 == _sha(kernel)
        assert ex.sent == [*sent_once, _sha(task)]
        assert sshd.connections() == before + 1
    finally:
        await ex.close()

    # A new connection asks the host first: it already holds both files, so nothing travels.
    fresh = sshd.executor(harness_python, cache)
    try:
        await fresh.evaluate(kernel, extra_args=["--check-only"])
        assert fresh.sent == []
        # The host's cache is cleaned behind our back: the evaluation notices and sends again.
        shutil.rmtree(cache / "objects")
        (cache / "objects").mkdir()
        shutil.rmtree(cache / "work")
        again = await fresh.evaluate(kernel, extra_args=["--check-only"])
        assert again.kernel_sha256 == _sha(kernel) and len(fresh.sent) == 2
    finally:
        await fresh.close()


async def test_close_stops_the_master(sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path) -> None:
    ex = sshd.executor(harness_python, tmp_path / "remote")
    try:
        await ex.evaluate(kernel, extra_args=["--check-only"])
        control = ex._control_dir
        assert control is not None and any(Path(control).iterdir())
        check = ex._ssh("-O", "check", "--", ex.target.destination)
        assert subprocess.run(check, capture_output=True).returncode == 0
    finally:
        await ex.close()
    assert subprocess.run(check, capture_output=True).returncode != 0  # the master is gone
    assert not Path(control).exists()
    await ex.close()  # idempotent


async def test_concurrent_evaluations_share_one_connection(sshd: SshServer, tmp_path: Path) -> None:
    echo = fake_python(tmp_path / "echo", ECHO_HARNESS)
    kernel = write_kernel(tmp_path / "k")
    ex = sshd.executor(echo, tmp_path / "remote", devices=[0, 1])
    try:
        await ex.evaluate(kernel, extra_args=["--check-only"])
        before = sshd.connections()
        a, b = await asyncio.gather(*(ex.evaluate(kernel, extra_args=["--check-only"]) for _ in range(2)))
        assert sshd.connections() == before
        devices = sorted(r.device["argv"][r.device["argv"].index("--devices") + 1] for r in (a, b))
        assert devices == ["0", "1"] and ex.parallelism == 2
    finally:
        await ex.close()


# --- errors --------------------------------------------------------------------------------------


async def _error(ex: SshExecutor, kernel: Path, extra_args: tuple[str, ...] = ("--check-only",)) -> str:
    try:
        with pytest.raises(ExecutorError) as info:
            await ex.evaluate(kernel, extra_args=extra_args)
    finally:
        await ex.close()
    message = str(info.value)
    assert "\n" not in message
    return message


async def test_unreachable_port(sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path) -> None:
    message = await _error(sshd.executor(harness_python, tmp_path / "r", port=free_port()), kernel)
    assert "is unreachable" in message and "Connection refused" in message


async def test_wrong_key(sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path) -> None:
    config = sshd.client_config(key="other_key")
    message = await _error(sshd.executor(harness_python, tmp_path / "r", ssh_options=["-F", str(config)]), kernel)
    assert "refused authentication" in message and "ssh-copy-id" in message


async def test_unknown_host_key(sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path) -> None:
    config = sshd.client_config(known_hosts="no_known_hosts")
    message = await _error(sshd.executor(harness_python, tmp_path / "r", ssh_options=["-F", str(config)]), kernel)
    assert "host key" in message


async def test_python_without_kstui(sshd: SshServer, kernel: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare-venv"
    venv.create(bare, with_pip=False)
    message = await _error(sshd.executor(bare, tmp_path / "r"), kernel)
    assert "kstui is not installed" in message and f"{bare}/bin/python -m pip install kstui" in message


async def test_no_python_at_the_path(sshd: SshServer, kernel: Path, tmp_path: Path) -> None:
    message = await _error(sshd.executor(tmp_path / "nowhere" / "python", tmp_path / "r"), kernel)
    assert "no Python at" in message and "ssh://host/path/to/venv" in message


async def test_harness_of_another_schema(sshd: SshServer, kernel: Path, tmp_path: Path) -> None:
    other = fake_python(tmp_path / "v2", ECHO_HARNESS.replace('"schema": 1', '"schema": 2'), schema=2)
    message = await _error(sshd.executor(other, tmp_path / "r"), kernel)
    assert "writes result schema 2" in message and "reads schema 1" in message


async def test_result_of_another_schema_is_refused_even_past_the_probe(sshd: SshServer, tmp_path: Path) -> None:
    liar = fake_python(tmp_path / "liar", ECHO_HARNESS.replace('"schema": 1', '"schema": 3'), schema=1)
    message = await _error(sshd.executor(liar, tmp_path / "r"), write_kernel(tmp_path / "k"))
    assert "schema 3 (this kstui reads schema 1)" in message


def _gpu_python(root: Path, smi: str | None) -> Path:
    """The real interpreter, but seeing only a fake nvidia-smi (or none) on PATH."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    if smi is not None:
        executable(bin_dir / "nvidia-smi", smi)
    return executable(root / "python", f'#!/bin/sh\nPATH="{bin_dir}"; export PATH\nexec "{sys.executable}" "$@"\n')


async def test_gpu_absent(sshd: SshServer, kernel: Path, tmp_path: Path) -> None:
    message = await _error(sshd.executor(_gpu_python(tmp_path / "a", None), tmp_path / "r"), kernel, ())
    assert "no NVIDIA GPU: nvidia-smi is not installed" in message
    failing = "#!/bin/sh\necho 'No devices were found'\nexit 6\n"
    message = await _error(sshd.executor(_gpu_python(tmp_path / "b", failing), tmp_path / "r"), kernel, ())
    assert "no usable NVIDIA GPU: No devices were found" in message


_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, GPU-aaaa, NVIDIA H200"; echo "1, GPU-bbbb, NVIDIA H200" ;;
  --query-compute-apps=*) echo "GPU-bbbb, 4242, python" ;;
esac
"""


async def test_gpu_busy_or_not_there(sshd: SshServer, kernel: Path, tmp_path: Path) -> None:
    python = _gpu_python(tmp_path / "g", _SMI)
    message = await _error(sshd.executor(python, tmp_path / "r", devices=[1]), kernel, ())
    assert "GPU 1 (NVIDIA H200) is busy: pid 4242 (python)" in message
    message = await _error(sshd.executor(python, tmp_path / "r", devices=[3]), kernel, ())
    assert "no GPU 3 on this host (it has 0, 1)" in message


async def test_timeout_kills_the_remote_harness(sshd: SshServer, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    slow = fake_python(tmp_path / "slow", f"import os, time\nopen({str(pids)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    ex = sshd.executor(slow, tmp_path / "r", timeout_s=5)  # room for ssh and Python to start on a loaded host
    start = time.monotonic()
    message = await _error(ex, write_kernel(tmp_path / "k"))
    assert "timed out after 5 s" in message and time.monotonic() - start < 20
    pid = int(pids.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the remote harness outlived the timeout"


# --- parsing -------------------------------------------------------------------------------------


def test_target_parsing() -> None:
    t = SshTarget.parse("ssh://ana@gpu1.lab:2222/opt/venvs/k%20s")
    assert (t.user, t.host, t.port, t.python) == ("ana", "gpu1.lab", 2222, "/opt/venvs/k s")
    assert SshTarget.parse("ssh://gpu1") == SshTarget("gpu1")
    assert isinstance(make_executor("ssh://gpu1", None, "0,1"), SshExecutor)
    for bad in ("ssh://", "ssh://h:notaport", "ssh://h?x=1", "http://h", "ssh://u:pw@h"):
        with pytest.raises(ExecutorError, match="expected ssh://"):
            SshTarget.parse(bad)


async def test_a_lost_agent_fails_the_evaluation_and_is_restarted(sshd: SshServer, tmp_path: Path) -> None:
    flag, pids = tmp_path / "hang", tmp_path / "pids"
    hang = f"import os, time\nif os.path.exists({str(flag)!r}):\n    open({str(pids)!r}, 'w').write(str(os.getpid()))\n    time.sleep(60)\n"
    python = fake_python(tmp_path / "h", hang + ECHO_HARNESS)
    kernel = write_kernel(tmp_path / "k")
    ex = sshd.executor(python, tmp_path / "r")
    try:
        await ex.evaluate(kernel, extra_args=["--check-only"])
        first_agent = ex._agent.pid
        flag.touch()
        running = asyncio.create_task(ex.evaluate(kernel, extra_args=["--check-only"]))
        while not pids.exists():
            await asyncio.sleep(0.05)
        os.kill(first_agent, signal.SIGKILL)
        with pytest.raises(ExecutorError, match="connection to the host's agent was lost"):
            await running
        flag.unlink()
        again = await ex.evaluate(kernel, extra_args=["--check-only"])
        assert again.kernel_sha256 == hashlib.sha256(kernel.read_bytes()).hexdigest()
        assert ex._agent.pid != first_agent
    finally:
        await ex.close()
        if pids.exists():  # the harness an agent killed by SIGKILL cannot stop (ours: end it)
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pids.read_text()), signal.SIGKILL)


async def test_close_ends_the_agent(sshd: SshServer, tmp_path: Path) -> None:
    ex = sshd.executor(fake_python(tmp_path / "e", ECHO_HARNESS), tmp_path / "r")
    await ex.evaluate(write_kernel(tmp_path / "k"), extra_args=["--check-only"])
    pid = ex._agent.pid
    await ex.close()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()


async def test_a_spec_task_travels_with_its_judge_files(sshd: SshServer, harness_python: str, tmp_path: Path) -> None:
    # The host's harness reads the reference and the baseline one folder up: each was sent and laid out
    # as the spec names it (a missing one is the harness's bad input, "no such file").
    if not _real_harness_cli():
        pytest.skip("needs the real harness CLI")
    kernel = write_spec_kernel(tmp_path / "ws")
    judge = [kernel, kernel.with_suffix(".toml"), kernel.with_name("op_ref.py"), tmp_path / "ws" / "shared" / "base.py"]
    cache = tmp_path / "remote"
    ex = sshd.executor(harness_python, cache)
    try:
        result = await ex.evaluate(kernel, extra_args=["--check-only"])
    finally:
        await ex.close()
    assert result.error is None and result.build.ok and result.task.startswith("op@")
    assert set(ex.sent) == {_sha(p) for p in judge}
    (work,) = (cache / "work").iterdir()
    laid = {p.relative_to(work).as_posix(): p.read_bytes() for p in work.rglob("*") if p.is_file()}
    assert {n: laid[n] for n in ("ops/op.cu", "ops/op.toml", "ops/op_ref.py", "shared/base.py")} == {
        n: (tmp_path / "ws" / n).read_bytes() for n in ("ops/op.cu", "ops/op.toml", "ops/op_ref.py", "shared/base.py")}


async def test_the_host_agent_lays_out_nothing_outside_its_work_folder(
    sshd: SshServer, harness_python: str, kernel: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "remote"
    ex = sshd.executor(harness_python, cache)
    try:
        await ex.evaluate(kernel, extra_args=["--check-only"])  # the agent is up, the kernel's object sent
        ksha = _sha(kernel)
        for files, work, why in [({"../../escape.cu": ksha}, "ab" * 20, "outside the work folder"),
                                 ({"/tmp/escape.cu": ksha}, "ab" * 20, "outside the work folder"),
                                 ({"k.cu": ksha}, "../x", "not a digest")]:
            request = {"kernel": next(iter(files)), "files": files, "work": work, "check_gpu": False, "devices": [],
                       "args": ["--check-only"]}
            done = await ex._request(request, "test")
            assert done.returncode == 125 and why in done.stderr.decode(), done.stderr
        done = await ex._request({"kernel": "other.cu", "files": {"k.cu": ksha}, "work": "ab" * 20, "check_gpu": False,
                                  "devices": [], "args": []}, "test")
        assert done.returncode == 125 and "not among the files sent" in done.stderr.decode()
    finally:
        await ex.close()
    assert not (cache / "escape.cu").exists() and not Path("/tmp/escape.cu").exists()
    assert not (cache / "work" / ("ab" * 20)).exists()
