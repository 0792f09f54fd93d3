"""Arithmetic over named sizes, for a spec's shapes, scalar values, FLOP and byte counts.

Parsed with `ast` and evaluated by walking the tree: numbers, names, + - * / // % **, unary minus
and a few functions (min, max, abs, sqrt, ceil, floor, log2, cdiv). Nothing else is accepted, so a
task file can never run code, and a power is bounded so no expression can stall the parent.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Callable, Mapping, Union

Number = Union[int, float]
MAX_LENGTH = 500
MAX_EXPONENT = 256


class ExprError(ValueError):
    """An expression that is not plain arithmetic over sizes, or that cannot be evaluated."""


def _cdiv(a: Number, b: Number) -> Number:
    return -(-a // b)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "min": min, "max": max, "abs": abs, "sqrt": math.sqrt, "ceil": math.ceil, "floor": math.floor,
    "log2": math.log2, "cdiv": _cdiv,
}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


@dataclass(frozen=True)
class Expr:
    text: str
    tree: ast.expr
    names: tuple[str, ...]  # the sizes it reads, in order of first use

    def __call__(self, env: Mapping[str, Number]) -> Number:
        return _eval(self.tree, env, self.text)


def parse_expr(source: str | int | float) -> Expr:
    """An expression from a number or a string, or ExprError naming what is not allowed."""
    if isinstance(source, bool) or not isinstance(source, (str, int, float)):
        raise ExprError("should be a number or an expression string such as \"rows * cols\"")
    text = source if isinstance(source, str) else repr(source)
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(" ".join(text.split()), mode="eval").body  # a TOML multi-line string is one expression
    except SyntaxError:
        raise ExprError(f"{text!r} is not an arithmetic expression") from None
    return expr_from_node(tree, text)


def expr_from_node(tree: ast.expr, text: str | None = None) -> Expr:
    """An already parsed expression (a module-level assignment's value), checked the same way."""
    text = ast.unparse(tree) if text is None else text
    names: list[str] = []
    _check(tree, text, names)
    return Expr(text, tree, tuple(dict.fromkeys(names)))


def _check(node: ast.AST, text: str, names: list[str]) -> None:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"{text!r}: only numbers may appear as constants")
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise ExprError(f"{text!r}: {node.id} is a function, call it as {node.id}(...)")
        names.append(node.id)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, text, names)
        _check(node.right, text, names)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check(node.operand, text, names)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS \
            and not node.keywords and node.args:
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise ExprError(f"{text!r}: no * arguments")
            _check(arg, text, names)
    elif isinstance(node, ast.Call):
        raise ExprError(f"{text!r}: unknown function (known: {', '.join(FUNCTIONS)})")
    else:
        raise ExprError(f"{text!r}: only numbers, sizes, + - * / // % ** and {', '.join(FUNCTIONS)} are allowed")


def _eval(node: ast.expr, env: Mapping[str, Number], text: str) -> Number:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        try:
            return env[node.id]
        except KeyError:
            raise ExprError(f"{text!r}: unknown size {node.id!r}") from None
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        args = [_eval(a, env, text) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)  # type: ignore[attr-defined]
        except (ValueError, TypeError, ZeroDivisionError, OverflowError) as exc:
            raise ExprError(f"{text!r}: {node.func.id}: {exc}") from None  # type: ignore[attr-defined]
    assert isinstance(node, ast.BinOp)
    left, right = _eval(node.left, env, text), _eval(node.right, env, text)
    if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > 2**64):
        raise ExprError(f"{text!r}: power too large")
    try:
        value = _BINARY[type(node.op)](left, right)
    except ZeroDivisionError:
        raise ExprError(f"{text!r}: division by zero") from None
    except OverflowError:
        raise ExprError(f"{text!r}: too large") from None
    if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
        raise ExprError(f"{text!r}: not a finite real number")
    return value
