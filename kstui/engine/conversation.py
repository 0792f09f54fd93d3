"""The conversation with the model: its messages, how a turn adds to them, how a trace rebuilds them, and
how old parts are elided to fit the context window.

Messages follow the Messages API: roles alternate, every tool_use is answered by a tool_result in the
next user message. Everything here keeps that true, whatever the model or a killed process left.
"""

from __future__ import annotations

import json
from typing import Any

from kstui.engine.events import (
    AssistantMessage,
    ContextTrimmed,
    Event,
    Rewound,
    ToolCallFinished,
    TurnFinished,
    TurnStarted,
    UserMessage,
)

COMPACTED_MARK = "[kstui] The conversation was compacted"
_ELIDED = "[elided by kstui to save context: {n} characters of an old tool result]"


class Conversation:
    """The messages of one session, and where each turn ended (for a rewind that forgets later turns)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.turn_ends: dict[int, int] = {}

    def add_user_text(self, text: str) -> None:
        self.messages[:] = with_user_text(self.messages, text)

    def add_assistant(self, blocks: list[dict[str, Any]]) -> None:
        if blocks:
            self.messages.append({"role": "assistant", "content": blocks})

    def add_tool_results(self, results: list[dict[str, Any]]) -> None:
        if results:
            self.messages.append({"role": "user", "content": results})

    def end_turn(self, turn: int) -> None:
        self.turn_ends[turn] = len(self.messages)

    def truncate_to(self, turn: int) -> bool:
        """Forget everything after `turn` ended; False if that turn's end is not known."""
        if turn not in self.turn_ends:
            return False
        del self.messages[self.turn_ends[turn]:]
        for later in [t for t in self.turn_ends if t > turn]:
            del self.turn_ends[later]
        return True

    @property
    def awaiting_reply(self) -> bool:
        """The last message is the user's: the model has something to answer."""
        return bool(self.messages) and self.messages[-1]["role"] == "user"

    @property
    def ended_without_tools(self) -> bool:
        """The model's last reply asked for no tool (a resumed session says "carry on" after it)."""
        if not self.messages or self.messages[-1]["role"] != "assistant":
            return False
        return not any(b.get("type") == "tool_use" for b in self.messages[-1]["content"])

    def rebuild(self, events: list[Event]) -> None:
        """The conversation as a trace recorded it."""
        self.turn_ends.clear()
        self.messages[:] = rebuild_messages(events, self.turn_ends)


