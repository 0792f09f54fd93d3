"""The anthropic SDK's private names kstui relies on (tests/test_anthropic_private.py checks each;
pyproject.toml pins the SDK to the minor version those tests pass on).

The agent's own retries of a broken stream wait as the SDK's retries of a failed request do, so both
kinds of wait read the same in the transcript; the SDK exposes these delays only as private constants.
"""

from __future__ import annotations

from anthropic._constants import INITIAL_RETRY_DELAY, MAX_RETRY_DELAY

__all__ = ["INITIAL_RETRY_DELAY", "MAX_RETRY_DELAY"]
