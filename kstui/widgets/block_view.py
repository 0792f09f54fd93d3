"""The interface every transcript block's widget has (the transcript and the lazily imported text view share it)."""

from __future__ import annotations

from kstui.views.transcript_state import Block


class BlockView:
    """What every block view does: show its block again after the block changed."""

    def show(self, block: Block) -> None:
        raise NotImplementedError

    async def stream(self, text: str) -> None:
        """A delta arrived for this block (only text and thinking blocks stream)."""

    async def close(self) -> None:
        """The block will not grow any more."""
