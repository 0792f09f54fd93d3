"""A loopback Messages API server for tests: the real `anthropic` client talks HTTP to it.

It speaks the streaming protocol of `POST /v1/messages` (SSE: message_start, content_block_start /
content_block_delta with text_delta, thinking_delta + signature_delta and input_json_delta in several
chunks, content_block_stop, message_delta with stop_reason and usage, message_stop, ping, error) and
answers non-streaming requests with the whole Message as JSON. It is driven by a script.

Scripting
---------
A script is a list of items, or a callable. Each HTTP request to /v1/messages takes the next item; a
retry of the client is a new request and takes the item after. An item is a `Reply` (a streamed
message, possibly with a fault in the middle of it), an `HttpError` (a status code and headers, no
stream) or a `Drop` (the connection closed unanswered). A callable receives the request body (a
dict) and the request's index and returns an item, so a script can look at the tool results it was
sent::

    from messages_server import MessagesServer, reply, text, thinking, tool_use, http_error

    with MessagesServer([
        http_error(429, retry_after=0.01),                       # retried by the SDK
        reply(thinking("let me look"), tool_use("read_file", {"path": "k.cu"})),
        reply(text("done")),
    ]) as server:
        agent = Agent(AgentConfig(base_url=server.url, ...), ..., api_key="test")
        ...
        server.requests[1].body["messages"][-1]   # the tool_result the agent sent back

    def script(body: dict, index: int) -> Reply | HttpError:
        last = body["messages"][-1]["content"]
        ...
    MessagesServer(script)

`server.push(item, ...)` appends to a list script while it runs. When the list runs out the server
answers 500 with a one-line message saying so (the client would retry it: keep scripts complete).

Builders
--------
- `text(s, chunks=3)`, `thinking(s, signature="sig", chunks=3)`, `tool_use(name, input, id=None,
  chunks=3)`: content blocks, each streamed as that many deltas (input_json in `chunks` pieces).
- `tool_use_raw(name, json_chunks)`: a tool_use whose input_json deltas are given verbatim (use it for
  malformed tool input).
- `reply(*blocks, stop_reason=None, usage=None, model=None, delay_s=None, cut_after=None,
  error_after=None)`: one streamed message. stop_reason defaults to "tool_use" when a block is a
  tool_use, else "end_turn". usage is `ServerUsage(input, output, cache_read, cache_write)`; by default
  input is the request's length / 4 and output the reply's length / 4 (both at least 1).
- Faults: `http_error(status, retry_after=None, retry_after_ms=None, error_type=None)` (429 rate limit,
  529 overloaded, 500 …); `dropped()` closes the connection before any response; `reply(...,
  cut_after=N)` drops the connection after N SSE events, in the middle of the chunked body (the
  client sees an incomplete read); `reply(..., error_after=N, error_type="overloaded_error")` sends
  an `error` SSE event after N events and ends the stream. `overloaded()` and `rate_limited()` are
  shorthands (with a retry-after of 10 ms, so that the SDK's retries stay fast in tests).
- Event order, for counting N: message_start, ping, then for each block content_block_start, its
  deltas, content_block_stop; then message_delta and message_stop.

Observing
---------
- `server.requests`: every request received, in order: `RecordedRequest(path, headers, body)`.
- `server.sent_usage`: the usage reported for each reply, in order (what cost should be
  computed from).
- `delay_s` (server-wide, or per reply) sleeps between SSE events so streaming is observable.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union


@dataclass
class ServerUsage:
    input: int
    output: int
    cache_read: int = 0
    cache_write: int = 0


@dataclass
class Block:
    """One content block and the deltas it is streamed as."""

    start: dict[str, Any]
    deltas: list[dict[str, Any]]
    final: dict[str, Any]  # the block as a non-streaming Message carries it


@dataclass
class Reply:
    blocks: list[Block]
    stop_reason: str | None = None
    usage: ServerUsage | None = None
    model: str | None = None
    delay_s: float | None = None
    cut_after: int | None = None
    error_after: int | None = None
    error_type: str = "overloaded_error"


@dataclass
class HttpError:
    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Drop:
    """Close the connection without answering (a dropped connection before any response)."""


Item = Union[Reply, HttpError, Drop]
Script = Union[list[Item], Callable[[dict[str, Any], int], Item]]


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _split(s: str, chunks: int) -> list[str]:
    if not s:
        return [""]
    n = max(1, min(chunks, len(s)))
    size = -(-len(s) // n)
    return [s[i : i + size] for i in range(0, len(s), size)]


def text(s: str, chunks: int = 3) -> Block:
    return Block(
        start={"type": "text", "text": ""},
        deltas=[{"type": "text_delta", "text": part} for part in _split(s, chunks)],
        final={"type": "text", "text": s},
    )


def thinking(s: str, signature: str = "sig-test", chunks: int = 3) -> Block:
    deltas = [{"type": "thinking_delta", "thinking": part} for part in _split(s, chunks)]
    deltas.append({"type": "signature_delta", "signature": signature})
    return Block(
        start={"type": "thinking", "thinking": "", "signature": ""},
        deltas=deltas,
        final={"type": "thinking", "thinking": s, "signature": signature},
    )


def tool_use(name: str, input: dict[str, Any], id: str | None = None, chunks: int = 3) -> Block:
    return tool_use_raw(name, _split(json.dumps(input), chunks), id=id, final_input=input)


def tool_use_raw(
    name: str, json_chunks: list[str], id: str | None = None, final_input: dict[str, Any] | None = None
) -> Block:
    block_id = id or f"toolu_{uuid.uuid4().hex[:20]}"
    return Block(
        start={"type": "tool_use", "id": block_id, "name": name, "input": {}},
        deltas=[{"type": "input_json_delta", "partial_json": part} for part in json_chunks],
        final={"type": "tool_use", "id": block_id, "name": name, "input": final_input or {}},
    )


def reply(
    *blocks: Block,
    stop_reason: str | None = None,
    usage: ServerUsage | None = None,
    model: str | None = None,
    delay_s: float | None = None,
    cut_after: int | None = None,
    error_after: int | None = None,
    error_type: str = "overloaded_error",
) -> Reply:
    return Reply(list(blocks), stop_reason, usage, model, delay_s, cut_after, error_after, error_type)


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def http_error(
    status: int,
    *,
    retry_after: float | None = None,
    retry_after_ms: float | None = None,
    error_type: str | None = None,
    message: str | None = None,
) -> HttpError:
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    if retry_after_ms is not None:
        headers["retry-after-ms"] = f"{retry_after_ms:g}"
    kind = error_type or _ERROR_TYPES.get(status, "api_error")
    return HttpError(status, kind, message or f"scripted {status} {kind}", headers)


def dropped() -> Drop:
    return Drop()


def rate_limited(retry_after: float = 0.01) -> HttpError:
    return http_error(429, retry_after=retry_after)


def overloaded(retry_after_ms: float = 10) -> HttpError:
    return http_error(529, retry_after_ms=retry_after_ms)


class MessagesServer:
    """A scripted Messages API on 127.0.0.1 (random port), served from a background thread."""

    def __init__(self, script: Script, *, delay_s: float = 0.0, model: str = "claude-test-model") -> None:
        self._script = script
        self._index = 0
        self._lock = threading.Lock()
        self.delay_s = delay_s
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.sent_usage: list[ServerUsage] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="messages-server", daemon=True
        )  # a short poll interval, so that stop() returns at once

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> MessagesServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def push(self, *items: Item) -> None:
        if not isinstance(self._script, list):
            raise TypeError("push() needs a list script")
        with self._lock:
            self._script.extend(items)

    def _next(self, body: dict[str, Any], headers: dict[str, str], path: str) -> Item:
        with self._lock:
            index = self._index
            self._index += 1
            self.requests.append(RecordedRequest(path, headers, body))
            if callable(self._script):
                return self._script(body, index)
            if index < len(self._script):
                return self._script[index]
        return http_error(500, message=f"the test script has no item for request {index}")


def _handler_for(server: MessagesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each SSE event leaves when it is written, not coalesced
    owner: MessagesServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            return  # the client closed a kept-alive connection, or hung up on a stream

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, _error_body("invalid_request_error", "body is not JSON"))
            return
        if self.path.split("?")[0] != "/v1/messages":
            self._send_json(404, _error_body("not_found_error", f"no route {self.path}"))
            return
        item = self.owner._next(body, {k.lower(): v for k, v in self.headers.items()}, self.path)
        if isinstance(item, HttpError):
            self._send_json(item.status, _error_body(item.error_type, item.message), item.headers)
            return
        if isinstance(item, Drop):
            self._cut()
            return
        usage = item.usage or ServerUsage(
            input=max(1, len(raw) // 4),
            output=max(1, sum(len(json.dumps(b.final)) for b in item.blocks) // 4),
        )
        with self.owner._lock:
            self.owner.sent_usage.append(usage)
        if body.get("stream"):
            self._stream(item, usage, body)
        else:
            self._send_json(200, _message(item, usage, body, self.owner.model, [b.final for b in item.blocks]))

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, item: Reply, usage: ServerUsage, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        # Chunked, so that a cut connection is an incomplete body to the client, not a clean end.
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
        self.end_headers()
        delay = self.owner.delay_s if item.delay_s is None else item.delay_s
        sent = 0
        try:
            for name, payload in _events(item, usage, body, self.owner.model):
                if item.cut_after is not None and sent >= item.cut_after:
                    self._cut()
                    return
                if item.error_after is not None and sent >= item.error_after:
                    self._chunk(_sse("error", _error_body(item.error_type, f"scripted {item.error_type}")))
                    break
                self._chunk(_sse(name, payload))
                sent += 1
                if delay:
                    time.sleep(delay)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (an interrupt): nothing more to send

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _cut(self) -> None:
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)


def _sse(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


def _error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _stop_reason(item: Reply) -> str:
    if item.stop_reason:
        return item.stop_reason
    return "tool_use" if any(b.start["type"] == "tool_use" for b in item.blocks) else "end_turn"


def _usage_json(usage: ServerUsage, output: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.input,
        "output_tokens": output,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
    }


def _message(
    item: Reply, usage: ServerUsage, body: dict[str, Any], default_model: str, content: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": item.model or body.get("model") or default_model,
        "content": content,
        "stop_reason": _stop_reason(item),
        "stop_sequence": None,
        "usage": _usage_json(usage, usage.output),
    }


def _events(item: Reply, usage: ServerUsage, body: dict[str, Any], default_model: str):
    start = _message(item, usage, body, default_model, [])
    start["stop_reason"] = None
    start["usage"] = _usage_json(usage, 1)
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(item.blocks):
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block.start}
        for delta in block.deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(item), "stop_sequence": None},
        "usage": {"output_tokens": usage.output},
    }
    yield "message_stop", {"type": "message_stop"}
