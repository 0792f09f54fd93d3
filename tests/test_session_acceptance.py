"""The acceptance rule: correctness first, then a gain beyond the measured noise, with rechecks when borderline."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from fakes import EventLog, FakeExecutor, kernel_text, make_workspace

from harness.result import EvalResult
from kstui.engine.acceptance import decide
from kstui.engine.config import SessionConfig
from kstui.engine.events import Accepted, Error, EvaluationStarted, Rejected, Rewound, SessionStarted, StartingPoint
from kstui.engine.session import Session


def _result(text: str, spread: float = 0.2, **kw: Any) -> EvalResult:
    return FakeExecutor(spread_pct=spread, **kw).result_for(text, "k.cu", "0" * 64, "full")


def _judge(candidate: EvalResult, best: EvalResult | None, floor: float = 0.5):
    return decide(candidate, best.geomean_speedup if best else None, best.noise_pct if best else None,
                 floor_pct=floor, borderline_factor=3.0)


@pytest.mark.parametrize("extra, needle", [
    ("// fake: wrong=bf16-d64-b2-h8x8-s1024x1024\n", "3/4 correct; bf16-d64-b2-h8x8-s1024x1024: wrong"),
    ("// fake: build-error\n", "build failed: k.cu:4: expected a ';'"),
    ("// fake: check-fail=no-host-sync\n", "check failed: no-host-sync"),
])
def test_incorrect_or_failing_versions_are_rejected_however_fast(extra: str, needle: str) -> None:
    base = _result(kernel_text(1.0))
    verdict = _judge(_result(kernel_text(5.0, extra)), base)
    assert verdict.kind == "reject" and needle in verdict.reason
    assert _judge(_result(kernel_text(5.0, extra)), None).kind == "reject"  # not even as a baseline


def test_evaluation_error_is_rejected() -> None:
    r = _result(kernel_text(2.0))
    r.error = "worker crashed"
    assert _judge(r, None).kind == "reject" and "worker crashed" in _judge(r, None).reason


def test_first_passing_version_is_the_baseline() -> None:
    verdict = _judge(_result(kernel_text(0.4)), None)
    assert verdict.kind == "accept" and "baseline" in verdict.reason


def test_gain_must_beat_the_measured_noise() -> None:
    best = _result(kernel_text(1.0))
    assert _judge(_result(kernel_text(1.2)), best).kind == "accept"
    assert _judge(_result(kernel_text(0.99)), best).kind == "reject"
    assert _judge(_result(kernel_text(1.01)), best).kind == "borderline"  # 1% < 3 x 0.5% floor
    noisy_best, noisy = _result(kernel_text(1.0), spread=4.0), _result(kernel_text(1.05), spread=4.0)
    assert noisy.noise_pct is not None and noisy.noise_pct > 2.5
    verdict = _judge(noisy, noisy_best)
    assert verdict.kind == "borderline" and verdict.margin_pct == pytest.approx(noisy.noise_pct)
    assert _judge(_result(kernel_text(1.05)), best).kind == "accept"  # the same gain, quiet measurements


def _save(kernel: Path, content: str) -> None:
    tmp = kernel.with_name(".k.cu.tmp")
    tmp.write_text(content)
    os.replace(tmp, kernel)


async def _manual(kernel: Path, executor: FakeExecutor, **kw: Any) -> tuple[Session, asyncio.Task, EventLog]:
    config = SessionConfig(kernel=kernel, workspace=kernel.parent, no_agent=True, **kw)
    session = Session(config, executor=executor, agent=None)
    log = EventLog()
    session.subscribe(log)
    task = asyncio.create_task(session.run())
    await log.wait_for(SessionStarted)
    await log.wait_for(StartingPoint)  # every session first evaluates the kernel as the user brought it
    return session, task, log


async def _finish(session: Session, task: asyncio.Task) -> Any:
    await session.stop()
    return await asyncio.wait_for(task, 10)


async def test_borderline_gain_is_rechecked_interleaved_and_accepted(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    fake = FakeExecutor()
    session, task, log = await _manual(kernel, fake)
    kernel.write_text(kernel_text(1.01))
    await session.evaluate_now()
    await _finish(session, task)
    (start,), (accepted,) = log.of(StartingPoint), log.of(Accepted)
    assert start.geomean == pytest.approx(1.0, rel=0.01) and accepted.previous == start.geomean
    paths = [p for p, _ in fake.calls]
    assert [p.name for p in paths] == ["k.cu"] * 6
    # Every evaluation judges a copy kept outside the workspace, with the kernel's own name (part of the
    # build) and its task file beside it.
    assert [p.parent.name.split("-")[0] for p in paths] == ["start", "candidate", "candidate", "best", "candidate",
                                                            "best"]
    assert not any(p.is_relative_to(kernel.parent) for p in paths)
    committed = session.history.result_of(accepted.commit)
    assert committed is not None and committed.device["call_no"] == 5  # the last recheck's fresh measurement
    assert not any(p.parent.exists() for p in paths)  # snapshots removed
    assert [e.eval_no for e in log.of(EvaluationStarted)] == [1, 2, 3, 4, 5, 6]


async def test_borderline_gain_that_vanishes_on_recheck_is_rejected(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    # the candidate's rechecks run 2% slower: its first, lucky measurement does not survive
    fake = FakeExecutor(drift=lambda call_no, text: 1.02 if "speedup=1.01" in text and call_no > 2 else 1.0)
    session, task, log = await _manual(kernel, fake)
    kernel.write_text(kernel_text(1.01))
    await session.evaluate_now()
    await _finish(session, task)
    assert log.of(Accepted) == []
    assert "rechecked 2x interleaved" in log.of(Rejected)[0].reason
    (start,) = session.history.entries()
    assert start.start and start.sha == log.of(StartingPoint)[0].commit


async def test_clear_gain_needs_no_recheck_and_noise_blocks_a_small_one(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    fake = FakeExecutor(spread_pct=4.0)
    session, task, log = await _manual(kernel, fake)
    kernel.write_text(kernel_text(1.02))  # 2% faster but noise is ~2.8%
    await session.evaluate_now()
    kernel.write_text(kernel_text(1.5))
    await session.evaluate_now()
    await _finish(session, task)
    assert log.of(StartingPoint)[0].geomean == pytest.approx(1.0, rel=0.03)
    assert [a.geomean for a in log.of(Accepted)] == [pytest.approx(1.5, rel=0.03)]
    assert len(log.of(Rejected)) == 1 and len(fake.calls) == 2 + 4 + 1


async def test_manual_mode_evaluates_every_real_save(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    session, task, log = await _manual(kernel, FakeExecutor())
    _save(kernel, kernel_text(0.9, "// first save\n"))
    await log.wait_for(Rejected, 1)  # slower than the start
    _save(kernel, kernel_text(1.3))
    await log.wait_for(Accepted, 1)
    _save(kernel, kernel_text(1.1))
    await log.wait_for(Rejected, 2)
    summary = await _finish(session, task)
    assert summary.accepted == 1 and summary.evals == 4  # the start and three saves
    assert "speedup=1.3" in session.history.content_at(session.history.best().sha)


async def test_rewind_restores_a_version_as_a_new_commit(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    fake = FakeExecutor()
    session, task, log = await _manual(kernel, fake)
    first = log.of(StartingPoint)[0].commit
    kernel.write_text(kernel_text(1.4))
    await session.evaluate_now()
    await session.rewind(first)
    await asyncio.sleep(0.5)  # the restore's own write must not be evaluated as a save
    await _finish(session, task)
    rewound = log.of(Rewound)
    assert len(rewound) == 1 and rewound[0].to_commit == first
    assert kernel.read_text() == kernel_text(1.0)
    entries = session.history.entries()
    assert entries[0].sha == rewound[0].new_commit and entries[0].restores == first and len(entries) == 3
    assert len(fake.calls) == 2


async def test_harness_change_stops_evaluation_with_an_alert(tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    shutil.copytree(Path(__file__).resolve().parent.parent / "harness", harness,
                    ignore=shutil.ignore_patterns("__pycache__"))
    kernel = make_workspace(tmp_path / "ws", 1.0)
    fake = FakeExecutor()
    session, task, log = await _manual(kernel, fake, harness_dir=harness)
    (harness / "result.py").write_text((harness / "result.py").read_text() + "\n# tampered\n")
    kernel.write_text(kernel_text(2.0))
    await session.evaluate_now()
    summary = await asyncio.wait_for(task, 10)
    assert summary.reason == "harness changed"
    alerts = [e for e in log.of(Error) if e.where == "harness"]
    assert len(alerts) == 1 and "result.py" in alerts[0].message
    assert len(fake.calls) == 1 and log.of(Accepted) == []  # only the start was evaluated


async def test_a_partial_scenario_set_is_never_accepted(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    session, task, log = await _manual(kernel, FakeExecutor())
    outcome = await session.toolbox.run("evaluate", {"scenarios": "bf16-d64-b2-h8x8-s1024x1024"})  # the agent's tool
    await _finish(session, task)
    summary_text = outcome.text
    assert "NOT A CANDIDATE" in summary_text and "1/1 scenarios correct" in summary_text
    assert log.of(Accepted) == [] and "for information only: only the session's set 'full'" in log.of(Rejected)[0].reason


async def test_spare_gpus_retime_the_best_beside_the_candidate(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    # The machine got 10% slower since the best was accepted: its recorded 1.0x no longer holds, and a
    # candidate measured now at 0.95x is in truth faster than the best measured now (0.91x).
    slower = lambda call_no, text: 1.1 if call_no > 1 else 1.0  # noqa: E731
    fake = FakeExecutor(parallelism=2, drift=slower, delay_s=0.2)
    session, task, log = await _manual(kernel, fake)
    kernel.write_text(kernel_text(1.05))
    await session.evaluate_now()
    await _finish(session, task)
    assert [(p.parent.name.split("-")[0], p.name) for p, _ in fake.calls] == [("start", "k.cu"), ("candidate", "k.cu"),
                                                                             ("best", "k.cu")]
    started = log.of(EvaluationStarted)
    assert "spare GPU" in started[2].where and started[2].ts - started[1].ts < 0.2  # concurrent, not queued
    (accepted,) = log.of(Accepted)
    assert accepted.geomean < 1.0  # beats the fresh best (the start, re-timed), not the stale record
    assert not list(kernel.parent.glob(".k.kstui-*"))


async def test_max_evals_holds_with_rechecks_counted(tmp_path: Path) -> None:
    kernel = make_workspace(tmp_path / "ws", 1.0)
    fake = FakeExecutor()
    session, task, log = await _manual(kernel, fake, max_evals=3)
    kernel.write_text(kernel_text(1.01))  # borderline: its re-checks (4 more) would go past 3
    await session.evaluate_now()
    await _finish(session, task)
    assert len(fake.calls) == 2 and log.of(Accepted) == []
    assert "re-checking it would go past --max-evals 3" in log.of(Rejected)[0].reason
