"""Interpreters for executor tests: the real one, and fakes whose `harness` misbehaves on purpose.

A fake is a tiny `harness` package in a temporary directory plus a shell wrapper that puts it on
PYTHONPATH, changes into it (`python -m` looks in the working directory first) and execs the real
interpreter with -S (no site-packages, so the installed harness cannot shadow the fake): to an executor
it is just another Python.
"""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

KERNEL_SOURCE = '#include <cuda_runtime.h>\nextern "C" int kstui_noop(cudaStream_t s) { return 0; }\n'

# A harness whose `eval` prints a schema-valid EvalResult (the kernel's real sha256) and echoes its
# arguments (and CUDA_VISIBLE_DEVICES) into result.device, so a test sees exactly what an executor invoked.
ECHO_HARNESS = r'''
import hashlib, json, os, sys
args = sys.argv[2:]
kernel = args[0]
try:
    sha = hashlib.sha256(open(kernel, "rb").read()).hexdigest()
except OSError as exc:
    print(f"harness: cannot read {kernel}: {exc.strerror}", file=sys.stderr)
    sys.exit(2)
ids = ["s1", "s2", "s3", "s4"]
if "--shard" in args:
    k, n = map(int, args[args.index("--shard") + 1].split("/"))
    ids = ids[k - 1 :: n]
check_only = "--check-only" in args
scen = [] if check_only else [
    {"id": i, "timed": True, "correct": True, "verdict": "ok", "speedup": 1.5, "spread_pct": 1.0}
    for i in ids
]
print(json.dumps({
    "schema": 1, "task": "noop", "kernel": kernel, "kernel_sha256": sha, "scenario_set": "quick",
    "build": {"ok": True}, "device": {"argv": args, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}, "checks": [{"name": "forbidden-include", "ok": True}],
    "scenarios": scen, "all_correct": bool(scen), "geomean_speedup": 1.5 if scen else None,
}))
'''


def write_kernel(directory: Path, name: str = "noop.cu", source: str = KERNEL_SOURCE) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    kernel = directory / name
    kernel.write_text(source)
    kernel.with_suffix(".toml").write_text('task = "noop"\n')
    return kernel


def fake_python(root: Path, main: str, *, schema: int = 1, path_dirs: str | None = None) -> Path:
    """A wrapper interpreter whose `python -m harness` runs `main`; harness.result.SCHEMA_VERSION = schema.

    path_dirs, when given, replaces PATH for everything the interpreter runs (fake tools such as
    nvidia-smi live there).
    """
    pkg = root / "site" / "harness"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "result.py").write_text(f"SCHEMA_VERSION = {schema}\n")
    (pkg / "__main__.py").write_text(textwrap.dedent(main))
    wrapper = root / "python"
    path_line = f'PATH="{path_dirs}"; export PATH\n' if path_dirs is not None else ""
    wrapper.write_text(
        f'#!/bin/sh\n{path_line}PYTHONPATH="{root / "site"}"; export PYTHONPATH\ncd "{root / "site"}"\nexec "{sys.executable}" -S "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return wrapper


def fake_harness(python: Path) -> Path:
    """The harness package a fake_python's `python -m harness` would run (the local executor binds it by path)."""
    return python.parent / "site" / "harness"


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def write_spec_kernel(workspace: Path) -> Path:
    """`kstui new op` in workspace/ops, with a baseline one folder up (../shared/base.py): a spec task
    whose judge files are the task file, the reference and that baseline; returns the kernel's path."""
    from kstui.new_task import render

    ops, shared = workspace / "ops", workspace / "shared"
    ops.mkdir(parents=True)
    shared.mkdir()
    for name, text in render("op").items():
        (ops / name).write_text(text)
    toml = ops / "op.toml"
    toml.write_text(toml.read_text().replace('baselines = ["eager", "compiled"]',
                                             'baselines = ["eager", "../shared/base.py:slow"]'))
    (shared / "base.py").write_text("import torch\n\n\ndef slow(x):\n    return x * torch.sigmoid(x)\n")
    return ops / "op.cu"
