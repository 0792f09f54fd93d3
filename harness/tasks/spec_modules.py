"""Loading a spec's Python files (reference, baselines, KernelBench modules) in the worker, by path.

The files sit in the workspace, where the agent writes. So they are loaded by path, never by putting
their folder on sys.path (a torch.py or harness/ planted beside them is never imported), and compiled
from their source text, never from a __pycache__ file (a planted .pyc with the source's size and time
would otherwise be run in its place). A file's own imports see only the installed packages.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path


class SpecRuntimeError(RuntimeError):
    """The spec and its Python files disagree (shapes, names, outputs): the spec's fault, not the kernel's."""


def load_module(path: Path) -> types.ModuleType:
    name = "_kstui_judge_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    source = path.read_bytes()
    module = types.ModuleType(name)
    module.__file__ = str(path)
    # Registered before it runs, like an import: dataclasses and torch.compile look modules up by name.
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def function(path: Path, name: str):
    fn = getattr(load_module(path), name, None)
    if not callable(fn):
        raise SpecRuntimeError(f"{path.name}: {name} is not a function")
    return fn
