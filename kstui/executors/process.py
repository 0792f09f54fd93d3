"""A command run to completion in its own process group: bounded output, a timeout, nothing left behind."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kstui.executors import lifeline
from kstui.executors.protocol import ExecutorError

# Bytes kept per output stream: a real EvalResult is far smaller, so more is garbage, not a result.
OUTPUT_CAP = 64 * 1024 * 1024
# After the process is gone, how long its pipes may stay open (a stray grandchild) before we stop reading.
_PIPE_GRACE_S = 2.0


@dataclass
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes


# kstui's own model credentials: no transport needs them, and what a transport runs is the agent's kernel.
_MODEL_CREDENTIALS = ("ANTHROPIC_", "CLAUDE_")


def transport_environment() -> dict[str, str]:
    """The environment of the user's own transports (--eval-cmd, ssh): theirs, since they may need its
    credentials (the SSH agent, a kubeconfig), less kstui's model key."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_MODEL_CREDENTIALS)}


async def run_process(
    argv: Sequence[str],
    *,
    timeout_s: float,
    what: str,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    on_stderr_line: Callable[[str], None] | None = None,
) -> Completed:
    """Run argv in its own process group (env: by default the transport environment); on timeout or
    cancellation the whole group is killed.
    on_stderr_line sees each line of stderr as it comes (all of it is returned as well)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env if env is not None else transport_environment(),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=lifeline.tie_to_parent(),
        )
    except OSError as exc:
        raise ExecutorError(f"{what}: cannot start {argv[0]}: {exc.strerror or exc}") from None
    lifeline.track(proc.pid)
    readers = [asyncio.ensure_future(_drain(proc.stdout)), asyncio.ensure_future(_drain(proc.stderr, on_stderr_line))]
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
        lifeline.untrack(proc.pid)
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


async def _drain(stream: asyncio.StreamReader | None, on_line: Callable[[str], None] | None = None) -> bytes:
    if stream is None:
        return b""
    chunks: list[bytes] = []
    kept = 0
    pending = b""
    while chunk := await stream.read(1 << 16):
        if kept < OUTPUT_CAP:
            chunks.append(chunk[: OUTPUT_CAP - kept])
            kept += len(chunks[-1])
        if on_line is not None:
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                on_line(line.decode("utf-8", "replace"))
    return b"".join(chunks)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def last_line(data: bytes, limit: int = 300) -> str:
    """The last non-empty line of a stream, shortened: what a one-line error can quote."""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= limit else line[: limit - 1] + "…"

