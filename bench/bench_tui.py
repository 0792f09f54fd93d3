"""TUI benchmark: prints measured numbers, nothing else.

1. First frame: `kstui FILE --no-agent`, and `kstui FILE` with the agent on, in a real terminal (tmux)
   until the status line and the source are drawn, and the same for a kernel ten times as long; and
   whether importing the app and the session pulls in torch (it must not).
2. Key press to screen update while assistant text streams into a transcript that holds 11,500 tool
   calls: typing into the question box, and both column-resize keys (each moves one divider: the
   transcript and the column beside it are laid out and painted again). A resize key is timed twice:
   to the end of the frame that paints the new layout (Textual's layout-refresh signal, published once
   that frame has been handed to the terminal driver), and to when a task of the benchmark sees the new
   transcript width, which also waits for whatever runs once that frame is out (the resized widgets'
   Resize events, a garbage collection held back for the frame).
3. Resident memory of that process at that size, and the share of a core the stream alone keeps busy.

Run: .venv/bin/python bench/bench_tui.py [--calls 11500] [--presses 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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

def kernel_text(steps: int = 150) -> str:
    """A kernel of 2 * steps + 3 lines (by default 303, about the starting kernel's 344)."""
    return "\n".join(
        ["#include <cuda_runtime.h>", "__global__ void k(const float* x, float* y, int n) {"]
        + [f"  // step {i}\n  if (threadIdx.x == {i % 32}) y[{i}] = x[{i}];" for i in range(steps)]
        + ["}", ""]
    )


KERNEL = kernel_text()


def first_frame_s(workspace: Path, *, agent: bool = False, kernel_source: str = KERNEL) -> float | None:
    """`kstui FILE` in tmux until its first frame is on screen. The installed entry point, with this
    checkout's packages first on the path, so a worktree's benchmark times that worktree's code. With
    `agent`, a key is set and the agent is on (its API a closed loopback port: nothing leaves the
    machine); otherwise --no-agent. Python writes its bytecode, as it does for a user (a container may
    set PYTHONDONTWRITEBYTECODE, which makes every start compile kstui's modules again); main() makes
    one untimed start first, so the cache is there."""
    if shutil.which("tmux") is None:
        return None
    workspace.mkdir(parents=True, exist_ok=True)
    kernel = workspace / "bench.cu"
    kernel.write_text(kernel_source)
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    kstui = Path(sys.executable).with_name("kstui")
    name = f"kstui-bench-{uuid.uuid4().hex[:8]}"
    env = ["env", "-u", "PYTHONDONTWRITEBYTECODE", "TERM=xterm-256color", f"PYTHONPATH={ROOT}"]
    if agent:
        env += ["ANTHROPIC_API_KEY=sk-bench-not-a-key", "ANTHROPIC_BASE_URL=http://127.0.0.1:9"]
        command = shlex.join([*env, str(kstui), str(kernel)])
    else:
        command = shlex.join([*env, "ANTHROPIC_API_KEY=", str(kstui), str(kernel), "--no-agent"])
    for attempt in range(3):
        started = time.perf_counter()
        made = subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "140", "-y", "40", command])
        if made.returncode == 0:
            break
        time.sleep(0.5)  # the server of the last measurement was still exiting ("server exited unexpectedly")
    else:
        return None
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
    code = "import sys, kstui.app, kstui.cli, kstui.engine.session; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return out.stdout.strip() == "True"


def press(app, key: str) -> None:
    """A key as the terminal driver delivers it (Pilot.press also waits for the app to go idle, which
    it never does while text streams, so it would measure its own timeout)."""
    from textual import events

    names = {"left_square_bracket": "[", "right_square_bracket": "]", "left_curly_bracket": "{",
             "right_curly_bracket": "}"}
    character = key if len(key) == 1 else names.get(key)
    app.post_message(events.Key(key, character))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def latency(workspace: Path, calls: int, presses: int) -> dict[str, float]:
    from kstui.app import KstuiApp
    from kstui.engine import events as ev

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
            # Through the app's subscriber, as a Session's deltas arrive (faster than the session sends).
            turn = calls // 10 + 1
            i = 0
            while True:
                app.forward(ev.TextDelta(turn, f"token{i} " + ("\n\n" if i % 40 == 39 else "")))
                i += 1
                await asyncio.sleep(0.01)

        streamer = asyncio.create_task(stream())
        await pilot.pause(0.5)
        # What the stream alone costs: the share of one core the app uses with no key pressed.
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(3)
        stream_busy = (time.process_time() - cpu) / (time.perf_counter() - wall)
        resize: dict[str, list[float]] = {"source": [], "speedup": []}
        resize_seen: dict[str, list[float]] = {"source": [], "speedup": []}
        typing: list[float] = []
        main.box.focus()
        for n in range(presses):
            before = main.box.value
            t0 = time.perf_counter()
            press(app, "x")
            while main.box.value == before:
                await asyncio.sleep(0.001)
            typing.append((time.perf_counter() - t0) * 1000)
            await pilot.pause(0.05)
        main.transcript.focus()
        painted: dict[str, float] = {}

        def layout_refreshed(screen) -> None:
            # Textual publishes this at the end of a layout refresh, after the frame went to the driver.
            now = time.perf_counter()
            if "at" not in painted and main.transcript.size.width != painted["width"]:
                painted["at"] = now

        main.screen_layout_refresh_signal.subscribe(main, layout_refreshed, immediate=True)
        keys = {"source": ("right_square_bracket", "left_square_bracket"),
                "speedup": ("right_curly_bracket", "left_curly_bracket")}
        for column, (wider, narrower) in keys.items():
            for n in range(presses):
                # Either divider moves the transcript's edge: its new width is the layout having run.
                before = main.transcript.size.width
                painted.clear()
                painted["width"] = before
                t0 = time.perf_counter()
                press(app, wider if n % 2 == 0 else narrower)
                while main.transcript.size.width == before:
                    await asyncio.sleep(0.001)
                seen = time.perf_counter()
                resize[column].append((painted["at"] - t0) * 1000)
                resize_seen[column].append((seen - t0) * 1000)
                await pilot.pause(0.05)
        streamer.cancel()
        streamed = sum(len(b.body) for b in main.transcript.state.blocks if b.kind == "text")
        memory = rss_mb()
        mounted = main.transcript.mounted_count
    return {
        "load_s": load_s,
        "typing": percentiles(typing),
        "resize_source": percentiles(resize["source"]),
        "resize_speedup": percentiles(resize["speedup"]),
        "resize_source_seen": percentiles(resize_seen["source"]),
        "resize_speedup_seen": percentiles(resize_seen["speedup"]),
        "rss_mb": memory,
        "stream_busy": stream_busy,
        "mounted": mounted,
        "streamed_chars": streamed,
    }