def with_user_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The messages with text added as the user, joined to a last user message (roles must alternate).

    A new list; the messages given are not changed."""
    block = {"type": "text", "text": text}
    if not messages or messages[-1].get("role") != "user":
        return [*messages, {"role": "user", "content": [block]}]
    last = messages[-1]
    content = last.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return [*messages[:-1], {**last, "content": [*blocks, block]}]


def tool_result(call_id: str, text: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}


def rebuild_messages(events: list[Event], turn_ends: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The conversation as the session held it, from the trace's events.

    Tool calls the trace started but never finished (the process was killed) get an error result, so
    the conversation stays valid for the API.
    """
    messages: list[dict[str, Any]] = []
    ends: dict[int, int] = {} if turn_ends is None else turn_ends
    pending: dict[str, dict[str, Any]] = {}
    assistant_turn: int | None = None

    def close_pending() -> None:
        if not pending:
            return
        results = [tool_result(cid, "not finished: the session was interrupted", True) for cid in pending]
        pending.clear()
        if messages and messages[-1]["role"] == "user" and any(
                b.get("type") == "tool_result" for b in messages[-1]["content"]):
            messages[-1]["content"].extend(results)
        else:
            messages.append({"role": "user", "content": results})

    for e in events:
        if isinstance(e, UserMessage):
            close_pending()
            messages[:] = with_user_text(messages, e.text)
        elif isinstance(e, TurnStarted):
            close_pending()
        elif isinstance(e, AssistantMessage):
            if assistant_turn == e.turn and messages and messages[-1]["role"] == "assistant":
                messages.pop()  # a partial reply kept before a retry: the retried reply replaces it
                pending.clear()
            assistant_turn = e.turn
            blocks = sendable_content(e.content, interrupted=e.interrupted)
            if blocks:
                messages.append({"role": "assistant", "content": blocks})
                pending.update({b["id"]: b for b in blocks if b.get("type") == "tool_use"})
        elif isinstance(e, ToolCallFinished) and e.call_id in pending:
            del pending[e.call_id]
            result = tool_result(e.call_id, e.output, e.is_error)
            if messages[-1]["role"] == "user":
                messages[-1]["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        elif isinstance(e, TurnFinished):
            close_pending()
            ends[e.turn] = len(messages)
        elif isinstance(e, ContextTrimmed):
            continue  # compaction is redone on the rebuilt conversation by the agent
        elif isinstance(e, Rewound) and e.truncated_to_turn is not None and e.truncated_to_turn in ends:
            del messages[ends[e.truncated_to_turn]:]
            for later in [t for t in ends if t > e.truncated_to_turn]:
                del ends[later]
    close_pending()
    return messages


def sendable_content(content: list[dict[str, Any]], *, interrupted: bool) -> list[dict[str, Any]]:
    """The blocks of an assistant reply as the next request may carry them.

    An interrupted reply keeps only its text: its tool calls never ran (and may be incomplete) and
    its thinking may lack a signature. An empty list means: send no assistant message for it.
    """
    out: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                out.append({"type": "text", "text": block["text"]})
        elif interrupted:
            continue
        elif kind == "thinking":
            if block.get("signature"):
                out.append({"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]})
        elif kind == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": block["data"]})
        elif kind == "tool_use":
            # The API takes only an object back; any other JSON value the model sent got an error result.
            tool_input = block.get("input")
            out.append({"type": "tool_use", "id": block["id"], "name": block["name"],
                        "input": tool_input if isinstance(tool_input, dict) else {}})
        else:
            out.append(block)
    return out




def elide_before(messages: list[dict[str, Any]], cut: int) -> tuple[list[dict[str, Any]], int, int]:
    """Elide tool results, big tool inputs, old restatements and thinking before index cut.

    Returns the new list, how many tool results were elided and how many characters were saved.
    """
    out: list[dict[str, Any]] = []
    elided = saved = 0
    for i, message in enumerate(messages):
        content = message.get("content")
        if i >= cut or not isinstance(content, list):
            out.append(message)
            continue
        blocks: list[dict[str, Any]] = []
        for block in content:
            new, was_result = _elide_block(block)
            if new is not block:
                saved += message_chars(block) - (message_chars(new) if new is not None else 0)
                elided += was_result
            if new is not None:
                blocks.append(new)
        if not blocks:  # an assistant message that held only thinking
            blocks = [{"type": "text", "text": "[thinking elided by kstui]"}]
        out.append({**message, "content": blocks})
    return out, elided, saved


def _elide_block(block: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    kind = block.get("type")
    if kind == "tool_result":
        body = block.get("content")
        size = len(body) if isinstance(body, str) else message_chars(body or [])
        if isinstance(body, str) and body.startswith("[elided by kstui"):
            return block, False
        return {**block, "content": _ELIDED.format(n=size)}, True
    if kind in ("thinking", "redacted_thinking"):
        return None, False
    if kind == "tool_use" and isinstance(block.get("input"), dict):
        # Only an object has fields to elide: the model may send any JSON value as a tool's input.
        big = {k: v for k, v in block["input"].items() if isinstance(v, str) and len(v) > 400}
        if big:
            inputs = {**block["input"], **{k: f"[elided by kstui: {len(v)} characters]" for k, v in big.items()}}
            return {**block, "input": inputs}, False
    if kind == "text" and block.get("text", "").startswith(COMPACTED_MARK):
        return {"type": "text", "text": f"{COMPACTED_MARK} earlier; that restatement was elided."}, False
    return block, False




def message_chars(obj: Any) -> int:
    """The size of messages or blocks as the API would carry them, in characters."""
    return len(json.dumps(obj, ensure_ascii=False, default=str))
