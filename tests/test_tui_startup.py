"""What the TUI does before its first frame, and what it leaves until after: `kstui FILE` must draw
within 1.5 s (issue 4), so nothing that frame does not show is imported or started before it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pilot_support import until  # noqa: E402
from test_tui_events import KERNEL  # noqa: E402

from kstui.app import KstuiApp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    path = tmp_path / "flash_fwd.cu"
    path.write_text(KERNEL)
    path.with_suffix(".toml").write_text('task = "attention"\n')
    return path


def fresh_python(code: str, **env: str) -> dict:
    """Run `code` in a new interpreter (this one has imported everything already); it prints JSON."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, **env}, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_first_frame_imports_neither_markdown_nor_the_screens_a_key_opens(kernel):
    code = f"""
import asyncio, json, sys
from pathlib import Path
from kstui.app import KstuiApp

async def main():
    app = KstuiApp(kernel=Path({str(kernel)!r}), watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        loaded = [m for m in ("markdown_it", "textual.widgets._markdown", "kstui.widgets.text", "plotext",
                              "kstui.screens.help", "kstui.screens.history", "kstui.screens.bank",
                              "kstui.screens.confirm", "kstui.screens.replay") if m in sys.modules]
        await pilot.press("question_mark")
        await pilot.pause()
        print(json.dumps({{"loaded": loaded, "help": type(app.screen).__name__}}))

asyncio.run(main())
"""
    result = fresh_python(code)
    assert result == {"loaded": [], "help": "HelpScreen"}  # and the key still opens its screen


