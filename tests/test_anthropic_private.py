"""The anthropic SDK's private names in kstui/compat/anthropic_private.py still exist and mean the same."""

from __future__ import annotations

from kstui.compat.anthropic_private import INITIAL_RETRY_DELAY, MAX_RETRY_DELAY


def test_retry_delays_are_the_sdks_backoff_bounds() -> None:
    assert isinstance(INITIAL_RETRY_DELAY, float) and isinstance(MAX_RETRY_DELAY, float)
    assert 0 < INITIAL_RETRY_DELAY < MAX_RETRY_DELAY <= 60
