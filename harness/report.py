"""The readable report: failures first, then every timed scenario, then the verdict line."""

from __future__ import annotations

from harness.result import EvalResult, ScenarioResult


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _row(s: ScenarioResult) -> str:
    return (f"{s.id:<46} {s.verdict:<13} {_num(s.time_us, '>10.1f')} {(s.baseline or '-'):>14} "
            f"{_num(s.baseline_us, '>10.1f')} {_num(s.speedup, '>7.3f')} {_num(s.tflops, '>8.1f')} {_num(s.pct_peak, '>6.1f')}")


HEADER = (f"{'scenario':<46} {'verdict':<13} {'µs':>10} {'baseline':>14} {'base µs':>10} {'speedup':>7} "
          f"{'TFLOP/s':>8} {'%peak':>6}")


def render(result: EvalResult) -> str:
    lines = [f"{result.kernel} ({result.task}, sha256 {result.kernel_sha256[:12]}) on "
             f"{result.device.get('name', 'no GPU')}{' @ ' + result.device['host'] if result.device.get('host') else ''}"]
    b = result.build
    if b.ok:
        lines.append(f"build: ok{' (cached)' if b.cached else ''} in {b.seconds:.1f} s; registers {b.registers}, "
                     f"spills {b.spills} B, smem {b.smem_bytes} B, stack {b.stack_bytes} B")
    else:
        lines.append("build: FAILED")
        lines += [f"  {e.file}:{e.line}: {e.message}" for e in b.errors[:20]] or [f"  {b.log.strip()[-2000:]}"]
    for c in result.checks:
        if not c.ok:
            lines.append(f"check {c.name}: FAILED: {c.detail}")
    if result.error:
        lines.append(f"error: {result.error}")
    failed = [s for s in result.scenarios if not s.correct]
    timed_ok = [s for s in result.scenarios if s.timed and s.correct]
    if failed:
        lines += ["", f"failed ({len(failed)}):", HEADER]
        lines += [_row(s) + (f"\n    {s.detail}" if s.detail else "") for s in failed[:60]]
        if len(failed) > 60:
            lines.append(f"  … and {len(failed) - 60} more")
    if timed_ok:
        lines += ["", "timed:", HEADER] + [_row(s) for s in timed_ok]
    lines += ["", summary(result)]
    return "\n".join(lines)


def summary(result: EvalResult) -> str:
    timed = result.timed
    checks = result.checks
    untimed = [s for s in result.scenarios if not s.timed]
    parts = [f"{sum(s.correct for s in timed)}/{len(timed)} timed correct",
             f"{sum(s.correct for s in untimed)}/{len(untimed)} correctness-grid",
             f"checks {sum(c.ok for c in checks)}/{len(checks)}"]
    if result.geomean_speedup is not None:
        names = sorted({s.baseline for s in timed if s.baseline})
        parts.append(f"geomean {result.geomean_speedup:.3f}x vs the fastest valid baseline ({', '.join(names)})"
                     f" ± {result.noise_pct or 0:.2f}%")
    else:
        parts.append("geomean -")
    if not result.scenarios and result.error is None and result.build.ok and result.checks_ok:
        verdict = "BUILD AND CHECKS OK (no scenarios run)"
    else:
        verdict = "CORRECT" if result.passed else "REJECTED"
    return f"{verdict}: " + ", ".join(parts) + f"; {result.seconds:.1f} s"
