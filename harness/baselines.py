"""The on-disk cache of baseline timings and measured peaks, keyed by what can change them.

A key holds the device, driver, library versions and the harness's timing method; any change gives a
new key, so stale numbers are never read. The baseline of record is re-timed in every evaluation,
interleaved with the candidate; the cache only saves re-timing the others to find the fastest.
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
        self._data = self._read().get(key, {"scenarios": {}, "peaks": None})
        self._dirty = False

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def peaks(self) -> dict[str, float] | None:
        return self._data.get("peaks")

    @peaks.setter
    def peaks(self, value: dict[str, float]) -> None:
        self._data["peaks"] = value
        self._dirty = True

    def scenario(self, sid: str) -> dict[str, dict[str, Any]]:
        return self._data["scenarios"].get(sid, {})

    def put(self, sid: str, name: str, valid: bool, us: float | None, detail: str = "") -> None:
        self._data["scenarios"].setdefault(sid, {})[name] = {"valid": valid, "us": us, "detail": detail}
        self._dirty = True

    def clear(self) -> None:
        self._data = {"scenarios": {}, "peaks": self.peaks}
        self._dirty = True

    def save(self) -> None:
        """Merge into the file under an exclusive lock: workers on several GPUs share it."""
        if not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            entry = data.setdefault(self.key, {"scenarios": {}, "peaks": None})
            if self._data.get("peaks"):
                entry["peaks"] = self._data["peaks"]
            for sid, names in self._data["scenarios"].items():
                entry["scenarios"].setdefault(sid, {}).update(names)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
        self._dirty = False
