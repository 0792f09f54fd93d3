"""TUI benchmark: prints measured numbers, nothing else.

1. First frame: `kstui FILE --no-agent` in a real terminal (tmux) until the status line is drawn; and
   whether importing the app and the session pulls in torch (it must not).
2. Key press to screen update while assistant text streams into a transcript that holds 11,500 tool
   calls (median and p95 over repeated presses of a layout-changing key).
3. Resident memory of that process at that size.

Run: .venv/bin/python bench/bench_tui.py [--calls 11500] [--presses 40]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNEL = "\n".join(
    ["#include <cuda_runtime.h>", "__global__ void k(const float* x, float* y, int n) {"]
    + [f"  // step {i}\n  if (threadIdx.x == {i % 32}) y[{i}] = x[{i}];" for i in range(150)]
    + ["}", ""]
)


def first_frame_s(workspace: Path) -> float | None:
    if shutil.which("tmux") is None:
        return None
    kernel = workspace / "bench.cu"
    kernel.write_text(KERNEL)
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    kstui = Path(sys.executable).with_name("kstui")
    name = f"kstui-bench-{uuid.uuid4().hex[:8]}"
    command = shlex.join(["env", "TERM=xterm-256color", "ANTHROPIC_API_KEY=", str(kstui), str(kernel), "--no-agent"])
    started = time.perf_counter()
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "140", "-y", "40", command], check=True)
    try:
        while time.perf_counter() - started < 60:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
            if "kstui · bench.cu" in screen and "step 3" in screen:
                return time.perf_counter() - started
            time.sleep(0.01)
        return None
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def imports_torch() -> bool:
    code = "import sys, kstui.app, kstui.cli, kstui.session; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return out.stdout.strip() == "True"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def latency(workspace: Path, calls: int, presses: int) -> dict[str, float]:
    from kstui import events as ev
    from kstui.app import KstuiApp
    from kstui.widgets.messages import SessionEvent

    kernel = workspace / "bench.cu"
    kernel.write_text(KERNEL)
    events: list[ev.Event] = []
    for i in range(calls):
        output = (KERNEL[: 1000 + (i % 7) * 500]) if i % 3 == 0 else f"ok {i}\n" * 20
        events.append(ev.ToolCallStarted(i // 10, f"c{i}", "read_file" if i % 3 == 0 else "bash",
                                         {"path": "bench.cu"} if i % 3 == 0 else {"command": f"nvcc -O3 step{i}.cu"}))
        events.append(ev.ToolCallFinished(i // 10, f"c{i}", events[-1].name, output, seconds=0.05))
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        main = app.main
        loaded = time.perf_counter()
        await main.transcript.load(events)
        await pilot.pause()
        load_s = time.perf_counter() - loaded

        async def stream() -> None:
            turn = calls // 10 + 1
            i = 0
            while True:
                main.post_message(SessionEvent(ev.TextDelta(turn, f"token{i} ")))
                i += 1
                await asyncio.sleep(0.01)

        streamer = asyncio.create_task(stream())
        await pilot.pause(0.5)
        samples: list[float] = []
        for n in range(presses):
            key = "right_square_bracket" if n % 2 == 0 else "left_square_bracket"
            before = main.source.size.width
            t0 = time.perf_counter()
            await pilot.press(key)
            while main.source.size.width == before:
                await asyncio.sleep(0.001)
            samples.append((time.perf_counter() - t0) * 1000)
            await pilot.pause(0.05)
        streamer.cancel()
        streamed = sum(len(b.body) for b in main.transcript.state.blocks if b.kind == "text")
        memory = rss_mb()
        mounted = main.transcript.mounted_count
    samples.sort()
    return {
        "load_s": load_s,
        "median_ms": statistics.median(samples),
        "p95_ms": samples[max(0, int(len(samples) * 0.95) - 1)],
        "max_ms": samples[-1],
        "rss_mb": memory,
        "mounted": mounted,
        "streamed_chars": streamed,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=11_500)
    parser.add_argument("--presses", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        frame = first_frame_s(Path(tmp))
        print(f"first frame (kstui FILE --no-agent, tmux 140x40): {frame:.2f} s" if frame is not None
              else "first frame: not measured (no tmux, or no frame within 60 s)")
        print(f"torch imported by kstui.app/cli/session: {imports_torch()}")
        numbers = asyncio.run(latency(Path(tmp), args.calls, args.presses))
    print(f"transcript: {args.calls:,} tool calls, {numbers['mounted']} blocks mounted, "
          f"loaded in {numbers['load_s']:.2f} s")
    print(f"key press -> screen update while streaming: median {numbers['median_ms']:.1f} ms, "
          f"p95 {numbers['p95_ms']:.1f} ms, max {numbers['max_ms']:.1f} ms over {args.presses} presses "
          f"({numbers['streamed_chars']:,} chars streamed meanwhile)")
    print(f"resident memory: {numbers['rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
