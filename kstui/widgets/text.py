"""Assistant text in the transcript: a Markdown block that streams.

Its own module because Markdown is slow to import and no first frame shows assistant text: the
transcript imports it when the first text block arrives.
"""

from __future__ import annotations

from textual.timer import Timer
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownStream

from kstui.views.transcript_state import Block
from kstui.widgets.block_view import BlockView

STREAM_PERIOD_S = 0.1  # streamed text is painted up to 10 times a second, however fast it arrives


class TextView(Markdown, BlockView):
    """Assistant text, streamed through Textual's MarkdownStream (appends, never re-parses the whole).

    Deltas are handed to the stream at most STREAM_PERIOD_S apart: each append lays the transcript out
    and paints it again, and a key pressed meanwhile waits for that frame.
    """

    def __init__(self, block: Block) -> None:
        super().__init__(block.body, classes="block text")
        self._stream: MarkdownStream | None = None
        self._pending: list[str] = []
        self._flush_timer: Timer | None = None

    def show(self, block: Block) -> None:
        self.update(block.body)

    async def stream(self, text: str) -> None:
        self._pending.append(text)
        if self._flush_timer is None:
            self._flush_timer = self.set_timer(STREAM_PERIOD_S, self._flush)

    async def _flush(self) -> None:
        self._flush_timer = None
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        await self._stream.write(text)

    async def close(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.stop()
        await self._flush()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
