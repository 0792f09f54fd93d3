"""The Task a spec describes: every method of the interface, from the spec alone.

Torch-free at import: scenarios, ids, FLOPs and bytes come from the spec; what needs tensors (inputs,
the reference, the comparison, the baselines) is harness.tasks.spec_runtime, imported on first use
inside the worker.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.tasks.base import Baseline, Comparison, Scenario, ScenarioError, Task, parse_kv_spec
from harness.tasks.spec import DTYPES, Spec, SpecError, TensorArg, load_spec

if TYPE_CHECKING:
    from harness.tasks.spec_runtime import SpecRuntime

_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}


def task_name(spec: Spec) -> str:
    """The spec's name and a digest of everything that defines the task, so a changed spec or reference
    never reads baseline timings cached for another (the cache is keyed by the task's name)."""
    digest = hashlib.sha256(json.dumps(spec.data, sort_keys=True, default=str).encode())
    for path in spec.python_files():
        digest.update(path.read_bytes())
    return f"{spec.name}@{digest.hexdigest()[:8]}"


class SpecTask(Task):
    """options: {"dir": the task file's folder, "spec": its parsed TOML} (what harness.taskfile passes)."""

    name = "spec"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.spec = load_spec(Path(self.options["dir"]), self.options["spec"])
        self.name = task_name(self.spec)  # type: ignore[misc]  # per instance: one class, many tasks
        self.entry_symbol = self.spec.symbol  # type: ignore[misc]
        self.output_names = tuple(a.name for a in self.spec.output_args)  # type: ignore[misc]
        self.argtypes = [ctypes.c_void_p if isinstance(a, TensorArg) else _CTYPES[a.ctype]  # type: ignore[misc]
                         for a in self.spec.args] + [ctypes.c_void_p]
        self._runtime: SpecRuntime | None = None

    # --- scenario sets (torch-free) ---
    def _scenario(self, row: dict[str, Any], timed: bool, group: str) -> Scenario:
        return Scenario(self.spec.scenario_id(row), timed, dict(row), group)

    def timed_grid(self) -> list[Scenario]:
        return [self._scenario(r, True, "timed") for r in self.spec.timed]

    def correctness_grid(self) -> list[Scenario]:
        return [self._scenario(r, False, "check") for r in self.spec.check]

    def quick_ids(self) -> list[str]:
        return list(self.spec.quick)

    def parse_spec(self, spec: str) -> Scenario:
        allowed: dict[str, Any] = {s: int for s in self.spec.sizes} | {v: str for v in self.spec.dtype_vars}
        given = parse_kv_spec(spec, allowed)
        given = {**{v: types[0] for v, types in self.spec.dtype_vars.items()}, **given}
        try:
            (row,) = self.spec.resolve_row(given, "scenario")
        except SpecError as exc:
            raise ScenarioError(f"scenario spec {spec!r}: {exc.message}") from None
        return self._scenario(row, True, "custom")

    def exact_flops(self, s: Scenario) -> float:
        return float(self.spec.flops(s.params)) if self.spec.flops is not None else 0.0

    def min_bytes(self, s: Scenario) -> float:
        """The spec's byte count, or every input and output tensor read or written once."""
        if self.spec.bytes is not None:
            return float(self.spec.bytes(s.params))
        total = 0
        for a in self.spec.tensors:
            n = 1
            for x in self.spec.shape_of(a, s.params):
                n *= x
            total += n * DTYPES[self.spec.dtype_of(a, s.params)][1]
        return float(total)

    # --- worker side (torch) ---
    @property
    def runtime(self) -> SpecRuntime:
        if self._runtime is None:
            from harness.tasks.spec_runtime import SpecRuntime

            self._runtime = SpecRuntime(self.spec)
        return self._runtime

    def make_inputs(self, s, gen, device):
        return self.runtime.make_inputs(s, gen, device)

    def refill_inputs(self, s, inputs, gen):
        self.runtime.refill_inputs(s, inputs, gen)

    def output_shapes(self, s, inputs):
        return self.runtime.output_shapes(s)

    def call_args(self, s, inputs, outputs, stream):
        args: list[Any] = []
        for a in self.spec.args:
            if isinstance(a, TensorArg):
                args.append((inputs if a.role == "in" else outputs)[a.name].data_ptr())
            else:
                args.append(self.spec.scalar_value(a, s.params))
        return args + [stream]

    def reference(self, s, inputs):
        return self.runtime.reference(s, inputs)

    def compare(self, s, ref, outputs, only=()) -> Comparison:
        return self.runtime.compare(s, ref, outputs, only or self.output_names)

    def baselines(self) -> list[Baseline]:
        return self.runtime.baselines()
