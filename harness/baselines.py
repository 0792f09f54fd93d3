"""The on-disk cache of baseline timings and measured peaks, keyed by what can change them.

A key holds the device, driver, library versions and the harness's timing method; any change gives a
new key, so stale numbers are never read. The baseline of record is re-timed in every evaluation,
interleaved with the candidate; the cache only saves re-timing the others to find the fastest.

The worker reads the file (read-only inside its sandbox) and never writes it: what a worker measured
before it loaded the candidate is reported to its parent (`changes()`, harness.trusted), which alone
merges it into the file (`merge`). What a worker measures after loading judges that evaluation only.
Beside the timings, `warmed` lists the scenarios whose references a worker warmed up before loading
a candidate, so that the Triton kernels they compiled are in the trusted Triton cache (harness.trusted).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any

TIMING_METHOD = 3  # bump when the way baselines are timed or the peaks are measured changes


def default_cache_dir() -> Path:
    if os.environ.get("KSTUI_CACHE_DIR"):
        return Path(os.environ["KSTUI_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kstui"


def fingerprint(device: dict[str, Any], task: str) -> str:
    keys = ("name", "cc", "driver", "torch", "cuda", "cudnn", "libraries", "sm_count")
    raw = json.dumps({k: device.get(k) for k in keys} | {"task": task, "method": TIMING_METHOD}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


class BaselineCache:
    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key
        self._data = _read(path).get(key, {})
        self._data.setdefault("scenarios", {})
        self._changes: dict[str, Any] = {"scenarios": {}, "warmed": []}

    @property
    def peaks(self) -> dict[str, float] | None:
        return self._data.get("peaks")

    @peaks.setter
    def peaks(self, value: dict[str, float]) -> None:
        self._data["peaks"] = self._changes["peaks"] = value

    def scenario(self, sid: str) -> dict[str, dict[str, Any]]:
        return self._data["scenarios"].get(sid, {})

    def put(self, sid: str, name: str, valid: bool, us: float | None, detail: str = "") -> None:
        entry = {"valid": valid, "us": us, "detail": detail}
        self._data["scenarios"].setdefault(sid, {})[name] = entry
        self._changes["scenarios"].setdefault(sid, {})[name] = entry

    def warmed(self, sid: str) -> bool:
        return sid in self._data.get("warmed", ())

    def mark_warmed(self, sid: str) -> None:
        self._data.setdefault("warmed", []).append(sid)
        self._changes["warmed"].append(sid)

    def clear(self) -> None:
        """Forget the timings read from the file (in memory only: the file is the parent's)."""
        self._data["scenarios"] = json.loads(json.dumps(self._changes["scenarios"]))

    def reread(self) -> None:
        """The file again (other workers' reports may have been merged since), with what this
        process measured on top: its own report may not have been merged yet."""
        self._data = _read(self.path).get(self.key, {})
        self._data.setdefault("scenarios", {})
        if self._changes.get("peaks"):
            self._data["peaks"] = self._changes["peaks"]
        for sid, names in self._changes["scenarios"].items():
            self._data["scenarios"].setdefault(sid, {}).update(names)
        self._data["warmed"] = sorted(set(self._data.get("warmed", [])) | set(self._changes["warmed"]))

    def changes(self) -> dict[str, Any]:
        """What was measured in this process, for `merge`."""
        return self._changes


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def merge(path: Path, key: str, changes: dict[str, Any]) -> None:
    """Merge a worker's pre-load measurements into the file under an exclusive lock (workers on
    several GPUs report at once). Malformed parts are dropped: the file stays well formed."""
    peaks = changes.get("peaks")
    scenarios = changes.get("scenarios") if isinstance(changes.get("scenarios"), dict) else {}
    warmed = [s for s in changes.get("warmed", []) if isinstance(s, str)] if isinstance(changes.get("warmed"), list) else []
    if not (peaks or scenarios or warmed):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _read(path)
        entry = data.setdefault(key, {})
        entry.setdefault("scenarios", {})
        if isinstance(peaks, dict) and all(isinstance(v, (int, float)) for v in peaks.values()):
            entry["peaks"] = peaks
        for sid, names in scenarios.items():
            good = {n: e for n, e in names.items() if _well_formed(e)} if isinstance(names, dict) else {}
            if good:
                entry["scenarios"].setdefault(sid, {}).update(good)
        entry["warmed"] = sorted(set(entry.get("warmed", [])) | set(warmed))
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def _well_formed(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("valid"), bool)
            and (entry.get("us") is None or isinstance(entry.get("us"), (int, float))))
