"""Where evaluations run: the harness CLI locally, through a command template, over SSH or on Ray.

Every executor hands back the harness's own EvalResult, validated against the schema. Anything else
(a crash, garbage on stdout, a timeout, an unreachable host) is an ExecutorError carrying one line for
the user; the session reports it and goes on. A nonzero exit with a valid EvalResult is a rejection.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import harness.result
from harness.result import EvalResult, SchemaError

if TYPE_CHECKING:
    from kstui.harness_server import HarnessServer

DEFAULT_TIMEOUT_S = 1800.0
# Bytes kept per output stream: a real EvalResult is far smaller, so more is garbage, not a result.
OUTPUT_CAP = 64 * 1024 * 1024
# After the process is gone, how long its pipes may stay open (a stray grandchild) before we stop reading.
_PIPE_GRACE_S = 2.0


class ExecutorError(Exception):
    """One line for the user: what failed and what to do about it."""


@runtime_checkable
class Executor(Protocol):
    @property
    def parallelism(self) -> int:
        """How many evaluations can run at once without sharing a GPU (spare GPUs for re-timing)."""
        ...

    def describe(self) -> str: ...

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = ()
    ) -> EvalResult: ...

    async def close(self) -> None: ...


# --- running a command ---------------------------------------------------------------------------


@dataclass
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes


async def run_process(
    argv: Sequence[str],
    *,
    timeout_s: float,
    what: str,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Completed:
    """Run argv in its own process group; on timeout or cancellation the whole group is killed."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise ExecutorError(f"{what}: cannot start {argv[0]}: {exc.strerror or exc}") from None
    readers = [asyncio.ensure_future(_drain(proc.stdout)), asyncio.ensure_future(_drain(proc.stderr))]
    try:
        await asyncio.wait_for(_feed_and_wait(proc, stdin), timeout_s)
    except asyncio.TimeoutError:
        raise ExecutorError(f"{what} timed out after {timeout_s:g} s (killed)") from None
    finally:
        if proc.returncode is None:  # timed out or cancelled: the leader is alive, so its group id is ours
            kill_group(proc.pid)
            await asyncio.shield(proc.wait())
        if proc.stdin is not None:
            proc.stdin.close()
        _, pending = await asyncio.wait(readers, timeout=_PIPE_GRACE_S)
        for task in pending:
            task.cancel()
    out, err = (t.result() if t.done() and not t.cancelled() else b"" for t in readers)
    return Completed(proc.returncode if proc.returncode is not None else -1, out, err)


