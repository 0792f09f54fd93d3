"""The agent against the loopback server: the real anthropic client over real HTTP."""

from __future__ import annotations

import asyncio
import time
import typing
from pathlib import Path

import anthropic
import pytest
from messages_server import (
    MessagesServer,
    ServerUsage,
    dropped,
    http_error,
    overloaded,
    rate_limited,
    reply,
    text,
    thinking,
    tool_use,
    tool_use_raw,
)

from kstui.engine.agent import DEFAULT_MODEL, Agent, AgentConfig, AgentError
from kstui.engine.conversation import COMPACTED_MARK, sendable_content
from kstui.engine.events import AssistantMessage, ContextTrimmed, Notice, Retry, TextDelta, ThinkingDelta, Usage
from kstui.engine.pricing import CACHE_WRITE_5M, MODELS, RequestTokens, request_cost
from kstui.engine.prompts import system_prompt
from kstui.engine.tools import Toolbox

TOOLS = [
    {"name": "read_file", "description": "read", "input_schema": {"type": "object", "properties": {}}},
    {"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}},
]
USER = [{"role": "user", "content": "make it faster"}]


def make_agent(server: MessagesServer, **overrides) -> Agent:
    config = AgentConfig(base_url=server.url, stream_retry_base_s=0.01, **overrides)
    return Agent(config, "You optimise a kernel.", TOOLS, api_key="test-key")


async def collect(agent: Agent, messages=USER, turn: int = 1) -> list:
    return [event async for event in agent.stream_turn(messages, turn)]


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def expected_cost(model: str, usage: ServerUsage) -> float:
    spec = MODELS[model]
    return (
        usage.input * spec.input
        + usage.output * spec.output
        + usage.cache_read * spec.input * spec.cache_read
        + usage.cache_write * spec.input * CACHE_WRITE_5M
    ) / 1e6


def assert_api_valid(messages: list[dict]) -> None:
    """Roles alternate, and every tool_use is answered by a tool_result in the next message."""
    assert messages[0]["role"] == "user"
    for a, b in zip(messages, messages[1:]):
        assert a["role"] != b["role"]
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or not isinstance(message["content"], list):
            continue
        uses = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
        if uses:
            answer = messages[i + 1]["content"]
            assert {b["tool_use_id"] for b in answer if b["type"] == "tool_result"} == uses


# ---- streaming ----


async def test_deltas_stream_in_order_and_the_final_message_is_the_sdks():
    script = [
        reply(text("warm-up")),  # the client's first request pays one-off set-up costs
        reply(
            thinking("first I look at the loads", chunks=4),
            text("Reading the kernel.", chunks=3),
            tool_use("read_file", {"path": "k.cu"}, chunks=3),
            delay_s=0.01,
        )
    ]
    with MessagesServer(script) as server:
        agent = make_agent(server, model="claude-opus-5-5", thinking_budget=8000)
        await collect(agent)
        events = await collect(agent)
        await agent.close()
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ThinkingDelta"] * 4 + ["TextDelta"] * 3 + ["Usage", "AssistantMessage"]
    assert "".join(e.text for e in of(events, ThinkingDelta)) == "first I look at the loads"
    assert "".join(e.text for e in of(events, TextDelta)) == "Reading the kernel."
    stamps = [e.ts for e in events[:7]]
    assert stamps == sorted(stamps) and stamps[-1] - stamps[0] > 0.03  # they arrived as they were sent
    final = events[-1]
    assert not final.interrupted and final.turn == 1
    assert [b["type"] for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0]["signature"] == "sig-test"
    assert final.content[2]["input"] == {"path": "k.cu"} and final.content[2]["name"] == "read_file"
    assert agent.last_stop_reason == "tool_use"


async def test_request_carries_cache_breakpoints_thinking_and_effort():
    with MessagesServer([reply(text("a")), reply(text("b"))]) as server:
        adaptive = make_agent(server, model="claude-opus-5-5", thinking_budget=4000, effort="high")
        await collect(adaptive)
        budget = make_agent(server, model="claude-haiku-4-5", thinking_budget=4000, max_tokens=8000)
        await collect(budget)
        first, second = (r.body for r in server.requests)
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert [("cache_control" in t) for t in first["tools"]] == [False, True]
    assert first["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["thinking"]["type"] == "adaptive" and first["output_config"] == {"effort": "high"}
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert USER == [{"role": "user", "content": "make it faster"}]  # the caller's list is not modified


async def test_thinking_off_sends_no_thinking_and_base_url_comes_from_the_environment(monkeypatch):
    with MessagesServer([reply(text("hi"))]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        agent = Agent(AgentConfig(thinking_budget=0), "sys", TOOLS, api_key="k")
        await collect(agent)
        body = server.requests[0].body
    assert "thinking" not in body and body["model"] == DEFAULT_MODEL


def test_default_model_is_one_the_sdk_knows_and_is_priced():
    known = typing.get_args(typing.get_args(anthropic.types.Model)[0])
    assert DEFAULT_MODEL in known and DEFAULT_MODEL in MODELS


# ---- usage and cost ----


async def test_usage_and_cost_accumulate_per_model():
    model = "claude-opus-5-5"
    usages = [ServerUsage(1200, 340, cache_read=5000, cache_write=800), ServerUsage(300, 90, cache_read=7000)]
    with MessagesServer([reply(text("one"), usage=usages[0]), reply(text("two"), usage=usages[1])]) as server:
        agent = make_agent(server, model=model)
        first = of(await collect(agent), Usage)
        second = of(await collect(agent, turn=2), Usage)
        assert server.sent_usage == usages
    assert first[-1].cost_usd == pytest.approx(expected_cost(model, usages[0]))
    total = second[-1]
    assert total.input_tokens == 1500 and total.output_tokens == 430
    assert total.cache_read_tokens == 12000 and total.cache_write_tokens == 800
    assert total.cost_usd == pytest.approx(sum(expected_cost(model, u) for u in usages))
    assert agent.usage.cost_usd == pytest.approx(total.cost_usd) and agent.usage.by_model[model].requests == 2


async def test_an_unpriced_model_is_flagged_not_guessed():
    with MessagesServer([reply(text("x"), model="claude-unknown-9")]) as server:
        events = await collect(make_agent(server, model="claude-unknown-9"))
    assert "claude-unknown-9" in of(events, Notice)[0].message
    assert of(events, Usage)[-1].cost_usd == 0.0


def test_long_prompt_tier_and_snapshot_ids():
    spec = MODELS["claude-haiku-5-5"]
    short = RequestTokens(input=1000, output=100)
    long = RequestTokens(input=spec.long_prompt_tokens + 1, output=100)
    assert request_cost("claude-haiku-5-5", short) == pytest.approx((1000 * spec.input + 100 * spec.output) / 1e6)
    assert request_cost("claude-haiku-5-5", long) == pytest.approx(
        (long.input * spec.input + 100 * spec.output) * spec.long_prompt_mult / 1e6
    )
    assert request_cost("claude-haiku-4-5-20251001", short) == request_cost("claude-haiku-4-5", short)
    assert request_cost("claude-opus-5-5-extra", short) is None  # never priced as a neighbour


# ---- faults ----


@pytest.mark.parametrize(
    "fault, words",
    [
        (rate_limited(0.01), "429"),
        (overloaded(), "529"),
        (http_error(500, retry_after_ms=10), "500"),
        (dropped(), "connection"),
    ],
)
async def test_http_faults_are_retried_by_the_sdk_and_reported(fault, words):
    with MessagesServer([fault, reply(text("recovered"))]) as server:
        events = await collect(make_agent(server))
        assert len(server.requests) == 2
    retries = of(events, Retry)
    assert len(retries) == 1 and words in retries[0].reason and retries[0].attempt == 1
    assert events.index(retries[0]) < events.index(of(events, TextDelta)[0])
    assert events[-1].content == [{"type": "text", "text": "recovered"}] and not events[-1].interrupted


async def test_retry_after_is_honoured_and_reported():
    with MessagesServer([http_error(429, retry_after=0.4), reply(text("ok"))]) as server:
        started = time.monotonic()
        events = await collect(make_agent(server))
        elapsed = time.monotonic() - started
    assert of(events, Retry)[0].wait_s == pytest.approx(0.4)
    assert elapsed >= 0.4


@pytest.mark.parametrize(
    "broken, words",
    [
        (reply(text("abcdefghij", chunks=5), cut_after=5), "connection broke"),
        (reply(text("abcdefghij", chunks=5), error_after=5, error_type="overloaded_error"), "overloaded_error"),
        (reply(text("abcdefghij", chunks=5), tool_use_raw("bash", ['{"command"', ": }"])), "not JSON"),
    ],
)
async def test_a_stream_broken_mid_reply_keeps_the_partial_and_retries(broken, words):
    with MessagesServer([broken, reply(text("whole answer"))]) as server:
        agent = make_agent(server)
        events = await collect(agent)
        assert len(server.requests) == 2
    partial, final = of(events, AssistantMessage)
    assert partial.interrupted and partial.content[0]["type"] == "text"
    streamed = "".join(e.text for e in of(events[: events.index(partial)], TextDelta))
    assert partial.content[0]["text"] == streamed and 0 < len(streamed)
    retry = of(events, Retry)[0]
    assert words in retry.reason and events.index(partial) < events.index(retry) < events.index(final)
    assert final is events[-1] and not final.interrupted and final.content[0]["text"] == "whole answer"


async def test_a_rejected_request_is_an_agent_error_without_retries():
    with MessagesServer([http_error(400, message="messages: roles must alternate")]) as server:
        agent = make_agent(server)
        events = []
        with pytest.raises(AgentError, match="invalid_request_error.*roles must alternate"):
            async for event in agent.stream_turn(USER, 1):
                events.append(event)
        assert len(server.requests) == 1 and not of(events, Retry)


async def test_retries_run_out_into_an_agent_error():
    with MessagesServer([overloaded(), overloaded(), overloaded()]) as server:
        events = []
        with pytest.raises(AgentError, match="after 2 retries: HTTP 529 overloaded_error"):
            async for event in make_agent(server, max_retries=2).stream_turn(USER, 1):
                events.append(event)
        assert len(server.requests) == 3
    assert [e.attempt for e in of(events, Retry)] == [1, 2]


async def test_a_fatal_error_event_keeps_the_partial_then_raises():
    script = [reply(text("partial words", chunks=2), error_after=4, error_type="invalid_request_error")]
    with MessagesServer(script) as server:
        events = []
        with pytest.raises(AgentError, match="invalid_request_error"):
            async for event in make_agent(server).stream_turn(USER, 1):
                events.append(event)
    assert events[-1].interrupted and events[-1].content[0]["text"] == "partial"


# ---- interrupt ----


async def test_interrupt_keeps_the_partial_reply():
    words = "".join(f"w{i} " for i in range(40))
    with MessagesServer([reply(text(words, chunks=40), delay_s=0.02), reply(text("next"))]) as server:
        agent = make_agent(server)
        events = []
        async for event in agent.stream_turn(USER, 1):
            events.append(event)
            if len(of(events, TextDelta)) == 3:
                agent.interrupt()
        final = events[-1]
        assert isinstance(final, AssistantMessage) and final.interrupted
        received = "".join(e.text for e in of(events, TextDelta))
        assert final.content[0]["text"].startswith(received) and len(final.content[0]["text"]) < len(words)
        again = await collect(agent, turn=2)  # the agent goes on after an interrupt
        assert again[-1].content[0]["text"] == "next"


async def test_interrupt_during_a_retry_wait_ends_the_turn():
    with MessagesServer([http_error(429, retry_after=30), reply(text("never"))]) as server:
        agent = make_agent(server)
        events = []
        started = time.monotonic()
        async for event in agent.stream_turn(USER, 1):
            events.append(event)
            if isinstance(event, Retry):
                agent.interrupt()
        assert time.monotonic() - started < 5
    assert of(events, Retry)[0].wait_s == 30
    assert events[-1] == AssistantMessage(turn=1, content=[], interrupted=True, ts=events[-1].ts)


async def test_interrupt_before_the_request_starts():
    with MessagesServer([reply(text("unused"))]) as server:
        agent = make_agent(server)
        turn = agent.stream_turn(USER, 1)
        first = asyncio.ensure_future(turn.__anext__())
        await asyncio.sleep(0)  # the turn's task exists but has not run a step
        agent.interrupt()
        events = [await first] + [e async for e in turn]
    assert events == [AssistantMessage(turn=1, content=[], interrupted=True, ts=events[0].ts)]


def test_sendable_content_drops_what_an_interrupted_reply_cannot_carry():
    content = [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "so"},
        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
        {"type": "text", "text": ""},
    ]
    assert sendable_content(content, interrupted=True) == [{"type": "text", "text": "so"}]
    assert [b["type"] for b in sendable_content(content, interrupted=False)] == ["thinking", "text", "tool_use"]
    assert sendable_content([{"type": "thinking", "thinking": "cut", "signature": ""}], interrupted=False) == []


# ---- compaction ----


def long_conversation(pairs: int, result_size: int) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "optimise k.cu"}]
    for i in range(pairs):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t" * 50, "signature": "s"},
                    {"type": "text", "text": f"step {i}"},
                    {
                        "type": "tool_use",
                        "id": f"tu{i}",
                        "name": "write_file",
                        "input": {"path": "k.cu", "content": "x" * 2000},
                    },
                ],
            }
        )
        result = {"type": "tool_result", "tool_use_id": f"tu{i}", "content": "r" * result_size}
        messages.append({"role": "user", "content": [result]})
    return messages


