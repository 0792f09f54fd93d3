"""Trace throughput: a session of N tool calls (default 11,500, KernelSeek's longest) written and read back.

    python bench/bench_trace.py [--tool-calls N]

The event mix: per tool call the call, its result (every tenth a 20 KB file read, the others ~800
bytes) and a streamed text chunk; per turn of two calls a start, the finished assistant message, a
usage event and a finish (≈ 57k events in all). Prints the event count, file size and seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kstui.events import (
    AssistantMessage,
    Event,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    Usage,
)
from kstui.trace import TraceWriter, read_trace

_KERNEL_READ = ("    float acc = fmaf(q[i], k[i], acc);  // line of a kernel\n" * 350)[:20_000]
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


def run_bench(path: Path, tool_calls: int = 11_500) -> tuple[float, float, int]:
    """(seconds to write, seconds to read back, events) for one synthetic session."""
    events = session_events(tool_calls)
    t0 = time.perf_counter()
    with TraceWriter(path) as writer:
        for event in events:
            writer.append(event)
    t1 = time.perf_counter()
    n = sum(1 for _ in read_trace(path))
    t2 = time.perf_counter()
    if n != len(events):
        raise SystemExit(f"read back {n} events of {len(events)}")
    return t1 - t0, t2 - t1, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool-calls", type=int, default=11_500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        write_s, read_s, n = run_bench(path, args.tool_calls)
        size_mb = path.stat().st_size / 1e6
    print(f"tool calls {args.tool_calls}  events {n}  file {size_mb:.1f} MB")
    print(f"write {write_s:.3f} s ({write_s / n * 1e6:.1f} us/event)  "
          f"read {read_s:.3f} s ({read_s / n * 1e6:.1f} us/event)  total {write_s + read_s:.3f} s")


if __name__ == "__main__":
    main()
