"""What a task is: scenarios, an entry point, inputs, an fp32 reference, baselines, FLOP/byte counts.

The harness is generic over tasks; everything operator-specific lives in a task module. Modules are
torch-free at import time (the parent process and `--check-only` never import torch); the methods
that make tensors import it themselves and run only inside the worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    import torch


class ScenarioError(ValueError):
    """A scenario set, id or spec the task does not know: bad input, one line."""


@dataclass(frozen=True)
class Scenario:
    id: str
    timed: bool
    params: dict[str, Any] = field(hash=False, compare=False)
    group: str = ""


@dataclass
class Baseline:
    """Another implementation of the task's function, timed against the candidate."""

    name: str
    # (scenario, inputs) -> a zero-argument callable returning the outputs; raises if refused.
    prepare: Callable[[Scenario, dict[str, Any]], Callable[[], dict[str, "torch.Tensor"]]]
    # Outputs the baseline produces and that are checked (a baseline may not expose every output).
    checks: tuple[str, ...]
    # A handicapped variant, used only where no regular baseline accepts a scenario.
    fallback: bool = False


@dataclass
class Comparison:
    verdict: str  # "ok" or a harness.result verdict
    detail: str = ""
    errors: dict[str, float] = field(default_factory=dict)  # output name -> max abs error
    tolerances: dict[str, float] = field(default_factory=dict)


class Task:
    name: ClassVar[str]
    entry_symbol: ClassVar[str]
    # ctypes argument types of the entry point, in order; the last is the stream.
    argtypes: ClassVar[list[Any]]
    output_names: ClassVar[tuple[str, ...]]

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    # --- scenario sets (torch-free) ---
    def timed_grid(self) -> list[Scenario]:
        raise NotImplementedError

    def correctness_grid(self) -> list[Scenario]:
        raise NotImplementedError

    def exhaustive_grid(self) -> list[Scenario]:
        """A larger untimed grid for `--scenarios exhaustive`, where the task has one."""
        return self.correctness_grid()

    def quick_ids(self) -> list[str]:
        raise NotImplementedError

    def parse_spec(self, spec: str) -> Scenario:
        raise NotImplementedError

    def exact_flops(self, s: Scenario) -> float:
        raise NotImplementedError

    def min_bytes(self, s: Scenario) -> float:
        raise NotImplementedError

    def scenarios(self, selection: str = "full", specs: tuple[str, ...] = ()) -> list[Scenario]:
        """The correctness grid (always; the exhaustive one for `exhaustive`, with the full timed set) plus
        the selected timed scenarios and any ad-hoc specs."""
        timed = {s.id: s for s in self.timed_grid()}
        untimed = {s.id: s for s in (self.exhaustive_grid() if selection == "exhaustive" else self.correctness_grid())}
        if selection in ("full", "exhaustive"):
            chosen = list(timed.values())
        elif selection == "quick":
            chosen = [timed[i] for i in self.quick_ids()]
        elif selection == "none":
            chosen = []
        else:
            chosen = []
            for sid in filter(None, (x.strip() for x in selection.split(","))):
                if sid in timed:
                    chosen.append(timed[sid])
                elif sid in untimed:
                    continue  # the correctness grid runs anyway
                else:
                    raise ScenarioError(f"unknown scenario id {sid!r} (see `kstui eval --list-scenarios FILE`)")
        extra = [self.parse_spec(spec) for spec in specs]
        seen = {s.id for s in chosen}
        chosen += [s for s in extra if s.id not in seen]
        # A timed scenario is checked too: one that the untimed grid also holds runs once, timed (the
        # exhaustive cross product holds a timed row, which ran twice under one id and was counted twice).
        seen = {s.id for s in chosen}
        return [s for s in untimed.values() if s.id not in seen] + chosen

    # --- worker side (torch) ---
    def make_inputs(self, s: Scenario, gen: "torch.Generator", device: "torch.device") -> dict[str, "torch.Tensor"]:
        raise NotImplementedError

    def refill_inputs(self, s: Scenario, inputs: dict[str, "torch.Tensor"], gen: "torch.Generator") -> None:
        """Overwrite the inputs in place with a fresh draw (same buffers, same pointers)."""
        raise NotImplementedError

    def output_shapes(self, s: Scenario, inputs: dict[str, "torch.Tensor"]) -> dict[str, tuple[tuple[int, ...], "torch.dtype"]]:
        raise NotImplementedError

    def call_args(self, s: Scenario, inputs: dict[str, "torch.Tensor"], outputs: dict[str, "torch.Tensor"], stream: int) -> list[Any]:
        raise NotImplementedError

    def reference(self, s: Scenario, inputs: dict[str, Any]) -> Any:
        """The fp32 reference and the tolerances for these inputs (computed once per draw)."""
        raise NotImplementedError

    def compare(self, s: Scenario, ref: Any, outputs: dict[str, "torch.Tensor"], only: tuple[str, ...]) -> Comparison:
        """Judge outputs against the reference; `only` names the outputs to judge."""
        raise NotImplementedError

    def baselines(self) -> list[Baseline]:
        return []


def parse_kv_spec(spec: str, allowed: dict[str, Callable[[str], Any]]) -> dict[str, Any]:
    """'a=1,b=x' -> {'a': 1, 'b': 'x'} with per-key converters; one-line ScenarioError otherwise."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep:
            raise ScenarioError(f"scenario spec {spec!r}: {part!r} is not key=value")
        if key not in allowed:
            raise ScenarioError(f"scenario spec {spec!r}: unknown key {key!r} (known: {', '.join(allowed)})")
        try:
            out[key] = allowed[key](value.strip())
        except ValueError:
            raise ScenarioError(f"scenario spec {spec!r}: bad value for {key!r}: {value!r}") from None
    return out

