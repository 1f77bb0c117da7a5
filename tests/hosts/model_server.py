"""A scripted model server for driving real agent hosts in tests.

Speaks the Anthropic Messages API (``POST /v1/messages``, streaming SSE or JSON, and
``count_tokens``) for Claude Code and OpenAI chat completions (``POST .../chat/completions``,
streaming or JSON) for opencode, on 127.0.0.1 at a free port. Every request body is
recorded. Answers come from a script: a list of ``Turn``s, each used once, the first whose
``when`` accepts the request; anything unmatched (titles, quota checks, summaries a host
asks for on its own) gets a harmless default text answer.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_TEXT = "OK."


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What the model answers: text, then tool calls (a tool_use stop when there are any);
    or, with ``status``, an HTTP error of that status carrying ``text`` as its message."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 0


def say(text: str) -> Reply:
    return Reply(text=text)


def call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=(ToolCall(name, arguments),))


def fail(status: int = 400, message: str = "scripted failure") -> Reply:
    """An API error answer (400 is one the hosts do not retry)."""
    return Reply(text=message, status=status)


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ToolCall(name, args) for name, args in pairs))


@dataclass(frozen=True)
class ModelRequest:
    """One recorded request, with readers that work for both APIs."""

    api: str  # "anthropic" or "openai"
    path: str
    body: dict[str, Any]

    def tool_names(self) -> list[str]:
        names: list[str] = []
        for tool in self.body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if self.api == "openai":
                function = tool.get("function") or {}
                names.append(str(function.get("name", "")))
            else:
                names.append(str(tool.get("name", "")))
        return names

    def system_text(self) -> str:
        if self.api == "anthropic":
            return _text_of(self.body.get("system", ""))
        return "\n".join(
            _text_of(m.get("content", ""))
            for m in self.messages()
            if m.get("role") in ("system", "developer")
        )

    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages") or []
        return [m for m in messages if isinstance(m, dict)]

    def all_text(self) -> str:
        """System prompt and every message's text (tool inputs and results included)."""
        parts = [self.system_text()] if self.api == "anthropic" else []
        parts += [_text_of(m.get("content", "")) for m in self.messages()]
        for m in self.messages():
            for tool_call in m.get("tool_calls") or []:
                parts.append(json.dumps(tool_call))
        return "\n".join(parts)

    def last_message(self) -> dict[str, Any]:
        messages = self.messages()
        return messages[-1] if messages else {}

    def user_texts(self) -> list[str]:
        """The text of every user message (system reminders a host adds included)."""
        return [_text_of(m.get("content", "")) for m in self.messages() if m.get("role") == "user"]

    def last_user_text(self) -> str:
        texts = self.user_texts()
        return texts[-1] if texts else ""

    def tool_results(self) -> list[tuple[str, str]]:
        """(tool name, result text) for each tool result in the request, in order."""
        names: dict[str, str] = {}
        results: list[tuple[str, str]] = []
        for m in self.messages():
            content = m.get("content")
            if self.api == "openai":
                for tool_call in m.get("tool_calls") or []:
                    function = tool_call.get("function") or {}
                    names[str(tool_call.get("id"))] = str(function.get("name", ""))
                if m.get("role") == "tool":
                    call_id = str(m.get("tool_call_id"))
                    results.append((names.get(call_id, ""), _text_of(content)))
                continue
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use":
                    names[str(block.get("id"))] = str(block.get("name", ""))
                elif block.get("type") == "tool_result":
                    call_id = str(block.get("tool_use_id"))
                    results.append((names.get(call_id, ""), _text_of(block.get("content", ""))))
        return results

    def last_tool_results(self) -> list[tuple[str, str]]:
        """Tool results that arrived since the model's last answer (the turn being asked)."""
        messages = self.messages()
        tail: list[dict[str, Any]] = []
        for m in reversed(messages):
            if m.get("role") == "assistant":
                break
            tail.append(m)
        if not tail:
            return []
        ids: set[str] = set()
        for m in tail:
            if m.get("role") == "tool":
                ids.add(str(m.get("tool_call_id")))
            content = m.get("content")
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        ids.add(str(block.get("tool_use_id")))
        every = self._results_by_id()
        return [every[i] for i in every if i in ids]

    def _results_by_id(self) -> dict[str, tuple[str, str]]:
        names: dict[str, str] = {}
        out: dict[str, tuple[str, str]] = {}
        for m in self.messages():
            content = m.get("content")
            for tool_call in m.get("tool_calls") or []:
                names[str(tool_call.get("id"))] = str((tool_call.get("function") or {}).get("name"))
            if m.get("role") == "tool":
                call_id = str(m.get("tool_call_id"))
                out[call_id] = (names.get(call_id, ""), _text_of(content))
            if isinstance(content, list):
                for block in content:
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "tool_use":
                        names[str(block.get("id"))] = str(block.get("name", ""))
                    elif block.get("type") == "tool_result":
                        call_id = str(block.get("tool_use_id"))
                        text = _text_of(block.get("content", ""))
                        out[call_id] = (names.get(call_id, ""), text)
        return out


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif "content" in block:
                    texts.append(_text_of(block["content"]))
        return "\n".join(texts)
    return ""


