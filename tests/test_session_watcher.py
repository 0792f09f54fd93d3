"""The kernel watcher against real filesystem events (watchdog's inotify observer)."""

import asyncio
import os
from pathlib import Path

from kstui.engine.watcher import FileWatcher


async def _collect(path: Path, action, settle_s: float = 0.1, wait_s: float = 1.0) -> int:
    fired: list[str] = []
    watcher = FileWatcher(path, lambda: fired.append(path.read_text()), settle_s=settle_s)
    watcher.start()
    try:
        await asyncio.sleep(0.05)
        action()
        await asyncio.sleep(wait_s)
    finally:
        watcher.stop()
    return len(fired)


async def test_plain_write_fires_once(tmp_path: Path) -> None:
    k = tmp_path / "k.cu"
    k.write_text("a\n")
    assert await _collect(k, lambda: k.write_text("b\n")) == 1


async def test_burst_is_coalesced(tmp_path: Path) -> None:
    k = tmp_path / "k.cu"
    k.write_text("a\n")

    def burst() -> None:
        for i in range(20):
            k.write_text(f"v{i}\n")

    assert await _collect(k, burst, settle_s=0.2) == 1


async def test_atomic_save_by_rename_is_seen(tmp_path: Path) -> None:
    k = tmp_path / "k.cu"
    k.write_text("a\n")

    def editor_save() -> None:  # write a temp file beside it, then rename over (vim, VS Code, emacs)
        tmp = tmp_path / ".k.cu.swp"
        tmp.write_text("saved\n")
        os.replace(tmp, k)

    assert await _collect(k, editor_save) == 1


async def test_backup_then_create_is_seen(tmp_path: Path) -> None:
    k = tmp_path / "k.cu"
    k.write_text("a\n")

    def backup_save() -> None:  # move the original away, create a new file in its place
        os.replace(k, tmp_path / "k.cu~")
        k.write_text("new\n")

    assert await _collect(k, backup_save) == 1


async def test_other_files_are_ignored(tmp_path: Path) -> None:
    k = tmp_path / "k.cu"
    k.write_text("a\n")
    assert await _collect(k, lambda: (tmp_path / "other.cu").write_text("x"), wait_s=0.5) == 0
