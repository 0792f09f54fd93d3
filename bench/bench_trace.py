"""Trace throughput: a session of N tool calls (default 11,500, KernelSeek's longest) written and read back.

    python bench/bench_trace.py [--tool-calls N]

The event mix: per tool call the call, its result (every tenth a 20 KB file read, the others ~800
bytes) and a streamed text chunk; per turn of two calls a start, the finished assistant message, a
usage event and a finish (≈ 57k events in all). Prints the event count, the file size, and wall and
CPU seconds (on a shared machine the CPU figure is the one that means something).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kstui.engine.events import (
    AssistantMessage,
    Event,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
)
from kstui.engine.trace import TraceWriter, read_trace

_KERNEL_READ = ("    float acc = fmaf(q[i], k[i], acc);  // line of a kernel\n" * 350)[:20_000]
_FAKE_KEY = "sk-ant-api03-" + "Bench0Key1Not2Real3" * 5
_SMALL = ("nvcc: ok\n" + "x" * 790)[:800]


def session_events(tool_calls: int) -> list[Event]:
    out: list[Event] = []
    for i in range(tool_calls):
        turn = i // 2
        if i % 2 == 0:
            out.append(TurnStarted(turn=turn))
        out.append(TextDelta(turn=turn, text="Let me look at the inner loop and check the register count."))
        out.append(ToolCallStarted(turn=turn, call_id=f"toolu_{i:06d}", name="read_file",
                                   input={"path": "flash_fwd.cu", "offset": i % 400}))
        out.append(ToolCallFinished(turn=turn, call_id=f"toolu_{i:06d}", name="read_file",
                                    output=_KERNEL_READ if i % 10 == 0 else _SMALL, seconds=0.01))
        if i % 2 == 1:
            out.append(AssistantMessage(turn=turn, content=[
                {"type": "text", "text": "Let me look at the inner loop and check the register count."},
                {"type": "tool_use", "id": f"toolu_{i:06d}", "name": "read_file", "input": {"path": "flash_fwd.cu"}},
            ]))
            out.append(Usage(model="claude", input_tokens=1000 * turn, output_tokens=50 * turn,
                             cache_read_tokens=900 * turn, cache_write_tokens=100, cost_usd=0.001 * turn))
            out.append(TurnFinished(turn=turn, stop_reason="tool_use"))
    return out


@dataclass
class BenchResult:
    events: int
    write_s: float  # wall clock
    read_s: float
    write_cpu_s: float  # this process's CPU time (user + system): what a busy machine does not inflate
    read_cpu_s: float


def run_bench(path: Path, tool_calls: int = 11_500) -> BenchResult:
    """Write one synthetic session's events to path and read them back, timed."""
    events = session_events(tool_calls)
    w0, c0 = time.perf_counter(), time.process_time()
    with TraceWriter(path, extra_secrets=[_FAKE_KEY]) as writer:  # a session always has a key to guard
        for event in events:
            writer.append(event)
    w1, c1 = time.perf_counter(), time.process_time()
    n = sum(1 for _ in read_trace(path))
    w2, c2 = time.perf_counter(), time.process_time()
    if n != len(events):
        raise SystemExit(f"read back {n} events of {len(events)}")
    return BenchResult(n, w1 - w0, w2 - w1, c1 - c0, c2 - c1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool-calls", type=int, default=11_500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        r = run_bench(path, args.tool_calls)
        size_mb = path.stat().st_size / 1e6
    print(f"tool calls {args.tool_calls}  events {r.events}  file {size_mb:.1f} MB")
    print(f"wall: write {r.write_s:.3f} s ({r.write_s / r.events * 1e6:.1f} us/event)  "
          f"read {r.read_s:.3f} s ({r.read_s / r.events * 1e6:.1f} us/event)  total {r.write_s + r.read_s:.3f} s")
    print(f"cpu:  write {r.write_cpu_s:.3f} s  read {r.read_cpu_s:.3f} s  "
          f"total {r.write_cpu_s + r.read_cpu_s:.3f} s")


if __name__ == "__main__":
    main()
