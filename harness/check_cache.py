"""The static checks of an unchanged kernel, kept beside the build cache.

The same bytes at the same path, preprocessed with the same flags by the same nvcc and judged by the
same checking code, give the same findings; the preprocessor's pass alone costs about half a second,
a sixth of a quick evaluation. A key covers all of that (the checking code by the hash of its own
source files), so a change to any of it checks afresh; a missing or damaged entry is checked afresh.
Only checks that all passed are kept: a failure may come from the machine (a preprocessor that timed
out, nm missing) and is worth its price again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from harness import build as build_module
from harness import checks as checks_module
from harness.build import BuildInputError, BuildOptions, default_cache_dir, file_sha256, find_nvcc, nvcc_version
from harness.result import Check


@lru_cache(maxsize=1)
def _code_hash() -> str:
    digest = hashlib.sha256()
    for module in (checks_module, build_module):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def _memo(options: BuildOptions, parts: dict, compute: Callable[[], list[Check]]) -> list[Check]:
    parts = {"code": _code_hash(), **parts}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    root = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    entry = root / "checks" / f"{key}.json"
    try:
        return [Check(**c) for c in json.loads(entry.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    checks = compute()
    if not all(c.ok for c in checks):
        return checks
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix=f".{key[:16]}.", dir=entry.parent)
        with os.fdopen(fd, "w") as f:
            json.dump([asdict(c) for c in checks], f)
        os.replace(staging, entry)  # a concurrent reader sees the whole entry or none
    except OSError:
        pass  # an unwritable cache costs the next evaluation the checks again, nothing more
    return checks


def source_checks(source: Path, options: BuildOptions, source_bytes: bytes) -> list[Check]:
    """checks.source_checks of these bytes, kept per (bytes, path, flags, nvcc, checking code)."""
    try:
        nvcc = find_nvcc(options.nvcc)
    except BuildInputError:  # text only: quick, and not worth a key
        return checks_module.source_checks(source, options, source_bytes)
    arch = options.arch or build_module.detect_arch()
    parts = {"kind": "source", "source": hashlib.sha256(source_bytes).hexdigest(), "path": str(source),
             "arch": arch, "fast_math": options.fast_math, "flags": list(options.extra_flags),
             "nvcc": nvcc, "version": nvcc_version(nvcc)}
    return _memo(options, parts, lambda: checks_module.source_checks(source, options, source_bytes))


def binary_checks(library: Path, entry_symbols: Sequence[str], options: BuildOptions) -> list[Check]:
    """checks.binary_checks, kept per (library bytes, entry symbols, checking code)."""
    parts = {"kind": "binary", "library": file_sha256(library), "entry": list(entry_symbols)}
    return _memo(options, parts, lambda: checks_module.binary_checks(library, entry_symbols))
