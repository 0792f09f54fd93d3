"""What each Claude model costs and what it accepts: prices, context window, thinking style.

Prices are list prices in USD per million tokens from platform.claude.com's pricing page (as reported
by the pricing trackers that cite it, checked 2026-12-01). A prompt-cache write costs 1.25x the input
rate for the default 5-minute lifetime (2x for 1 hour); a cache read costs the model's own multiple
of the input rate. An id this table does not know is not priced: its cost is reported as unknown,
never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CACHE_WRITE_5M = 1.25
CACHE_WRITE_1H = 2.0


@dataclass(frozen=True)
class ModelSpec:
    input: float  # USD per MTok
    output: float
    cache_read: float  # multiple of the input rate
    context_window: int
    adaptive_thinking: bool  # True: thinking is {"type": "adaptive"} (a token budget is rejected)
    long_prompt_tokens: int | None = None  # a prompt above this bills every rate x long_prompt_mult
    long_prompt_mult: float = 1.0


_FABLE_5_2 = ModelSpec(8.0, 40.0, 0.025, 1_000_000, True)
_FABLE_5_1 = ModelSpec(10.0, 50.0, 0.025, 1_000_000, True)
_FABLE_5 = ModelSpec(10.0, 50.0, 0.10, 1_000_000, True)
_OPUS_5 = ModelSpec(5.0, 25.0, 0.10, 1_000_000, True)
_OPUS_4_ADAPTIVE = ModelSpec(5.0, 25.0, 0.10, 200_000, True)

MODELS: dict[str, ModelSpec] = {
    "claude-fable-5-2": _FABLE_5_2,
    "claude-mythos-5-2": _FABLE_5_2,
    "claude-fable-5-1": _FABLE_5_1,
    "claude-mythos-5-1": _FABLE_5_1,
    "claude-fable-5": _FABLE_5,
    "claude-mythos-5": _FABLE_5,
    "claude-opus-5-5": ModelSpec(4.0, 20.0, 0.05, 1_000_000, True),
    "claude-opus-5": _OPUS_5,
    "claude-opus-4-8": _OPUS_4_ADAPTIVE,
    "claude-opus-4-7": _OPUS_4_ADAPTIVE,
    "claude-opus-4-6": _OPUS_4_ADAPTIVE,
    "claude-opus-4-5": ModelSpec(5.0, 25.0, 0.10, 200_000, False),
    "claude-sonnet-5-5": ModelSpec(2.0, 10.0, 0.05, 1_000_000, True),
    "claude-sonnet-5": ModelSpec(2.0, 10.0, 0.10, 1_000_000, True),
    "claude-sonnet-4-6": ModelSpec(3.0, 15.0, 0.10, 200_000, True),
    "claude-haiku-5-5": ModelSpec(0.10, 0.50, 0.10, 200_000, True, long_prompt_tokens=100_000, long_prompt_mult=5.0),
    "claude-haiku-4-5": ModelSpec(1.0, 5.0, 0.10, 200_000, False),
}

# Snapshot ids carry a date: claude-haiku-4-5-20251001 is priced as claude-haiku-4-5.
_SNAPSHOT = re.compile(r"-\d{8}$")


def spec_for(model: str) -> ModelSpec | None:
    """The spec of a model id (aliases and dated snapshots), or None for an id this table lacks."""
    return MODELS.get(_SNAPSHOT.sub("", model))


@dataclass(frozen=True)
class RequestTokens:
    input: int  # uncached input tokens
    output: int
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0

    @property
    def prompt(self) -> int:
        return self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h


def request_cost(model: str, tokens: RequestTokens) -> float | None:
    """USD for one request, or None when the model is not in the table."""
    spec = spec_for(model)
    if spec is None:
        return None
    mult = spec.long_prompt_mult if spec.long_prompt_tokens and tokens.prompt > spec.long_prompt_tokens else 1.0
    rate_in = spec.input * mult
    micro = (
        tokens.input * rate_in
        + tokens.output * spec.output * mult
        + tokens.cache_read * rate_in * spec.cache_read
        + tokens.cache_write_5m * rate_in * CACHE_WRITE_5M
        + tokens.cache_write_1h * rate_in * CACHE_WRITE_1H
    )
    return micro / 1_000_000