async def _feed_and_wait(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    if data is not None and proc.stdin is not None:
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child exited without reading; its exit status says why
    await proc.wait()


async def _drain(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    chunks: list[bytes] = []
    kept = 0
    while chunk := await stream.read(1 << 16):
        if kept < OUTPUT_CAP:
            chunks.append(chunk[: OUTPUT_CAP - kept])
            kept += len(chunks[-1])
    return b"".join(chunks)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- reading a result ----------------------------------------------------------------------------


def last_line(data: bytes, limit: int = 300) -> str:
    """The last non-empty line of a stream, shortened: what a one-line error can quote."""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def decode_result(text: str) -> EvalResult:
    """The EvalResult in text: the whole of it, or the last JSON object that starts a line.

    Wrappers (srun, kubectl, docker) sometimes print a line of their own before the harness's JSON.
    """
    try:
        return EvalResult.from_json(text)
    except SchemaError as whole:
        first_error = whole
    for match in reversed(list(re.finditer(r"^\{", text, re.MULTILINE))):
        if match.start() == 0:
            continue
        try:
            return EvalResult.from_json(text[match.start() :])
        except SchemaError:
            continue
    raise first_error


def parse_result(done: Completed, what: str) -> EvalResult:
    """An EvalResult from a finished harness invocation, or an ExecutorError saying why there is none."""
    text = done.stdout.decode("utf-8", "replace")
    err = last_line(done.stderr)
    status = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    try:
        return decode_result(text)
    except SchemaError as exc:
        reason = str(exc)
    if done.returncode == 2 and err:  # the harness's "bad input" line
        raise ExecutorError(f"{what}: {err}")
    if not text.strip():
        raise ExecutorError(f"{what} printed no result ({status})" + (f": {err}" if err else ""))
    if reason.startswith("schema "):
        raise ExecutorError(f"{what} speaks result {reason}: install the same kstui version on both sides")
    raise ExecutorError(
        f"{what} printed no valid EvalResult ({reason}; {status})" + (f"; stderr: {err}" if err else "")
    )


def harness_args(kernel: str, scenarios: str, extra_args: Sequence[str], devices: Sequence[int]) -> list[str]:
    """The `harness eval` argument list every executor runs (after `python -m harness`)."""
    args = ["eval", kernel, "--scenarios", scenarios, "--json", "-"]
    if devices:
        args += ["--devices", ",".join(str(d) for d in devices)]
    return args + list(extra_args)


def annotate(result: EvalResult, *, host: str, queue_wait_s: float) -> EvalResult:
    """Record where the evaluation ran and how long it waited for a GPU (the TUI shows both)."""
    result.device["host"] = host
    result.device["queue_wait_s"] = round(queue_wait_s, 3)
    return result


# --- sharing GPUs between concurrent evaluations -------------------------------------------------


class DevicePool:
    """Hands slots (GPU indices, or anonymous slots) to concurrent evaluations.

    With split=True an evaluation that starts alone gets every free GPU (the harness spreads its
    scenarios over them); evaluations started together (one asyncio.gather) split the free GPUs, so a
    candidate and a re-timing of the best kernel run side by side and never share a GPU. A request
    waits while every slot is in use.
    """

    def __init__(self, slots: Sequence[int | None], *, split: bool) -> None:
        if not slots:
            raise ValueError("a device pool needs at least one slot")
        self._order = list(slots)
        self._free = list(slots)
        self._split = split
        self._waiting: list[asyncio.Future[list[int | None]]] = []
        self._scheduled = False

    @property
    def size(self) -> int:
        return len(self._order)

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[list[int]]:
        """Yield the GPU indices granted (empty for an anonymous slot)."""
        fut: asyncio.Future[list[int | None]] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._schedule()
        try:
            granted = await fut
        except asyncio.CancelledError:
            if fut in self._waiting:
                self._waiting.remove(fut)
            elif fut.done() and not fut.cancelled():
                self._release(fut.result())
            raise
        try:
            yield [d for d in granted if d is not None]
        finally:
            self._release(granted)

    def _schedule(self) -> None:
        # Allocate on the next loop iteration, so requests made together are seen together.
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._allocate)

    def _allocate(self) -> None:
        self._scheduled = False
        self._waiting = [f for f in self._waiting if not f.done()]
        n = min(len(self._waiting), len(self._free))
        if n == 0:
            return
        if self._split:
            shares = [self._free[i::n] for i in range(n)]
            self._free = []
        else:
            shares = [[slot] for slot in self._free[:n]]
            self._free = self._free[n:]
        for fut, share in zip(self._waiting[:n], shares):
            fut.set_result(sorted(share, key=self._order.index))
        self._waiting = self._waiting[n:]

    def _release(self, slots: list[int | None]) -> None:
        returned = self._free + slots
        self._free = [s for s in self._order if s in returned] if self._split else returned
        if self._waiting:
            self._schedule()


def pool_for(devices: Sequence[int] | None, parallelism: int = 1) -> DevicePool:
    if devices:
        return DevicePool(list(devices), split=True)
    return DevicePool([None] * max(1, parallelism), split=False)


# --- local ---------------------------------------------------------------------------------------


def _harness_env() -> dict[str, str]:
    """The environment for a harness subprocess: ours, with our own harness package first on the path."""
    env = dict(os.environ)
    root = str(Path(harness.result.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


class LocalExecutor:
    """`python -m harness eval … --json -` in a subprocess on this machine.

    With warm=True the evaluations go to one long-lived `python -m harness serve` instead, which
    prepares each GPU's next worker (torch, CUDA, the baselines' first calls) while the agent works,
    so an evaluation starts judging at once (kstui.harness_server).
    """

    def __init__(
        self,
        python: str = sys.executable,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        devices: Sequence[int] | None = None,
        warm: bool = False,
    ) -> None:
        self.python = python
        self.timeout_s = timeout_s
        self.devices = list(devices) if devices else None
        self._pool = pool_for(self.devices)
        self._host = socket.gethostname()
        self._server: HarnessServer | None = None
        if warm:
            from kstui.harness_server import HarnessServer

            self._server = HarnessServer(python, _harness_env())

    @property
    def parallelism(self) -> int:
        return self._pool.size

    def describe(self) -> str:
        return "local" + (f" GPUs {','.join(map(str, self.devices))}" if self.devices else "")

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = ()
    ) -> EvalResult:
        asked = time.monotonic()
        async with self._pool.lease() as devices:
            waited = time.monotonic() - asked
            path = Path(kernel).resolve()
            args = harness_args(str(path), scenarios, extra_args, devices)
            if self._server is not None:
                done = await self._server.request(args[1:], self.timeout_s)
            else:
                done = await run_process(
                    [self.python, "-m", "harness", *args], timeout_s=self.timeout_s, what="local harness",
                    env=_harness_env(), cwd=path.parent,
                )
        return annotate(parse_result(done, "local harness"), host=self._host, queue_wait_s=waited)

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()


# --- command template ----------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{(file|dir|name|stem|scenarios|args)\}")


class TemplateExecutor:
    """A shell command template (`ssh gpu1 kstui eval {file} --json -`, `srun --gres=gpu:1 …`).

    Placeholders, each replaced by one shell-quoted word (so they belong outside quotes): {file} the
    kernel's absolute path, {dir} its directory, {name} its file name, {stem} its name without suffix,
    {scenarios} the scenario selection, {args} the extra harness arguments (several words). A template
    without {scenarios} gets `--scenarios S` appended; one without {args} gets the arguments appended.
    """

    def __init__(
        self,
        template: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        devices: Sequence[int] | None = None,
        parallelism: int = 1,
    ) -> None:
        if not re.search(r"\{(file|name)\}", template):
            raise ExecutorError("--eval-cmd needs a {file} (or {name}) placeholder where the kernel goes")
        try:
            shlex.split(_PLACEHOLDER.sub("x", template))
        except ValueError as exc:
            raise ExecutorError(f"--eval-cmd is not a valid shell command: {exc}") from None
        self.template = template
        self.timeout_s = timeout_s
        self.devices = list(devices) if devices else None
        self._pool = pool_for(self.devices, parallelism)

    @property
    def parallelism(self) -> int:
        return self._pool.size

    def describe(self) -> str:
        return self.template if len(self.template) <= 60 else self.template[:59] + "…"

    def command(self, kernel: Path, scenarios: str, extra_args: Sequence[str], devices: Sequence[int] = ()) -> str:
        """The shell command for one evaluation."""
        kernel = Path(kernel).resolve()
        args = list(extra_args) + (["--devices", ",".join(map(str, devices))] if devices else [])
        values = {
            "file": shlex.quote(str(kernel)),
            "dir": shlex.quote(str(kernel.parent)),
            "name": shlex.quote(kernel.name),
            "stem": shlex.quote(kernel.stem),
            "scenarios": shlex.quote(scenarios),
            "args": " ".join(shlex.quote(a) for a in args),
        }
        cmd = _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.template)
        if "{scenarios}" not in self.template:
            cmd += " --scenarios " + values["scenarios"]
        if "{args}" not in self.template and args:
            cmd += " " + values["args"]
        return cmd

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = ()
    ) -> EvalResult:
        asked = time.monotonic()
        async with self._pool.lease() as devices:
            waited = time.monotonic() - asked
            cmd = self.command(kernel, scenarios, extra_args, devices)
            done = await run_process(["/bin/sh", "-c", cmd], timeout_s=self.timeout_s, what="--eval-cmd")
        result = parse_result(done, "--eval-cmd")
        result.device.setdefault("host", self.describe())
        result.device["queue_wait_s"] = round(waited, 3)
        return result

    async def close(self) -> None:
        return None


