"""The spec's arithmetic over sizes: what it computes, and that nothing but arithmetic gets through."""

from __future__ import annotations

import pytest

from harness.tasks.expr import ExprError, parse_expr


@pytest.mark.parametrize("text, env, value", [
    ("rows * cols", {"rows": 3, "cols": 7}, 21),
    ("2 * N * N * N", {"N": 1024}, 2 * 1024**3),
    ("(height + 2 * padding - k) // stride + 1", {"height": 17, "padding": 2, "k": 5, "stride": 2}, 9),
    ("1 / sqrt(d)", {"d": 64}, 0.125),
    ("cdiv(n, 128) * 128", {"n": 129}, 256),
    ("max(a, b) - min(a, b) + abs(-3) % 2", {"a": 2, "b": 9}, 8),
    ("ceil(n / 3) + floor(n / 3) + log2(n)", {"n": 8}, 3 + 2 + 3.0),
    ("-x + +y ** 2", {"x": 1, "y": 3}, 8),
    (4096, {}, 4096),
    (1e-5, {}, 1e-5),
    ("2 * a\n   + b", {"a": 1, "b": 2}, 4),  # a TOML multi-line string
])
def test_evaluates_arithmetic_over_sizes(text, env, value) -> None:
    assert parse_expr(text)(env) == pytest.approx(value)


def test_names_are_the_sizes_read_in_order_of_first_use() -> None:
    assert parse_expr("b * a + b * max(c, 1)").names == ("b", "a", "c")


@pytest.mark.parametrize("text, message", [
    ("__import__('os').system('true')", "unknown function"),
    ("x.shape", "only numbers, sizes"),
    ("[1, 2]", "only numbers, sizes"),
    ("a if b else c", "only numbers, sizes"),
    ("lambda: 1", "only numbers, sizes"),
    ("a < b", "only numbers, sizes"),
    ("'text'", "only numbers may appear as constants"),
    ("True", "only numbers may appear as constants"),
    ("open(1)", "unknown function"),
    ("max", "is a function"),
    ("max(*a)", r"no \* arguments"),
    ("max(a=1)", "unknown function"),
    ("rows *", "not an arithmetic expression"),
    ("x" * 600, "longer than"),
])
def test_refuses_anything_but_arithmetic(text, message) -> None:
    with pytest.raises(ExprError, match=message):
        parse_expr(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_refuses_values_that_are_not_numbers_or_strings(value) -> None:
    with pytest.raises(ExprError, match="number or an expression"):
        parse_expr(value)


@pytest.mark.parametrize("text, env, message", [
    ("a / b", {"a": 1, "b": 0}, "division by zero"),
    ("a // b", {"a": 1, "b": 0}, "division by zero"),
    ("2 ** 100000", {}, "power too large"),
    ("(2 ** 200) ** 200", {}, "power too large"),
    ("1e300 * 1e300", {}, "not a finite real number"),
    ("(-8) ** 0.5", {}, "not a finite real number"),
    ("sqrt(a)", {"a": -1}, "sqrt"),
    ("missing + 1", {}, "unknown size 'missing'"),
])
def test_evaluation_errors_are_one_line(text, env, message) -> None:
    with pytest.raises(ExprError, match=message):
        parse_expr(text)(env)