Matcher = Callable[[ModelRequest], bool]


def fresh(request: ModelRequest) -> bool:
    """The first request of a turn: no tool result since the model last spoke."""
    return not request.last_tool_results()


def after(tool: str) -> Matcher:
    """A request carrying the result of a ``tool`` call the model just made."""
    return lambda request: any(name == tool for name, _ in request.last_tool_results())


def both(*matchers: Matcher) -> Matcher:
    return lambda request: all(m(request) for m in matchers)


@dataclass
class Turn:
    """Answer ``reply`` to the first request ``when`` accepts (once, unless ``repeat``).

    ``after_turn`` holds the answer back until the turn of that name has been answered
    (its reply sent): how a script makes one agent finish after another. ``reply`` may be
    a function of the request, for answers that quote what the host sent (a chat name).
    """

    when: Matcher
    reply: Reply | Callable[[ModelRequest], Reply]
    name: str = ""
    repeat: bool = False
    after_turn: str = ""
    used: int = 0

    def reply_for(self, request: ModelRequest) -> Reply:
        return self.reply(request) if callable(self.reply) else self.reply


@dataclass
class Script:
    turns: list[Turn] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: ModelRequest) -> Turn:
        with self.lock:
            for turn in self.turns:
                if turn.used and not turn.repeat:
                    continue
                try:
                    matched = turn.when(request)
                except (KeyError, TypeError, ValueError, AttributeError, IndexError):
                    matched = False
                if matched:
                    turn.used += 1
                    return turn
        return Turn(when=lambda _: True, reply=Reply(text=DEFAULT_TEXT))

    def unused(self) -> list[str]:
        with self.lock:
            return [t.name or repr(t.reply) for t in self.turns if not t.used]


@dataclass(frozen=True)
class Exchange:
    request: ModelRequest
    reply: Reply
    turn: str  # the matched turn's name, "" for the default answer


