"""How an evaluation worker is started: the command line, environment, directory and sandbox.

- Python runs isolated (`-I`: no script or current directory on sys.path, no PYTHON* variable, no
  user site directory), and the harness package is bound by its path (BOOT), so no `harness`,
  `sitecustomize`, `.pth` or `torch.py` the agent planted anywhere is imported. sys.path is the
  worker Python's own (its standard library and site-packages, with their .pth files) plus the
  extra site directories named in $KSTUI_WORKER_SITE (e.g. where FlashAttention 4 was installed):
  a harness-specific opt-in, never PYTHONPATH, which any shell or tool may have set.
- The environment is an allowlist (what CUDA, torch and Triton need), then scrubbed by the secret
  policy: no key, token or credential reaches the kernel. HOME, TMPDIR and every cache are private.
- The working directory is private (harness.worker_files); the workspace is hidden in the sandbox.
- Where bubblewrap works the worker runs inside it (harness.confine), with the Python installation,
  the harness package, the extra site directories, the baseline cache (read-only) and its private
  directory; elsewhere it runs unconfined and the EvalResult says so (device["sandbox"]).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import confine, secret_env, trusted
from harness.worker_files import WorkerFiles

PACKAGE_DIR = Path(__file__).resolve().parent
PROBE_TIMEOUT_S = 60
NPROC = 4096  # tasks (threads included) of the sandbox's user: a fork bomb stops there
FSIZE = 8 << 30  # the largest file the worker may write
BOOT = """\
import importlib.util, sys
pkg = sys.argv[1]
spec = importlib.util.spec_from_file_location("harness", pkg + "/__init__.py", submodule_search_locations=[pkg])
module = importlib.util.module_from_spec(spec)
sys.modules["harness"] = module
spec.loader.exec_module(module)
from harness.worker_boot import boot
boot(sys.argv[2])
"""
_PROBE = ("import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]"
          " + sys.path))")

# Passed through when set (and not withheld by the secret policy); everything else is dropped.
PASSED = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_MAX_CONNECTIONS", "LD_LIBRARY_PATH", "CC",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK",
    "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH",
    "TRITON_LIBDEVICE_PATH",
})
PASSED_PREFIXES = ("LC_", "NVIDIA_")
SEARCH_PATHS = ("PATH", "LD_LIBRARY_PATH")  # their entries inside a hidden directory are dropped
# What the worker runs: the driver's version query, and the C compiler Triton builds its launcher with.
TOOLS = ("nvidia-smi", "cc", "gcc", "c++", "g++", "ld", "as")


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: WorkerFiles
    sandbox: str  # "bubblewrap", or "none: why"


def extra_site_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """$KSTUI_WORKER_SITE: extra site directories for the worker (absolute, existing)."""
    env = os.environ if env is None else env
    return [Path(p) for p in env.get("KSTUI_WORKER_SITE", "").split(os.pathsep) if p and os.path.isabs(p)
            and os.path.isdir(p)]


def _inside(path: str | Path, hidden: Sequence[Path]) -> bool:
    real = Path(os.path.realpath(path))
    return any(real == h or h in real.parents for h in hidden)


def worker_environment(env: Mapping[str, str], files: WorkerFiles, hide: Sequence[Path]) -> dict[str, str]:
    """The allowlisted environment, secrets withheld, with private homes for every cache."""
    hidden = [Path(os.path.realpath(h)) for h in hide]
    extra = {n.strip() for n in env.get("KSTUI_WORKER_ENV", "").split(",") if n.strip()}
    out = {k: v for k, v in env.items()
           if (k in PASSED or k.startswith(PASSED_PREFIXES) or k in extra) and not secret_env.is_withheld(k, v)}
    for name in SEARCH_PATHS:
        if name in out:
            out[name] = os.pathsep.join(p for p in out[name].split(os.pathsep)
                                        if os.path.isabs(p) and not _inside(p, hidden))
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    home, tmp = str(files.home), str(files.tmp)
    out.update({
        "HOME": home, "TMPDIR": tmp, "XDG_CACHE_HOME": f"{home}/.cache", "XDG_CONFIG_HOME": f"{home}/.config",
        "TRITON_CACHE_DIR": str(files.triton), "TRITON_HOME": home, "CUDA_CACHE_PATH": f"{home}/.nv/ComputeCache",
        "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor",
    })
    return out


def _is_elf(path: str) -> bool:
    try:
        with open(os.path.realpath(path), "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


@functools.lru_cache(maxsize=8)
def python_roots(python: str) -> tuple[str, ...]:
    """The directories a Python needs to start: its prefixes and its isolated sys.path (asked once).

    A wrapper script (not an executable binary) gets its own directory and this Python's roots."""
    if not _is_elf(python):
        own = python_roots(sys.executable) if os.path.abspath(python) != os.path.abspath(sys.executable) else ()
        return (os.path.dirname(os.path.abspath(python)), *own)
    try:
        out = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, cwd="/", env={"PATH": os.environ.get("PATH", "")})
        paths = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        paths = []
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return tuple(dict.fromkeys(p for p in [venv, *paths] if isinstance(p, str) and os.path.isabs(p)
                               and os.path.exists(p)))


