"""The local executor's `python -m harness serve` subprocess: evaluations whose worker was prepared early.

One server per executor, started on first use and started again if it dies. Requests are answered in
any order and matched by id. A timeout or a cancelled request kills the server (its workers notice
their parent is gone and end), so nothing of a hung evaluation outlives the request; the next request
starts a fresh server, which costs one cold worker start.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from kstui.executors import lifeline
from kstui.executors.process import Completed, kill_group
from kstui.executors.protocol import ExecutorError, ProgressCallback

_STDERR_LINES = 20


class HarnessServer:
    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.argv = list(argv)  # the command that runs `harness serve`
        self.env = env
        self.cwd = cwd
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[dict]] = {}
        self._progress: dict[int, ProgressCallback] = {}
        self._ids = itertools.count(1)
        self._tasks: list[asyncio.Task[None]] = []
        self._stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        self._lock = asyncio.Lock()

    async def _ensure(self) -> asyncio.subprocess.Process:
        async with self._lock:
            if self._proc is not None and self._proc.returncode is None:
                return self._proc
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd, start_new_session=True,
                    preexec_fn=lifeline.tie_to_parent(), limit=1 << 26)
            except OSError as exc:
                raise ExecutorError(f"local harness: cannot start {self.argv[0]}: {exc.strerror or exc}") from None
            lifeline.track(self._proc.pid)
            self._stderr.clear()
            self._tasks = [asyncio.ensure_future(self._read_replies(self._proc)),
                           asyncio.ensure_future(self._read_stderr(self._proc))]
            return self._proc

    async def _read_replies(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            try:
                reply = json.loads(line)
                if isinstance(reply.get("progress"), dict):
                    callback = self._progress.get(reply["id"])
                    if callback is not None:
                        callback(reply["progress"])
                    continue
                fut = self._pending.pop(reply["id"], None)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not a reply of ours; the request it belongs to times out or fails below
            if fut is not None and not fut.done():
                fut.set_result(reply)
        await proc.wait()
        lifeline.untrack(proc.pid)
        tail = next((ln for ln in reversed(self._stderr) if ln.strip()), "")
        why = f"the harness server exited (status {proc.returncode})" + (f": {tail[:300]}" if tail else "")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ExecutorError(f"local harness: {why}"))
        self._pending.clear()

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            self._stderr.append(line.decode("utf-8", "replace").rstrip())

    async def request(self, args: Sequence[str], timeout_s: float,
                      progress: ProgressCallback | None = None) -> Completed:
        """`harness eval ARGS` through the server, as if run as a process; `progress` gets its reports
        (the server sends them for a request with --progress)."""
        proc = await self._ensure()
        rid = next(self._ids)
        fut: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if progress is not None:
            self._progress[rid] = progress
        try:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps({"id": rid, "argv": list(args)}) + "\n").encode())
            await proc.stdin.drain()
            reply = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except (BrokenPipeError, ConnectionResetError):
            reply = await self._last_words(fut)
        except asyncio.TimeoutError:
            fut.cancel()  # no one reads the failure the killed server's reader would set on it
            await self._kill()
            raise ExecutorError(f"local harness timed out after {timeout_s:g} s (killed)") from None
        except asyncio.CancelledError:
            fut.cancel()
            await self._kill()
            raise
        finally:
            self._pending.pop(rid, None)
            self._progress.pop(rid, None)
        return Completed(int(reply.get("rc", 2)), str(reply.get("stdout", "")).encode(),
                         str(reply.get("stderr", "")).encode())

    async def _last_words(self, fut: asyncio.Future[dict]) -> dict:
        """The server died as we wrote: its reader fails the request with the server's last line."""
        try:
            return await asyncio.wait_for(fut, 5.0)
        except asyncio.TimeoutError:
            await self._kill()
            raise ExecutorError("local harness: the harness server stopped answering (killed)") from None

    async def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            kill_group(proc.pid)
            await asyncio.shield(proc.wait())

    async def close(self) -> None:
        """End the server: end of input makes it kill its prepared workers and exit."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 10.0)
            except asyncio.TimeoutError:
                await self._kill()
        for task in self._tasks:
            try:
                await asyncio.wait_for(task, 2.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
        self._proc = None
