"""A Footer that can highlight keys (`b` lights up while the run is stalled) and that rebuilds its
keys only when what it shows changes.

Textual's Footer rebuilds all of its keys on every bindings update: each focus change, and each status
the session reports (`refresh_bindings`). A rebuild mounts a dozen widgets and lays the whole screen
out again, so a key that moved focus paid for it even when the footer would look the same.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer

from kstui.compat.textual_private import FooterKey, footer_bindings_ready


def shown_bindings(screen: Screen) -> tuple:
    """What the footer draws from the screen's bindings (compose reads the same fields)."""
    return tuple(
        (key, binding.action, binding.description, binding.group, enabled, tooltip)
        for key, (_node, binding, enabled, tooltip) in screen.active_bindings.items()
        if binding.show
    )


class AlertFooter(Footer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.alert_keys: frozenset[str] = frozenset()
        self.rebuilds = 0  # times the keys were built (tests count them)
        self._composed: tuple | None = None

    def set_alert(self, keys: frozenset[str]) -> None:
        # Mark the keys on screen now; compose marks them again whenever the Footer rebuilds itself.
        self.alert_keys = keys
        for key in self.query(FooterKey):
            key.set_class(key.key in keys, "-alert")

    def bindings_changed(self, screen: Screen) -> None:
        unchanged = self.is_attached and screen is self.screen and shown_bindings(screen) == self._composed
        if footer_bindings_ready(self) and unchanged:
            return
        super().bindings_changed(screen)

    def compose(self):
        self.rebuilds += 1
        self._composed = shown_bindings(self.screen) if footer_bindings_ready(self) else None
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.key in self.alert_keys:
                widget.add_class("-alert")
            yield widget
