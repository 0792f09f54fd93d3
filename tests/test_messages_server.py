"""The loopback Messages API server speaks the wire protocol the SDK expects (raw HTTP here)."""

from __future__ import annotations

import http.client
import json

import pytest
from messages_server import (
    MessagesServer,
    ServerUsage,
    dropped,
    http_error,
    reply,
    text,
    thinking,
    tool_use,
    tool_use_raw,
)


def _post(server: MessagesServer, body: dict) -> http.client.HTTPResponse:
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", "/v1/messages", json.dumps(body), {"content-type": "application/json"})
    return conn.getresponse()


def _sse(raw: bytes) -> list[tuple[str, dict]]:
    events = []
    for chunk in raw.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_stream_event_order_and_deltas():
    blocks = thinking("abcdef", chunks=3), text("hello", chunks=2), tool_use("bash", {"command": "ls"}, chunks=4)
    script = [reply(*blocks)]
    with MessagesServer(script) as server:
        resp = _post(server, {"model": "m", "stream": True, "messages": []})
        assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream"
        events = _sse(resp.read())
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert [d["type"] for d in deltas] == ["thinking_delta"] * 3 + ["signature_delta"] + ["text_delta"] * 2 + [
        "input_json_delta"
    ] * 4
    assert "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta") == '{"command": "ls"}'
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert server.requests[0].body["model"] == "m"


def test_http_error_carries_status_headers_and_error_body():
    with MessagesServer([http_error(429, retry_after=2), http_error(529, retry_after_ms=10)]) as server:
        first = _post(server, {"stream": True})
        assert first.status == 429 and first.getheader("retry-after") == "2"
        assert json.loads(first.read())["error"]["type"] == "rate_limit_error"
        second = _post(server, {"stream": True})
        assert second.status == 529 and second.getheader("retry-after-ms") == "10"
        assert json.loads(second.read())["error"]["type"] == "overloaded_error"


def test_cut_is_an_incomplete_chunked_body():
    with MessagesServer([reply(text("x" * 30, chunks=10), cut_after=4)]) as server:
        resp = _post(server, {"stream": True})
        with pytest.raises(http.client.IncompleteRead):
            resp.read()


def test_dropped_connection_gets_no_response():
    with MessagesServer([dropped()]) as server:
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            _post(server, {"stream": True})


def test_error_event_ends_the_stream():
    with MessagesServer([reply(text("abc"), error_after=3, error_type="api_error")]) as server:
        events = _sse(_post(server, {"stream": True}).read())
    assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "scripted api_error"}})
    assert "message_stop" not in [n for n, _ in events]


def test_callable_script_sees_body_and_index_and_usage_is_recorded():
    seen = []

    def script(body, index):
        seen.append((index, body["messages"][-1]["content"]))
        return reply(text(f"answer {index}"), usage=ServerUsage(input=10 + index, output=3))

    with MessagesServer(script) as server:
        for i in range(2):
            _post(server, {"stream": True, "messages": [{"role": "user", "content": f"q{i}"}]}).read()
    assert seen == [(0, "q0"), (1, "q1")]
    assert [u.input for u in server.sent_usage] == [10, 11]


def test_exhausted_script_answers_500_and_non_streaming_returns_a_message():
    with MessagesServer([reply(text("whole"), tool_use_raw("t", ['{"a"', ": 1}"], final_input={"a": 1}))]) as server:
        message = json.loads(_post(server, {"model": "m"}).read())
        assert [b["type"] for b in message["content"]] == ["text", "tool_use"]
        assert message["content"][1]["input"] == {"a": 1} and message["stop_reason"] == "tool_use"
        late = _post(server, {"stream": True})
        assert late.status == 500 and "no item for request 1" in late.read().decode()
