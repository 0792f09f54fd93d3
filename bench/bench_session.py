"""Session overhead and a KernelSeek-length session.

1. Overhead per tool call, model and harness time excluded: an in-process agent replays a script of
   tool calls instantly (no HTTP), the real Toolbox runs them, the fake executor answers `evaluate`
   instantly; overhead = (wall time - time inside the tools) / tool calls. Target ≤ 20 ms.
2. 11,500 tool calls against the loopback Messages server through the real anthropic client (the
   server runs in a child process so its request log does not count against our memory): time
   spent writing the trace, time to read it back, and peak resident memory. Targets: trace written
   and read back ≤ 3 s, resident memory ≤ 300 MB.

    .venv/bin/python bench/bench_session.py [--calls 11500] [--per-reply 50] [--overhead-calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fakes import FakeExecutor, make_workspace  # noqa: E402

import kstui.engine.agent  # noqa: E402,F401  (a one-time import, seconds on a busy machine: not per-call overhead)
from kstui.engine.config import SessionConfig  # noqa: E402
from kstui.engine.events import AssistantMessage, Error, Event, ToolCallFinished  # noqa: E402
from kstui.engine.session import Session  # noqa: E402
from kstui.engine.trace import TraceWriter, read_trace  # noqa: E402


class ReplayAgent:
    """Answers each turn at once with `per_turn` tool calls (one of them evaluate), then ends."""

    def __init__(self, calls: int, per_turn: int) -> None:
        self.remaining = calls
        self.per_turn = per_turn
        self.last_stop_reason: str | None = None
        self.config = type("C", (), {"model": "replay"})()

    async def stream_turn(self, messages: list[dict[str, Any]], turn: int) -> AsyncIterator[Event]:
        n = min(self.per_turn, self.remaining)
        self.remaining -= n
        blocks = [{"type": "tool_use", "id": f"t{turn}-{i}", "name": "evaluate" if i == 0 else "read_file",
                   "input": {} if i == 0 else {"path": "k.cu", "start_line": 1, "end_line": 3}} for i in range(n)]
        self.last_stop_reason = "tool_use" if blocks else "end_turn"
        yield AssistantMessage(turn=turn, content=blocks or [{"type": "text", "text": "done"}])

    def interrupt(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def compact(self, messages, *, kernel_text, best_summary):  # noqa: ANN001
        return messages, None


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def bench_overhead(calls: int, per_turn: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        kernel = make_workspace(Path(tmp) / "ws")
        config = SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="x")
        session = Session(config, executor=FakeExecutor(), agent=ReplayAgent(calls, per_turn))  # type: ignore[arg-type]
        tool_s: list[float] = []
        session.subscribe(lambda e: tool_s.append(e.seconds) if isinstance(e, ToolCallFinished) else None)
        started = time.perf_counter()
        summary = await session.run()
        wall = time.perf_counter() - started
    n = summary.tool_calls
    return {"tool_calls": n, "wall_s": wall, "inside_tools_s": sum(tool_s),
            "overhead_ms_per_call": (wall - sum(tool_s)) / n * 1000}


_SERVER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from messages_server import MessagesServer, reply, text, tool_use
    calls, per = {calls}, {per}
    def script(body, index):
        start = index * per
        if start >= calls:
            return reply(text("done"))
        n = min(per, calls - start)
        blocks = [tool_use("evaluate", {{}}, chunks=1) if i == 0 else
                  tool_use("read_file", {{"path": "k.cu", "start_line": 1, "end_line": 3}}, chunks=1)
                  for i in range(n)]
        return reply(text("next", chunks=1), *blocks)
    server = MessagesServer(script)
    server.requests = type("Drop", (list,), {{"append": lambda self, x: None}})()
    server.start()
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()
""")


async def bench_long_session(calls: int, per_reply: int) -> dict[str, float]:
    child = subprocess.Popen([sys.executable, "-c", _SERVER.format(tests=str(ROOT / "tests"), calls=calls, per=per_reply)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            kernel = make_workspace(Path(tmp) / "ws")
            # A private copy of the harness: the integrity check must not trip on edits in this checkout.
            harness = Path(tmp) / "harness"
            shutil.copytree(ROOT / "harness", harness, ignore=shutil.ignore_patterns("__pycache__"))
            config = SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="sk-ant-bench",
                                   base_url=url, thinking_budget=0, harness_dir=harness)
            session = Session.build(config, FakeExecutor())
            errors: list[str] = []
            session.subscribe(lambda e: errors.append(e.message) if isinstance(e, Error) else None)
            append_s = [0.0]
            original = TraceWriter.append

            def timed_append(self: TraceWriter, event: Event) -> None:
                t = time.perf_counter()
                original(self, event)
                append_s[0] += time.perf_counter() - t

            TraceWriter.append = timed_append  # type: ignore[method-assign]
            try:
                started = time.perf_counter()
                summary = await session.run()
                wall = time.perf_counter() - started
            finally:
                TraceWriter.append = original  # type: ignore[method-assign]
            t = time.perf_counter()
            events = sum(1 for _ in read_trace(summary.trace))
            read_s = time.perf_counter() - t
            size_mb = os.path.getsize(summary.trace) / 2**20
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(10)
    return {"reason": summary.reason, "errors": errors, "tool_calls": summary.tool_calls, "turns": summary.turns, "evals": summary.evals, "wall_s": wall,
            "trace_events": events, "trace_mb": size_mb, "trace_write_s": append_s[0], "trace_read_s": read_s,
            "trace_total_s": append_s[0] + read_s, "peak_rss_mb": _rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=11_500)
    parser.add_argument("--per-reply", type=int, default=50)
    parser.add_argument("--overhead-calls", type=int, default=2000)
    args = parser.parse_args()
    over = asyncio.run(bench_overhead(args.overhead_calls, 10))
    print(f"session overhead: {over['overhead_ms_per_call']:.2f} ms per tool call "
          f"({over['tool_calls']} calls, 1 in 10 an evaluation; wall {over['wall_s']:.2f} s, "
          f"{over['inside_tools_s']:.2f} s inside the tools) [target <= 20 ms]")
    long = asyncio.run(bench_long_session(args.calls, args.per_reply))
    print(f"long session: {long['tool_calls']} tool calls in {long['turns']} turns ({long['evals']} evaluations), "
          f"wall {long['wall_s']:.1f} s; ended: {long['reason']}" + "".join(f"\n  error: {e}" for e in long["errors"]))
    print(f"  trace: {long['trace_events']} events, {long['trace_mb']:.1f} MB; written in {long['trace_write_s']:.2f} s, "
          f"read back in {long['trace_read_s']:.2f} s, total {long['trace_total_s']:.2f} s [target <= 3 s]")
    print(f"  peak resident memory: {long['peak_rss_mb']:.0f} MB [target <= 300 MB]")


if __name__ == "__main__":
    main()
