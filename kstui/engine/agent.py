"""The model side of a session: one streamed turn at a time through the anthropic SDK.

`Agent.stream_turn` sends the conversation and yields typed events as the reply streams in. Three
kinds of failure are handled, each visible to the user as a `Retry` event:
- an HTTP failure before the stream starts (429, 529, 5xx, a refused or dropped connection) is
  retried by the SDK itself with its backoff (honouring retry-after); a client middleware, which the
  SDK runs once per attempt, reports each one;
- a stream that breaks after it started (a cut connection, an `error` event, tool input that is not
  JSON, an end before message_stop) is not retried by the SDK: the partial reply is yielded as an
  `AssistantMessage(interrupted=True)` (kept for the trace) and the request is sent again;
- anything else (a bad key, a rejected request, retries exhausted) raises `AgentError`, after the
  partial reply, if there is one, has been yielded.
The last AssistantMessage a turn yields is the reply; an earlier one is a partial that a retry
superseded.
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import httpx2

from kstui.compat.anthropic_private import INITIAL_RETRY_DELAY, MAX_RETRY_DELAY
from kstui.engine.conversation import COMPACTED_MARK, elide_before, message_chars, with_user_text
from kstui.engine.events import AssistantMessage, ContextTrimmed, Event, Notice, Retry, TextDelta, ThinkingDelta, Usage
from kstui.engine.pricing import RequestTokens, request_cost, spec_for

# The most capable generally available model this SDK knows (Mythos is invitation-only).
DEFAULT_MODEL = "claude-fable-5-2"
DEFAULT_CONTEXT_WINDOW = 200_000  # for a model the table does not know: the smallest current window
_RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
_CHARS_PER_TOKEN = 3  # deliberately low for code: an estimate that errs towards compacting early


class AgentError(Exception):
    """The turn failed for good; the message is one line for the user."""


@dataclass
class AgentConfig:
    model: str = DEFAULT_MODEL
    max_tokens: int = 32_000
    thinking_budget: int = 16_000  # 0 = off; >0 = on (adaptive models decide the amount themselves)
    base_url: str | None = None  # None: ANTHROPIC_BASE_URL, else the SDK's default
    context_window: int | None = None  # None: the model's own (kstui.engine.pricing), else 200K
    max_retries: int = 5
    effort: str | None = None  # output_config.effort (low, medium, high, …); None: the model default
    thinking: Literal["auto", "adaptive", "budget"] = "auto"  # auto: what the model accepts
    compact_at: float = 0.8  # compact when the context estimate passes this share of the window
    stream_retry_base_s: float = 1.0  # backoff after a stream broke mid-reply: doubles, at most 30 s
    timeout_s: float = 600.0


@dataclass
class ModelUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    requests: int = 0
    priced: bool = True  # False: the model is not in the price table and cost_usd leaves it out


@dataclass
class UsageTotals:
    by_model: dict[str, ModelUsage] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float:
        return sum(m.cost_usd for m in self.by_model.values())

    def add(self, model: str, tokens: RequestTokens) -> ModelUsage:
        entry = self.by_model.setdefault(model, ModelUsage())
        entry.input_tokens += tokens.input
        entry.output_tokens += tokens.output
        entry.cache_read_tokens += tokens.cache_read
        entry.cache_write_tokens += tokens.cache_write_5m + tokens.cache_write_1h
        entry.requests += 1
        cost = request_cost(model, tokens)
        if cost is None:
            entry.priced = False
        else:
            entry.cost_usd += cost
        return entry


class _StreamBroke(Exception):
    """The stream failed after it started; retrying the request may succeed."""


_END = object()


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        system_prompt: str,
        tools: list[dict[str, Any]],
        *,
        api_key: str,
    ) -> None:
        self.config = config
        self.usage = UsageTotals()
        self.last_stop_reason: str | None = None
        spec = spec_for(config.model)
        self.context_window = config.context_window or (spec.context_window if spec else DEFAULT_CONTEXT_WINDOW)
        self._system = [{"type": "text", "text": system_prompt, "cache_control": {"type": "ephemeral"}}]
        self._tools = copy.deepcopy(tools)
        if self._tools:
            self._tools[-1]["cache_control"] = {"type": "ephemeral"}
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=config.base_url,
            max_retries=config.max_retries,
            timeout=config.timeout_s,
            middleware=[self._observe_attempt],
        )
        self._emit: Callable[[Event], None] = lambda event: None
        self._task: asyncio.Task[None] | None = None
        self._interrupted = False
        self._retries = 0
        self._turn = 0
        self._stream: Any = None
        self._unpriced_noted: set[str] = set()
        # The context the last request used (prompt tokens) and how many messages it held.
        self._last_prompt_tokens: int | None = None
        self._last_len = 0

    async def close(self) -> None:
        await self._client.close()

    # ---- one turn ----

    async def stream_turn(self, messages: list[dict[str, Any]], turn: int) -> AsyncIterator[Event]:
        """Yield TextDelta, ThinkingDelta, Retry, Usage (and Notice) events, then the AssistantMessage."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._interrupted = False
        self._turn = turn
        task = asyncio.create_task(self._run(messages, turn, queue.put_nowait))
        # A done callback, not a finally: a task cancelled before its first step never runs its body.
        task.add_done_callback(lambda _: queue.put_nowait(_END))
        self._task = task
        try:
            while (item := await queue.get()) is not _END:
                yield item
            if task.cancelled() and self._interrupted:  # interrupted before it sent anything
                yield AssistantMessage(turn=turn, content=[], interrupted=True)
            else:
                await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self._task = None

    def interrupt(self) -> None:
        """Stop the stream in flight; the partial reply ends the turn as AssistantMessage(interrupted=True)."""
        if self._task is not None and not self._task.done():
            self._interrupted = True
            self._task.cancel()

    async def _run(self, messages: list[dict[str, Any]], turn: int, emit: Callable[[Event], None]) -> None:
        self._emit = emit
        self._retries = 0
        self.last_stop_reason = None
        params = self._params(messages)
        self._last_len = len(messages)
        breaks = 0
        try:
            while True:
                self._stream = None
                try:
                    message = await self._attempt(params, turn, emit)
                except _StreamBroke as broke:
                    self._keep_partial(turn, emit)
                    if breaks >= self.config.max_retries:
                        raise AgentError(f"{broke} (gave up after {breaks} retries)") from None
                    breaks += 1
                    wait = min(self.config.stream_retry_base_s * 2 ** (breaks - 1), 30.0)
                    self._retries += 1
                    emit(Retry(attempt=self._retries, reason=f"{broke}; partial reply kept", wait_s=wait))
                    await asyncio.sleep(wait)
                    continue
                except anthropic.APIStatusError as exc:
                    self._keep_partial(turn, emit)
                    raise AgentError(_describe_status(exc, retried=self._retries)) from None
                except anthropic.APIConnectionError as exc:
                    raise AgentError(f"cannot reach the model API: {_one_line(exc)}") from None
                self._account(message.model or self.config.model, message.usage, emit)
                self.last_stop_reason = message.stop_reason
                emit(AssistantMessage(turn=turn, content=[b.to_dict() for b in message.content]))
                return
        except asyncio.CancelledError:
            if not self._interrupted:
                raise
            self._keep_partial(turn, emit, always=True)

    async def _attempt(self, params: dict[str, Any], turn: int, emit: Callable[[Event], None]) -> Any:
        tool_json: dict[int, str] = {}
        finished = False
        async with self._client.messages.stream(**params) as stream:
            self._stream = stream
            try:
                async for event in stream:
                    if event.type == "text":
                        emit(TextDelta(turn=turn, text=event.text))
                    elif event.type == "thinking":
                        emit(ThinkingDelta(turn=turn, text=event.thinking))
                    elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                        tool_json[event.index] = tool_json.get(event.index, "") + event.delta.partial_json
                    elif event.type == "content_block_stop" and event.index in tool_json:
                        _check_tool_json(tool_json[event.index])
                    elif event.type == "message_stop":
                        finished = True
            except (httpx2.TransportError, anthropic.APIConnectionError) as exc:
                raise _StreamBroke(f"the connection broke mid-reply ({_one_line(exc)})") from None
            except anthropic.APIStatusError as exc:
                kind = _error_type(exc)
                if kind in _RETRYABLE_STREAM_ERRORS:
                    raise _StreamBroke(f"the stream reported {kind}") from None
                raise
            except ValueError as exc:
                raise _StreamBroke(_describe_bad_event(exc)) from None
            if not finished:
                raise _StreamBroke("the stream ended before message_stop")
            return await stream.get_final_message()

    def _keep_partial(self, turn: int, emit: Callable[[Event], None], *, always: bool = False) -> None:
        """Account for and yield what a broken or interrupted stream produced."""
        snapshot = _snapshot(self._stream)
        if snapshot is not None:
            self._account(snapshot.model or self.config.model, snapshot.usage, emit)
        content = [b.to_dict() for b in snapshot.content] if snapshot is not None else []
        if content or always:
            emit(AssistantMessage(turn=turn, content=content, interrupted=True))

    def _account(self, model: str, usage: Any, emit: Callable[[Event], None]) -> None:
        tokens = _request_tokens(usage)
        self._last_prompt_tokens = tokens.prompt
        entry = self.usage.add(model, tokens)
        if not entry.priced and model not in self._unpriced_noted:
            self._unpriced_noted.add(model)
            emit(Notice(message=f"no price is known for model {model}: its cost is not counted", level="warning"))
        emit(
            Usage(
                model=model,
                input_tokens=entry.input_tokens,
                output_tokens=entry.output_tokens,
                cache_read_tokens=entry.cache_read_tokens,
                cache_write_tokens=entry.cache_write_tokens,
                cost_usd=entry.cost_usd,
            )
        )

    # ---- the request ----

    def _params(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "system": self._system,
            "messages": _with_cache_breakpoint(messages),
        }
        if self._tools:
            params["tools"] = self._tools
        thinking = self._thinking()
        if thinking is not None:
            params["thinking"] = thinking
        if self.config.effort:
            params["output_config"] = {"effort": self.config.effort}
        return params

    def _thinking(self) -> dict[str, Any] | None:
        if self.config.thinking_budget <= 0:
            return None
        style = self.config.thinking
        if style == "auto":
            spec = spec_for(self.config.model)
            style = "adaptive" if spec is not None and spec.adaptive_thinking else "budget"
        if style == "adaptive":
            return {"type": "adaptive", "display": "summarized"}
        budget = min(self.config.thinking_budget, self.config.max_tokens - 1)
        return {"type": "enabled", "budget_tokens": budget} if budget >= 1024 else None

    async def _observe_attempt(self, request: Any, call_next: Any) -> Any:
        """SDK middleware, run once per HTTP attempt: report each attempt the SDK will retry."""
        limit = request.max_retries if isinstance(request.max_retries, int) else self.config.max_retries
        will_retry = request.retries_taken < limit
        try:
            response = await call_next(request)
        except anthropic.APIConnectionError as exc:
            if will_retry:
                self._note_retry(f"connection failed ({_one_line(exc)})", _backoff(request.retries_taken))
            raise
        http = response.http_response
        if will_retry and not http.is_success and _sdk_retries(http):
            await http.aread()
            wait = _retry_after(http.headers)
            self._note_retry(_describe_http(http), _backoff(request.retries_taken) if wait is None else wait)
        return response

    def _note_retry(self, reason: str, wait_s: float) -> None:
        self._retries += 1
        self._emit(Retry(attempt=self._retries, reason=reason, wait_s=round(wait_s, 3)))

    # ---- long sessions ----

    def estimate_tokens(self, messages: list[dict[str, Any]]) -> int:
        """The context the next request would use: the last reported prompt plus what was added since."""
        if self._last_prompt_tokens is not None and len(messages) >= self._last_len:
            return self._last_prompt_tokens + message_chars(messages[self._last_len :]) // _CHARS_PER_TOKEN
        return (message_chars(self._system) + message_chars(self._tools) + message_chars(messages)) // _CHARS_PER_TOKEN

    def compact(
        self, messages: list[dict[str, Any]], *, kernel_text: str, best_summary: str
    ) -> tuple[list[dict[str, Any]], ContextTrimmed | None]:
        """Near the context window: elide old tool results and restate the kernel and the best result.

        Only block contents change: every message, every tool_use and its tool_result stay, so the
        conversation keeps the structure the API requires. The latest messages stay whole.
        """
        before = self.estimate_tokens(messages)
        limit = int(self.context_window * self.config.compact_at)
        if before < limit or not messages:
            return messages, None
        restatement = (
            f"{COMPACTED_MARK} to fit the context window: old tool results were elided. "
            f"The kernel file now reads:\n\n```\n{kernel_text}\n```\n\nBest accepted result: {best_summary}"
        )
        for keep in (8, 4, 2):
            compacted, elided, saved = elide_before(messages, max(0, len(messages) - keep))
            after = before - (saved - len(restatement)) // _CHARS_PER_TOKEN
            if after < limit:
                break
        compacted = with_user_text(compacted, restatement)
        self._last_prompt_tokens = None  # the next estimate counts characters until the API reports again
        return compacted, ContextTrimmed(
            turn=self._turn, elided_results=elided, tokens_before=before, tokens_after=max(after, 0)
        )


