"""A one-cell strip between two columns that the mouse drags.

It owns only the drag: while the button is held it reports where the pointer is, and the screen that
owns the column split decides what that means for the widths.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widget import Widget


class Divider(Widget):
    ALLOW_SELECT = False  # a press here starts a drag, not a text selection
    FOCUS_ON_CLICK = False

    @dataclass
    class Dragged(Message):
        """The divider was dragged to `screen_x`."""

        divider: Divider
        screen_x: int

        def can_replace(self, message: Message) -> bool:
            # Moves queued faster than the screen handles them: only the newest position matters.
            return isinstance(message, Divider.Dragged) and message.divider is self.divider

    def __init__(self, column: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.column = column  # the side column whose edge this divider is
        self._dragged_to: int | None = None  # the last x reported; None when no drag is on

    def render(self) -> str:
        return ""  # a strip of background (main.tcss), which the hover and the drag light up

    def on_mouse_down(self, event: events.MouseDown) -> None:
        event.stop()
        self._dragged_to = event.screen_x
        self.add_class("-dragging")
        self.capture_mouse()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        # The terminal reports moves along the column too; only a new x can change a width.
        if self._dragged_to is not None and event.screen_x != self._dragged_to:
            self._dragged_to = event.screen_x
            self.post_message(self.Dragged(self, event.screen_x))

    def on_mouse_up(self, event: events.MouseUp) -> None:
        event.stop()
        self._end_drag()
        self.release_mouse()

    def on_mouse_release(self, event: events.MouseRelease) -> None:
        # The capture can also end some other way (a screen pushed mid-drag).
        self._end_drag()

    def _end_drag(self) -> None:
        self._dragged_to = None
        self.remove_class("-dragging")