async def test_compaction_keeps_structure_restates_and_shrinks():
    with MessagesServer([reply(text("carry on"))]) as server:
        agent = make_agent(server, context_window=20_000)
        messages = long_conversation(pairs=20, result_size=3000)
        before = agent.estimate_tokens(messages)
        compacted, trimmed = agent.compact(messages, kernel_text="__global__ void k() {}", best_summary="1.30x geomean")
        assert isinstance(trimmed, ContextTrimmed) and trimmed.elided_results > 0
        assert trimmed.tokens_before == before and trimmed.tokens_after < before
        assert agent.estimate_tokens(compacted) < before
        assert_api_valid(compacted)
        assert len(compacted) == len(messages)
        assert compacted[-1]["content"][:-1] == messages[-1]["content"]  # the latest result stays whole
        restated = compacted[-1]["content"][-1]["text"]
        assert restated.startswith(COMPACTED_MARK) and "__global__ void k() {}" in restated and "1.30x" in restated
        assert messages[1]["content"][2]["input"]["content"] == "x" * 2000  # the caller's list is untouched
        await collect(agent, compacted)  # the API takes it
        assert len(server.requests[0].body["messages"]) == len(messages)

        again, second = agent.compact(
            compacted + long_conversation(20, 3000)[1:], kernel_text="v2", best_summary="1.4x"
        )
        assert second is not None
        texts = [b.get("text", "") for m in again for b in (m["content"] if isinstance(m["content"], list) else [])]
        assert sum("__global__ void k() {}" in t for t in texts) == 0  # the old restatement was elided too
        assert_api_valid(again)


