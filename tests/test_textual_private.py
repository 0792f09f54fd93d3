"""Each private Textual name in kstui/compat/textual_private.py still does what kstui relies on.

These fail when a Textual release renames or changes one; pyproject.toml pins Textual to the minor
version they pass on.
"""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.app import App, ComposeResult  # noqa: E402
from textual.containers import Horizontal  # noqa: E402
from textual.geometry import Size  # noqa: E402
from textual.widgets import Footer, Static  # noqa: E402

from kstui.compat.textual_private import (  # noqa: E402
    FooterKey,
    SizeFilteredScrollView,
    clear_arrangement_cache,
    clear_box_model_cache,
    footer_bindings_ready,
    refresh_layout,
)


class Row(App):
    BINDINGS = [("x", "bell", "ring")]

    def compose(self) -> ComposeResult:
        with Horizontal(id="row"):
            yield Static("left", id="left")
            yield Static("right", id="right")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#left").styles.width = 10
        self.query_one("#right").styles.width = "1fr"


async def test_clear_arrangement_cache_and_refresh_layout_lay_a_screen_out_at_once() -> None:
    async with Row().run_test(size=(60, 10)) as pilot:
        await pilot.pause()
        left = pilot.app.query_one("#left")
        assert left.region.width == 10
        left.styles.width = 20
        assert left.region.width == 10  # Textual lays it out on a later tick
        clear_arrangement_cache(pilot.app.query_one("#row"))
        refresh_layout(pilot.app.screen)
        assert left.region.width == 20  # without awaiting anything


async def test_clear_box_model_cache_lets_a_widget_be_measured_again() -> None:
    async with Row().run_test(size=(60, 10)) as pilot:
        await pilot.pause()
        left = pilot.app.query_one("#left")
        assert len(left._box_model_cache) > 0
        clear_box_model_cache(left)
        assert len(left._box_model_cache) == 0


async def test_footer_bindings_ready_and_footer_keys() -> None:
    footer = Footer()
    assert footer_bindings_ready(footer) is False
    async with Row().run_test(size=(60, 10)) as pilot:
        await pilot.pause()
        shown = pilot.app.query_one(Footer)
        assert footer_bindings_ready(shown) is True
        assert "x" in [k.key for k in shown.query(FooterKey)]


class Counting(SizeFilteredScrollView):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0
        self.allow = False

    def size_update_needed(self, size: Size, virtual_size: Size, container_size: Size) -> bool:
        self.asked += 1
        return self.allow


class Scroller(App):
    def compose(self) -> ComposeResult:
        yield Counting()


async def test_size_filtered_scroll_view_sees_every_size_update_and_can_skip_it() -> None:
    async with Scroller().run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        view = pilot.app.query_one(Counting)
        assert view.asked > 0  # Textual still calls _size_updated on layout
        assert view.container_size == Size(0, 0)  # every update skipped: Textual's own never ran
        view.allow = True
        pilot.app.screen.refresh(layout=True)
        await pilot.pause()
        assert view.container_size == Size(40, 10)
