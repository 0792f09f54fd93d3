"""What a worker learnt before it loaded the candidate, and the parent keeping it.

A kernel's host code runs inside the worker's process once the library is loaded, so nothing the
worker reports after that may change what a *later* evaluation trusts. Two things are kept across
evaluations: the baseline timings (which baseline is the record for a scenario, harness.baselines)
and the Triton cache (the references' compiled kernels). Both are written by the parent only, from
one report the worker sends on a pipe of its own and closes *before* it loads the library: after
that the pipe is gone from the process, so nothing the candidate does can add to it.

- Baselines: the report's measurements are merged into the cache file, which the worker can read
  but not write (its directory is bound read-only in the sandbox).
- Triton: each worker compiles into a private directory seeded with a copy of the trusted cache;
  the report lists the entries compiled before the load with each file's SHA-256, and the parent
  copies an entry into the trusted cache only if every file still has that hash (copied first,
  hashed after, so a file rewritten in between is never kept). An entry is published with one
  rename, so a reader sees all of it or none.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from harness import baselines

REPORT_LIMIT = 64 << 20  # bytes read from a report before it is dropped as malformed


# ---------------------------------------------------------------------------------------------------
# The worker's side


def triton_entries(directory: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(directory) if e.is_dir()}
    except OSError:
        return set()


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def triton_manifest(directory: Path, before: set[str]) -> dict[str, dict[str, str]]:
    """{entry: {file: sha256}} of the entries made since `before` was listed."""
    manifest = {}
    for entry in sorted(triton_entries(directory) - before):
        files = {}
        for f in os.scandir(directory / entry):
            if f.is_file(follow_symlinks=False) and not f.name.startswith("."):
                files[f.name] = _hash(Path(f.path))
        manifest[entry] = files
    return manifest


def send_report(fd: int | None, key: str, changes: dict[str, Any], triton: dict[str, dict[str, str]]) -> None:
    """Write the one report and close the pipe for good (call before loading any candidate)."""
    if fd is None:
        return
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"key": key, "baselines": changes, "triton": triton}) + "\n")


# ---------------------------------------------------------------------------------------------------
# The parent's side


class Keeper:
    """Reads a worker's report in a thread and keeps it: baselines merged, Triton entries harvested."""

    def __init__(self, fd: int, cache_path: Path | None, triton_private: Path, triton_trusted: Path | None) -> None:
        self.fd = fd
        self.cache_path, self.private, self.trusted = cache_path, triton_private, triton_trusted
        self._thread = threading.Thread(target=self._run, name="trusted-report", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        data = b""
        try:
            while len(data) <= REPORT_LIMIT:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(self.fd)
        line = data.split(b"\n", 1)[0]
        try:
            report = json.loads(line)
        except ValueError:
            return  # no report (the worker died first, or never got that far): nothing is kept
        if isinstance(report, dict) and isinstance(report.get("key"), str) and self.cache_path and self.trusted:
            keep(report, self.cache_path, self.private, self.trusted)


def keep(report: dict[str, Any], cache_path: Path, private: Path, trusted: Path) -> None:
    if isinstance(report.get("baselines"), dict):
        try:
            baselines.merge(cache_path, report["key"], report["baselines"])
        except OSError:
            pass  # an unwritable cache costs a later evaluation the measurement again, nothing more
    manifest = report.get("triton")
    if isinstance(manifest, dict):
        for entry, files in manifest.items():
            if isinstance(entry, str) and isinstance(files, dict):
                harvest(private, trusted, entry, files)


def harvest(private: Path, trusted: Path, entry: str, files: dict[str, Any]) -> bool:
    """Copy one Triton cache entry into the trusted cache if every file still matches its hash."""
    if not _plain_name(entry) or not files or not all(_plain_name(n) and isinstance(h, str) for n, h in files.items()):
        return False
    if (trusted / entry).exists():
        return False
    try:
        trusted.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry[:16]}.", dir=trusted))
    except OSError:
        return False
    try:
        for name, digest in files.items():
            source = private / entry / name
            if source.is_symlink():
                return False
            shutil.copyfile(source, staging / name)
            if _hash(staging / name) != digest:
                return False
        os.rename(staging, trusted / entry)
        return True
    except OSError:
        return False  # a file gone or changed, or a concurrent harvest of the same entry won
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def seed(trusted: Path, private: Path) -> None:
    """The trusted Triton cache copied into a worker's private one (copies: the worker may write there)."""
    for entry in triton_entries(trusted):
        if not entry.startswith("."):
            shutil.copytree(trusted / entry, private / entry, symlinks=True, dirs_exist_ok=True)


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name and not name.startswith(".")