def test_an_agent_session_is_built_without_importing_the_sdk(kernel):
    code = f"""
import json, sys
from kstui.cli import _run_parser, prepare_session
session = prepare_session(_run_parser("kstui").parse_args([{str(kernel)!r}]), headless=False)
print(json.dumps({{"sdk": "anthropic" in sys.modules, "agent_module": "kstui.engine.agent" in sys.modules,
                  "manual": session.config.manual}}))
"""
    result = fresh_python(code, ANTHROPIC_API_KEY="sk-test-not-a-key", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    assert result == {"sdk": False, "agent_module": False, "manual": False}


def test_the_agents_sdk_is_imported_once_the_first_frame_is_out(kernel):
    # Imported on a thread, the SDK (about 2 s) still holds the GIL for most of it: begun at mount, it
    # made the first frame of kstui FILE with the agent on come about half as late again.
    code = f"""
import asyncio, json, sys, time
from pathlib import Path
from kstui.app import KstuiApp
from kstui.cli import _run_parser, prepare_session

session = prepare_session(_run_parser("kstui").parse_args([{str(kernel)!r}]), headless=False)
seen = {{}}
on_ready = KstuiApp.on_ready

def recording(self):
    seen["sdk_at_first_frame"] = "kstui.engine.agent" in sys.modules or "anthropic" in sys.modules
    on_ready(self)

KstuiApp.on_ready = recording

async def main():
    app = KstuiApp(kernel=session.config.kernel, session=session, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        deadline = time.monotonic() + 60
        while session.agent is None and time.monotonic() < deadline:
            await pilot.pause(0.05)
        seen["agent"] = type(session.agent).__name__
        seen["mode"] = session.state.mode
        await session.stop()

asyncio.run(main())
print(json.dumps(seen))
"""
    result = fresh_python(code, ANTHROPIC_API_KEY="sk-test-not-a-key", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    assert result == {"sdk_at_first_frame": False, "agent": "Agent", "mode": "agent"}


async def test_an_agent_whose_view_never_draws_is_made_all_the_same(kernel, monkeypatch):
    import asyncio

    from fakes import FakeExecutor  # noqa: E402

    from kstui.engine import session as session_module
    from kstui.engine.config import SessionConfig
    from kstui.engine.session import Session

    config = SessionConfig(kernel=kernel, workspace=kernel.parent, api_key="sk-test-not-a-key",
                           base_url="http://127.0.0.1:9")
    headless = Session.build(config, FakeExecutor())
    assert headless.agent_after is None  # nothing to wait for without a view
    await headless._make_agent()
    assert headless.agent is not None

    monkeypatch.setattr(session_module, "AGENT_AFTER_MAX_WAIT_S", 0.05)
    viewed = Session.build(config, FakeExecutor())
    viewed.agent_after = asyncio.Event()  # a view that never sets it
    await asyncio.wait_for(viewed._make_agent(), 30)
    assert viewed.agent is not None
    for made in (headless, viewed):
        await made.agent.close()


async def test_the_first_frame_lexes_and_renders_only_the_source_lines_on_screen(kernel, monkeypatch):
    from rich.text import Text

    kernel.write_text("\n".join(f"  int x{i} = {i};  // line {i}" for i in range(3000)) + "\n")
    rendered: list[str] = []
    render = Text.render

    def counting_render(self, *args, **kwargs):
        rendered.append(self.plain)
        return render(self, *args, **kwargs)

    monkeypatch.setattr(Text, "render", counting_render)
    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        source = app.main.source
        code_lines = [t for t in rendered if "// line" in t]
        # Lexed no further than the screen, each line on it rendered once, however often Textual laid out.
        assert source.code.lexed < 80 and len(code_lines) == len(set(code_lines)) < 40
        assert "// line 12" in source.render_line(12).text
        await until(pilot, lambda: source.allow_vertical_scroll)
        source.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert "// line 2999" in source.render_line(source.size.height - 1).text
        assert source.code.lexed == 3000


async def test_a_divider_move_does_not_render_the_middle_columns_own_blank_lines(kernel, monkeypatch):
    from textual._styles_cache import StylesCache

    rendered: list[str | None] = []
    original = StylesCache.render_widget

    def recording(self, widget, crop):
        rendered.append(widget.id)
        return original(self, widget, crop)

    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        monkeypatch.setattr(StylesCache, "render_widget", recording)
        width = app.main.transcript.size.width
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: app.main.transcript.size.width != width)
        await pilot.pause()
    assert "transcript" in rendered  # the column was painted again at its new width ...
    assert "middle" not in rendered  # ... without its container's own lines


async def test_the_plot_replaces_its_placeholder_with_the_first_geomean(kernel):
    from test_tui_events import fake_result

    from kstui.engine import events as ev
    from kstui.widgets.messages import SessionEvent

    app = KstuiApp(kernel=kernel, watch=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        speedup = app.main.speedup
        assert not speedup.query("#plot") and speedup.query_one("#no-plot").size.height >= 8
        app.main.post_message(SessionEvent(ev.EvaluationFinished(1, fake_result(KERNEL), where="fake")))
        await until(pilot, lambda: bool(speedup.query("#plot")) and speedup.query_one("#plot").size.height >= 8)
        assert not speedup.query("#no-plot")
        assert [w.id for w in speedup.children].index("plot") == 2  # where the placeholder was


async def test_collection_held_for_start_up_resumes_with_the_first_frame(kernel):
    import gc

    gc.disable()
    try:
        app = KstuiApp(kernel=kernel, watch=False, gc_held=True)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause()
            assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.enable()


def test_kstui_file_holds_collection_until_the_app_takes_over(kernel, monkeypatch):
    import gc

    from kstui import app as app_module
    from kstui import cli

    seen = {}

    def run_session_app(session, *, gc_held=False):
        seen.update(enabled=gc.isenabled(), gc_held=gc_held)
        return 0

    monkeypatch.setattr(app_module, "run_session_app", run_session_app)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    try:
        assert cli.main([str(kernel), "--no-agent"]) == 0
    finally:
        gc.enable()
    assert seen == {"enabled": False, "gc_held": True}


def test_bad_input_to_kstui_file_leaves_collection_on(tmp_path):
    import gc

    from kstui import cli

    assert cli.main([str(tmp_path / "missing.cu")]) == 2
    assert gc.isenabled()
