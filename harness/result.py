"""The EvalResult: what the harness prints with --json, and what the app decides on.

Torch-free on purpose: the app, the executors and the tests read results without a GPU stack.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1

# Per-scenario verdicts. "ok" is the only passing one.
VERDICTS = (
    "ok",
    "wrong",  # error above tolerance
    "nan",  # NaN or Inf in o or lse
    "unwritten",  # part of o or lse still holds the NaN poison
    "no-key-rows",  # a row that sees no key is not o = 0, lse = -inf
    "input-mutated",  # an input differs from its clone after the call
    "stale-result",  # the fresh-data re-check after timing failed (cached results)
    "too-fast",  # time below the physical floor
    "hidden-work",  # wall clock disagrees with the stream's events
    "error",  # the entry point returned nonzero, or a CUDA error was raised
    "crash",  # the worker died (segfault, abort, illegal address, trap)
    "timeout",  # the scenario ran past its budget
    "skipped",  # never ran because an earlier failure ended the evaluation
)


@dataclass
class CompileError:
    file: str
    line: int
    message: str


@dataclass
class BuildReport:
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    registers: int | None = None
    spills: int = 0  # spill stores + spill loads, bytes
    smem_bytes: int | None = None
    stack_bytes: int | None = None
    log: str = ""
    errors: list[CompileError] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    nvcc: str = ""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class ScenarioResult:
    id: str
    timed: bool
    correct: bool
    verdict: str = "ok"
    detail: str = ""
    max_abs_err: float | None = None
    tolerance: float | None = None
    lse_max_abs_err: float | None = None
    lse_tolerance: float | None = None
    time_us: float | None = None
    spread_pct: float | None = None
    baseline: str | None = None
    baseline_us: float | None = None
    baselines: dict[str, float | None] = field(default_factory=dict)
    speedup: float | None = None
    tflops: float | None = None
    pct_peak: float | None = None
    gflop: float | None = None
    gpu: int | None = None
    seconds: float | None = None  # harness wall time spent on this scenario


@dataclass
class EvalResult:
    task: str
    kernel: str
    kernel_sha256: str
    scenario_set: str
    build: BuildReport
    schema: int = SCHEMA_VERSION
    device: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    scenarios: list[ScenarioResult] = field(default_factory=list)
    all_correct: bool = False
    geomean_speedup: float | None = None
    noise_pct: float | None = None
    error: str | None = None  # an evaluation-wide failure, one line
    seconds: float = 0.0
    profile: dict[str, float] = field(default_factory=dict)  # seconds per harness phase

    @property
    def checks_ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def correct_count(self) -> int:
        return sum(1 for s in self.scenarios if s.correct)

    @property
    def timed(self) -> list[ScenarioResult]:
        return [s for s in self.scenarios if s.timed]

    @property
    def passed(self) -> bool:
        """Correct everywhere, every check passed, no evaluation-wide error."""
        return self.build.ok and self.checks_ok and self.all_correct and self.error is None

    def finalize(self) -> None:
        """Derive all_correct, geomean and noise from the scenarios (never trust a caller's copy)."""
        self.all_correct = bool(self.scenarios) and all(s.correct for s in self.scenarios) and self.build.ok
        self.geomean_speedup = geomean_of(self.timed)
        self.noise_pct = noise_of(self.timed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, default=_json_default)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        validate(data)
        build = dict(data["build"])
        build["errors"] = [CompileError(**e) for e in build.get("errors", [])]
        return cls(
            **{
                **_known(cls, data),
                "build": BuildReport(**_known(BuildReport, build)),
                "checks": [Check(**_known(Check, c)) for c in data.get("checks", [])],
                "scenarios": [ScenarioResult(**_known(ScenarioResult, s)) for s in data.get("scenarios", [])],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"not JSON: {exc}") from None
        return cls.from_dict(data)


class SchemaError(ValueError):
    """The data is not an EvalResult of this schema."""


def _json_default(obj: Any) -> Any:
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


_REQUIRED = {
    "schema": int,
    "task": str,
    "kernel_sha256": str,
    "build": dict,
    "checks": list,
    "scenarios": list,
    "all_correct": bool,
}
_SCENARIO_REQUIRED = {"id": str, "timed": bool, "correct": bool, "verdict": str}


def validate(data: Any) -> None:
    """Raise SchemaError with a one-line reason unless data is an EvalResult of our schema."""
    if not isinstance(data, dict):
        raise SchemaError("an EvalResult is a JSON object")
    for key, typ in _REQUIRED.items():
        if key not in data:
            raise SchemaError(f"missing field {key!r}")
        if not isinstance(data[key], typ):
            raise SchemaError(f"field {key!r} should be {typ.__name__}")
    if data["schema"] != SCHEMA_VERSION:
        raise SchemaError(f"schema {data['schema']} (this kstui reads schema {SCHEMA_VERSION})")
    if not isinstance(data["build"].get("ok"), bool):
        raise SchemaError("field 'build.ok' should be bool")
    for i, s in enumerate(data["scenarios"]):
        if not isinstance(s, dict):
            raise SchemaError(f"scenario {i} is not an object")
        for key, typ in _SCENARIO_REQUIRED.items():
            if not isinstance(s.get(key), typ):
                raise SchemaError(f"scenario {i}: field {key!r} should be {typ.__name__}")
        if s["verdict"] not in VERDICTS:
            raise SchemaError(f"scenario {s['id']}: unknown verdict {s['verdict']!r}")
        if s["correct"] != (s["verdict"] == "ok"):
            raise SchemaError(f"scenario {s['id']}: correct={s['correct']} contradicts verdict {s['verdict']!r}")
    claimed = data["all_correct"]
    actual = bool(data["scenarios"]) and all(s["correct"] for s in data["scenarios"]) and data["build"]["ok"]
    if claimed != actual:
        raise SchemaError(f"all_correct={claimed} contradicts the scenarios")
    g = data.get("geomean_speedup")
    if g is not None and (not isinstance(g, (int, float)) or not math.isfinite(g) or g <= 0):
        raise SchemaError("geomean_speedup should be a positive number or null")


def geomean_of(scenarios: list[ScenarioResult]) -> float | None:
    """Geomean of speedups over the timed scenarios; None unless every one is correct and timed.

    A failed scenario is never dropped to flatter the mean: the mean does not exist then.
    """
    if not scenarios:
        return None
    speedups = [s.speedup for s in scenarios]
    if any(not s.correct for s in scenarios) or any(x is None or x <= 0 for x in speedups):
        return None
    return math.exp(sum(math.log(x) for x in speedups) / len(speedups))  # type: ignore[arg-type]


def noise_of(scenarios: list[ScenarioResult]) -> float | None:
    """The geomean's relative uncertainty in percent, propagated from each scenario's spread.

    spread_pct is the interquartile range over the median of the repetitions; a speedup carries the
    spread of both the candidate and the baseline (same reps, so the same order); averaged over n
    scenarios, independent errors shrink by sqrt(n).
    """
    spreads = [s.spread_pct for s in scenarios if s.spread_pct is not None]
    if not spreads:
        return None
    per = math.sqrt(sum((math.sqrt(2) * x) ** 2 for x in spreads) / len(spreads))
    return per / math.sqrt(len(spreads))
