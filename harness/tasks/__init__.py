"""Task registry: a workspace's <kernel>.toml names one of these."""

from __future__ import annotations

from typing import Any

from harness.tasks.attention import AttentionTask
from harness.tasks.base import Task
from harness.tasks.rmsnorm import RMSNormTask

TASKS: dict[str, type[Task]] = {t.name: t for t in (AttentionTask, RMSNormTask)}


def get_task(name: str, options: dict[str, Any] | None = None) -> Task:
    try:
        return TASKS[name](options)
    except KeyError:
        raise KeyError(f"unknown task {name!r} (known: {', '.join(TASKS)})") from None
