"""The worker side of a spec task: inputs, the reference, the comparison and the baselines, with torch.

A function reference is called with its parameters bound by name (input tensors, scalar arguments,
sizes); a KernelBench reference is its Model, built from get_init_inputs() and called on
get_inputs(), with the module's sizes set to the scenario's. Both draw from the scenario's secret
seed: our distributions from its generator, a KernelBench module's own torch.rand calls from a seed
taken from it. The reference runs twice per draw: in higher precision (floating inputs upcast to fp32,
or fp64 when an input is 32-bit or wider) for the truth, and in the inputs' own dtype for the
tolerance (harness.tasks.spec_compare).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import torch

from harness.tasks.base import Baseline, Comparison, Scenario
from harness.tasks.spec import DTYPES, Parameter, PyRef, Spec, TensorArg
from harness.tasks.spec_compare import OutputReference, compare_output, reference_tolerance
from harness.tasks.spec_inputs import fill
from harness.tasks.spec_modules import SpecRuntimeError, function, load_module
from harness.tasks.spec_outputs import carrier, torch_dtype


class SpecRuntime:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        ref = spec.reference
        self.kernelbench = KernelBenchReference(spec, load_module(ref.path)) if ref.function is None else None
        self.fn = function(ref.path, ref.function) if ref.function is not None else None
        self._compiled: Callable[..., Any] | None = None

    # --- inputs and outputs ---
    def _shape(self, a: TensorArg, row: dict[str, Any]) -> tuple[int, ...]:
        return self.spec.shape_of(a, row)

    def output_shapes(self, s: Scenario) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        row = s.params
        return {a.name: carrier(self._shape(a, row), self.spec.dtype_of(a, row)) for a in self.spec.output_args}

    def make_inputs(self, s: Scenario, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
        row = s.params
        inputs = {a.name: torch.empty(self._shape(a, row), dtype=torch_dtype(self.spec.dtype_of(a, row)), device=device)
                  for a in self.spec.input_args}
        if self.kernelbench:
            self.kernelbench.bind(s, inputs, device)
        self.refill_inputs(s, inputs, gen)
        return inputs

    def refill_inputs(self, s: Scenario, inputs: dict[str, torch.Tensor], gen: torch.Generator) -> None:
        drawn = self.kernelbench.draw(s, inputs, gen) if self.kernelbench else set()
        for a in self.spec.input_args:
            if a.name not in drawn:
                fill(inputs[a.name], self.spec.inputs.get(a.name), s.params, gen)

    def _outputs(self, result: Any, row: dict[str, Any], who: str) -> dict[str, torch.Tensor]:
        outs = self.spec.output_args
        if isinstance(result, torch.Tensor):
            items = [result]
        elif isinstance(result, dict):
            missing = [a.name for a in outs if a.name not in result]
            if missing:
                raise SpecRuntimeError(f"{who} returned a dict without {missing[0]!r}")
            items = [result[a.name] for a in outs]
        elif isinstance(result, (tuple, list)):
            items = list(result)
        else:
            raise SpecRuntimeError(f"{who} returned {type(result).__name__}, not tensors")
        if len(items) != len(outs):
            raise SpecRuntimeError(f"{who} returned {len(items)} outputs; the spec has {len(outs)} "
                                   f"({', '.join(a.name for a in outs)})")
        out = {}
        for a, t in zip(outs, items):
            shape = self._shape(a, row)
            if not isinstance(t, torch.Tensor) or t.numel() != math.prod(shape):
                got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise SpecRuntimeError(f"{who}: output {a.name} is {got}; the spec's {a.key}.shape gives {list(shape)}")
            out[a.name] = t.reshape(shape)
        return out

    # --- calling the reference ---
    def hp_dtype(self, row: dict[str, Any]) -> torch.dtype:
        if self.spec.reference_dtype:
            return torch_dtype(self.spec.reference_dtype)
        wide = any(DTYPES[d][2] == "float" and DTYPES[d][1] >= 4
                   for d in (self.spec.dtype_of(a, row) for a in self.spec.input_args))
        return torch.float64 if wide else torch.float32

    def call(self, s: Scenario, inputs: dict[str, torch.Tensor], mode: str) -> dict[str, torch.Tensor]:
        """The reference's outputs: "hp" in higher precision, "lp" in the inputs' dtypes, "compiled" too
        but through torch.compile."""
        row = s.params
        who = self.spec.reference.text
        with torch.no_grad():
            if self.kernelbench:
                result = self.kernelbench.call(s, inputs, mode, self.hp_dtype(row))
            else:
                assert self.fn is not None
                fn = self.fn
                if mode == "compiled":
                    if self._compiled is None:
                        self._compiled = torch.compile(self.fn, dynamic=False)
                    fn = self._compiled
                values = upcast(inputs, self.hp_dtype(row)) if mode == "hp" else inputs
                result = fn(**bind(self.spec, self.spec.reference.params, values, row))
        return self._outputs(result, row, who)

    def reference(self, s: Scenario, inputs: dict[str, torch.Tensor]) -> dict[str, OutputReference]:
        row = s.params
        hp = self.call(s, inputs, "hp")
        rules = self.spec.tolerance
        lp = self.call(s, inputs, "lp") if any(t.rule != "allclose" for t in rules.values()) else {}
        refs = {}
        for a in self.spec.output_args:
            rule, dtype = rules[a.name], torch_dtype(self.spec.dtype_of(a, row))
            h = hp[a.name]
            if h.is_floating_point():  # never less precise than the output itself
                h = h.to(torch.float64 if dtype == torch.float64 else self.hp_dtype(row))
            tol = reference_tolerance(rule, h, lp[a.name], dtype) if rule.rule == "reference" else None
            refs[a.name] = OutputReference(h.contiguous(), lp[a.name] if rule.rule == "exact" else None, tol, rule)
        return refs

    def compare(self, s: Scenario, ref: dict[str, OutputReference], outputs: dict[str, torch.Tensor],
                only: tuple[str, ...]) -> Comparison:
        errors: dict[str, float] = {}
        tolerances: dict[str, float] = {}
        by_name = {a.name: a for a in self.spec.output_args}
        for name in only:
            a = by_name[name]
            shape, dtype = self._shape(a, s.params), self.spec.dtype_of(a, s.params)
            cmp = compare_output(name, outputs[name], ref[name], shape, dtype)
            if cmp.verdict != "ok":
                return cmp
            errors.update(cmp.errors)
            tolerances.update(cmp.tolerances)
        return Comparison("ok", "", errors, tolerances)

    # --- baselines ---
    def baselines(self) -> list[Baseline]:
        names = tuple(a.name for a in self.spec.output_args)
        out = []
        for b in self.spec.baselines:
            if isinstance(b, PyRef):
                assert b.function is not None
                out.append(Baseline(b.function, self._user_baseline(b), names))
            else:
                out.append(Baseline(b, self._reference_baseline("lp" if b == "eager" else "compiled"), names))
        # Where nothing else passes the check on a scenario: the reference itself in higher precision.
        out.append(Baseline("reference", self._reference_baseline("hp"), names, fallback=True))
        return out

    def _declared(self, outs: dict[str, torch.Tensor], row: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {a.name: outs[a.name].to(torch_dtype(self.spec.dtype_of(a, row))) for a in self.spec.output_args}

    def _reference_baseline(self, mode: str):
        def prepare(s: Scenario, inputs: dict[str, Any]) -> Callable[[], dict[str, torch.Tensor]]:
            return lambda: self._declared(self.call(s, inputs, mode), s.params)

        return prepare

    def _user_baseline(self, b: PyRef):
        fn = function(b.path, b.function or "")

        def prepare(s: Scenario, inputs: dict[str, Any]) -> Callable[[], dict[str, torch.Tensor]]:
            kwargs = bind(self.spec, b.params, inputs, s.params)

            def run() -> dict[str, torch.Tensor]:
                with torch.no_grad():
                    return self._declared(self._outputs(fn(**kwargs), s.params, b.text), s.params)

            return run

        return prepare


def upcast(inputs: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}


def bind(spec: Spec, params: tuple[Parameter, ...], inputs: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """A function's arguments by parameter name: an input tensor, a scalar argument's value or a size."""
    scalars = {a.name: a for a in spec.scalars}
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.name in inputs:
            kwargs[p.name] = inputs[p.name]
        elif p.name in scalars:
            kwargs[p.name] = spec.scalar_value(scalars[p.name], row)
        elif p.name in row and p.name not in spec.dtype_vars:
            kwargs[p.name] = row[p.name]
    return kwargs


def _seed(gen: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device).item())


class KernelBenchReference:
    """A KernelBench module as the reference: its Model (one per scenario, kept so torch.compile compiles it
    once) with the spec's parameter arguments bound to the input buffers, and get_inputs()."""

    def __init__(self, spec: Spec, module: Any) -> None:
        self.spec, self.module = spec, module
        self.models: dict[str, torch.nn.Module] = {}
        self.compiled: dict[str, Callable[..., Any]] = {}
        self.layout: dict[str, list[tuple[str, Any]]] = {}  # forward's arguments: ("input", name) | ("value", v)
        self.file = spec.reference.path.name

    def _build(self, row: dict[str, Any], seed: int, device: torch.device, inputs: bool = True
               ) -> tuple[list[Any], torch.nn.Module]:
        """Model(*get_init_inputs()) and (with inputs) get_inputs(), drawn from seed on device."""
        assert self.spec.kernelbench is not None
        for name in self.spec.kernelbench.sizes:
            setattr(self.module, name, row[name])
        devices = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            with torch.device(device):
                init = self.module.get_init_inputs() if hasattr(self.module, "get_init_inputs") else []
                model = self.module.Model(*init)
                values = list(self.module.get_inputs()) if inputs else []
        return values, model

    def _lp_dtype(self, row: dict[str, Any]) -> torch.dtype | None:
        ordered = sorted(self.spec.input_args, key=lambda a: a.param is not None)
        for a in ordered:
            d = self.spec.dtype_of(a, row)
            if DTYPES[d][2] == "float":
                return torch_dtype(d)
        return None

    def bind(self, s: Scenario, inputs: dict[str, torch.Tensor], device: torch.device) -> None:
        """The scenario's Model, its parameter arguments now reading and writing these input buffers."""
        model = self.models.get(s.id)
        if model is None:
            _, model = self._build(s.params, 0, device, inputs=False)
            lp = self._lp_dtype(s.params)
            if lp is not None:
                model.to(lp)
            self.models[s.id] = model
        for a in self.spec.input_args:
            if a.param is not None:
                self._alias(model, a, inputs[a.name])

    def _alias(self, model: torch.nn.Module, a: TensorArg, buffer: torch.Tensor) -> None:
        owner_name, _, leaf = a.param.rpartition(".")  # type: ignore[union-attr]
        try:
            owner = model.get_submodule(owner_name)
        except AttributeError:
            owner = None
        current = getattr(owner, leaf, None) if owner is not None else None
        if not isinstance(current, torch.Tensor):
            known = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
            raise SpecRuntimeError(f"{self.file}: Model has no parameter or buffer {a.param!r} "
                                   f"(it has: {', '.join(known) or 'none'})")
        if tuple(current.shape) != tuple(buffer.shape):
            raise SpecRuntimeError(f"{self.file}: {a.param} has shape {list(current.shape)}; the spec's "
                                   f"{a.key}.shape gives {list(buffer.shape)}")
        if isinstance(current, torch.nn.Parameter):
            current.data = buffer
        else:
            setattr(owner, leaf, buffer)

    def draw(self, s: Scenario, inputs: dict[str, torch.Tensor], gen: torch.Generator) -> set[str]:
        """A fresh Model initialisation and get_inputs() from the scenario's generator, copied into the
        buffers; returns the inputs filled (those the spec gives a distribution of its own are not)."""
        device = next(iter(inputs.values())).device if inputs else torch.device("cpu")
        values, fresh = self._build(s.params, _seed(gen), device)
        model = self.models[s.id]
        model.load_state_dict(fresh.state_dict())  # also into the parameter arguments' buffers
        tensor_args = [a for a in self.spec.input_args if a.param is None]
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if len(tensors) != len(tensor_args):
            raise SpecRuntimeError(f"{self.file}: get_inputs() gives {len(tensors)} tensors; the spec's entry has "
                                   f"{len(tensor_args)} input tensors that are not parameters "
                                   f"({', '.join(a.name for a in tensor_args) or 'none'})")
        layout: list[tuple[str, Any]] = []
        filled = {a.name for a in self.spec.input_args if a.param is not None and a.name not in self.spec.inputs}
        it = iter(tensor_args)
        for v in values:
            if not isinstance(v, torch.Tensor):
                layout.append(("value", v))
                continue
            a = next(it)
            if tuple(v.shape) != tuple(inputs[a.name].shape):
                raise SpecRuntimeError(f"{self.file}: get_inputs() gives {a.name} of shape {list(v.shape)}; the "
                                       f"spec's {a.key}.shape gives {list(inputs[a.name].shape)}")
            if a.name not in self.spec.inputs:
                inputs[a.name].copy_(v)
                filled.add(a.name)
            layout.append(("input", a.name))
        self.layout[s.id] = layout
        return filled

    def call(self, s: Scenario, inputs: dict[str, torch.Tensor], mode: str, hp: torch.dtype) -> Any:
        model = self.models[s.id]
        args = [inputs[v] if kind == "input" else v for kind, v in self.layout[s.id]]
        if mode == "hp":
            model = copy.deepcopy(model).to(hp)
            args = [a.to(hp) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        elif mode == "compiled":
            if s.id not in self.compiled:
                self.compiled[s.id] = torch.compile(model, dynamic=False)
            model = self.compiled[s.id]
        return model(*args)
