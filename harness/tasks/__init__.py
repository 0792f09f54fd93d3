"""Task registry: a workspace's <kernel>.toml names one of these, or describes its own task (a spec)."""

from __future__ import annotations

from typing import Any

from harness.tasks.attention import AttentionTask
from harness.tasks.base import Task
from harness.tasks.rmsnorm import RMSNormTask
from harness.tasks.spec_task import SpecTask

TASKS: dict[str, type[Task]] = {t.name: t for t in (AttentionTask, RMSNormTask)}


def get_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """A built-in task by name; a spec task (options {"dir", "spec"}, from harness.taskfile) whatever its name."""
    if name in TASKS:
        return TASKS[name](options)
    if options and "spec" in options:
        return SpecTask(options)
    raise KeyError(f"unknown task {name!r} (known: {', '.join(TASKS)}; or describe the task in the task file: "
                   "docs/TASKS.md)")
