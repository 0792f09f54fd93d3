"""`python -m harness eval …` (also `kstui eval …`): evaluate a kernel, print the table and/or JSON.

Exit codes: 0 every scenario correct and every check passed (or, with --check-only, build and checks
passed); 1 rejected; 2 bad input (one line on stderr). `--progress` writes harness.progress's dicts
while it runs, each as one line `kstui-progress: {json}` on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, TextIO

from harness.progress import PROGRESS_PREFIX
from harness.result import SCHEMA_VERSION
from harness.secret_env import redact, secret_values

if TYPE_CHECKING:
    from harness.pool import WorkerPool


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # to the caller's stderr, which may not be ours
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kstui eval", description="Judge a kernel: build, checks, correctness, timing.")
    p.add_argument("file", type=Path, help="the kernel (.cu) with its task file (.toml) beside it")
    p.add_argument("--scenarios", default="full", help="quick, full (default), exhaustive (full, with the whole FA3 correctness cross product) or comma-separated ids")
    p.add_argument("--scenario", action="append", default=[], metavar="SPEC",
                   help="an ad-hoc timed scenario, e.g. 'dtype=fp16,d=96,b=1,hq=6,hkv=2,sq=77,sk=4099,causal=1'")
    p.add_argument("--json", metavar="PATH|-", help="write the EvalResult JSON to PATH, or alone on stdout with -")
    p.add_argument("--baseline", metavar="NAME", help="compare against this baseline only (e.g. cudnn)")
    p.add_argument("--retime-baselines", action="store_true", help="ignore cached baseline timings")
    p.add_argument("--check-only", action="store_true", help="build and static checks only (no GPU)")
    p.add_argument("--devices", metavar="LIST", help="GPUs to spread scenarios over, e.g. 0,1")
    p.add_argument("--shard", metavar="K/N", help="evaluate only the K-th of N balanced parts")
    p.add_argument("--seed", type=int, help="input seed (default: secret and fresh per evaluation)")
    p.add_argument("--scenario-timeout", type=float, metavar="S", help="per-scenario budget in seconds")
    p.add_argument("--total-timeout", type=float, metavar="S", help="whole-evaluation budget in seconds")
    p.add_argument("--worker-python", metavar="PATH",
                   help="the Python (with torch and CUDA) that runs the worker (default: this one)")
    p.add_argument("--workspace", type=Path, metavar="DIR",
                   help="the agent's workspace: hidden from the worker, and nothing the judge trusts may lie "
                        "inside it (default: the kernel's directory, hidden only)")
    p.add_argument("--list-scenarios", action="store_true", help="print the scenario ids and exit")
    p.add_argument("--progress", action="store_true",
                   help=f"while it runs, write the phase, scenarios done and time left as '{PROGRESS_PREFIX}{{json}}' lines on stderr")
    p.add_argument("--version", action="version", version=f"kstui-harness schema {SCHEMA_VERSION}")
    return p


def _parse_devices(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        devices = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--devices {text!r}: expected GPU indices like 0,1") from None
    if not devices or len(set(devices)) != len(devices) or min(devices) < 0:
        raise ValueError(f"--devices {text!r}: expected distinct GPU indices like 0,1")
    return devices


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or int(n) < 1:
        raise ValueError(f"--shard {text!r}: expected K/N such as 1/2")
    return int(k), int(n)


def progress_lines(stream: TextIO) -> Callable[[dict[str, Any]], None]:
    """`--progress` as lines on a stream: one whole line per call, whichever thread calls."""
    lock = threading.Lock()

    def write(state: dict[str, Any]) -> None:
        with lock:
            stream.write(f"{PROGRESS_PREFIX}{json.dumps(state)}\n")
            stream.flush()

    return write


def _quiet(stream: TextIO) -> None:
    """Point a closed pipe's descriptor at /dev/null, so the interpreter's last flush is silent."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None, pool: "WorkerPool | None" = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None, progress: Callable[[dict[str, Any]], None] | None = None) -> int:
    """One evaluation. `harness serve` passes its pool of prepared workers, captures the output and, for
    `--progress`, takes the progress itself (`progress`) instead of the lines on stderr."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"{exc} (kstui eval --help)", file=stderr)
        return 2
    from harness.report import render
    from harness.runner import BadInput, EvalOptions, evaluate, resolve

    try:
        opts = EvalOptions(selection=args.scenarios, specs=tuple(args.scenario), baseline=args.baseline,
                           retime=args.retime_baselines, check_only=args.check_only,
                           devices=_parse_devices(args.devices), shard=_parse_shard(args.shard), seed=args.seed,
                           scenario_timeout_s=args.scenario_timeout, total_timeout_s=args.total_timeout,
                           workspace=args.workspace,
                           **({"python": args.worker_python} if args.worker_python else {}))
        if args.list_scenarios:
            _, _, scenarios = resolve(args.file, opts)
            try:
                for s in scenarios:
                    print(f"{s.id}\t{'timed' if s.timed else 'check'}\t{s.group}", file=stdout)
                stdout.flush()
            except BrokenPipeError:  # a reader that stopped early (`| head -1`) wanted no more
                _quiet(stdout)
            return 0
        if args.progress:
            progress = progress or progress_lines(stderr)
        result = evaluate(args.file, opts, pool, progress if args.progress else None)
    except (BadInput, ValueError) as exc:
        print(redact(f"kstui eval: {exc}", secret_values()), file=stderr)
        return 2
    except KeyboardInterrupt:
        print("kstui eval: interrupted", file=stderr)
        return 2
    # The one secret policy: no secret of this environment in anything printed or written (a build
    # log can quote a kernel that holds one; the no-secrets check has refused it already).
    secrets = secret_values()
    text = redact(render(result), secrets)
    if args.json == "-":
        print(text, file=stderr)
        stdout.write(redact(result.to_json(), secrets) + "\n")
    else:
        print(text, file=stdout)
        if args.json:
            try:
                Path(args.json).write_text(redact(result.to_json(indent=1), secrets) + "\n")
            except OSError as exc:
                print(f"kstui eval: cannot write {args.json}: {exc.strerror}", file=stderr)
                return 2
    if args.check_only:
        return 0 if result.build.ok and result.checks_ok else 1
    return 0 if result.passed else 1