def judge_cache_dir(prep: Mapping[str, Any]) -> Path | None:
    """The directory of the baseline cache and the trusted Triton cache, from the preparation."""
    return Path(prep["cache_path"]).parent if prep.get("cache_path") else None


def launch(prep: Mapping[str, Any], python: str) -> Launch:
    """Everything needed to start a worker for this preparation; its private directory is made here."""
    files = WorkerFiles()
    hide = [Path(p) for p in prep.get("hide", ())]
    cache = judge_cache_dir(prep)
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            trusted.seed(cache / "triton", files.triton)
        except OSError:
            pass  # no cache: the worker compiles what it needs
    sites = [p for p in extra_site_dirs() if not _inside(p, [Path(os.path.realpath(h)) for h in hide])]
    box, note = confine.detect()
    config = {"sites": [str(p) for p in sites], "nproc": NPROC if box else None, "fsize": FSIZE}
    argv = [python, "-I", "-u", "-c", BOOT, str(PACKAGE_DIR), json.dumps(config)]
    env = worker_environment(os.environ, files, hide)
    if box is not None:
        ro = [PACKAGE_DIR, *map(Path, python_roots(python)), *sites, *_tool_dirs(env), files.eval,
              *([cache] if cache else [])]
        ro = [p for p in ro if (p == files.eval or not _inside(p, [files.root])) and not _holds_home(p)]
        argv = box.wrap(argv, confine.Mounts(ro=tuple(ro), rw=(files.root,), hide=tuple(hide)), files.tmp)
    return Launch(argv, env, files.tmp, files, note)


def _tool_dirs(env: Mapping[str, str]) -> list[Path]:
    """The directories of the tools the worker runs and of its libraries (the driver's, often).

    A compiler is bound with its installation prefix: gcc under /opt/gcc/bin (the GPU image's $CC, which
    Triton builds its launcher with) runs cc1 from /opt/gcc/libexec and links from /opt/gcc/lib."""
    named = [env[n] for n in ("CC", "CXX") if env.get(n)]
    found = [t for t in (shutil.which(name, path=env.get("PATH")) for name in (*TOOLS, *named)) if t]
    dirs = [Path(t).parent for t in found] + [Path(os.path.realpath(t)).parent for t in found]
    home = [Path(os.path.realpath(Path.home()))]
    dirs += [d.parent for d in dirs if d.name == "bin" and len(d.parent.parts) > 2 and not _inside(d.parent, home)]
    dirs += [Path(p) for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return dirs + [Path(env[n]) for n in ("CUDA_HOME", "CUDA_PATH") if env.get(n)]


def _holds_home(path: Path) -> bool:
    """The home directory or a directory above it: binding it would show the home (a Python
    installation inside the home is bound on its own)."""
    home = Path(os.path.realpath(Path.home()))
    real = Path(os.path.realpath(path))
    return real == home or real in home.parents


def outside_workspace(workspace: Path, python: str, cache_dir: Path) -> str | None:
    """None when nothing the worker trusts lies inside the workspace, else one line naming what does."""
    ws = [Path(os.path.realpath(workspace))]
    named = [("the harness", PACKAGE_DIR), ("the cache", cache_dir), ("the worker's Python", Path(python)),
             *[("the worker's Python installation", Path(p)) for p in python_roots(python)],
             *[("KSTUI_WORKER_SITE", p) for p in extra_site_dirs()]]
    for what, path in named:
        if _inside(path, ws):
            return f"{what} ({path}) lies inside the workspace {workspace}, where the agent can change it"
    return None
