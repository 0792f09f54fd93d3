"""A ScrollView whose scrollbars are not repainted by layouts that change nothing they show.

Textual (8.2) passes a ScrollView the region its content fills as `virtual_size` on every layout of
the screen, which never equals the ScrollView's own virtual size, so each layout (a streamed
paragraph, a divider move) took ScrollView's "something changed" path and refreshed both scrollbars:
measured with text streaming, the screen's update took 37 ms instead of 26 with the source pane as a
ScrollView (docs/BENCHMARKS.md). What the scrollbars depend on is the widget's size, its container's
size and its own virtual size: a layout that leaves those as they were is skipped.
"""

from __future__ import annotations

from textual.geometry import Size

from kstui.compat.textual_private import SizeFilteredScrollView


class SteadyScrollbars(SizeFilteredScrollView):
    _steady_key: tuple[Size, Size, Size] | None = None

    def size_update_needed(self, size: Size, virtual_size: Size, container_size: Size) -> bool:
        key = (size, container_size, self.virtual_size)
        if key == self._steady_key:
            return False
        self._steady_key = key
        return True
