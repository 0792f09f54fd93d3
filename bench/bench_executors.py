"""Executor overhead: what an SSH (loopback, warm connection) or Ray (local instance) evaluation costs
beyond running the same harness locally.

The harness here is the tests' echo stand-in (a schema-valid EvalResult, no build), so the figure is
the executor's own cost: the cache check, the request to the host's agent over the multiplexed ssh
session, Ray scheduling. Each round runs one local, one SSH and one Ray evaluation back to back and
the overhead is the median of the per-round differences, so machine load hits both sides alike.
Targets (issue 5): SSH ≤ 300 ms, Ray ≤ 500 ms per evaluation.

    .venv/bin/python bench/bench_executors.py [--n 15] [--no-ray]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from executor_support import ECHO_HARNESS, fake_python, write_kernel  # noqa: E402
from sshd_fixture import SshdUnavailable, running_sshd  # noqa: E402

from kstui.executors.local import LocalExecutor
from kstui.executors.protocol import Executor  # noqa: E402

TARGET_MS = {"ssh": 300.0, "ray": 500.0}
EXTRA = ["--check-only"]  # no GPU here, and Ray then asks for none


async def timed_ms(ex: Executor, kernel: Path) -> float:
    start = time.perf_counter()
    await ex.evaluate(kernel, extra_args=EXTRA)
    return (time.perf_counter() - start) * 1000


@contextlib.asynccontextmanager
async def ray_executor(echo: Path) -> AsyncIterator[Executor]:
    import ray

    from kstui.executors.ray import RayExecutor

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ex = RayExecutor(python=str(echo))
    try:
        yield ex
    finally:
        await ex.close()
        ray.shutdown()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15, help="measured rounds (median reported)")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kstui-bench-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            return await measure(Path(tmp), stack, args)


async def measure(root: Path, stack: contextlib.AsyncExitStack, args: argparse.Namespace) -> int:
    """Warm every executor, time interleaved rounds, print; 1 if a target is missed."""
    kernel = write_kernel(root / "ws")
    echo = fake_python(root / "echo", ECHO_HARNESS)
    executors: dict[str, Executor] = {"local": LocalExecutor(python=str(echo))}
    try:
        server = stack.enter_context(running_sshd(root / "sshd"))
        ssh = server.executor(echo, root / "remote-cache")
        stack.push_async_callback(ssh.close)
        executors["ssh"] = ssh
    except SshdUnavailable as exc:
        print(f"ssh: skipped ({exc})")
    if args.no_ray:
        print("ray: skipped (--no-ray)")
    elif importlib.util.find_spec("ray") is None:
        print("ray: skipped (not installed: pip install 'kstui[ray]')")
    else:
        executors["ray"] = await stack.enter_async_context(ray_executor(echo))

    for ex in executors.values():  # warm: connection, agent, upload, Ray workers
        await timed_ms(ex, kernel)
    times: dict[str, list[float]] = {name: [] for name in executors}
    for _ in range(args.n):
        for name, ex in executors.items():
            times[name].append(await timed_ms(ex, kernel))

    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; median of {args.n} rounds")
    print(f"  local harness (echo stand-in): {statistics.median(times['local']):7.1f} ms")
    failed = False
    for name in ("ssh", "ray"):
        if name not in times:
            continue
        diffs = [t - base for t, base in zip(times[name], times["local"])]
        overhead = statistics.median(diffs)
        spread = statistics.quantiles(diffs, n=4) if len(diffs) >= 4 else [overhead, overhead, overhead]
        ok = overhead <= TARGET_MS[name]
        failed |= not ok
        print(f"  {name:5s} {statistics.median(times[name]):7.1f} ms; overhead {overhead:6.1f} ms "
              f"(quartiles {spread[0]:.0f}..{spread[2]:.0f}; target ≤ {TARGET_MS[name]:.0f}: "
              f"{'ok' if ok else 'OVER TARGET'})")
    if "ssh" in executors:
        ssh = executors["ssh"]
        rtt = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(ssh._command(["true"]), check=True)  # type: ignore[attr-defined]
            rtt.append((time.perf_counter() - start) * 1000)
        print(f"  for comparison, one `ssh host true` over the warm connection (the host's login shell"
              f" included), which the agent saves per evaluation: {statistics.median(rtt):.1f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
