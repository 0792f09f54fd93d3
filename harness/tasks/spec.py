"""A task described by its task file: entry point, reference, scenarios, inputs, counts, tolerance.

`load_spec(folder, data)` turns the parsed TOML of a spec task file into a `Spec`, or raises `SpecError`
naming the key and what is wrong with it. Torch-free: the parent and `--check-only` validate the
whole spec, reading the Python files it names with `ast` (harness.tasks.pysource), never importing
them. docs/TASKS.md describes every key.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from harness.tasks.expr import Expr, ExprError, parse_expr
from harness.tasks.pysource import KernelBenchModule, Parameter, SourceError, function_parameters, kernelbench_module

# name -> (torch dtype attribute, bytes per element, kind)
DTYPES: dict[str, tuple[str, int, str]] = {
    "bf16": ("bfloat16", 2, "float"), "fp16": ("float16", 2, "float"), "fp32": ("float32", 4, "float"),
    "fp64": ("float64", 8, "float"), "fp8e4m3": ("float8_e4m3fn", 1, "float"), "fp8e5m2": ("float8_e5m2", 1, "float"),
    "int8": ("int8", 1, "int"), "uint8": ("uint8", 1, "int"), "int16": ("int16", 2, "int"),
    "int32": ("int32", 4, "int"), "int64": ("int64", 8, "int"), "bool": ("bool", 1, "bool"),
}
SCALAR_TYPES = ("int32", "int64", "float32", "float64")
RULES = ("reference", "allclose", "exact")
DISTRIBUTIONS = ("normal", "uniform", "integers", "spd")
DEFAULT_BASELINES = ("eager", "compiled")
QUICK_DEFAULT = 3
TOP_KEYS = ("name", "reference", "baselines", "flops", "bytes", "dtypes", "sizes", "entry", "inputs", "scenarios",
            "tolerance", "build", "eval")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
    volatile while bool class delete new namespace template this throw try catch true false""".split())


