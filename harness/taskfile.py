"""The task file beside a kernel (`flash_fwd.cu` -> `flash_fwd.toml`): which task, and its options.

A task file names a built-in task (`task = "attention"`) or describes its own (a spec: `reference`,
`[entry]`, ... as in docs/TASKS.md), validated here in full without importing anything it names.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.tasks.spec import Spec, SpecError, is_spec, load_spec
from harness.tasks.spec_task import task_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class TaskFileError(ValueError):
    """A missing or malformed task file: one line naming the file and what is wrong."""


@dataclass
class TaskFile:
    path: Path
    task: str
    options: dict[str, Any] = field(default_factory=dict)
    fast_math: bool = False
    build_flags: list[str] = field(default_factory=list)
    build_timeout_s: float = 300.0
    scenario_timeout_s: float = 60.0
    total_timeout_s: float = 1800.0
    time_budget_ms: float = 25.0
    noise_target_pct: float = 0.0
    spec: Spec | None = None  # a task file that describes its own task


def task_file_for(kernel: Path) -> Path:
    return kernel.with_suffix(".toml")


def _get(table: dict, key: str, typ: type | tuple[type, ...], default: Any, where: str) -> Any:
    value = table.get(key, default)
    numeric = typ in (int, float, (int, float))
    if not isinstance(value, typ) or (numeric and isinstance(value, bool)):
        raise TaskFileError(f"{where}: {key!r} should be {getattr(typ, '__name__', 'a number')}")
    return value


def load_task_file(kernel: Path) -> TaskFile:
    path = task_file_for(kernel)
    if not path.is_file():
        raise TaskFileError(f"{path}: no task file beside the kernel (it names the task, e.g. task = \"attention\")")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskFileError(f"{path}: {exc}") from None
    except OSError as exc:
        raise TaskFileError(f"{path}: {exc.strerror}") from None
    where = str(path)
    build = data.get("build", {})
    ev = data.get("eval", {})
    options = data.get("options", {})
    for name, table in (("build", build), ("eval", ev), ("options", options)):
        if not isinstance(table, dict):
            raise TaskFileError(f"{where}: [{name}] should be a table")
    spec = None
    if is_spec(data):
        if "task" in data:
            raise TaskFileError(f"{where}: task: a task file names a built-in task or describes its own "
                                "(reference, [entry]), not both")
        options = {k: v for k, v in data.items() if k not in ("build", "eval")}
        try:
            spec = load_spec(path.resolve().parent, options)
        except SpecError as exc:
            raise TaskFileError(f"{where}: {exc}") from None
        options = {"dir": str(path.resolve().parent), "spec": options}
        task = task_name(spec)
    else:
        task = data.get("task")
        if not isinstance(task, str):
            raise TaskFileError(f"{where}: missing 'task': name a built-in task (task = \"attention\") or describe "
                                "your own (reference = \"my_op_ref.py:my_op\" and [entry]; see docs/TASKS.md)")
    flags = _get(build, "flags", list, [], f"{where} [build]")
    if not all(isinstance(f, str) for f in flags):
        raise TaskFileError(f"{where} [build]: 'flags' should be a list of strings")
    return TaskFile(
        path=path,
        task=task,
        options=options,
        fast_math=_get(build, "fast_math", bool, False, f"{where} [build]"),
        build_flags=flags,
        build_timeout_s=float(_get(build, "timeout_s", (int, float), 300, f"{where} [build]")),
        scenario_timeout_s=float(_get(ev, "scenario_timeout_s", (int, float), 60, f"{where} [eval]")),
        total_timeout_s=float(_get(ev, "total_timeout_s", (int, float), 1800, f"{where} [eval]")),
        time_budget_ms=float(_get(ev, "time_budget_ms", (int, float), 25, f"{where} [eval]")),
        noise_target_pct=float(_get(ev, "noise_target_pct", (int, float), 0, f"{where} [eval]")),
        spec=spec,
    )


def judge_files(kernel: Path) -> list[Path]:
    """The files besides the kernel that decide how it is judged, resolved: its task file and every Python
    file a spec names (reference, baselines). The parent copies them where the worker reads them, and a
    session protects them as it found them."""
    tf = load_task_file(kernel)
    return [tf.path.resolve(), *(tf.spec.python_files() if tf.spec else [])]


@dataclass(frozen=True)
class JudgeLayout:
    """The kernel with its judge files as one folder tree, so that a copy of the tree is judged the same:
    each file named relative to a common root (posix), a spec's `../refs/x.py` kept where it is named."""

    root: Path
    kernel: str  # the kernel's name under the root
    files: dict[str, Path]  # name under the root -> the file to read (resolved); the task file first

    @property
    def task_dir(self) -> str:
        """The task file's folder under the root (the kernel's)."""
        return os.path.dirname(self.kernel) or "."


def judge_layout(kernel: Path, *, lenient: bool = False) -> JudgeLayout:
    """judge_files' files as the spec names them, beside the kernel (the task file is found there).
    lenient: a task file that cannot be read as a task is laid out alone (whoever judges the copy says
    what is wrong with it), instead of TaskFileError."""
    folder = Path(os.path.abspath(kernel)).parent
    try:
        tf = load_task_file(kernel)
    except TaskFileError:
        if not lenient:
            raise
        task = task_file_for(Path(os.path.abspath(kernel)))
        return JudgeLayout(root=folder, kernel=kernel.name, files={task.name: task} if os.path.lexists(task) else {})
    named = {folder / tf.path.name: tf.path.resolve()}
    for ref in tf.spec.python_refs() if tf.spec else []:
        named.setdefault(Path(os.path.normpath(folder / ref.text.partition(":")[0])), ref.path)
    root = Path(os.path.commonpath([folder, *(p.parent for p in named)]))
    return JudgeLayout(root=root, kernel=(folder / kernel.name).relative_to(root).as_posix(),
                       files={p.relative_to(root).as_posix(): source for p, source in named.items()})
