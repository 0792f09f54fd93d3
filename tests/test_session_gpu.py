"""The whole loop on a GPU: `kstui run --headless` through its own local executor, the real anthropic
client talking to the loopback Messages server, whose scripted agent writes real kernels one after
another into a real git repository, each judged by the real harness.

The user brings flash_fwd.cu launching its kernel twice (a correct kernel at half speed). The agent
then writes a wrong kernel (causal mask aligned top-left), the start unchanged, a slower correct one
(three launches) and a faster one (one launch). The start must be evaluated and committed, only the
faster version accepted, and the trace, the commits and their notes must agree. Each evaluation's
time is printed as `SESSION ...` lines (`bench/gpu_check.sh session` collects them); set
KSTUI_SESSION_OUT=DIR to keep the headless output (written as it comes), the trace and the repository's
log there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from messages_server import MessagesServer, reply, text, tool_use

from kstui.engine.events import (
    Accepted,
    EvaluationFinished,
    Rejected,
    SessionStarted,
    StartingPoint,
)
from kstui.engine.history import History
from kstui.engine.trace import read_trace

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-ant-gpu-session-0000000000"
LAUNCH = "flash_fwd_kernel<T, DP><<<blocks, THREADS, smem_bytes, stream>>>(p);"


def _launched(source: str, times: int) -> str:
    assert source.count(LAUNCH) == 1
    return source.replace(LAUNCH, "\n    ".join([LAUNCH] * times))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _user_repo(ws: Path, start: str) -> Path:
    ws.mkdir()
    kernel = ws / "flash_fwd.cu"
    kernel.write_text(start)
    shutil.copy(ROOT / "workspace" / "flash_fwd.toml", ws / "flash_fwd.toml")
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", ".")
    _git(ws, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "my kernel")
    return kernel


def test_headless_session_on_the_gpu_starts_from_the_users_kernel(tmp_path: Path) -> None:
    original = (ROOT / "workspace" / "flash_fwd.cu").read_text()
    start = _launched(original, 2)
    wrong = start.replace("const int causal_offset = p.seqlen_k - p.seqlen_q;", "const int causal_offset = 0;")
    assert wrong != start
    versions = [("wrong", wrong), ("same", start), ("slower", _launched(original, 3)), ("faster", original)]
    kernel = _user_repo(tmp_path / "ws", start)
    user_main = _git(kernel.parent, "rev-parse", "main")

    script: list[Any] = [
        reply(text(f"Version {name}."), tool_use("write_file", {"path": "flash_fwd.cu", "content": source}),
              tool_use("evaluate", {}))
        for name, source in versions
    ]
    script.append(reply(text("Done.")))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "KSTUI_SESSION"))}
    env.update(ANTHROPIC_API_KEY=KEY, KSTUI_THINKING="0", HOME=str(tmp_path / "home"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    # The headless output goes to a file as it comes, so a run cut short by a device limit still shows
    # how far it got.
    keep = Path(os.environ.get("KSTUI_SESSION_OUT") or tmp_path / "out")
    keep.mkdir(parents=True, exist_ok=True)
    log = keep / "headless.txt"
    started = time.monotonic()
    with MessagesServer(script) as server, open(log, "w") as out:
        env["ANTHROPIC_BASE_URL"] = server.url
        rc = subprocess.run([sys.executable, "-m", "kstui", "run", str(kernel), "--headless", "--scenarios", "quick"],
                            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, timeout=540).returncode
        # Each turn wrote, then evaluated: the evaluation's result is the turn's last tool result.
        tool_results = [[b["content"] for b in r.body["messages"][-1]["content"] if b.get("type") == "tool_result"][-1]
                        for r in server.requests[1:]]
    wall = time.monotonic() - started
    printed = log.read_text()

    (trace,) = (kernel.parent / ".kstui" / "sessions").glob("*/trace.jsonl")
    shutil.copy(trace, keep / "trace.jsonl")
    (keep / "git-log.txt").write_text(_git(kernel.parent, "log", "--all", "--notes=kstui", "--stat"))
    assert rc == 0, printed[-8000:]

    events = list(read_trace(trace))
    finished = [e for e in events if isinstance(e, EvaluationFinished)]
    verdicts = [e for e in events if isinstance(e, (Accepted, Rejected))]
    (session_started,) = [e for e in events if isinstance(e, SessionStarted)]
    (starting,) = [e for e in events if isinstance(e, StartingPoint)]
    assert session_started.model, "meta: the model of an agent session is recorded"

    # The start: evaluated (the first evaluation), correct everywhere, committed on kstui's branch.
    assert starting.eval_no == 1 and starting.geomean is not None and starting.correct == starting.total > 0
    assert starting.commit is not None

    # Each version's verdict, in order, and the tool result the agent read.
    kinds = [(type(v).__name__, v.reason if isinstance(v, Rejected) else v.message) for v in verdicts]
    assert [k for k, _ in kinds] == ["Rejected", "Rejected", "Rejected", "Accepted"], kinds
    wrong_v, same_v, slower_v, faster_v = verdicts
    assert "correct" in wrong_v.reason and "wrong" in wrong_v.reason, wrong_v.reason
    assert wrong_v.geomean is None  # correctness before timing: a wrong kernel is never timed
    assert "not faster" in same_v.reason or "rechecked" in same_v.reason, same_v.reason
    assert "not faster" in slower_v.reason or "rechecked" in slower_v.reason, slower_v.reason
    assert slower_v.geomean is not None and slower_v.geomean < starting.geomean
    assert faster_v.geomean > 1.3 * starting.geomean and faster_v.previous == pytest.approx(starting.geomean)
    assert len(tool_results) == 4
    assert ["REJECTED" in r for r in tool_results] == [True, True, True, False]
    assert "ACCEPTED" in tool_results[3]

    # Git agrees: the start and the faster version on kstui's branch, each with its result as a note,
    # the user's branch untouched.
    history = History(kernel)
    try:
        entries = history.entries()
        assert [e.start for e in entries] == [False, True]
        accepted_entry, start_entry = entries
        assert start_entry.sha == starting.commit and accepted_entry.sha == faster_v.commit
        assert history.content_at(accepted_entry.sha) == original
        assert history.content_at(start_entry.sha) == start
        for entry, geomean in ((start_entry, starting.geomean), (accepted_entry, faster_v.geomean)):
            noted = history.result_of(entry.sha)
            assert noted is not None and noted.passed and noted.geomean_speedup == pytest.approx(geomean)
            assert entry.geomean == pytest.approx(geomean, rel=1e-3)
    finally:
        history.close()
    assert _git(kernel.parent, "rev-parse", "main") == user_main
    assert KEY not in trace.read_text() and KEY not in printed

    # Time per evaluation, for docs/BENCHMARKS.md.
    names = {1: "start"} | {2 + i: name for i, (name, _) in enumerate(versions)}
    for e in finished:
        label = names.get(e.eval_no, "re-check")
        geo = e.result.geomean_speedup if e.result is not None else None
        print(f"SESSION eval {e.eval_no} {label:8s} {e.seconds:7.1f} s  geomean {geo if geo is None else f'{geo:.3f}x'}")
    print(f"SESSION {len(finished)} evaluations, {sum(e.seconds for e in finished):.1f} s evaluating, "
          f"{wall:.1f} s wall for the whole session")
