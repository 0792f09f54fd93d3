"""`--gpu ray[://address]`: each evaluation (or each of --shards N parts) is a Ray task on one GPU.

Ray is an optional extra (`pip install 'kstui[ray]'`) and is imported only when this executor starts.
The kernel and the task's judge files (task file, reference, baselines: kstui.executors.bundle) travel
inside the task; each node keeps its own build and baseline caches (a node-local KSTUI_CACHE_DIR
unless the node sets one), since timings belong to one GPU.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.merge import merge_results
from harness.result import EvalResult
from kstui.executors.bundle import Bundle, read_bundle, safe_name
from kstui.executors.process import Completed
from kstui.executors.protocol import DEFAULT_TIMEOUT_S, ExecutorError, ProgressCallback
from kstui.executors.results import harness_args, parse_result

INSTALL_HINT = "pip install 'kstui[ray]'"
# Beyond the harness's own budget, how long a task may take to be scheduled and report back.
_SLACK_S = 120.0


def run_on_node(kernel: str, files: dict[str, bytes], args: list[str], python: str | None,
                timeout_s: float) -> dict[str, Any]:
    """The Ray task body: lay the bundle out on this node (kernel: its name among `files`) and run the
    harness CLI there."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import tempfile

    root = os.path.join(tempfile.gettempdir(), f"kstui-ray-{os.getuid()}")
    bundle = Bundle(kernel, files)
    work = os.path.join(root, "work", bundle.digest()[:40])
    for name, data in files.items():
        if not safe_name(name):
            raise ValueError(f"refused to lay out {name!r}: outside the work folder")
        dst = os.path.join(work, name)
        if not os.path.exists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            tmp = f"{dst}.{os.getpid()}"
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, dst)
    path = os.path.join(work, kernel)
    env = dict(os.environ)
    env.setdefault("KSTUI_CACHE_DIR", os.path.join(root, "cache"))
    started = time.time()
    proc = subprocess.Popen([python or sys.executable, "-m", "harness", "eval", path, *args],
                            cwd=os.path.dirname(path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # the timeout, or ray.cancel's KeyboardInterrupt: never leave the harness running
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return {"rc": proc.returncode, "stdout": out, "stderr": err, "host": socket.gethostname(), "started": started}


def scenario_order(kernel: Path, scenarios: str, extra_args: Sequence[str]) -> list[str] | None:
    """The scenario ids in the harness's own order, to put merged shards back in it (None if unknown)."""
    from harness.runner import BadInput, EvalOptions, resolve

    specs = tuple(extra_args[i + 1] for i, a in enumerate(extra_args[:-1]) if a == "--scenario")
    try:
        _, _, listed = resolve(kernel, EvalOptions(selection=scenarios, specs=specs))
    except (BadInput, OSError, ValueError, KeyError):
        return None
    return [s.id for s in listed]


class RayExecutor:
    """Evaluations as Ray tasks asking for one GPU each (none for --check-only)."""

    def __init__(
        self,
        address: str | None = None,
        shards: int = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        python: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if shards < 1:
            raise ExecutorError(f"--shards must be at least 1 (got {shards})")
        self.address = address
        self.shards = shards
        self.timeout_s = timeout_s
        self.python = python  # the interpreter on the nodes; None: the Ray worker's own
        self.init_kwargs = dict(init_kwargs or {})
        self._ray: Any = None
        self._remote: Any = None
        self._started_ray = False
        self._gpus = 0.0
        self._lock = asyncio.Lock()

    @property
    def parallelism(self) -> int:
        """Whole evaluations the cluster can run at once (known after the first evaluation; 1 before)."""
        return max(1, int(self._gpus) // self.shards)

    def describe(self) -> str:
        where = self.address or "ray (local)"
        return where + (f" ×{self.shards} shards" if self.shards > 1 else "")

    async def _connect(self) -> Any:
        async with self._lock:
            if self._ray is None:
                try:
                    import ray
                except ImportError:
                    raise ExecutorError(f"--gpu ray needs Ray, which is not installed: {INSTALL_HINT}") from None
                if not ray.is_initialized():
                    try:
                        await asyncio.to_thread(ray.init, address=self.address, **self.init_kwargs)
                    except Exception as exc:  # Ray raises many kinds (ConnectionError, RuntimeError, …)
                        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                        raise ExecutorError(f"cannot reach Ray at {self.address or 'a local instance'}: {line}") from None
                    self._started_ray = True
                self._gpus = float(ray.cluster_resources().get("GPU", 0))
                self._remote = ray.remote(run_on_node)
                self._ray = ray
            return self._ray

    async def evaluate(
        self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = (),
        progress: ProgressCallback | None = None,  # unused: a Ray task reports no progress until it returns
    ) -> EvalResult:
        kernel = Path(kernel)
        bundle = read_bundle(kernel)
        ray = await self._connect()
        # A check-only evaluation builds and reads source: no GPU to wait for.
        gpus = 0 if "--check-only" in extra_args else 1
        if gpus and self._gpus == 0:  # the task would wait for a GPU that never comes
            raise ExecutorError("the Ray cluster has no GPUs: start its nodes with GPUs (ray start --num-gpus N)")
        base = harness_args("", scenarios, extra_args, ())[2:]
        shard_args = [base] if self.shards == 1 else [[*base, "--shard", f"{k}/{self.shards}"] for k in range(1, self.shards + 1)]
        submitted = time.time()
        refs = [
            self._remote.options(num_gpus=gpus, num_cpus=1).remote(bundle.kernel, bundle.files, args, self.python,
                                                                   self.timeout_s)
            for args in shard_args
        ]
        try:
            outs = await asyncio.wait_for(asyncio.gather(*refs), self.timeout_s + _SLACK_S)
        except asyncio.TimeoutError:
            raise ExecutorError(f"Ray evaluation timed out after {self.timeout_s + _SLACK_S:g} s") from None
        except ray.exceptions.RayError as exc:
            line = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ExecutorError(f"Ray task failed: {line}") from None
        finally:
            for ref in refs:
                ray.cancel(ref)  # a no-op for finished tasks; stops the rest if we were cancelled
        parts = []
        for k, out in enumerate(outs, start=1):
            what = "harness on Ray" + (f" (shard {k}/{self.shards})" if self.shards > 1 else "")
            part = parse_result(Completed(out["rc"], out["stdout"], out["stderr"]), what)
            part.device["host"] = out["host"]
            part.device["queue_wait_s"] = round(max(0.0, out["started"] - submitted), 3)
            parts.append(part)
        if len(parts) == 1:
            result = parts[0]
        else:
            try:
                result = merge_results(parts, scenario_order(kernel, scenarios, extra_args))
            except ValueError as exc:
                raise ExecutorError(f"Ray shards do not merge: {exc}") from None
            result.device["host"] = ",".join(dict.fromkeys(p.device["host"] for p in parts))
            result.device["queue_wait_s"] = max(p.device["queue_wait_s"] for p in parts)
        if result.kernel_sha256 != hashlib.sha256(bundle.source).hexdigest():
            raise ExecutorError("Ray evaluated other content than the kernel sent")
        result.kernel = str(kernel)
        return result

    async def close(self) -> None:
        if self._ray is not None and self._started_ray:
            await asyncio.to_thread(self._ray.shutdown)
        self._ray = None
        self._remote = None
        self._started_ray = False