# ---- helpers ----


def _snapshot(stream: Any) -> Any:
    if stream is None:
        return None
    try:
        return stream.current_message_snapshot
    except AssertionError:  # no message_start arrived
        return None


def _request_tokens(usage: Any) -> RequestTokens:
    write = usage.cache_creation_input_tokens or 0
    split = getattr(usage, "cache_creation", None)
    one_hour = split.ephemeral_1h_input_tokens if split is not None else 0
    return RequestTokens(
        input=usage.input_tokens or 0,
        output=usage.output_tokens or 0,
        cache_read=usage.cache_read_input_tokens or 0,
        cache_write_5m=max(write - one_hour, 0),
        cache_write_1h=one_hour,
    )


def _check_tool_json(raw: str) -> None:
    if not raw.strip():
        return  # a tool call without arguments
    try:
        json.loads(raw)
    except json.JSONDecodeError:
        raise _StreamBroke(f"the model sent tool input that is not JSON ({_clip(raw)})") from None


def _describe_bad_event(exc: ValueError) -> str:
    text = str(exc)
    if "tool parameter JSON" in text:
        return f"the model sent tool input that is not JSON ({_clip(text.rpartition('JSON: ')[2])})"
    return f"an unreadable stream event ({_one_line(exc)})"


def _sdk_retries(response: httpx2.Response) -> bool:
    """The SDK's retry rule (x-should-retry, else 408, 409, 429, 5xx)."""
    header = response.headers.get("x-should-retry")
    if header in ("true", "false"):
        return header == "true"
    return response.status_code in (408, 409, 429) or response.status_code >= 500


