"""Executor overhead: what an SSH (loopback, warm connection) or Ray (local instance) evaluation costs
beyond running the same harness locally.

The harness here is the tests' echo stand-in (a schema-valid EvalResult, no build), so the figure is
the executor's own cost: the cache check, the request to the host's agent over the multiplexed ssh
session, Ray scheduling. A negative overhead means the difference is below the run-to-run noise. Targets (issue 5): SSH ≤ 300 ms, Ray ≤ 500 ms per evaluation.

    .venv/bin/python bench/bench_executors.py [--n 10] [--no-ray]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from executor_support import ECHO_HARNESS, fake_python, write_kernel  # noqa: E402
from sshd_fixture import SshdUnavailable, running_sshd  # noqa: E402

from kstui.executors import Executor, LocalExecutor  # noqa: E402

SSH_TARGET_MS = 300.0
RAY_TARGET_MS = 500.0


async def median_ms(ex: Executor, kernel: Path, n: int, extra: list[str]) -> float:
    await ex.evaluate(kernel, extra_args=extra)  # warm: connection, upload, Ray workers
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await ex.evaluate(kernel, extra_args=extra)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def verdict(overhead: float, target: float) -> str:
    return "ok" if overhead <= target else "OVER TARGET"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="timed evaluations per executor (median reported)")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="kstui-bench-") as tmp:
        root = Path(tmp)
        kernel = write_kernel(root / "ws")
        echo = fake_python(root / "echo", ECHO_HARNESS)
        local = await median_ms(LocalExecutor(python=str(echo)), kernel, args.n, ["--check-only"])
        print(f"local harness (echo stand-in):        {local:8.1f} ms median of {args.n}")

        try:
            with running_sshd(root / "sshd") as server:
                ex = server.executor(echo, root / "remote-cache")
                try:
                    ssh = await median_ms(ex, kernel, args.n, ["--check-only"])
                    rtt = []
                    for _ in range(args.n):
                        start = time.perf_counter()
                        subprocess.run(ex._ssh("-o", "ControlMaster=no", "--", ex.target.destination, "true"), check=True)
                        rtt.append((time.perf_counter() - start) * 1000)
                finally:
                    await ex.close()
            overhead = ssh - local
            failed |= overhead > SSH_TARGET_MS
            print(f"ssh loopback, warm connection:        {ssh:8.1f} ms; overhead {overhead:6.1f} ms "
                  f"(target ≤ {SSH_TARGET_MS:.0f}: {verdict(overhead, SSH_TARGET_MS)})")
            print(f"  for comparison, one `ssh host true` over the warm connection (the host's login shell"
                  f" included), which the long-lived agent saves per evaluation: {statistics.median(rtt):.1f} ms")
        except SshdUnavailable as exc:
            print(f"ssh: skipped ({exc})")

        if args.no_ray or importlib.util.find_spec("ray") is None:
            print("ray: skipped" + ("" if args.no_ray else " (not installed: pip install 'kstui[ray]')"))
        else:
            import ray

            from kstui.remote.ray import RayExecutor

            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            try:
                ex = RayExecutor(python=str(echo))
                rayt = await median_ms(ex, kernel, args.n, ["--check-only"])
                await ex.close()
            finally:
                ray.shutdown()
            overhead = rayt - local
            failed |= overhead > RAY_TARGET_MS
            print(f"ray local instance, warm workers:     {rayt:8.1f} ms; overhead {overhead:6.1f} ms "
                  f"(target ≤ {RAY_TARGET_MS:.0f}: {verdict(overhead, RAY_TARGET_MS)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
