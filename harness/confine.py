"""bubblewrap confinement for a process that runs model-written native code (the evaluation worker).

The confined process sees an allowlist of the file system, everything else is absent:
- read-only: /usr, /etc without any entry that is not readable by everyone (shadow, ssh host keys,
  TLS private keys: the system's own judgement of what is secret), the root's /bin and /lib links,
  /sys, the library directories the loader is configured with, and what the caller names read-only
  (the Python installation, the harness package, a cache);
- a new /dev with only the GPU's device nodes bound in, a new /proc of its own pid namespace
  (with /proc/driver/nvidia), a private /tmp;
- writable: only what the caller names;
- hidden: what the caller names hidden (the workspace): an empty tmpfs over it, even where it lies
  inside a bound directory (whatever the caller bound inside it is bound again on top).
No network, no capabilities, no new user namespaces inside, its own user/pid/ipc/uts/cgroup
namespaces, a new session (no terminal injection), and it dies with its parent.

`detect()` probes bubblewrap once per process (per bwrap binary) and says in one line why the worker
runs unconfined where it cannot.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 20
SYSTEM_DIRS = ("/usr", "/etc")
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
TMP_BYTES = 1 << 30  # the private /tmp (memory): a kernel cannot fill the machine's RAM through it
_BASE = ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session")


@dataclass(frozen=True)
class Mounts:
    ro: tuple[Path, ...] = ()
    rw: tuple[Path, ...] = ()
    hide: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Bubblewrap:
    bwrap: str

    def wrap(self, argv: Sequence[str], mounts: Mounts, chdir: Path) -> list[str]:
        """argv run confined, seeing only the system, `mounts` and the GPU."""
        return [self.bwrap, *_base_flags(), *mount_args(mounts), "--chdir", str(chdir), "--", *argv]


def _base_flags() -> list[str]:
    # As root, capabilities survive into the namespace unless dropped; as a user there are none.
    return [*_BASE, *(["--cap-drop", "ALL"] if os.geteuid() == 0 else [])]


def mount_args(mounts: Mounts) -> list[str]:
    """bubblewrap's mount arguments, parents before children so a deeper mount lands on top."""
    ops: list[tuple[str, str, str]] = [("--ro-bind", d, d) for d in _system_dirs()]
    ops += [("--ro-bind", "/dev/null", p) for p in _secret_files()] + [("--tmpfs", "", p) for p in _secret_dirs()]
    ops += [("--ro-bind", source, target) for source, target in _sources_and_targets(mounts.ro)]
    ops += [("--bind", source, target) for source, target in _sources_and_targets(mounts.rw)]
    ops = _without_links_inside(ops)
    bound = [Path(p) for _, _, p in ops]
    hidden = {os.path.realpath(p) for p in mounts.hide} | {os.path.abspath(p) for p in mounts.hide}
    ops += [("--tmpfs", "", p) for p in sorted(hidden) if any(_within(Path(p), b) for b in bound)]
    ops.sort(key=lambda op: len(Path(op[2]).parts))  # stable: same depth keeps the order above
    args = [arg for name, target in _root_links() for arg in ("--symlink", target, name)]
    args += ["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/sys", "/sys", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    args += [arg for node in _gpu_nodes() for arg in ("--dev-bind", node, node)]
    for flag, source, target in ops:
        args += [flag, target] if flag == "--tmpfs" else [flag, source, target]
    return args


def _sources_and_targets(paths: Iterable[Path]) -> list[tuple[str, str]]:
    """Each existing path bound from where it really is, both there and under the name it was given."""
    pairs: dict[str, str] = {}
    for p in paths:
        real = os.path.realpath(p)
        if os.path.exists(real):
            pairs.setdefault(real, real)
            pairs.setdefault(os.path.abspath(p), real)
    return [(source, target) for target, source in pairs.items()]


def _without_links_inside(ops: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Drop binds onto a symlink that lies inside another bound directory: it is already there and leads
    to its target (bound at its real path), and bubblewrap cannot mount over it (/usr/local/cuda, a link
    to /usr/local/cuda-13.0 under the bound /usr)."""
    targets = [Path(t) for _, _, t in ops]
    return [op for op in ops if op[0] == "--tmpfs" or not os.path.islink(op[2])
            or not any(t != Path(op[2]) and _within(Path(op[2]), t) for t in targets)]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@functools.lru_cache(maxsize=1)
def _system_dirs() -> tuple[str, ...]:
    """/usr, /etc, the root's /bin and /lib where they are directories, and the library directories
    the loader is configured with (the driver's, often)."""
    dirs = [d for d in (*SYSTEM_DIRS, *ROOT_LINKS) if os.path.isdir(d) and not os.path.islink(d)]
    for conf in ["/etc/ld.so.conf", *sorted(glob.glob("/etc/ld.so.conf.d/*.conf"))]:
        try:
            lines = Path(conf).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            real = os.path.realpath(line)
            if line.startswith("/") and os.path.isdir(real) and not any(_within(Path(real), Path(d)) for d in dirs):
                dirs.append(real)
    return tuple(dirs)


@functools.lru_cache(maxsize=1)
def _root_links() -> tuple[tuple[str, str], ...]:
    """(/bin, usr/bin) for each of the root's merged-/usr links; real directories are bound instead."""
    return tuple((p, os.readlink(p)) for p in ROOT_LINKS if os.path.islink(p))


@functools.lru_cache(maxsize=1)
def _etc_secrets() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, directories) under /etc that are not readable by everyone."""
    files, dirs = [], []
    for top, subdirs, names in os.walk("/etc"):
        for name in list(subdirs):
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) and (mode & 0o005) != 0o005:
                dirs.append(path)
                subdirs.remove(name)
        for name in names:
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) and not mode & 0o004:
                files.append(path)
    return tuple(files), tuple(dirs)


def _secret_files() -> tuple[str, ...]:
    return _etc_secrets()[0]


def _secret_dirs() -> tuple[str, ...]:
    return _etc_secrets()[1]


def _gpu_nodes() -> list[str]:
    return sorted({p for pattern in GPU_NODES for p in glob.glob(pattern)})


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    """None when bubblewrap runs a confined `true` here with the worker's flags, else why not (one line)."""
    cmd = [bwrap, *_base_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[0] if lines else f"exit code {done.returncode}"
    return None


def _setting() -> str:
    return os.environ.get("KSTUI_WORKER_SANDBOX", "").strip().lower()


def required() -> bool:
    """$KSTUI_WORKER_SANDBOX=require: an evaluation fails rather than run a kernel unconfined."""
    return _setting() == "require"


def detect() -> tuple[Bubblewrap | None, str]:
    """(the sandbox or None, what EvalResult.device["sandbox"] says), for the worker and the build.

    $KSTUI_WORKER_SANDBOX=off runs them unconfined; otherwise they are confined where bubblewrap
    ($KSTUI_BWRAP, else bwrap on PATH) passes its probe."""
    if _setting() in ("off", "0", "no", "none"):
        return None, "none: turned off (KSTUI_WORKER_SANDBOX=off)"
    found = os.environ.get("KSTUI_BWRAP") or shutil.which("bwrap")
    if not found or not os.access(found, os.X_OK):
        return None, "none: bubblewrap (bwrap) is not installed: the kernel runs unconfined"
    reason = _probe(found)
    if reason is None:
        return Bubblewrap(found), "bubblewrap"
    return None, f"none: bubblewrap cannot run here ({reason}): the kernel runs unconfined"