async def reload_latency(workspace: Path, saves: int) -> str:
    """Editor-style atomic save (temp file renamed over the kernel) -> the source pane holds the new text."""
    from kstui.app import KstuiApp

    kernel = workspace / "reload" / "k.cu"
    kernel.parent.mkdir(parents=True)
    kernel.with_suffix(".toml").write_text('task = "attention"\n')
    body = "".join(f"// line {i}\n" for i in range(400))
    kernel.write_text(body)
    samples = []
    app = KstuiApp(kernel=kernel)
    async with app.run_test(size=(140, 40)) as pilot:
        source = app.main.source
        for i in range(saves):
            tmp = kernel.with_name(".k.cu.swp")
            tmp.write_text(body + f"// save {i}\n")
            started = time.perf_counter()
            os.replace(tmp, kernel)
            while f"save {i}" not in source.state.text:
                await asyncio.sleep(0.002)
            samples.append((time.perf_counter() - started) * 1000)
            await pilot.pause(0.3)
    return percentiles(samples)


def percentiles(samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[max(0, int(len(samples) * 0.95) - 1)]
    return f"median {statistics.median(samples):.1f} ms, p95 {p95:.1f} ms, max {samples[-1]:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=11_500)
    parser.add_argument("--presses", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first_frame_s(Path(tmp) / "bytecode")  # untimed: writes the bytecode a user's later starts use
        frame = first_frame_s(Path(tmp) / "manual")
        print(f"first frame (kstui FILE --no-agent, tmux 140x40): {frame:.2f} s" if frame is not None
              else "first frame: not measured (no tmux, or no frame within 60 s)")
        frame = first_frame_s(Path(tmp) / "agent", agent=True)
        print(f"first frame with the agent on (kstui FILE, a key set, tmux 140x40): {frame:.2f} s" if frame is not None
              else "first frame with the agent on: not measured (no tmux, or no frame within 60 s)")
        frame = first_frame_s(Path(tmp) / "long", kernel_source=kernel_text(1500))
        print(f"first frame of a 3,003-line kernel (--no-agent): {frame:.2f} s" if frame is not None
              else "first frame of a 3,003-line kernel: not measured")
        print(f"torch imported by kstui.app/cli/session: {imports_torch()}")
        numbers = asyncio.run(latency(Path(tmp), args.calls, args.presses))
        reload = asyncio.run(reload_latency(Path(tmp), 20))
    print(f"transcript: {args.calls:,} tool calls, {numbers['mounted']} blocks mounted, "
          f"loaded in {numbers['load_s']:.2f} s")
    print(f"streaming alone (100 deltas/s, no key pressed): {numbers['stream_busy']:.0%} of one core busy")
    print(f"while streaming ({numbers['streamed_chars']:,} chars), over {args.presses} presses each:")
    print(f"  typing a character in the question box -> the box's value changed (painted on the next frame): {numbers['typing']}")
    print(f"  source column key ([ ]) -> frame with the new layout painted: {numbers['resize_source']}")
    print(f"    -> the transcript's new width seen by a task (after what runs once that frame is out): "
          f"{numbers['resize_source_seen']}")
    print(f"  speedup column key ({{ }}) -> frame with the new layout painted: {numbers['resize_speedup']}")
    print(f"    -> the transcript's new width seen by a task (after what runs once that frame is out): "
          f"{numbers['resize_speedup_seen']}")
    print(f"resident memory: {numbers['rss_mb']:.0f} MB")
    print(f"atomic save -> source pane reloaded (20 saves, 400-line kernel): {reload}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
