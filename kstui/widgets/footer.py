"""A Footer that can highlight keys: `b` lights up while the run is stalled."""

from __future__ import annotations

from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class AlertFooter(Footer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.alert_keys: frozenset[str] = frozenset()

    def set_alert(self, keys: frozenset[str]) -> None:
        if keys != self.alert_keys:
            self.alert_keys = keys
            self.call_later(self.recompose)

    def compose(self):
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.key in self.alert_keys:
                widget.add_class("-alert")
            yield widget
