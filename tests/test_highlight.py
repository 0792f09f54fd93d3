"""The source pane's lazy highlighter: the same colours as rich's Syntax, however far it has lexed."""

from pathlib import Path

import pytest
from rich.console import Console
from rich.syntax import Syntax

from kstui.views.highlight import HighlightedLines

ROOT = Path(__file__).resolve().parents[1]
TRICKY = (
    "/* a comment\n   over two lines */\n#include <cuda_runtime.h>\n"
    "\tint\tx = 1;  // tabs\n\n\n"
    'const char* s = "a \\"quoted\\" string";\n'
    "__global__ void k(float* o) { o[threadIdx.x] = 0.f; }"  # no final newline
)


def colours(text, console):
    return [(text.get_style_at_offset(console, i).color, text.get_style_at_offset(console, i).bold)
            for i in range(len(text.plain))]


@pytest.mark.parametrize("source", [TRICKY, (ROOT / "workspace" / "flash_fwd.cu").read_text()],
                         ids=["tricky", "flash_fwd"])
def test_every_line_is_highlighted_as_richs_syntax_highlights_it(source):
    console = Console(color_system="truecolor")
    expected = Syntax(source, "cuda", theme="monokai", tab_size=4).highlight(source.expandtabs(4)).split("\n")
    lines = HighlightedLines(source)
    assert len(lines.lines) == len(source.splitlines())
    for i in range(len(lines.lines)):
        assert lines.line(i).plain == expected[i].plain
        assert colours(lines.line(i), console) == colours(expected[i], console), f"line {i + 1}"


def test_lines_are_lexed_only_as_far_as_they_are_asked_for():
    lines = HighlightedLines("".join(f"int x{i};\n" for i in range(10_000)))
    lines.line(5)
    assert 6 <= lines.lexed < 10
    assert lines.line(9_999).plain == "int x9999;" and lines.lexed == 10_000
    assert lines.line(10_000).plain == ""  # past the end: nothing, not an error


def test_the_widest_line_is_measured_in_cells_with_tabs_expanded():
    assert HighlightedLines("\tab\n漢字\n").width == 4 + 2
    assert HighlightedLines("").lines == [] and HighlightedLines("").width == 0
