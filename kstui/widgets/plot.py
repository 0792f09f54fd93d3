"""The speedup panel's plot: a PlotextPlot that keeps the figures it drew, one per size.

PlotextPlot draws its figure again at every repaint (plotext lays it out for the size, then Rich decodes
plotext's ANSI, then Textual converts that text): about 4.5 ms, most of the plot's share of the frame
that a `{ }` key or a drag of the speedup divider lays out. The figure depends only on the points, the
size and the theme, so a width the panel had before (the divider moved back, a key pressed the other
way) is shown from here; new points empty the cache.
"""

from __future__ import annotations

from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Size
from textual_plotext import PlotextPlot

SIZES_KEPT = 8  # each figure is a few thousand cells; a drag visits one width per cell


class FigurePlot(PlotextPlot):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._figures: LRUCache[tuple[Size, str, str], Content] = LRUCache(SIZES_KEPT)

    def render(self) -> Content:
        key = (self.size, self.app.theme, self.theme)
        figure = self._figures.get(key)
        if figure is None:
            figure = Content.from_rich_text(super().render(), console=self.app.console)
            self._figures[key] = figure
        return figure

    def replot(self) -> None:
        """The points changed (the caller has set them on `plt`): draw them afresh at every size."""
        self._figures.clear()
        self.refresh()