class SpecError(ValueError):
    """One thing wrong with a spec: the key (e.g. entry.args[2].shape[0]) and what is wrong."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def is_spec(data: dict[str, Any]) -> bool:
    """A task file that describes its own task (rather than naming a built-in one)."""
    return "reference" in data or "entry" in data


@dataclass(frozen=True)
class TensorArg:
    name: str
    role: str  # "in" or "out"
    dtype: str  # a dtype name or a dtype variable
    shape: tuple[Expr, ...]
    param: str | None  # a KernelBench Model's parameter or buffer this input stands for
    key: str


@dataclass(frozen=True)
class ScalarArg:
    name: str
    ctype: str
    value: Expr | None  # None when dtype_code is set
    dtype_code: str | None  # a dtype variable: the index of its type in the variable's list
    key: str


Arg = Union[TensorArg, ScalarArg]


@dataclass(frozen=True)
class Distribution:
    kind: str
    mean: float = 0.0
    std: float = 1.0
    low: Expr | None = None
    high: Expr | None = None


@dataclass(frozen=True)
class Tolerance:
    rule: str
    factor: float = 2.0
    atol: float | None = None  # None: one unit in the last place of the output dtype at the reference's magnitude
    rtol: float = 0.0


@dataclass(frozen=True)
class PyRef:
    """`file.py:function`, or a KernelBench module (`function` None), resolved beside the task file."""

    text: str
    path: Path
    function: str | None
    params: tuple[Parameter, ...] = ()


@dataclass
class Spec:
    folder: Path  # the task file's: the Python files it names are found from here
    name: str
    symbol: str
    args: tuple[Arg, ...]
    dtype_vars: dict[str, tuple[str, ...]]
    sizes: tuple[str, ...]
    defaults: dict[str, int]
    timed: list[dict[str, Any]]
    check: list[dict[str, Any]]
    quick: list[str]
    flops: Expr | None
    bytes: Expr | None
    inputs: dict[str, Distribution]
    tolerance: dict[str, Tolerance]  # by output name
    reference_dtype: str | None
    reference: PyRef
    baselines: tuple[str | PyRef, ...]
    kernelbench: KernelBenchModule | None = None
    data: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def tensors(self) -> list[TensorArg]:
        return [a for a in self.args if isinstance(a, TensorArg)]

    @property
    def input_args(self) -> list[TensorArg]:
        return [a for a in self.tensors if a.role == "in"]

    @property
    def output_args(self) -> list[TensorArg]:
        return [a for a in self.tensors if a.role == "out"]

    @property
    def scalars(self) -> list[ScalarArg]:
        return [a for a in self.args if isinstance(a, ScalarArg)]

    def python_refs(self) -> list[PyRef]:
        return [self.reference, *(b for b in self.baselines if isinstance(b, PyRef))]

    def python_files(self) -> list[Path]:
        """Every Python file the spec names: part of the judge, like the task file itself."""
        return list(dict.fromkeys(r.path for r in self.python_refs()))

    def dtype_of(self, arg: TensorArg, row: dict[str, Any]) -> str:
        return row[arg.dtype] if arg.dtype in self.dtype_vars else arg.dtype

    def shape_of(self, arg: TensorArg, row: dict[str, Any]) -> tuple[int, ...]:
        return tuple(_whole(e(row), f"{arg.key}.shape[{i}]") for i, e in enumerate(arg.shape))

    def scalar_value(self, arg: ScalarArg, row: dict[str, Any]) -> int | float:
        if arg.dtype_code is not None:
            return self.dtype_vars[arg.dtype_code].index(row[arg.dtype_code])
        assert arg.value is not None
        value = arg.value(row)
        return _whole(value, f"{arg.key}.value", negative=True) if arg.ctype.startswith("int") else float(value)

    def scenario_id(self, row: dict[str, Any]) -> str:
        parts = [str(row[v]) for v in self.dtype_vars]
        for name in self.sizes:
            value = row[name]
            sep = "_" if name[-1].isdigit() or value < 0 else ""
            parts.append(f"{name}{sep}{value}" if value >= 0 else f"{name}{sep}m{-value}")
        return "-".join(parts)

    def resolve_row(self, given: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """A scenario row completed with defaults and checked; a dtype variable left out takes each of its
        types in turn, so one row may stand for several scenarios."""
        for k, v in given.items():
            if k in self.dtype_vars:
                if v not in self.dtype_vars[k]:
                    raise SpecError(f"{key}.{k}", f"{v!r} is not one of {k}'s types ({', '.join(self.dtype_vars[k])})")
            elif k in self.sizes:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise SpecError(f"{key}.{k}", "a size should be a whole number")
            else:
                raise SpecError(f"{key}.{k}", f"not a size ({_names(self.sizes)}) or dtype variable "
                                              f"({_names(self.dtype_vars)})")
        base = {**self.defaults, **{k: v for k, v in given.items() if k in self.sizes}}
        missing = [s for s in self.sizes if s not in base]
        if missing:
            raise SpecError(key, f"no value for size {missing[0]!r} (give it here or in [sizes])")
        choices = [[given[v]] if v in given else list(t) for v, t in self.dtype_vars.items()]
        rows = [{**base, **dict(zip(self.dtype_vars, combo))} for combo in itertools.product(*choices)]
        for row in rows:
            self._check_row(row, key)
        return rows

    def _check_row(self, row: dict[str, Any], key: str) -> None:
        try:
            for a in self.tensors:
                self.shape_of(a, row)
            for s in self.scalars:
                self.scalar_value(s, row)
            for what, expr in (("flops", self.flops), ("bytes", self.bytes)):
                if expr is not None and not expr(row) >= 0:
                    raise SpecError(what, "should not be negative")
            for name, d in self.inputs.items():
                low = d.low(row) if d.low is not None else None
                high = d.high(row) if d.high is not None else None
                if d.kind == "integers":
                    low, high = _whole(low, f"inputs.{name}.low", True), _whole(high, f"inputs.{name}.high", True)
                if low is not None and high is not None and not low < high:
                    raise SpecError(f"inputs.{name}", f"low ({low}) should be below high ({high})")
                shape = self.shape_of(next(a for a in self.input_args if a.name == name), row)
                if d.kind == "spd" and (len(shape) < 2 or shape[-1] != shape[-2]):
                    raise SpecError(f"inputs.{name}", f"spd needs square matrices [..., n, n], not {list(shape)}")
        except ExprError as exc:
            raise SpecError(key, str(exc)) from None
        except SpecError as exc:
            raise SpecError(key, f"{exc.key}: {exc.message}") from None


def _whole(value: int | float, key: str, negative: bool = False) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise SpecError(key, f"evaluates to {value}, not a whole number")
        value = int(value)
    if value < 0 and not negative:
        raise SpecError(key, f"evaluates to {value} (should be 0 or more)")
    return value


def _names(names: Any) -> str:
    return ", ".join(names) or "none"


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise SpecError(where, "should be a table")
    return value


def _str(value: Any, key: str, what: str = "a string") -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(key, f"should be {what}")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(key, "should be a number")
    return float(value)


def _unknown(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    for k in table:
        if k not in known:
            hint = "; a top-level key goes above the first [table]" if where and k in TOP_KEYS else ""
            raise SpecError(f"{where}{k}" if where else k, f"unknown key (known: {', '.join(known)}){hint}")


def _expr(value: Any, key: str) -> Expr:
    try:
        return parse_expr(value)
    except ExprError as exc:
        raise SpecError(key, str(exc)) from None


def _ident(value: Any, key: str, what: str) -> str:
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise SpecError(key, f"should be {what} (letters, digits and _, not starting with a digit)")
    return value


def _pyref(text: Any, key: str, base: Path, kernelbench_ok: bool) -> tuple[PyRef, KernelBenchModule | None]:
    text = _str(text, key, 'a Python file and function, "file.py:function"'
                + (' or a KernelBench file, "19_ReLU.py"' if kernelbench_ok else ""))
    file, sep, function = text.partition(":")
    if not file.endswith(".py"):
        raise SpecError(key, f"{text!r}: expected \"file.py:function\"")
    if Path(file).is_absolute():  # the judge copies the file with the task file, wherever it judges
        raise SpecError(key, f"{text!r}: give the file relative to the task file's folder, not as an absolute path")
    path = (base / file).resolve()
    try:
        if sep:
            _ident(function, key, "file.py:function with a Python function name")
            return PyRef(text, path, function, tuple(function_parameters(path, function))), None
        if not kernelbench_ok:
            raise SpecError(key, f"{text!r}: name the function, \"{file}:function\"")
        return PyRef(text, path, None), kernelbench_module(path)
    except SourceError as exc:
        raise SpecError(key, str(exc)) from None


def load_spec(folder: Path, data: dict[str, Any]) -> Spec:
    """The spec in `data` (a task file's parsed TOML; its folder is `folder`), or SpecError for the first
    thing wrong. The folder, not the file: copies of a task file beside it are the same task."""
    _unknown(data, TOP_KEYS, "")
    base = folder
    if "reference" not in data:
        raise SpecError("reference", 'missing: the PyTorch reference, "file.py:function" or a KernelBench "file.py"')
    reference, kernelbench = _pyref(data["reference"], "reference", base, kernelbench_ok=True)
    baselines = _baselines(data.get("baselines", list(DEFAULT_BASELINES)), base)
    dtype_vars = _dtype_vars(_table(data, "dtypes", "dtypes"))
    defaults = dict(kernelbench.sizes) if kernelbench else {}
    for k, v in _table(data, "sizes", "sizes").items():
        _ident(k, f"sizes.{k}", "a size name")
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"sizes.{k}", "should be a whole number")
        if k in dtype_vars:
            raise SpecError(f"sizes.{k}", "is also a dtype variable")
        defaults[k] = v
    entry = _table(data, "entry", "entry")
    _unknown(entry, ("symbol", "args"), "entry.")
    symbol = _ident(entry.get("symbol"), "entry.symbol", "the kernel's C entry point name")
    if symbol in _C_KEYWORDS:
        raise SpecError("entry.symbol", f"{symbol!r} is a C/C++ keyword")
    args = _args(entry.get("args"), dtype_vars, kernelbench is not None)
    scenarios = _table(data, "scenarios", "scenarios")
    _unknown(scenarios, ("timed", "check", "quick"), "scenarios.")
    raw_rows = {kind: _rows(scenarios.get(kind, []), f"scenarios.{kind}") for kind in ("timed", "check")}
    sizes = list(defaults)
    for rows in raw_rows.values():
        for row in rows:
            sizes += [k for k in row if k not in dtype_vars and k not in sizes]
    flops = _expr(data["flops"], "flops") if "flops" in data else None
    nbytes = _expr(data["bytes"], "bytes") if "bytes" in data else None
    inputs = _inputs(_table(data, "inputs", "inputs"), args)
    if kernelbench is None:
        for a in args:
            types = dtype_vars.get(a.dtype, (a.dtype,)) if isinstance(a, TensorArg) else ()
            if isinstance(a, TensorArg) and a.role == "in" and a.name not in inputs \
                    and any(DTYPES[t][2] != "float" for t in types):
                raise SpecError(f"inputs.{a.name}", f"missing: an integer input needs its range, e.g. [inputs.{a.name}]"
                                                    ' dist = "integers", low = 0, high = "n"')
    used = _check_names(args, flops, nbytes, inputs, sizes, dtype_vars)
    _check_binding(reference, "reference", args, sizes)
    for b in baselines:
        if isinstance(b, PyRef):
            _check_binding(b, "baselines", args, sizes)
    used |= {p.name for r in (reference, *baselines) if isinstance(r, PyRef) for p in r.params}
    tolerance_table = _table(data, "tolerance", "tolerance")
    spec = Spec(
        folder=folder, name=_ident(data.get("name", symbol), "name", "a name"), symbol=symbol, args=tuple(args),
        dtype_vars=dtype_vars, sizes=tuple(sizes), defaults=defaults, timed=[], check=[], quick=[], flops=flops,
        bytes=nbytes, inputs=inputs, tolerance=_tolerances(tolerance_table, args), reference=reference,
        reference_dtype=_reference_dtype(tolerance_table), baselines=tuple(baselines), kernelbench=kernelbench,
        data=data,
    )
    for name in sizes:
        if name not in used and not (kernelbench and name in kernelbench.sizes):
            where = f"sizes.{name}" if name in defaults else _first_row_with(raw_rows, name)
            raise SpecError(where, f"size {name!r} is used nowhere (not in a shape, a scalar, flops, bytes, an "
                                   "input's range or the parameters of the reference or a baseline)")
    own = [(f"{reference.text} (its own shapes)", {})] if kernelbench else []
    spec.timed = _expand(spec, own + [(f"scenarios.timed[{i}]", r) for i, r in enumerate(raw_rows["timed"])])
    spec.check = _expand(spec, [(f"scenarios.check[{i}]", r) for i, r in enumerate(raw_rows["check"])])
    if not spec.timed:
        raise SpecError("scenarios.timed", "at least one timed scenario is needed (the geomean is taken over them)")
    spec.quick = _quick(scenarios.get("quick"), [spec.scenario_id(r) for r in spec.timed])
    return spec


def _baselines(value: Any, base: Path) -> list[str | PyRef]:
    if not isinstance(value, list):
        raise SpecError("baselines", 'should be a list such as ["eager", "compiled", "file.py:function"]')
    out: list[str | PyRef] = []
    names: set[str] = set()
    for i, item in enumerate(value):
        key = f"baselines[{i}]"
        if item in DEFAULT_BASELINES:
            name, entry = item, item
        else:
            entry, _ = _pyref(item, key, base, kernelbench_ok=False)
            name = entry.function or ""
        if name in names or (name == "reference"):
            raise SpecError(key, f"a second baseline named {name!r}")
        names.add(name)
        out.append(entry)
    return out


def _dtype_vars(table: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    out = {}
    for var, types in table.items():
        key = f"dtypes.{var}"
        _ident(var, key, "a dtype variable name")
        if var in DTYPES:
            raise SpecError(key, f"{var!r} is a dtype name; a variable needs another name (such as T)")
        if not isinstance(types, list) or not types or not all(t in DTYPES for t in types):
            raise SpecError(key, f"should be a list of dtypes from: {', '.join(DTYPES)}")
        if len(set(types)) != len(types):
            raise SpecError(key, "lists a dtype twice")
        out[var] = tuple(types)
    return out


def _args(value: Any, dtype_vars: dict[str, tuple[str, ...]], kernelbench: bool) -> list[Arg]:
    if not isinstance(value, list) or not value:
        raise SpecError("entry.args", "should be a list of arguments in call order (the stream comes last, implied)")
    args: list[Arg] = []
    for i, item in enumerate(value):
        key = f"entry.args[{i}]"
        if not isinstance(item, dict):
            raise SpecError(key, '{ tensor = "x", ... } or { scalar = "n", ... }')
        if ("tensor" in item) == ("scalar" in item):
            raise SpecError(key, "needs exactly one of 'tensor' (a pointer) or 'scalar' (a value)")
        if "tensor" in item:
            _unknown(item, ("tensor", "role", "dtype", "shape", "param"), f"{key}.")
            name = _ident(item["tensor"], f"{key}.tensor", "a name")
            role = item.get("role")
            if role not in ("in", "out"):
                raise SpecError(f"{key}.role", 'should be "in" or "out"')
            dtype = item.get("dtype")
            if dtype not in DTYPES and dtype not in dtype_vars:
                raise SpecError(f"{key}.dtype", f"should be a dtype ({', '.join(DTYPES)}) or a variable of [dtypes]"
                                                f" ({_names(dtype_vars)})")
            shape = item.get("shape")
            if not isinstance(shape, list):
                raise SpecError(f"{key}.shape", 'should be a list of sizes, e.g. ["rows", "cols"] ([] for a scalar)')
            param = item.get("param")
            if param is not None:
                if not kernelbench:
                    raise SpecError(f"{key}.param", "only a KernelBench reference (a Model) has parameters")
                if role != "in":
                    raise SpecError(f"{key}.param", "a parameter is an input")
                _str(param, f"{key}.param", "the Model's parameter name, e.g. \"conv2d.weight\"")
            args.append(TensorArg(name, role, dtype, tuple(_expr(e, f"{key}.shape[{j}]") for j, e in enumerate(shape)),
                                  param, key))
        else:
            _unknown(item, ("scalar", "type", "value", "dtype_code"), f"{key}.")
            name = _ident(item["scalar"], f"{key}.scalar", "a name")
            ctype = item.get("type")
            if ctype not in SCALAR_TYPES:
                raise SpecError(f"{key}.type", f"should be one of {', '.join(SCALAR_TYPES)}")
            code = item.get("dtype_code")
            if code is not None:
                if "value" in item:
                    raise SpecError(key, "either 'value' or 'dtype_code', not both")
                if code not in dtype_vars:
                    raise SpecError(f"{key}.dtype_code", f"should name a dtype variable ({_names(dtype_vars)})")
                if not ctype.startswith("int"):
                    raise SpecError(f"{key}.type", "a dtype code is a whole number (int32 or int64)")
                args.append(ScalarArg(name, ctype, None, code, key))
            else:
                args.append(ScalarArg(name, ctype, _expr(item.get("value", name), f"{key}.value"), None, key))
        if [a.name for a in args].count(name) > 1:
            raise SpecError(key, f"a second argument named {name!r}")
    if not any(isinstance(a, TensorArg) and a.role == "out" for a in args):
        raise SpecError("entry.args", 'no output: at least one tensor needs role = "out"')
    return args


def _rows(value: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise SpecError(key, "should be a list of tables of sizes, e.g. [{ rows = 4096, cols = 4096 }]")
    return value


def _inputs(table: dict[str, Any], args: list[Arg]) -> dict[str, Distribution]:
    names = [a.name for a in args if isinstance(a, TensorArg) and a.role == "in"]
    out = {}
    for name, d in table.items():
        key = f"inputs.{name}"
        if name not in names:
            raise SpecError(key, f"not an input tensor ({_names(names)})")
        if not isinstance(d, dict):
            raise SpecError(key, "should be a table, e.g. { dist = \"uniform\", low = -1, high = 1 }")
        kind = d.get("dist", "normal")
        if kind not in DISTRIBUTIONS:
            raise SpecError(f"{key}.dist", f"should be one of {', '.join(DISTRIBUTIONS)}")
        known = {"normal": ("dist", "mean", "std"), "uniform": ("dist", "low", "high"),
                 "integers": ("dist", "low", "high"), "spd": ("dist",)}[kind]
        _unknown(d, known, f"{key}.")
        if kind in ("uniform", "integers") and ("low" not in d or "high" not in d):
            raise SpecError(key, f"{kind} needs low and high" + (" (high excluded)" if kind == "integers" else ""))
        dist = Distribution(kind, _number(d.get("mean", 0.0), f"{key}.mean"), _number(d.get("std", 1.0), f"{key}.std"),
                            _expr(d["low"], f"{key}.low") if "low" in d else None,
                            _expr(d["high"], f"{key}.high") if "high" in d else None)
        if dist.std <= 0:
            raise SpecError(f"{key}.std", "should be above 0")
        out[name] = dist
    return out


def _check_names(args: list[Arg], flops: Expr | None, nbytes: Expr | None, inputs: dict[str, Distribution],
                 sizes: list[str], dtype_vars: dict[str, Any]) -> set[str]:
    """Every name an expression reads is a size; returns the sizes read."""
    uses: list[tuple[str, Expr]] = []
    for a in args:
        if isinstance(a, TensorArg):
            uses += [(f"{a.key}.shape[{j}]", e) for j, e in enumerate(a.shape)]
        elif a.value is not None:
            uses.append((f"{a.key}.value", a.value))
    uses += [(k, e) for k, e in (("flops", flops), ("bytes", nbytes)) if e is not None]
    for name, d in inputs.items():
        uses += [(f"inputs.{name}.{w}", e) for w, e in (("low", d.low), ("high", d.high)) if e is not None]
    used: set[str] = set()
    for key, expr in uses:
        for n in expr.names:
            if n not in sizes:
                hint = " (a dtype variable is not a number; use dtype_code)" if n in dtype_vars else ""
                raise SpecError(key, f"unknown size {n!r}{hint} (sizes, from [sizes] and the scenario rows: "
                                     f"{_names(sizes)})")
            used.add(n)
    return used


def _check_binding(ref: PyRef, key: str, args: list[Arg], sizes: list[str]) -> None:
    """A function's parameters are bound by name: inputs, scalar arguments and sizes."""
    inputs = [a.name for a in args if isinstance(a, TensorArg) and a.role == "in"]
    outputs = {a.name for a in args if isinstance(a, TensorArg) and a.role == "out"}
    scalars = [a.name for a in args if isinstance(a, ScalarArg)]
    for p in ref.params:
        if p.name in outputs:
            raise SpecError(key, f"{ref.text}: parameter {p.name!r} is an output; the function returns its outputs")
        if not p.has_default and p.name not in inputs and p.name not in scalars and p.name not in sizes:
            raise SpecError(key, f"{ref.text}: parameter {p.name!r} names no input, scalar or size "
                                 f"(inputs: {_names(inputs)}; scalars: {_names(scalars)}; sizes: {_names(sizes)})")


def _tolerances(table: dict[str, Any], args: list[Arg]) -> dict[str, Tolerance]:
    outputs = {a.name: a for a in args if isinstance(a, TensorArg) and a.role == "out"}
    common = ("rule", "factor", "atol", "rtol")
    _unknown({k: v for k, v in table.items() if not isinstance(v, dict)}, (*common, "reference_dtype"), "tolerance.")
    top = _tolerance({k: v for k, v in table.items() if k in common}, "tolerance")
    out = {}
    for name, arg in outputs.items():
        own = table.get(name)
        key = f"tolerance.{name}"
        if own is not None:
            _unknown(own, common, f"{key}.")
        t = _tolerance(own, key) if own is not None else top
        integral = arg.dtype in DTYPES and DTYPES[arg.dtype][2] != "float"
        if integral and own and t.rule != "exact":
            raise SpecError(f"{key}.rule", "an integer or bool output is judged exactly")
        out[name] = Tolerance("exact") if integral else t
    for k, v in table.items():
        if isinstance(v, dict) and k not in outputs:
            raise SpecError(f"tolerance.{k}", f"not an output ({_names(outputs)})")
    return out


def _tolerance(t: dict[str, Any], key: str) -> Tolerance:
    rule = t.get("rule", "reference")
    if rule not in RULES:
        raise SpecError(f"{key}.rule", f"should be one of {', '.join(RULES)}")
    factor = _number(t.get("factor", 2.0), f"{key}.factor")
    atol = _number(t["atol"], f"{key}.atol") if "atol" in t else None
    rtol = _number(t.get("rtol", 0.0), f"{key}.rtol")
    if factor < 0 or (atol is not None and atol < 0) or rtol < 0:
        raise SpecError(key, "factor, atol and rtol should not be negative")
    if rule == "allclose" and not (atol or rtol):
        raise SpecError(key, "allclose needs atol or rtol above 0")
    if rule == "exact" and ("atol" in t or "rtol" in t or "factor" in t):
        raise SpecError(key, "exact takes no factor, atol or rtol")
    if rule == "reference" and "rtol" in t:
        raise SpecError(f"{key}.rtol", 'rtol belongs to rule = "allclose"')
    return Tolerance(rule, factor, atol, rtol)


def _reference_dtype(table: dict[str, Any]) -> str | None:
    value = table.get("reference_dtype")
    if value is not None and value not in ("fp32", "fp64"):
        raise SpecError("tolerance.reference_dtype", 'should be "fp32" or "fp64"')
    return value


def _first_row_with(raw_rows: dict[str, list[dict[str, Any]]], name: str) -> str:
    return next(f"scenarios.{kind}[{i}].{name}" for kind, rows in raw_rows.items() for i, r in enumerate(rows)
                if name in r)


def _expand(spec: Spec, rows: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Resolved rows, each id once. A row that repeats a KernelBench file's own shapes is dropped quietly:
    the spec may list them to give them a place among its other rows."""
    out: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    for key, row in rows:
        for resolved in spec.resolve_row(row, key):
            sid = spec.scenario_id(resolved)
            if sid in where:
                if where[sid].endswith("(its own shapes)"):
                    continue
                raise SpecError(key, f"the same scenario as {where[sid]} ({sid})")
            where[sid] = key
            out.append(resolved)
    return out


def _quick(value: Any, timed_ids: list[str]) -> list[str]:
    if value is None:
        return timed_ids[:QUICK_DEFAULT]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise SpecError("scenarios.quick", "should be a non-empty list of timed scenario ids")
    for i, sid in enumerate(value):
        if sid not in timed_ids:
            raise SpecError(f"scenarios.quick[{i}]", f"{sid!r} is not a timed scenario (timed: {', '.join(timed_ids)})")
    return list(value)
