"""The speedup panel: best and latest geomean against the named baseline, the plot per evaluation
(accepted points marked), the sortable per-scenario table, the stall indicator, tokens and cost."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable

from harness.result import ScenarioResult
from kstui.engine import events as ev
from kstui.engine.result_view import fmt_x
from kstui.views.format import fmt_num, fmt_tokens
from kstui.views.speedup_state import SpeedupState
from kstui.widgets.fit import FitStatic
from kstui.widgets.steady import SteadyScrollbars

if TYPE_CHECKING:
    from kstui.widgets.plot import FigurePlot

# Numbers first, the long scenario id last: in a narrow panel the numbers are what must show.
COLUMNS = ("ok", "speedup", "µs", "base µs", "TF/s", "id")
FIELDS = ("correct", "speedup", "time_us", "baseline_us", "tflops", "id")
PLOT_TITLE = "geomean per evaluation (● accepted)"


def sort_key(value: Any) -> tuple[int, Any]:
    # Missing numbers sort last whichever way, and never compare against floats.
    return (1, 0) if value is None else (0, value)


class ScenarioTable(DataTable, SteadyScrollbars):  # DataTable first: Textual takes CSS and components from it
    """Per-scenario numbers of the latest evaluation; `s` cycles the sort column, `r` reverses."""

    BINDINGS = [
        Binding("s", "cycle_sort", "sort by next column"),
        Binding("r", "reverse_sort", "reverse sort"),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.sort_column = FIELDS.index("id")
        self.sort_reverse = False
        self._rows: list[ScenarioResult] = []

    def on_mount(self) -> None:
        for name, key in zip(COLUMNS, FIELDS):
            self.add_column(name, key=key)

    def show(self, scenarios: list[ScenarioResult]) -> None:
        self._rows = scenarios
        self._fill()

    def _fill(self) -> None:
        field = FIELDS[self.sort_column]
        rows = sorted(self._rows, key=lambda s: sort_key(getattr(s, field)), reverse=self.sort_reverse)
        self.clear()
        for s in rows:
            ok = Text("✓", style="green") if s.correct else Text(s.verdict, style="bold red")
            self.add_row(ok, fmt_x(s.speedup), fmt_num(s.time_us), fmt_num(s.baseline_us), fmt_num(s.tflops), s.id,
                         key=s.id)

    def action_cycle_sort(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(FIELDS)
        self._fill()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._fill()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        if event.column_index == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = event.column_index, False
        self._fill()


BAR_CELLS = 16


def y_ticks(values: list[float], count: int = 5) -> tuple[list[float], list[str]]:
    """Ticks over the values' range with labels rounded to what tells them apart (plotext's own read
    `1.000153`)."""
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.01, hi + 0.01
    step = (hi - lo) / (count - 1)
    decimals = min(4, max(0, math.ceil(-math.log10(step)) + 1))
    if step < 10**-decimals:  # closer than the labels can show: spread the ticks to distinct labels
        step = 10**-decimals
        lo = round((lo + hi) / 2 - step * (count - 1) / 2, decimals)
    ticks = [lo + step * i for i in range(count)]
    return ticks, [f"{t:.{decimals}f}" for t in ticks]


def progress_line(p: ev.EvaluationProgress) -> Text:
    """`correctness ▕████░░░░▏ 120/395 · ~12 s left`: the phase, a bar of scenarios done, the time left."""
    line = Text(f"\n{p.phase} ", style="yellow")
    if p.total:
        filled = round(BAR_CELLS * min(p.done, p.total) / p.total)
        line.append("▕" + "█" * filled + "░" * (BAR_CELLS - filled) + "▏", style="yellow")
        line.append(f" {p.done}/{p.total}", style="yellow")
    if p.eta_s is not None:
        line.append(f" · ~{max(0.0, p.eta_s):.0f} s left", style="dim")
    return line


class SpeedupPanel(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = SpeedupState()
        self._summary = FitStatic(id="summary")
        self._stall = FitStatic(id="stall")
        # Until there is a geomean to plot, one line stands in for the plot: plotext takes about 0.1 s to
        # import, which the first frame of a new session would otherwise wait for to draw empty axes.
        self._no_plot = FitStatic(Text.assemble(PLOT_TITLE, "\n", ("no geomean to plot yet", "dim")),
                                  id="no-plot", classes="plot")
        self._plot: FigurePlot | None = None
        self._table = ScenarioTable(id="scenarios")
        self._usage = FitStatic(id="usage")
        self._plotted: list[tuple[int, float, bool]] | None = None  # the points the figure shows

    def compose(self):
        yield self._summary
        yield self._stall
        yield self._no_plot
        yield self._table
        yield self._usage

    def on_mount(self) -> None:
        self.redraw()

    def apply_event(self, event: ev.Event) -> bool:
        """Fold an event in and redraw; True when the stall state changed (the footer follows it)."""
        before = self.state.trigger
        had_result = self.state.result_eval
        if self.state.apply(event):
            self.redraw(table=self.state.result_eval != had_result)
        return self.state.trigger != before

    def redraw(self, *, table: bool = True) -> None:
        s = self.state
        latest = s.latest
        vs = f" vs {s.baseline}" if s.baseline else ""
        lines = Text.assemble(
            ("best ", "dim"), (fmt_x(s.best), "bold green"), (vs, "dim"),
            (f"  {s.best_commit[:7]}" if s.best_commit else "", "dim"), "\n",
            ("latest ", "dim"), (fmt_x(latest.geomean) if latest else "—", "bold"),
            (f"  #{latest.eval_no}" if latest else "", "dim"), "  ",
            ("correct ", "dim"), (f"{latest.correct}/{latest.total}" if latest and latest.total else "—", "bold"),
        )
        if s.start is not None:
            lines.append_text(Text.assemble("\n", ("start ", "dim"), (fmt_x(s.start), "bold"),
                                            ("  the kernel as brought", "dim")))
        elif s.start_note:
            lines.append(f"\nstart: your kernel did not pass as brought ({s.start_note[:80]})", style="yellow")
        if s.evaluating is not None:
            lines.append(f"\nevaluating #{s.evaluating} on {s.where}…", style="yellow")
            if s.progress is not None:
                lines.append_text(progress_line(s.progress))
        else:
            lines.append(f"\nevaluations run on {s.where}", style="dim")
            if s.device:
                lines.append(f"\nlast on {s.device}", style="dim")
        if s.last_error:
            lines.append(f"\nlast evaluation failed: {s.last_error}", style="red")
        self._summary.update(lines)
        if s.limit_claim:
            self._stall.update(Text(f"⚠ limit claimed: {s.limit_claim[:120]} — press b", style="bold yellow"))
        elif s.stalled:
            self._stall.update(Text(f"⚠ STALLED: {s.stalled} — press b for a question", style="bold yellow"))
        self._stall.display = bool(s.stalled or s.limit_claim)
        self._draw_plot()
        if table and s.result_eval is not None:
            rows = s.result.scenarios if s.result is not None else []
            self._table.show(rows)
            why = ("" if rows else " · no scenario ran" + (" (build failed)" if s.result is not None
                                                            and not s.result.build.ok else ""))
            self._table.border_title = f"scenarios · evaluation #{s.result_eval}{why}"
        cost = f"${s.cost_usd:.2f}"
        self._usage.update(
            Text(
                f"{s.model or 'no model'} · in {fmt_tokens(s.input_tokens)} · out {fmt_tokens(s.output_tokens)}"
                f" · cache {fmt_tokens(s.cache_read_tokens)} · {cost} · {s.status}",
                style="dim",
            )
        )

    def _draw_plot(self) -> None:
        points = [p for p in self.state.points if p.geomean is not None]
        plotted = [(p.eval_no, p.geomean, p.accepted) for p in points]
        if plotted == self._plotted:
            # Most events (status, tokens) leave the points alone: the figures drawn stand.
            return
        self._plotted = plotted
        if self._plot is None:
            if not points:
                return
            from kstui.widgets.plot import FigurePlot

            self._plot = FigurePlot(id="plot", classes="plot")
            self._no_plot.remove()
            self.mount(self._plot, before=self._table)
        plt = self._plot.plt
        plt.clear_data()
        plt.clear_figure()
        if points:
            plt.plot([p.eval_no for p in points], [p.geomean for p in points], marker="braille", color="blue")
            accepted = [p for p in points if p.accepted]
            if accepted:
                plt.scatter([p.eval_no for p in accepted], [p.geomean for p in accepted], marker="●", color="green")
            plt.hline(1.0, "gray")
            xs = [p.eval_no for p in points]
            step = max(1, len(xs) // 6)
            plt.xticks(xs[::step])
            plt.yticks(*y_ticks([p.geomean for p in points] + [1.0]))
        plt.title(PLOT_TITLE)
        self._plot.replot()
