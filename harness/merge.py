"""Splitting a scenario set into balanced shards, and merging shard results into one EvalResult."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from harness.result import Check, EvalResult

T = TypeVar("T")
PER_SCENARIO_COST = 5e9  # a scenario's fixed cost (inputs, references, launches) in FLOP-equivalents


def split_balanced(items: Sequence[T], n: int, cost: Callable[[T], float]) -> list[list[T]]:
    """n parts of similar total cost (longest-processing-time first), each keeping the input order.

    Deterministic: shard K of N is the same set whichever process computes it.
    """
    if n < 1:
        raise ValueError("shard count must be at least 1")
    loads = [0.0] * n
    owner: dict[int, int] = {}
    for idx in sorted(range(len(items)), key=lambda i: (-cost(items[i]), i)):
        part = min(range(n), key=lambda j: (loads[j], j))
        owner[idx] = part
        loads[part] += cost(items[idx]) + PER_SCENARIO_COST
    return [[items[i] for i in range(len(items)) if owner[i] == part] for part in range(n)]


def merge_results(parts: Sequence[EvalResult], order: Sequence[str] | None = None) -> EvalResult:
    """One EvalResult from shard results of the same kernel: scenarios in `order` (or part order),
    checks AND-combined by name, every derived figure recomputed."""
    if not parts:
        raise ValueError("nothing to merge")
    first = parts[0]
    if any(p.kernel_sha256 != first.kernel_sha256 or p.task != first.task for p in parts):
        raise ValueError("cannot merge results of different kernels or tasks")
    checks: dict[str, Check] = {}
    for p in parts:
        for c in p.checks:
            prev = checks.get(c.name)
            if prev is None:
                checks[c.name] = Check(c.name, c.ok, c.detail)
            elif not c.ok:
                checks[c.name] = Check(c.name, False, "; ".join(x for x in (prev.detail if not prev.ok else "", c.detail) if x))
    scenarios = [s for p in parts for s in p.scenarios]
    if order is not None:
        rank = {sid: i for i, sid in enumerate(order)}
        scenarios.sort(key=lambda s: rank.get(s.id, len(rank)))
    device = dict(first.device)
    devices = [p.device for p in parts if p.device]
    if len(devices) > 1:
        device["gpus"] = [{"host": d.get("host"), "index": d.get("index"), "name": d.get("name")} for d in devices]
    errors = [p.error for p in parts if p.error]
    merged = EvalResult(
        task=first.task, kernel=first.kernel, kernel_sha256=first.kernel_sha256, scenario_set=first.scenario_set,
        build=first.build, device=device, checks=list(checks.values()), scenarios=scenarios,
        error="; ".join(errors) if errors else None, seconds=max(p.seconds for p in parts),
    )
    merged.finalize()
    return merged
