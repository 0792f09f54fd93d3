"""A Footer that can highlight keys: `b` lights up while the run is stalled."""

from __future__ import annotations

from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class AlertFooter(Footer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.alert_keys: frozenset[str] = frozenset()

    def set_alert(self, keys: frozenset[str]) -> None:
        # Mark the keys on screen now; compose marks them again whenever the Footer rebuilds itself.
        self.alert_keys = keys
        for key in self.query(FooterKey):
            key.set_class(key.key in keys, "-alert")

    def compose(self):
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.key in self.alert_keys:
                widget.add_class("-alert")
            yield widget
