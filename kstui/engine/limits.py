"""The session's budgets: when it must end whatever the agent wants (evaluations, cost, turns, a changed judge)."""

from __future__ import annotations

from kstui.engine.config import SessionConfig
from kstui.engine.state import SessionState


def limit_reached(config: SessionConfig, state: SessionState) -> str | None:
    """The reason the session must end now, or None."""
    if not state.harness_ok:
        return "harness changed"
    if state.stop_reason is not None:
        return state.stop_reason
    if config.max_evals is not None and state.evals >= config.max_evals:
        return "max evals reached"
    if config.max_cost is not None and state.cost_usd >= config.max_cost:
        return "max cost reached"
    if config.max_turns is not None and state.turn >= config.max_turns:
        return "max turns reached"
    return None
