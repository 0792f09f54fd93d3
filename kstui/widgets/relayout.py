"""Lay a screen out and paint it at once: after a divider move gave the columns new widths, or a page
of earlier transcript entries was mounted.

Textual lays a screen out on its next update tick (60 a second) once the widgets whose styles changed
have gone idle and asked for it; streamed text keeps that timer part-way through an interval, so a key
that moves a divider waited 7-17 ms before its frame began (`u`: 52 -> 30 ms median in the key
benchmark). A terminal resize does not wait: Textual lays the screen out there and then
(`Screen._refresh_layout`), and these are the same kind of change. A container keeps its arrangement
cached by its own size, which a divider move leaves as it was, so that cache goes first. Both are
Textual's private names (kstui/compat/textual_private.py); the pilot test of the resize keys fails if
they stop doing this. (No full
garbage collection starts inside that frame: the app holds them from an input to its frame,
kstui/collector.py.)
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widget import Widget

from kstui.compat.textual_private import clear_arrangement_cache, refresh_layout


def relayout_now(screen: Screen, row: Widget) -> None:
    """`row`'s children changed (in width, or in number): lay `screen` out and paint it before returning."""
    clear_arrangement_cache(row)
    refresh_layout(screen)