def _retry_after(headers: httpx2.Headers) -> float | None:
    """The wait the server asked for (retry-after-ms, then retry-after seconds or date), as the SDK reads it."""
    try:
        return float(headers["retry-after-ms"]) / 1000
    except (KeyError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return max(email.utils.mktime_tz(parsed) - time.time(), 0.0) if parsed else None


def _backoff(retries_taken: int) -> float:
    """The SDK's nominal backoff before retry n+1 (it jitters this down by up to a quarter)."""
    return min(INITIAL_RETRY_DELAY * 2.0**retries_taken, MAX_RETRY_DELAY)


def _describe_http(response: httpx2.Response) -> str:
    kind, message = "", ""
    try:
        error = response.json().get("error", {})
        kind, message = error.get("type", ""), error.get("message", "")
    except (ValueError, AttributeError):
        pass
    reason = {429: "rate limited", 529: "overloaded"}.get(response.status_code, response.reason_phrase)
    detail = f": {kind}" if kind else ""
    detail += f" ({_clip(message)})" if message else ""
    return f"HTTP {response.status_code} {reason}{detail}"


def _error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("type", ""))
    return ""


def _describe_status(exc: anthropic.APIStatusError, *, retried: int) -> str:
    kind = _error_type(exc) or type(exc).__name__
    body = exc.body if isinstance(exc.body, dict) else {}
    message = body.get("error", {}).get("message", "") if isinstance(body.get("error"), dict) else ""
    status = f"HTTP {exc.status_code} " if exc.status_code != 200 else ""
    what = f"the model API still failed after {retried} retries" if retried else "the model API refused the request"
    return f"{what}: {status}{kind}" + (f" ({_clip(message)})" if message else "")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return _clip(text[0] if text else type(exc).__name__)


def _clip(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a cache breakpoint on the last block, so each turn reuses the previous prefix."""
    if not messages:
        return messages
    last = dict(messages[-1])
    content = last.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content or content[-1].get("type") not in (
        "text",
        "tool_result",
        "tool_use",
        "image",
        "document",
    ):
        return messages
    last["content"] = [*content[:-1], {**content[-1], "cache_control": {"type": "ephemeral"}}]
    return [*messages[:-1], last]
