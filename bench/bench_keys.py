"""Every key of the main screen, press to painted frame, while an agent streams through a real Session.

The app runs a real Session: the real `anthropic` client streams replies from the loopback Messages
server (tests/messages_server.py, in a child process so it takes no time from the app's) at about 100
deltas a second, each a few seconds of text and then one tool call; the fake real-schema executor
evaluates in 3 s, as a quick evaluation takes (`e` is timed to the frame that shows it running); the kernel's branch holds 60 accepted versions; the transcript holds 11,500 earlier tool
calls. Each key is posted as the terminal driver delivers it and timed to the end of the first frame
that shows its effect, that frame encoded to escape sequences as for a real terminal (the headless
driver skips that step; this benchmark does it inside the timed frame). Prints, per key, the median,
p95 and max.

Run: .venv/bin/python bench/bench_keys.py [--presses 20] [--calls 11500] [--only a,b,...] [--think S]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakes import FakeExecutor, kernel_text, make_workspace  # noqa: E402

from kstui.app import KstuiApp  # noqa: E402
from kstui.engine import events as ev  # noqa: E402
from kstui.engine.config import SessionConfig  # noqa: E402
from kstui.engine.history import History  # noqa: E402
from kstui.engine.session import Session  # noqa: E402

COMMITS = 60
# Each reply streams 40 paragraphs of 20 words, two words a delta, 100 deltas a second (about 4 s), then
# runs one tool: the transcript keeps growing as a long run's does, and its window stays full.
_SERVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from messages_server import MessagesServer, reply, text, tool_use
    go = Path({go!r})
    words = " ".join(f"word{{i}}" + ("\\n\\n" if i % 20 == 19 else "") for i in range(800))
    def script(body, index):
        while not go.exists():  # the benchmark loads its transcript first
            time.sleep(0.01)
        return reply(text(words, chunks=400), tool_use("bash", {{"command": "true"}}), delay_s=0.01)
    server = MessagesServer(script)
    server.start()
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()
""")


CHARACTERS = {"question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]",
              "left_curly_bracket": "{", "right_curly_bracket": "}", "escape": "\x1b", "ctrl+p": "\x10"}


class Frames:
    """Wraps the app's display: each frame is encoded as a terminal driver would encode it, then the
    condition waited for is checked against the app's state and that frame's text."""

    def __init__(self, app: KstuiApp) -> None:
        from textual._compositor import CompositorUpdate

        original = app._display
        self.condition: Callable[[Any, str], bool] | None = None
        self.done_at = 0.0

        def display(screen: Any, renderable: Any) -> None:
            original(screen, renderable)
            if renderable is None:
                return
            text = renderable.render_segments(app.console) if isinstance(renderable, CompositorUpdate) else ""
            if self.condition is not None and self.condition(screen, text):
                self.done_at = time.perf_counter()
                self.condition = None

        app._display = display  # type: ignore[method-assign]

    async def time_key(self, app: KstuiApp, key: str, condition: Callable[[Any, str], bool]) -> float:
        from textual import events

        self.condition = condition
        started = time.perf_counter()
        app.post_message(events.Key(key, CHARACTERS.get(key, key if len(key) == 1 else None)))
        deadline = started + 10
        while self.condition is not None:
            if time.perf_counter() > deadline:
                self.condition = None
                raise TimeoutError(f"no frame showed the effect of {key!r} within 10 s (screen {app.screen!r}, "
                                   f"status {getattr(app.main, 'status', None)!r}) "
                                   f"{[(b.kind, b.title[:80]) for b in app.main.transcript.state.blocks[-6:]]}")
            await asyncio.sleep(0.001)
        return (self.done_at - started) * 1000


