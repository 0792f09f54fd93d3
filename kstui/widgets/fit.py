"""A Static whose size follows its content on every update.

Textual (8.2) caches a widget's box model under a counter that `refresh(layout=True)` bumps only when
no layout is pending for the widget yet. If the screen lays out between two updates (another widget
asked for it) before this widget's idle handler ran, the first update's size is cached under the
counter the second update leaves unchanged, and the widget keeps that size: an evaluation line that
grew by "ACCEPTED" stayed one line short, a reloaded kernel could lose its last lines.
"""

from __future__ import annotations

from textual.visual import VisualType
from textual.widgets import Static

from kstui.compat.textual_private import clear_box_model_cache


class FitStatic(Static):
    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        super().update(content, layout=layout)
        if layout:
            clear_box_model_cache(self)
