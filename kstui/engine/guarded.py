"""The files a session obeys but the agent could reach (kstui.toml, the task file and what it names,
the question bank) and the git repository, as the session found them.

Their fingerprints are recorded in each SessionStarted event. When a later session of the same kernel
starts (a `--resume` or a new one), what changed since is listed before anything is built from it:
the TUI asks the human, headless refuses (kstui.cli). So a kstui.toml or task file planted during a
session never silently sets `eval_cmd`, `gpu`, `base_url` or the task, and a repository planted in
the workspace is never the one kstui commits to.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from harness.taskfile import TaskFileError, judge_files
from kstui.engine.bank import WORKSPACE_BANK, bank_paths
from kstui.engine.config import CONFIG_NAME, ConfigError, SessionConfig, read_config_file, user_config_path
from kstui.engine.events import SessionStarted
from kstui.engine.trace import TraceError, latest_session, read_trace, trace_path

REPOSITORY = "git repository"
# The settings whose change decides where code runs, where the key goes, or what is judged.
SETTINGS = ("eval_cmd", "gpu", "base_url", "devices", "scenarios", "branch", "unconfined_shell")


def guarded_files(config: SessionConfig) -> list[Path]:
    """kstui.toml (the workspace's and the user's), the task file and every file it names, the question bank."""
    files = [config.workspace / CONFIG_NAME, user_config_path(os.environ), config.kernel.with_suffix(".toml")]
    try:
        files += judge_files(config.kernel)
    except (TaskFileError, OSError):
        pass  # an unreadable task file is the evaluation's bad input; its own hash still stands
    # The workspace's bank even where there is none yet: one that appears is a change too.
    files += [*bank_paths(config.workspace, config.questions), config.workspace / WORKSPACE_BANK]
    return list(dict.fromkeys(Path(os.path.abspath(f)) for f in files))


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "absent"


def _file_settings(config: SessionConfig) -> dict[str, object]:
    """What the kstui.toml files set (flags and the environment are the human's, never compared)."""
    merged: dict[str, object] = {}
    for path in (user_config_path(os.environ), config.workspace / CONFIG_NAME):
        try:
            merged.update(read_config_file(path) if path.is_file() else {})
        except ConfigError:
            merged[f"{path.name} (unreadable)"] = True
    return merged


def capture(config: SessionConfig, git_dir: Path | None) -> dict[str, str]:
    """{file: sha256 or "absent", "setting:<name>": value as the kstui.toml files set it, "git repository":
    path} as things are now."""
    out = {str(p): _sha256(p) for p in guarded_files(config)}
    settings = _file_settings(config)
    out.update({f"setting:{name}": repr(settings.get(name)) for name in SETTINGS})
    if git_dir is not None:
        out[REPOSITORY] = str(git_dir)
    return out


def changes(before: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """One line per difference: the settings that would change, then the files, then the repository."""
    lines = []
    for key in sorted(set(before) | set(now), key=lambda k: (not k.startswith("setting:"), k == REPOSITORY, k)):
        old, new = before.get(key), now.get(key)
        if old is None or old == new:
            continue
        if key.startswith("setting:"):
            lines.append(f"{key.removeprefix('setting:')}: {old} -> {new}")
        elif key == REPOSITORY:
            lines.append(f"the git repository is now {new} (was {old})")
        else:
            what = "appeared" if old == "absent" else "was removed" if new == "absent" else "changed"
            lines.append(f"{key} {what}")
    return lines


def recorded(workspace: Path, kernel: Path) -> dict[str, str] | None:
    """The fingerprints the latest session of this kernel recorded when it last started, or None."""
    directory = latest_session(workspace, kernel)
    if directory is None:
        return None
    found: dict[str, str] | None = None
    try:
        for event in read_trace(trace_path(directory)):
            if isinstance(event, SessionStarted) and event.guarded:
                found = dict(event.guarded)
    except TraceError:
        return None
    return found