class ModelServer:
    """The HTTP server; ``script`` can be replaced between host runs."""

    def __init__(self) -> None:
        self.script = Script()
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)  # notified as each reply is sent
        self._sent: list[str] = []
        self._ids = itertools.count(1)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the exchanges are the record

            def do_GET(self) -> None:
                owner._json(self, 404, {"error": {"type": "not_found", "message": self.path}})

            def do_POST(self) -> None:
                owner._post(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def run(self, turns: Sequence[Turn]) -> None:
        """Start a new script (and a new record) for the next host run."""
        with self._lock:
            self.script = Script(list(turns))
            self.exchanges = []
            self._sent = []

    def requests(self) -> list[ModelRequest]:
        with self._lock:
            return [e.request for e in self.exchanges]

    def matched(self) -> list[str]:
        with self._lock:
            return [e.turn for e in self.exchanges if e.turn]

    def describe(self) -> str:
        """One line per exchange (for assertion messages): turn, tools offered, last text."""
        with self._lock:
            exchanges = list(self.exchanges)
        lines = []
        for e in exchanges:
            tools = e.request.tool_names()
            shown = ",".join(tools[:6]) + (f",+{len(tools) - 6}" if len(tools) > 6 else "")
            last = e.request.last_message()
            text = _text_of(last.get("content", ""))[-160:].replace("\n", " ")
            results = [name for name, _ in e.request.last_tool_results()]
            lines.append(f"{e.turn or '-'} tools=[{shown}] results={results} last={text!r}")
        return "\n".join(lines)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):020d}"

    # --- HTTP -----------------------------------------------------------------------

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._json(handler, 400, {"error": {"type": "invalid_request", "message": "json"}})
            return
        path = handler.path.split("?", 1)[0]
        if path.endswith("/count_tokens"):
            self._json(handler, 200, {"input_tokens": 100})
            return
        if path.endswith("/v1/messages"):
            api = "anthropic"
        elif path.endswith("/chat/completions"):
            api = "openai"
        else:
            self._json(handler, 404, {"error": {"type": "not_found", "message": path}})
            return
        request = ModelRequest(api, path, body if isinstance(body, dict) else {})
        turn = self.script.answer(request)
        reply = turn.reply_for(request)
        with self._lock:
            self.exchanges.append(Exchange(request, reply, turn.name))
        if turn.after_turn:
            with self._answered:
                waited = self._answered.wait_for(lambda: turn.after_turn in self._sent, 60)
            if not waited:
                self._json(handler, 500, {"error": {"type": "api_error", "message": "held"}})
                return
        try:
            if reply.status:
                kind = "invalid_request_error" if reply.status < 500 else "api_error"
                error = {"type": kind, "message": reply.text}
                self._json(handler, reply.status, {"type": "error", "error": error})
            elif api == "anthropic":
                self._anthropic(handler, request, reply)
            else:
                self._openai(handler, request, reply)
        finally:
            with self._answered:
                self._sent.append(turn.name)
                self._answered.notify_all()

    def _json(self, handler: BaseHTTPRequestHandler, status: int, doc: object) -> None:
        data = json.dumps(doc).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _stream(self, handler: BaseHTTPRequestHandler, events: Iterator[bytes]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        for event in events:
            handler.wfile.write(event)
            handler.wfile.flush()

    def _anthropic(
        self, handler: BaseHTTPRequestHandler, request: ModelRequest, reply: Reply
    ) -> None:
        model = str(request.body.get("model", "claude-test"))
        blocks: list[dict[str, Any]] = []
        if reply.text or not reply.tool_calls:
            blocks.append({"type": "text", "text": reply.text or DEFAULT_TEXT})
        for tool_call in reply.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": self.next_id("toolu_"),
                    "name": tool_call.name,
                    "input": tool_call.input,
                }
            )
        stop = "tool_use" if reply.tool_calls else "end_turn"
        message_id = self.next_id("msg_")
        usage = {"input_tokens": 100, "output_tokens": 10}
        if not request.body.get("stream"):
            self._json(
                handler,
                200,
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return

        def events() -> Iterator[bytes]:
            start: dict[str, Any] = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 1},
            }
            yield _sse("message_start", {"type": "message_start", "message": start})
            for index, block in enumerate(blocks):
                first: dict[str, Any]
                if block["type"] == "text":
                    first = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": block["text"]}
                else:
                    first = {**block, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                yield _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": first},
                )
                yield _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
                yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            yield _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 10},
                },
            )
            yield _sse("message_stop", {"type": "message_stop"})

        self._stream(handler, events())

    def _openai(self, handler: BaseHTTPRequestHandler, request: ModelRequest, reply: Reply) -> None:
        model = str(request.body.get("model", "test-model"))
        completion_id = self.next_id("chatcmpl-")
        tool_calls = [
            {
                "id": self.next_id("call_"),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.input)},
            }
            for c in reply.tool_calls
        ]
        text = reply.text if (reply.text or tool_calls) else DEFAULT_TEXT
        finish = "tool_calls" if tool_calls else "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if not request.body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            self._json(
                handler,
                200,
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return

        def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
            doc = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            return b"data: " + json.dumps(doc).encode() + b"\n\n"

        def events() -> Iterator[bytes]:
            yield chunk({"role": "assistant", "content": ""}, None)
            if text:
                yield chunk({"content": text}, None)
            for index, tool_call in enumerate(tool_calls):
                yield chunk({"tool_calls": [{"index": index, **tool_call}]}, None)
            yield chunk({}, finish)
            usage_doc = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            yield b"data: " + json.dumps(usage_doc).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        self._stream(handler, events())


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
