"""What a spec's Python files define, read with `ast` and never imported (the parent stays torch-free).

A reference or baseline is `file.py:function`; a KernelBench file is a module with `class Model`,
`get_inputs()` and usually `get_init_inputs()`, whose module-level whole-number assignments
(`batch_size = 16`, `N = 2048 * 2`) are its sizes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from harness.tasks.expr import ExprError, expr_from_node


class SourceError(ValueError):
    """A Python file that is missing, unreadable, not Python, or lacks what the spec names."""


@dataclass(frozen=True)
class Parameter:
    name: str
    has_default: bool


@dataclass(frozen=True)
class KernelBenchModule:
    sizes: dict[str, int]  # module-level whole-number constants, in file order


def read_module(path: Path) -> ast.Module:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise SourceError(f"{path}:{exc.lineno}: not valid Python: {exc.msg}") from None


def function_parameters(path: Path, name: str) -> list[Parameter]:
    """The parameters of the top-level function `name`; they are bound by name, so * and / are refused."""
    module = read_module(path)
    defs = [n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not defs:
        known = sorted(n.name for n in module.body if isinstance(n, ast.FunctionDef))
        raise SourceError(f"{path.name} defines no top-level function {name!r}"
                          + (f" (it defines: {', '.join(known)})" if known else ""))
    fn = defs[-1]
    if isinstance(fn, ast.AsyncFunctionDef):
        raise SourceError(f"{path.name}:{fn.lineno}: {name} is async; a reference is a plain function")
    args = fn.args
    if args.posonlyargs or args.vararg:
        raise SourceError(f"{path.name}:{fn.lineno}: {name}: parameters are bound by name, so neither / nor *args")
    positional = args.args
    defaults = len(args.defaults)
    params = [Parameter(a.arg, i >= len(positional) - defaults) for i, a in enumerate(positional)]
    params += [Parameter(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return params


def kernelbench_module(path: Path) -> KernelBenchModule:
    module = read_module(path)
    classes = {n.name for n in module.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
    wanted = (("class Model", "Model" in classes), ("def get_inputs()", "get_inputs" in functions))
    missing = [what for what, ok in wanted if not ok]
    if missing:
        raise SourceError(f"{path.name} is not a KernelBench module: no {' and no '.join(missing)} at top level "
                          "(or name a function: \"file.py:function\")")
    sizes: dict[str, int] = {}
    for node in module.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = _whole_number(node.value, sizes)
        if value is not None:
            sizes[node.targets[0].id] = value
        else:
            sizes.pop(node.targets[0].id, None)  # reassigned to something that is not a size
    return KernelBenchModule(sizes)


def _whole_number(node: ast.expr, known: dict[str, int]) -> int | None:
    """The value of `N = 2048 * 2` (arithmetic over earlier sizes), if it is a whole number."""
    try:
        value = expr_from_node(node)(known)
    except ExprError:
        return None
    return value if isinstance(value, int) else None
