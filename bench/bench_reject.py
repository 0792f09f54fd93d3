"""Time from request to verdict for every wrong kernel of tests/kernels/, through `harness serve` as a
session's local executor uses it (GPU).

Every case is built first (nvcc on the CPUs, in parallel), so each request finds its build cached, as
the agent's next evaluation finds the kernel it just built; a pause before each request that runs a
worker stands in for the agent's turn while the next worker prepares. Each request asks for `--progress`, so the time of
the first failure is seen too. Prints `BENCH` lines: per case, the wall time from request to verdict
minus the build, the worker's wait, when the first failure showed, the verdicts and whether any
scenario was timed (none may be); then the median and the maximum, and the starting kernel passing
afterwards (the harness is healthy). Writes each EvalResult and its progress lines to --out.
Usage: python bench/bench_reject.py [--out DIR] [--scenarios quick] [--pause S] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from kernels.suite import WrongKernel, wrong_kernels  # noqa: E402

from harness.result import EvalResult  # noqa: E402

WORKSPACE = ROOT / "workspace"


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


def build_all(cases: list[WrongKernel]) -> None:
    from harness.build import BuildInputError, BuildOptions, build
    from harness.taskfile import load_task_file

    def one(case: WrongKernel) -> None:
        tf = load_task_file(case.path)
        try:
            build(case.path, ["kstui_attention_fwd"],
                  BuildOptions(fast_math=tf.fast_math, extra_flags=tf.build_flags, timeout_s=tf.build_timeout_s))
        except BuildInputError:
            pass  # fails again in its evaluation, which is what it is judged on

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, cases))


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "harness", "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.ids = itertools.count(1)

    def eval(self, kernel: Path, *args: str) -> tuple[int, EvalResult | None, str, float, list[tuple[float, dict]]]:
        """(rc, result, stderr, wall seconds, [(seconds after the request, progress)])."""
        rid = next(self.ids)
        assert self.proc.stdin and self.proc.stdout
        t0 = time.monotonic()
        self.proc.stdin.write(json.dumps({"id": rid, "argv": [str(kernel), "--json", "-", "--progress", *args]}) + "\n")
        self.proc.stdin.flush()
        progress = []
        while True:
            msg = json.loads(self.proc.stdout.readline())
            if "progress" in msg:
                progress.append((time.monotonic() - t0, msg["progress"]))
                continue
            wall = time.monotonic() - t0
            assert msg["id"] == rid, msg
            result = EvalResult.from_json(msg["stdout"]) if msg["stdout"].strip() else None
            return msg["rc"], result, msg["stderr"], wall, progress

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def observed(result: EvalResult) -> set[str]:
    seen = {f"verdict:{s.verdict}" for s in result.scenarios if not s.correct and s.verdict != "skipped"}
    seen |= {f"check:{c.name}" for c in result.checks if not c.ok}
    if not result.build.ok:
        seen.add("build")
    return seen


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-out" / "reject")
    ap.add_argument("--scenarios", default="quick")
    ap.add_argument("--pause", type=float, default=5.0, help="seconds before each request (the agent's turn)")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cases = wrong_kernels(Path(tempfile.mkdtemp(prefix="kstui-wrong-")))
    if args.only:
        cases = [c for c in cases if c.name in args.only.split(",")]
    for case in cases:
        shutil.copy(WORKSPACE / "flash_fwd.toml", case.path.with_suffix(".toml"))
    t0 = time.monotonic()
    build_all(cases)
    bench("builds of the wrong kernels (s)", f"{time.monotonic() - t0:.1f} for {len(cases)}")
    server = Server()
    after_build: list[float] = []
    problems = 0
    try:
        # The first worker starts cold (torch, the CUDA context); later ones are prepared during the pause.
        cold = next(c for c in cases if "verdict:wrong" in c.expect)
        rc, _, _, wall, _ = server.eval(cold.path, "--scenarios", args.scenarios)
        bench(f"{cold.name}, cold worker (not counted)", f"rc {rc}, {wall:.2f} s")
        for case in cases:
            if not all(e == "build" or e.startswith("check:") for e in case.expect):
                time.sleep(args.pause)  # a case rejected before any worker runs leaves the prepared one alone
            rc, result, err, wall, progress = server.eval(case.path, "--scenarios", args.scenarios)
            (args.out / f"{case.name}.json").write_text(result.to_json(indent=1) if result else err)
            (args.out / f"{case.name}.progress").write_text("".join(f"{t:.3f} {json.dumps(p)}\n" for t, p in progress))
            if result is None:
                bench(case.name, f"NO RESULT rc {rc}: {err.strip().splitlines()[-1:]}")
                problems += 1
                continue
            seen = observed(result)
            timed = [s.id for s in result.scenarios if s.time_us is not None]
            first = next((t for t, p in progress if p["failed"]), None)
            net = wall - result.build.seconds
            after_build.append(net)
            ok = rc == 1 and bool(seen & set(case.expect)) and not timed
            problems += not ok
            faults = sum(s.verdict in ("crash", "timeout") for s in result.scenarios)
            bench(case.name, f"{'ok' if ok else 'UNEXPECTED'} {net:.2f} s after the build ({wall:.2f} wall, worker wait "
                             f"{result.profile.get('worker_wait_s', 0):.2f}, first failure "
                             f"{'-' if first is None else f'{first:.2f}'}); {sorted(seen)}; faults {faults}; "
                             f"timed {len(timed)}; expected one of {case.expect}")
        time.sleep(args.pause)
        rc, healthy, err, wall, _ = server.eval(WORKSPACE / "flash_fwd.cu", "--scenarios", args.scenarios)
        bench("starting kernel after the suite", f"rc {rc}, {'passed' if healthy and healthy.passed else 'FAILED'}, "
                                                 f"{wall:.2f} s")
        problems += not (healthy and healthy.passed)
    finally:
        server.close()
    if after_build:
        bench("request to verdict after the build (s)",
              f"median {statistics.median(after_build):.2f}, max {max(after_build):.2f} over {len(after_build)} "
              f"(goal: median <= 5, max <= 15)")
    bench("cases not rejected as expected, or timed", str(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