# --- choosing one --------------------------------------------------------------------------------


def parse_devices(devices: str | None) -> list[int] | None:
    """`--devices 0,1,3` → [0, 1, 3]; None or empty → None."""
    if devices is None or not devices.strip():
        return None
    try:
        parsed = [int(d) for d in devices.split(",")]
    except ValueError:
        raise ExecutorError(f"--devices expects GPU indices like 0,1 (got {devices!r})") from None
    if any(d < 0 for d in parsed) or len(set(parsed)) != len(parsed):
        raise ExecutorError(f"--devices expects distinct non-negative GPU indices (got {devices!r})")
    return parsed


def make_executor(
    gpu: str | None,
    eval_cmd: str | None,
    devices: str | None,
    *,
    shards: int = 1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    warm: bool = False,
) -> Executor:
    """The executor the flags ask for: --gpu (local | ssh://… | ray[://…]), --eval-cmd, --devices, --shards;
    warm prepares the local executor's workers ahead (the others start theirs on request)."""
    device_list = parse_devices(devices)
    if shards < 1:
        raise ExecutorError(f"--shards must be at least 1 (got {shards})")
    if gpu and eval_cmd:
        raise ExecutorError("--gpu and --eval-cmd exclude each other: pick one place to evaluate")
    is_ray = gpu is not None and (gpu == "ray" or gpu.startswith("ray://"))
    if shards > 1 and not is_ray:
        raise ExecutorError("--shards needs --gpu ray (for several local GPUs use --devices 0,1,…)")
    if eval_cmd:
        return TemplateExecutor(eval_cmd, timeout_s=timeout_s, devices=device_list)
    if gpu is None or gpu == "local":
        return LocalExecutor(timeout_s=timeout_s, devices=device_list, warm=warm)
    if gpu.startswith("ssh://"):
        from kstui.remote.ssh import SshExecutor

        return SshExecutor.from_url(gpu, devices=device_list, timeout_s=timeout_s)
    if is_ray:
        if device_list:
            raise ExecutorError("--devices does not apply to --gpu ray: Ray assigns the GPUs (use --shards)")
        from kstui.remote.ray import RayExecutor

        # "ray://host:10001" is Ray Client's own address form; plain "ray" joins or starts a local instance.
        address = gpu if gpu.startswith("ray://") else None
        return RayExecutor(address=address, shards=shards, timeout_s=timeout_s)
    raise ExecutorError(f"--gpu {gpu!r} is not understood: use local, ssh://[user@]host[:port][/python], or ray[://address]")

