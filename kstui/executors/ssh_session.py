"""Our end of the host's agent (ssh_scripts.AGENT_PY): one ssh session, requests matched to replies.

Concurrent requests are fine: each gets an id and a future; one reader task hands replies out. If the
session ends, every pending request fails with the same one-line ExecutorError.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from kstui.executors import lifeline
from kstui.executors.process import OUTPUT_CAP, Completed, last_line, transport_environment
from kstui.executors.protocol import ExecutorError

_STDERR_KEEP = 16_384  # bytes of the session's stderr kept for error messages


class SshSession:
    def __init__(self, proc: asyncio.subprocess.Process, describe_failure: Callable[[bytes], str]) -> None:
        self._proc = proc
        self._describe_failure = describe_failure
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._stderr = bytearray()
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._reader: asyncio.Task[None] | None = None
        self.pid: int | None = None  # the agent's pid on the host

    @classmethod
    async def start(cls, argv: Sequence[str], *, timeout_s: float,
                    describe_failure: Callable[[bytes], str]) -> SshSession:
        """Start the session and wait for the agent's ready line."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=OUTPUT_CAP, env=transport_environment(),
                preexec_fn=lifeline.tie_to_parent(),  # the host's agent ends when this ssh does
            )
        except OSError as exc:
            raise ExecutorError(f"cannot run ssh: {exc.strerror or exc}") from None
        agent = cls(proc, describe_failure)
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)  # type: ignore[union-attr]
            hello = json.loads(line) if line.strip() else {}
        except (asyncio.TimeoutError, ValueError):
            hello = {}
        if not hello.get("ready"):
            await agent.close()
            raise ExecutorError(describe_failure(bytes(agent._stderr)))
        agent.pid = hello.get("pid")
        agent._reader = asyncio.ensure_future(agent._read())
        return agent

    @property
    def alive(self) -> bool:
        return self._proc.returncode is None and self._reader is not None and not self._reader.done()

    async def request(self, payload: dict[str, Any], *, timeout_s: float, what: str) -> Completed:
        rid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            self._send({"id": rid, **payload})
            try:
                reply = await asyncio.wait_for(fut, timeout_s)
            except asyncio.TimeoutError:
                self._send({"cancel": rid}, quiet=True)
                raise ExecutorError(f"{what} timed out after {timeout_s:g} s (killed)") from None
            except asyncio.CancelledError:
                self._send({"cancel": rid}, quiet=True)
                raise
        finally:
            self._pending.pop(rid, None)
        return Completed(int(reply["rc"]), str(reply["stdout"]).encode(), str(reply["stderr"]).encode())

    def _send(self, msg: dict[str, Any], *, quiet: bool = False) -> None:
        stdin = self._proc.stdin
        try:
            if stdin is None or stdin.is_closing():
                raise BrokenPipeError
            stdin.write((json.dumps(msg) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError):
            if not quiet:
                raise ExecutorError(self._lost()) from None

    def _lost(self) -> str:
        return self._describe_failure(bytes(self._stderr))

    async def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                msg = json.loads(line)
                fut = self._pending.get(msg.get("id"))
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (ValueError, asyncio.LimitOverrunError):
            pass  # a torn or oversized line: the session is unusable, fail what is pending below
        await self._proc.wait()
        await asyncio.wait([self._stderr_task], timeout=1)
        error = ExecutorError(self._lost())
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def _drain_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        while chunk := await stderr.read(1 << 14):
            self._stderr += chunk
            del self._stderr[:-_STDERR_KEEP]

    async def close(self) -> None:
        """End the session: the agent sees EOF, kills what still runs and exits."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 10)
        except asyncio.TimeoutError:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # the leader is alive: the group is ours
            except ProcessLookupError:
                pass
            await self._proc.wait()
        tasks = [t for t in (self._reader, self._stderr_task) if t is not None]
        _, pending = await asyncio.wait(tasks, timeout=2)
        for task in pending:
            task.cancel()


def failure_line(prefix: str, stderr: bytes) -> str:
    """A session that ended: what its stderr last said."""
    reason = last_line(stderr)
    return f"{prefix}: the connection to the host's agent was lost" + (f" ({reason})" if reason else "")
