"""Every private Textual name kstui relies on, and nothing else.

Each is here because no public API does the same (the reason is at each use), and each has a test in
tests/test_textual_private.py that fails when Textual renames or changes it; pyproject.toml pins
Textual to the minor version those tests pass on. Only the TUI (app, screens, widgets) imports this.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

__all__ = ["FooterKey", "SizeFilteredScrollView", "clear_arrangement_cache", "clear_box_model_cache",
           "footer_bindings_ready", "refresh_layout"]


def clear_arrangement_cache(widget: Widget) -> None:
    """Forget how `widget` arranged its children (kept by its own size, which a column move leaves as is)."""
    widget._clear_arrangement_cache()


def refresh_layout(screen: Screen) -> None:
    """Lay `screen` out and paint it now, as Textual does for a terminal resize."""
    screen._refresh_layout()


def clear_box_model_cache(widget: Widget) -> None:
    """Forget `widget`'s cached size, so the next layout measures its new content."""
    widget._box_model_cache.clear()


def footer_bindings_ready(footer: Footer) -> bool:
    """The footer has read its screen's bindings at least once (before that it composes nothing)."""
    return footer._bindings_ready


class SizeFilteredScrollView(ScrollView):
    """A ScrollView that can skip Textual's per-layout size update (its private `_size_updated`)."""

    def size_update_needed(self, size: Size, virtual_size: Size, container_size: Size) -> bool:
        return True

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        if not self.size_update_needed(size, virtual_size, container_size):
            return False
        return super()._size_updated(size, virtual_size, container_size, layout)
