"""An executor for CPU tests that returns real-schema EvalResults derived from the kernel's text.

Directives in the kernel source steer it (one per line, anywhere in the file):
    // fake: speedup=1.25        every scenario this much faster than its baseline (default 1.0)
    // fake: wrong=<scenario id> that scenario is incorrect
    // fake: build-error         the build fails with a compile error on the directive's line
    // fake: check-fail=<name>   that static check fails
    // fake: executor-error      the executor itself fails (ExecutorError)
Per-scenario times carry a small deterministic jitter derived from the text, so two different kernels
never time identically and the same kernel always does, unless `drift` perturbs a particular call.
Every result goes through EvalResult.to_dict() and EvalResult.from_dict(), i.e. schema validation.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.result import BuildReport, Check, CompileError, EvalResult, ScenarioResult
from kstui.executors.protocol import ExecutorError

_DIRECTIVE = re.compile(r"//\s*fake:\s*([a-z-]+)(?:=(\S+))?")
DEFAULT_SCENARIOS = {
    "bf16-d64-b2-h8x8-s1024x1024": 40.0,
    "bf16-d128-b2-h16x16-s2048x2048-causal": 120.0,
    "fp16-d128-b1-h32x8-s4096x4096": 310.0,
    "fp16-d64-b4-h16x16-s512x512-causal": 18.0,
}
CHECKS = ("forbidden-include", "no-host-sync", "entry-point")


def _unit(text: str, salt: str) -> float:
    """A deterministic number in [0, 1) from the text."""
    return int.from_bytes(hashlib.sha256(f"{salt}\0{text}".encode()).digest()[:8], "big") / 2**64


@dataclass
class FakeExecutor:
    baselines: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SCENARIOS))
    spread_pct: float = 0.2
    delay_s: float = 0.0
    # drift(call_no, kernel_text) -> factor applied to this call's times (1.0 = none); for noise tests.
    drift: Callable[[int, str], float] | None = None
    calls: list[tuple[Path, str]] = field(default_factory=list)
    # per call, every file beside the kernel evaluated (name -> bytes): what a harness would read as the task
    beside: list[dict[str, bytes]] = field(default_factory=list)
    parallelism: int = 1  # GPUs it can use at once

    def describe(self) -> str:
        return "fake"

    async def close(self) -> None:
        return None

    async def evaluate(self, kernel: Path, *, scenarios: str = "full", extra_args: Sequence[str] = (),
                       progress: Callable[[dict], None] | None = None) -> EvalResult:
        data = Path(kernel).read_bytes()
        if progress is not None:  # what a harness reports on its way: one scenario done of all
            progress({"phase": "correctness", "done": 1, "total": len(self.baselines), "elapsed_s": 0.0,
                      "eta_s": self.delay_s, "failed": []})
        self.calls.append((Path(kernel), scenarios))
        self.beside.append({p.name: p.read_bytes() for p in Path(kernel).parent.iterdir() if p.is_file()})
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = data.decode("utf-8", "surrogateescape")
        result = self.result_for(text, Path(kernel).name, hashlib.sha256(data).hexdigest(), scenarios,
                                 call_no=len(self.calls))
        return EvalResult.from_dict(result.to_dict())

    def result_for(self, text: str, name: str, sha: str, scenarios: str, call_no: int = 1) -> EvalResult:
        directives: dict[str, list[str]] = {}
        lines: dict[str, int] = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in _DIRECTIVE.finditer(line):
                directives.setdefault(m.group(1), []).append(m.group(2) or "")
                lines.setdefault(m.group(1), lineno)
        if "executor-error" in directives:
            raise ExecutorError("fake executor: the evaluation host is unreachable")
        result = EvalResult(task="attention", kernel=name, kernel_sha256=sha, scenario_set=scenarios,
                            build=BuildReport(ok=True, seconds=0.01, registers=96, smem_bytes=32768),
                            device={"name": "fake", "host": "fake", "call_no": call_no})
        if "build-error" in directives:
            result.build = BuildReport(ok=False, seconds=0.01, log="fake nvcc: error",
                                       errors=[CompileError(name, lines["build-error"], "expected a ';'")])
            result.finalize()
            return result
        failing_checks = set(directives.get("check-fail", []))
        result.checks = [Check(c, c not in failing_checks, "fake check failed" if c in failing_checks else "")
                         for c in CHECKS]
        if scenarios == "check-only":
            result.finalize()
            return result
        speedup = float((directives.get("speedup") or ["1.0"])[-1])
        wrong = set(directives.get("wrong", []))
        factor = self.drift(call_no, text) if self.drift else 1.0
        ids = list(self.baselines) if scenarios in ("full", "quick") else scenarios.split(",")
        for sid in ids:
            base = self.baselines[sid]
            jitter = 1.0 + (_unit(text, sid) - 0.5) * self.spread_pct / 100.0
            t = base / speedup * jitter * factor
            ok = sid not in wrong
            result.scenarios.append(ScenarioResult(
                id=sid, timed=True, correct=ok, verdict="ok" if ok else "wrong",
                detail="" if ok else "max abs err 0.31 > tol 0.02", max_abs_err=0.001 if ok else 0.31,
                tolerance=0.02, time_us=t, spread_pct=self.spread_pct, baseline="fa3", baseline_us=base,
                baselines={"fa3": base}, speedup=base / t))
        result.finalize()
        return result


# --- helpers for session tests ----------------------------------------------------------------------

KERNEL_BODY = """#include <cuda_runtime.h>
// fake: speedup={speedup}
extern "C" int kstui_attention_fwd() {{ return 0; }}
"""


def kernel_text(speedup: float = 1.0, extra: str = "") -> str:
    return KERNEL_BODY.format(speedup=speedup) + extra


def make_workspace(root: Path, speedup: float = 1.0, name: str = "k") -> Path:
    """A workspace folder with a kernel and its task file; returns the kernel's path."""
    root.mkdir(parents=True, exist_ok=True)
    kernel = root / f"{name}.cu"
    kernel.write_text(kernel_text(speedup))
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    return kernel


class EventLog:
    """A session subscriber that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list = []
        self._changed = asyncio.Event()

    def __call__(self, event) -> None:
        self.events.append(event)
        self._changed.set()

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_for(self, kind: type, count: int = 1, timeout: float = 10.0,
                       where: Callable[[object], bool] = lambda e: True) -> list:
        async def until() -> list:
            while True:
                found = [e for e in self.of(kind) if where(e)]
                if len(found) >= count:
                    return found
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(until(), timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """`python tests/fakes.py FILE [--scenarios S] [--json -]`: the fake as an --eval-cmd, JSON on stdout."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--scenarios", default="full")
    parser.add_argument("--json", default="-")
    args, _ = parser.parse_known_args(argv)
    try:
        result = asyncio.run(FakeExecutor().evaluate(Path(args.file), scenarios=args.scenarios))
    except ExecutorError as exc:
        sys.stderr.write(f"{exc}\n")
        return 3
    sys.stdout.write(result.to_json() + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