def tool_calls(calls: int) -> list[ev.Event]:
    events: list[ev.Event] = []
    for i in range(calls):
        name = "read_file" if i % 3 == 0 else "bash"
        tool_input = {"path": "k.cu"} if i % 3 == 0 else {"command": f"nvcc -O3 step{i}.cu"}
        events.append(ev.ToolCallStarted(i // 10, f"c{i}", name, tool_input))
        events.append(ev.ToolCallFinished(i // 10, f"c{i}", name, f"ok {i}\n" * 20, seconds=0.05))
    return events


def make_history(kernel: Path) -> None:
    history = History(kernel)
    fake = FakeExecutor()
    for i in range(COMMITS):
        speedup = 1.0 + 0.01 * i
        text = kernel_text(speedup, extra="".join(f"// version {i} line {j}\n" for j in range(i % 7 + 1)))
        result = fake.result_for(text, kernel.name, f"{i:064x}", "full")
        history.commit_accepted(text, result, previous=None, turn=i, question=f"question {i}?",
                                question_source=("human", "bank", "self")[i % 3], eval_no=i + 1)
    kernel.write_text(text)
    history.close()


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return f"median {statistics.median(ordered):5.1f} ms, p95 {p95:5.1f} ms, max {ordered[-1]:5.1f} ms"


@asynccontextmanager
async def streaming_app(workspace: Path, calls: int) -> AsyncIterator[tuple[KstuiApp, Any, Path]]:
    """The app on a real Session whose agent is streaming, the transcript loaded; (app, pilot, kernel)."""
    go = workspace / "go"
    child = subprocess.Popen([sys.executable, "-c", _SERVER.format(tests=str(ROOT / "tests"), go=str(go))],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        kernel = make_workspace(workspace / "ws")
        make_history(kernel)
        harness = workspace / "harness"  # a private copy: the integrity check must not trip on this checkout
        shutil.copytree(ROOT / "harness", harness, ignore=shutil.ignore_patterns("__pycache__"))
        config = SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="sk-ant-bench", base_url=url,
                               thinking_budget=0, wait_for_human=True, harness_dir=harness)
        session = Session.build(config, FakeExecutor(delay_s=3.0))  # as a quick evaluation takes: `e` shows it start
        app = KstuiApp(kernel=kernel, session=session)
        async with app.run_test(size=(140, 40), notifications=True, tooltips=True) as pilot:  # as the app runs
            main = app.main
            assert main is not None
            await main.transcript.load(tool_calls(calls))
            go.touch()
            while not any(b.kind == "text" and len(b.body) > 200 for b in main.transcript.state.blocks):
                await asyncio.sleep(0.05)
            await pilot.pause(0.5)
            yield app, pilot, kernel
            await session.stop()
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(10)


async def measure(workspace: Path, calls: int, presses: int, only: set[str] | None = None,
                  think: float = 0.05) -> dict[str, list[float]]:
    """Median-ready times per key. `only`: the steps (named by their first key) to run; `think`: seconds
    between one key's frame and the next key."""
    from textual.command import CommandPalette

    from kstui.screens.bank import BankScreen
    from kstui.screens.confirm import ConfirmScreen
    from kstui.screens.help import HelpScreen
    from kstui.screens.history import HistoryScreen
    from kstui.screens.main import MainScreen

    times: dict[str, list[float]] = {}
    async with streaming_app(workspace, calls) as (app, pilot, kernel):
        main = app.main
        assert main is not None
        frames = Frames(app)

        async def key(name: str, label: str, condition: Callable[[Any, str], bool]) -> None:
            times.setdefault(label, []).append(await frames.time_key(app, name, condition))
            await asyncio.sleep(think)

        def on_main(screen: Any, _text: str) -> bool:
            return isinstance(screen, MainScreen)

        def showing(kind: type, marker: str) -> Callable[[Any, str], bool]:
            return lambda screen, text: isinstance(screen, kind) and marker in text

        async def question_box() -> None:
            main.transcript.focus()
            await key("a", "a: focus the question box", lambda s, t: main.box.has_focus)
            before = main.box.value
            await key("x", "typing in the question box", lambda s, t: main.box.value != before)
            await key("escape", "escape: leave the question box", lambda s, t: not main.box.has_focus)

        async def opens(name: str, what: str, kind: type, marker: str) -> None:
            await key(name, f"{name}: open {what}", showing(kind, marker))
            await key("escape", f"escape: close {what}", on_main)

        async def history_rows() -> None:
            # The screen is kept between visits, with its cursor where the reader left it.
            await key("h", "h: open the history", lambda s, t: isinstance(s, HistoryScreen) and s.shown is not None
                      and s.shown[:8] in t)
            screen = app.screen
            table = screen.query_one("#commits")
            if table.cursor_row + 3 >= len(screen.entries):  # the last rows: start over from the top
                table.move_cursor(row=0)
                await asyncio.sleep(0.1)
            for _ in range(3):
                row = table.cursor_row + 1
                sha = screen.entries[row].sha
                await key("down", "down: the next commit's diff and result (history)",
                          lambda s, t, sha=sha: screen.shown == sha and sha[:8] in t)
            await key("escape", "escape: close the history", on_main)

        async def pause() -> None:
            # Mid-turn the agent pauses after its step; between turns (rarely, here) at once.
            await key("p", "p: pause", lambda s, t: "pausing after this step" in t or "· paused" in t)
            await key("p", "p: resume", lambda s, t: not main.pause_requested)

        async def evaluate() -> None:
            evals = sum(b.kind == "eval" for b in main.transcript.state.blocks)
            await key("e", "e: evaluate now (or says it waits for the one running)",
                      lambda s, t: sum(b.kind == "eval" for b in main.transcript.state.blocks) > evals
                      or "this one starts when it ends" in t)

        async def resize(wider: str, narrower: str, label: str) -> None:
            for name in (wider, narrower):
                width = main.transcript.size.width
                await key(name, label, lambda s, t, w=width: main.transcript.size.width != w)

        async def scroll() -> None:
            main.transcript.focus()
            for name in ("pageup", "pagedown"):
                y = main.transcript.scroll_y
                await key(name, f"{name}: scroll the transcript", lambda s, t, y=y: main.transcript.scroll_y != y)

        steps: dict[str, Callable[[], Any]] = {
            "a": question_box,
            "b": lambda: opens("b", "the question bank", BankScreen, "question bank"),
            "h": history_rows,
            "?": lambda: opens("question_mark", "the help", HelpScreen, "move a run"),
            "ctrl+p": lambda: opens("ctrl+p", "the command palette", CommandPalette, "Question bank"),
            "q": lambda: opens("q", "the quit question (agent working)", ConfirmScreen, "Quit?"),
            "p": pause,
            "e": evaluate,
            "[": lambda: resize("right_square_bracket", "left_square_bracket", "[ ]: source column"),
            "{": lambda: resize("right_curly_bracket", "left_curly_bracket", "{ }: speedup column"),
            "pageup": scroll,
        }
        for _ in range(presses):
            for name, step in steps.items():
                if only is None or name in only:
                    await step()
        if only is None or "u" in only:
            main.transcript.focus()
            for _ in range(min(presses, 10)):  # each press mounts a page more: measured last
                mounted = main.transcript.mounted_count
                await key("u", "u: show earlier entries", lambda s, t, m=mounted: main.transcript.mounted_count > m)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--calls", type=int, default=11_500)
    parser.add_argument("--only", help="comma-separated steps: a b h ? ctrl+p q p e [ { pageup u")
    parser.add_argument("--think", type=float, default=0.05,
                        help="seconds from a key's frame to the next key (1.5: a person reading the screen)")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    with tempfile.TemporaryDirectory() as tmp:
        times = asyncio.run(measure(Path(tmp), args.calls, args.presses, only, args.think))
    print(f"every key, press -> first frame showing its effect, {args.calls:,} tool calls in the transcript, "
          f"text streaming through a real Session ({args.presses} presses each, {args.think} s between keys):")
    for label, samples in times.items():
        print(f"  {label:<50} {summary(samples)}")
    worst = max(statistics.median(s) for s in times.values())
    print(f"slowest key's median: {worst:.1f} ms [target <= 50 ms]")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of the app's process: {peak:.0f} MB [target <= 400 MB]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
