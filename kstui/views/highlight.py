"""A kernel's lines, highlighted by pygments as far as a reader has scrolled.

Lexing and rendering a whole file before drawing it cost the source pane about 0.1-0.2 s for the
344-line starting kernel on the 2-core development container (and grows with the kernel) before the
first frame could go out. The lexer's tokens come from a generator, so this pulls them only up to the
last line asked for: the first screen of a file of any length is lexed in a few milliseconds and the
rest as it scrolls into view. Nothing here knows about Textual.
"""

from __future__ import annotations

from pygments.lexers import get_lexer_by_name
from pygments.token import Token
from rich.cells import cell_len
from rich.color import Color, blend_rgb
from rich.style import Style
from rich.syntax import Syntax, SyntaxTheme
from rich.text import Text

TAB_SIZE = 4


class HighlightedLines:
    """The lines of one text with their highlighted `Text`, lexed lazily from the top."""

    def __init__(self, text: str, language: str = "cuda", theme: str = "monokai") -> None:
        self.lines = text.expandtabs(TAB_SIZE).splitlines()
        self.width = max((cell_len(line) for line in self.lines), default=0)
        self.theme: SyntaxTheme = Syntax.get_theme(theme)
        self.background = self.theme.get_background_style()
        self.number_styles = self._number_styles()
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=True, tabsize=TAB_SIZE)
        self._tokens = lexer.get_tokens("\n".join(self.lines) + "\n")
        self._styles: dict = {}
        self._done: list[Text] = []
        self._current = Text()

    @property
    def lexed(self) -> int:
        """How many lines have been highlighted so far."""
        return len(self._done)

    def line(self, index: int) -> Text:
        """Line `index` (0-based), highlighted; lexes on from where the last call stopped."""
        while len(self._done) <= index and self._tokens is not None:
            self._advance()
        if index < len(self._done):
            return self._done[index]
        return Text(self.lines[index]) if index < len(self.lines) else Text()

    def _advance(self) -> None:
        try:
            token_type, value = next(self._tokens)
        except StopIteration:
            self._tokens = None
            return
        style = self._styles.get(token_type)
        if style is None:
            style = self._styles[token_type] = self.theme.get_style_for_token(token_type)
        *ended, rest = value.split("\n")
        for piece in ended:
            if piece:
                self._current.append(piece, style)
            self._done.append(self._current)
            self._current = Text()
        if rest:
            self._current.append(rest, style)

    def _number_styles(self) -> tuple[Style, Style]:
        """The gutter's style for a line number, and for the number of a changed line (as rich's Syntax)."""
        text = self.theme.get_style_for_token(Token.Text)
        fg, bg = text.color, self.background.bgcolor
        if fg is None or bg is None:
            return self.background + Style(dim=True), self.background
        fg_rgb, bg_rgb = fg.get_truecolor(), bg.get_truecolor()

        def toward_fg(share: float) -> Style:
            return Style(color=Color.from_triplet(blend_rgb(bg_rgb, fg_rgb, share)))

        return (self.background + text + toward_fg(0.5),
                self.background + text + toward_fg(0.9) + Style(bold=True))
