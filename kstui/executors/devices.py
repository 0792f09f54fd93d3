"""GPU slots shared by concurrent evaluations of one executor, and the `--devices` list."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from kstui.executors.protocol import ExecutorError


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
