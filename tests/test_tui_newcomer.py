"""What a newcomer met in the TUI: manual mode's keys and banner, the footer at 80x24, tab keys, one Quit
in the palette."""

from __future__ import annotations

from fakes import FakeExecutor
from pilot_support import until
from test_tui_session import live, reply, text

from kstui.engine import events as ev
from kstui.engine.config import SessionConfig
from kstui.executors.protocol import ExecutorError
from kstui.screens.main import MainScreen


def _without_no_agent(**kw) -> SessionConfig:
    """The session a plain `kstui k.cu` makes without a key: manual, with no --no-agent given."""
    return SessionConfig(**{**kw, "no_agent": False})


def footer_text(app) -> str:
    return " ".join(f"{k.key_display} {k.description}" for k in app.main.footer.query("FooterKey"))


async def test_manual_mode_shows_only_working_keys_and_never_mentions_a_flag_not_given(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr("test_tui_session.SessionConfig", _without_no_agent)
    async with live(tmp_path, None) as (app, pilot, session, log):
        main = app.main
        await until(pilot, lambda: main.mode == "manual" and bool(log.of(ev.StartingPoint)))
        await pilot.pause()
        blocks = " ".join(b.title for b in main.transcript.state.blocks)
        assert "--no-agent" not in blocks and "no ANTHROPIC_API_KEY" in blocks
        assert footer_text(app) == "h history e evaluate ? help q quit"
        for key in ("a", "b", "p", "escape"):
            assert not main.check_action(dict(a="focus_question", b="bank", p="pause", escape="interrupt")[key], ())


async def test_at_80x24_the_footer_keeps_evaluate_help_quit_and_tabs_switch_by_number(tmp_path):
    script = [reply(text("thinking about it"), delay_s=0.05)]
    async with live(tmp_path, script, size=(80, 24)) as (app, pilot, session, log):
        main: MainScreen = app.main
        await until(pilot, lambda: main.mode == "agent" and main.has_class("-narrow"))
        await pilot.pause()
        shown = footer_text(app)
        assert shown.endswith("e evaluate ? help q quit")
        keys = list(main.footer.query("FooterKey"))
        assert keys[-1].key == "q" and 0 < keys[-1].region.right <= 80  # on screen, not cut off
        await pilot.press("1")
        await pilot.pause()
        assert main.query_one("#source").has_class("-active")
        await pilot.press("3")
        await pilot.pause()
        assert main.query_one("#speedup").has_class("-active")
        await pilot.press("2")
        await pilot.pause()
        assert main.query_one("#middle").has_class("-active")
        assert not main.check_action("resize", ("source", 1))  # [ ] { } are not bound to tabs
        assert main.check_action("show_tab", ("source",))


async def test_the_command_palette_has_one_quit(tmp_path):
    async with live(tmp_path, None) as (app, pilot, session, log):
        titles = [c.title for c in app.get_system_commands(app.main)]
        assert sum("quit" in t.lower() for t in titles) == 1


async def test_ctrl_c_stops_a_working_session_at_once_without_asking(tmp_path):
    import time

    from kstui.screens.confirm import ConfirmScreen

    script = [reply(text("a long reply " * 40, chunks=40), delay_s=0.2)]
    async with live(tmp_path, script) as (app, pilot, session, log):
        await until(pilot, lambda: app.main.status == "thinking" and bool(log.of(ev.TextDelta)))
        started = time.monotonic()
        await pilot.press("ctrl+c")
        await until(pilot, lambda: bool(log.of(ev.SessionEnded)) or not app.is_running, timeout=3)
        assert time.monotonic() - started < 2.0
        assert not isinstance(app.screen, ConfirmScreen)
        assert log.of(ev.SessionEnded)[0].reason == "stopped"


class _NoGpu(FakeExecutor):
    """The local harness on a machine whose torch has no CUDA: its one bad-input line, from the second call."""

    async def evaluate(self, kernel, **kw):
        if self.calls:
            raise ExecutorError("local harness: kstui eval: no CUDA GPU here (CPU build of torch): use "
                                "--check-only, or --gpu ssh://… / --eval-cmd")
        return await super().evaluate(kernel, **kw)


async def test_e_without_a_gpu_is_one_transcript_line(tmp_path):
    executor = _NoGpu()
    async with live(tmp_path, None, executor=executor) as (app, pilot, session, log):
        await until(pilot, lambda: bool(log.of(ev.StartingPoint)))
        await pilot.press("e")
        await until(pilot, lambda: len(log.of(ev.EvaluationFinished)) == 2)
        await pilot.pause()
        said = [b.title for b in app.main.transcript.state.blocks if "no CUDA GPU here" in b.title]
        assert len(said) == 1 and "evaluation #2" in said[0] and "\n" not in said[0]
