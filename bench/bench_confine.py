"""What the worker's sandbox costs per evaluation: the same evaluations with it and without it.

For each mode (bubblewrap: KSTUI_WORKER_SANDBOX=require, so an unconfined run fails loudly; off:
KSTUI_WORKER_SANDBOX=off), alternating so drift hits both alike: `harness eval` from a fresh process
(cold worker), and one `harness serve` given a first request (cold worker) then, after a pause for the
next worker to prepare, prepared ones. One cache directory for both modes, filled by a first
evaluation of each mode that is not reported. Prints `BENCH` lines: wall time as the caller sees it
and the worker's own profile (startup to its device line, wait for ready, warm-up).
Usage: python bench/bench_confine.py [--out DIR] [--selection quick|full] [--cli N] [--prepared N] [--pause S]
bubblewrap comes from $KSTUI_BWRAP or PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "workspace" / "flash_fwd.cu"
MODES = {"bubblewrap": "require", "unconfined": "off"}
PHASES = ("worker_startup_s", "worker_wait_s", "warmup_s", "reference_s", "timing_s")


def bench(name: str, value: str) -> None:
    print(f"BENCH {name:<44} {value}", flush=True)


def _env(mode: str, cache: Path) -> dict[str, str]:
    return {**os.environ, "KSTUI_WORKER_SANDBOX": MODES[mode], "KSTUI_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}


def _summary(result: dict, wall: float) -> str:
    prof = result.get("profile", {})
    ok = sum(1 for s in result["scenarios"] if s["correct"])
    parts = " ".join(f"{k[:-2]} {prof[k]:.2f}" for k in PHASES if k in prof)
    return (f"{wall:.2f} s ({ok}/{len(result['scenarios'])} correct, sandbox {result['device'].get('sandbox', '?')!r}; "
            f"{parts})")


def cli_eval(mode: str, cache: Path, selection: str) -> tuple[dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(KERNEL), "--scenarios", selection, "--json", "-"],
                          capture_output=True, text=True, env=_env(mode, cache), cwd=ROOT, timeout=900)
    wall = time.monotonic() - t0
    if not proc.stdout.strip():
        raise SystemExit(f"BAD {mode}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout), wall


class Server:
    def __init__(self, mode: str, cache: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "harness", "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=_env(mode, cache), cwd=ROOT)
        self.n = 0

    def eval(self, selection: str) -> tuple[dict, float]:
        assert self.proc.stdin and self.proc.stdout
        self.n += 1
        t0 = time.monotonic()
        argv = [str(KERNEL), "--scenarios", selection, "--json", "-"]
        self.proc.stdin.write(json.dumps({"id": self.n, "argv": argv}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        wall = time.monotonic() - t0
        if not reply["stdout"]:
            raise SystemExit(f"BAD serve: {reply['stderr'][-500:]}")
        return json.loads(reply["stdout"]), wall

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def _du(path: Path) -> str:
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
    return f"{len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    ap.add_argument("--selection", default="quick")
    ap.add_argument("--cli", type=int, default=2, help="cold `harness eval` runs per mode")
    ap.add_argument("--prepared", type=int, default=2, help="prepared-worker requests per mode")
    ap.add_argument("--pause", type=float, default=15.0, help="seconds before each prepared request")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "confine-cache"
    sel = args.selection
    for mode in MODES:  # fills the build, baseline and Triton caches; not reported
        result, wall = cli_eval(mode, cache, sel)
        bench(f"{mode} {sel} first (caches filled)", _summary(result, wall))
    bench("trusted Triton cache", _du(cache / "judge" / "triton"))
    for i in range(args.cli):
        for mode in MODES:
            bench(f"{mode} {sel} cold worker, harness eval {i + 1}", _summary(*cli_eval(mode, cache, sel)))
    for mode in MODES:
        server = Server(mode, cache)
        try:
            bench(f"{mode} {sel} cold worker, serve", _summary(*server.eval(sel)))
            for i in range(args.prepared):
                time.sleep(args.pause)
                result, wall = server.eval(sel)
                (args.out / f"confine-{mode}-{sel}-prepared-{i + 1}.json").write_text(json.dumps(result, indent=1))
                bench(f"{mode} {sel} prepared worker {i + 1}", _summary(result, wall))
        finally:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