async def test_no_compaction_below_the_threshold_and_estimate_follows_reported_usage():
    with MessagesServer([reply(text("ok"), usage=ServerUsage(input=110_000, output=10, cache_read=60_000))]) as server:
        agent = make_agent(server, context_window=200_000)
        messages = long_conversation(pairs=2, result_size=100)
        same, none = agent.compact(messages, kernel_text="k", best_summary="b")
        assert none is None and same is messages
        await collect(agent, messages)
        grown = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        assert agent.estimate_tokens(grown) >= 170_000  # the reported prompt, not a character count
        _, trimmed = agent.compact(grown, kernel_text="k", best_summary="b")
        assert trimmed is not None and trimmed.tokens_before >= 170_000


# ---- the tool loop and the prompt ----


async def test_a_tool_loop_with_a_hostile_call_goes_on(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "k.cu").write_text("__global__ void k() {}\n")

    async def evaluate(scenarios: str) -> str:
        return "12/12 correct"

    box = Toolbox(workspace, Path("k.cu"), evaluate=evaluate)

    def script(body: dict, index: int):
        if index == 0:
            return reply(tool_use("read_file", {"path": "../../etc/passwd"}), tool_use("read_file", {"path": "k.cu"}))
        results = [b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]
        return reply(text(f"{len(results)} results, {sum(bool(r.get('is_error')) for r in results)} refused"))

    with MessagesServer(script) as server:
        prompt = system_prompt("k.cu", str(workspace))
        agent = Agent(AgentConfig(base_url=server.url), prompt, box.definitions(), api_key="k")
        messages = list(USER)
        reply_ = (await collect(agent, messages))[-1]
        messages.append({"role": "assistant", "content": sendable_content(reply_.content, interrupted=False)})
        results = []
        for block in reply_.content:
            outcome = await box.run(block["name"], block["input"])
            result = {"type": "tool_result", "tool_use_id": block["id"], "content": outcome.text}
            results.append({**result, "is_error": outcome.is_error})
        messages.append({"role": "user", "content": results})
        final = (await collect(agent, messages, turn=2))[-1]
        sent = server.requests[1].body["messages"][-1]["content"]
    assert final.content[0]["text"] == "2 results, 1 refused"
    assert sent[0]["is_error"] and "outside the workspace" in sent[0]["content"]
    assert sent[1]["content"] == "__global__ void k() {}\n" and not sent[1]["is_error"]
    assert [t["name"] for t in server.requests[0].body["tools"]] == [d["name"] for d in box.definitions()]


def test_the_system_prompt_states_the_goal_and_equips_nothing():
    prompt = system_prompt("flash_fwd.cu", "/work/ws")
    for needed in ("flash_fwd.cu", "faster", "correct on every", "evaluate", "committed", "question"):
        assert needed in prompt
    lowered = prompt.lower()
    for advice in ("tensor core", "shared memory", "wmma", "softmax", "tiling", "cutlass", "flashattention", "ptx"):
        assert advice not in lowered  # Ask, Don't Equip: no operator-specific advice
    assert len(prompt) < 2000
