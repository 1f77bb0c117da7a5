"""The stdio transport of ``thatch mcp``: newline-delimited JSON-RPC, every request answered.

thatch reads and writes the wire itself instead of using the SDK's ``stdio_server``,
which parses each line on its own and hands failures over without the line, answers
nothing it cannot parse with an id, knows no batches, and at stdin EOF cancels requests
already read (a ``memory_remember`` could commit without its answer). Here:

- each line goes through ``jsonrpc_lines.read_line``: refusals carry the caller's id
  whenever the line has one; lone surrogate escapes are replaced and the message served;
- batches (JSON arrays) are served on sessions that negotiated a protocol version that
  has them (2024-11-05 and 2025-03-26; 2025-06-18 removed them) and answered with one
  array of the requests' responses; elsewhere they are refused with one error;
- at EOF the reader waits until every request it read has been answered (or cancelled
  by the client), then ends the stream; the server then exits with status 0;
- a ``tools/call`` whose ``arguments`` are no JSON object, which the SDK refuses as a
  protocol error before any handler runs, has them moved under ``_meta`` (the protocol's
  open map, ``ARGUMENTS_META_KEY``): the tool layer answers it with the spec's tool error.

While serving, fds 0 and 1 point at the null device and stderr, as the SDK's transport
does, so that a handler or child process writing to stdout cannot corrupt the wire.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, BinaryIO

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCMessage, RequestId

from thatch.frontend.mcp.jsonrpc_lines import Batch, Refused, read_line, top_level_id

__all__ = [
    "ARGUMENTS_META_KEY",
    "Eras",
    "Wire",
    "read_raw_line",
    "serve_stdio",
    "serve_streams",
    "with_arguments_set_aside",
]

# Versions whose JSON-RPC layer includes batches (2025-06-18 removed them).
BATCH_VERSIONS = frozenset({"2024-11-05", "2025-03-26"})
# A request line is a few kilobytes (tool arguments are capped at 50,000 characters);
# longer lines are refused after reading this much, so memory stays bounded.
MAX_LINE_BYTES = 32 * 1024 * 1024
# After stdin EOF, how long requests already read may take to answer before the server
# exits anyway (a safety net: every request path answers or is cancelled by the client).
DRAIN_SECONDS = 120.0

# Where a tools/call's non-object arguments travel to the handler (server.raw_arguments).
ARGUMENTS_META_KEY = "dev.thatch/arguments"

IdKey = tuple[type, RequestId]


def id_key(request_id: RequestId) -> IdKey:
    return (type(request_id), request_id)


@dataclass
class _BatchReply:
    owed: Counter[IdKey]
    parts: list[str] = field(default_factory=list)


class Wire:
    """The protocol side of stdout, and the ledger of requests still owed an answer.

    It is the SDK dispatcher's write stream: each response passes through ``send``,
    which settles its request, keeps it for its batch's array, and notes the protocol
    version the ``initialize`` response negotiated. ``on_written`` is called after each
    line is out (the server's after-the-answer work starts there).
    """

    def __init__(
        self,
        out: BinaryIO,
        on_written: Callable[[], None] | None = None,
        quiet: Iterable[RequestId] = (),
    ) -> None:
        self._out = out
        self._on_written = on_written
        # Requests the quick start already answered (cli/mcp_start.py), read again so the
        # SDK's session knows them: their answers are not written a second time.
        self._quiet: Counter[IdKey] = Counter(id_key(request_id) for request_id in quiet)
        self._lock = anyio.Lock()
        self._owed: Counter[IdKey] = Counter()
        self._drained = anyio.Event()
        self._drained.set()
        self._handshakes: Counter[IdKey] = Counter()
        self._handshake_done = anyio.Event()
        self._handshake_done.set()
        self._batches: dict[IdKey, _BatchReply] = {}
        self._broken = False
        self.protocol_version: str | None = None

    # -- requests read --------------------------------------------------------------

    async def expect(self, message: JSONRPCMessage) -> None:
        """Note a message about to be dispatched (before it is, so no answer is missed)."""
        if not isinstance(message, mcp_types.JSONRPCRequest):
            if isinstance(message, mcp_types.JSONRPCNotification):
                await self._cancelled(message)
            return
        key = id_key(message.id)
        if not +self._owed:
            self._drained = anyio.Event()
        self._owed[key] += 1
        if message.method == "initialize":
            if not +self._handshakes:
                self._handshake_done = anyio.Event()
            self._handshakes[key] += 1

    async def _cancelled(self, notification: mcp_types.JSONRPCNotification) -> None:
        # The SDK never answers a request the client cancelled (spec: MUST NOT).
        if notification.method != "notifications/cancelled":
            return
        request_id = (notification.params or {}).get("requestId")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return
        key = id_key(request_id)
        if self._owed[key]:
            batch = self._batches.get(key)
            if batch is not None and batch.owed[key]:
                batch.owed[key] -= 1
                await self._finish_if_complete(batch)
            self._handshake_answered(key, None)
            self._settle(key)

    def open_batch(self, items: list[JSONRPCMessage | Refused]) -> list[str] | None:
        """Start collecting a batch's answers; its refusals are answered in its array.

        Returns the array's parts when nothing in it is owed an answer (write it now;
        ``[]`` when it held notifications only, which JSON-RPC answers with nothing).
        """
        owed: Counter[IdKey] = Counter(
            id_key(item.id) for item in items if isinstance(item, mcp_types.JSONRPCRequest)
        )
        refusals = [_dump(item.reply()) for item in items if isinstance(item, Refused)]
        if not owed:
            return refusals
        batch = _BatchReply(owed, refusals)
        for key in owed:
            self._batches[key] = batch
        return None

    # -- answers written -------------------------------------------------------------

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if not isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            await self.write_line(_dump(message))
            return
        key = id_key(message.id) if message.id is not None else None
        if key is not None:
            self._handshake_answered(key, message)
        batch = self._batches.get(key) if key is not None else None
        if key is not None and self._quiet[key]:
            self._quiet[key] -= 1
        elif batch is not None and batch.owed[key]:  # type: ignore[index]
            batch.owed[key] -= 1  # type: ignore[index]
            batch.parts.append(_dump(message))
            await self._finish_if_complete(batch)
        else:
            await self.write_line(_dump(message))
        if key is not None:
            self._settle(key)

    def _handshake_answered(
        self, key: IdKey, answer: mcp_types.JSONRPCResponse | mcp_types.JSONRPCError | None
    ) -> None:
        if not self._handshakes[key]:
            return
        self._handshakes[key] -= 1
        if isinstance(answer, mcp_types.JSONRPCResponse):
            version = answer.result.get("protocolVersion")
            self.protocol_version = version if isinstance(version, str) else None
        if not +self._handshakes:
            self._handshakes.clear()
            self._handshake_done.set()

    async def _finish_if_complete(self, batch: _BatchReply) -> None:
        if +batch.owed:
            return
        for key in batch.owed:
            self._batches.pop(key, None)
        if batch.parts:  # all cancelled: JSON-RPC answers nothing rather than []
            await self.write_line("[" + ",".join(batch.parts) + "]")

    def _settle(self, key: IdKey) -> None:
        if self._owed[key]:
            self._owed[key] -= 1
        if not +self._owed:
            self._owed.clear()
            self._drained.set()

    async def refuse(self, refused: Refused) -> None:
        await self.write_line(_dump(refused.reply()))

    async def write_line(self, line: str) -> None:
        data = (line + "\n").encode("utf-8", "replace")
        async with self._lock:
            if not self._broken:
                self._broken = not await anyio.to_thread.run_sync(_write_all, self._out, data)
        if self._on_written is not None:
            self._on_written()

    # -- waiting ---------------------------------------------------------------------

    async def handshake_settled(self) -> None:
        """Wait until any ``initialize`` read so far has been answered."""
        await self._handshake_done.wait()

    async def drained(self) -> int:
        """Wait (bounded) until every request read has been answered; the number still owed."""
        with anyio.move_on_after(DRAIN_SECONDS):
            await self._drained.wait()
        return sum(self._owed.values())

    # -- the WriteStream protocol the dispatcher uses: thatch owns stdout, not it ---

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Wire:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


def _dump(message: JSONRPCMessage) -> str:
    return message.model_dump_json(by_alias=True, exclude_unset=True)


def _write_all(out: BinaryIO, data: bytes) -> bool:
    try:
        out.write(data)
        out.flush()
    except (OSError, ValueError):  # the client closed its end: nothing more to say
        return False
    return True


def read_raw_line(source: BinaryIO, limit: int = MAX_LINE_BYTES) -> tuple[bytes, bool] | None:
    """One line and whether it was cut: at most ``limit`` bytes are kept, the rest dropped."""
    line = source.readline(limit + 1)
    if not line:
        return None
    if len(line) <= limit or line.endswith(b"\n"):
        return line, False
    while (rest := source.readline(1 << 20)) and not rest.endswith(b"\n"):
        pass
    return line[:limit], True


def read_message(source: BinaryIO) -> JSONRPCMessage | Batch | Refused | None:
    """The next non-blank line parsed, ``None`` at EOF (run in a worker thread: reading
    and parsing a 10 MB line takes a while)."""
    while True:
        read = read_raw_line(source)
        if read is None:
            return None
        raw, cut = read
        text = raw.decode("utf-8", "replace")
        if cut:
            return Refused(
                mcp_types.PARSE_ERROR,
                f"Parse error: line longer than {MAX_LINE_BYTES} bytes",
                top_level_id(text),
            )
        line = read_line(text)
        if line is not None:
            return line


MODERN_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"


def opens_modern(message: mcp_types.JSONRPCRequest) -> bool:
    """Whether a connection's first request opens the 2026-07-28 era (the SDK's rule:
    the per-request envelope's version key, on anything but ``initialize``)."""
    meta = (message.params or {}).get("_meta")
    return message.method != "initialize" and isinstance(meta, dict) and MODERN_VERSION_KEY in meta


class Eras:
    """Where stdin's messages go: one SDK serving loop per protocol era the client opens.

    The SDK fixes a connection's era at its first request and refuses ``initialize`` on a
    2026-07-28 connection. Claude Code 2.1.332 opens with ``server/discover`` and, when the
    answer is slow, falls back to ``initialize`` on the same stdin: that ``initialize``
    opens a handshake-era loop, which serves everything after it. The first loop keeps
    serving what it already read. Nothing else changes era (an enveloped request on a
    handshake connection is still refused).
    """

    def __init__(
        self, start: Callable[[MemoryObjectReceiveStream[SessionMessage | Exception]], None]
    ) -> None:
        self._start = start
        self._inboxes: list[MemoryObjectSendStream[SessionMessage | Exception]] = []
        self._modern: bool | None = None  # undecided until the current loop's first request

    async def send(self, message: JSONRPCMessage) -> None:
        request = isinstance(message, mcp_types.JSONRPCRequest)
        fallback = request and self._modern and message.method == "initialize"  # type: ignore[union-attr]
        if not self._inboxes or fallback:
            self._open()
        if request and self._modern is None:
            self._modern = opens_modern(message)  # type: ignore[arg-type]
        await self._inboxes[-1].send(SessionMessage(message))

    def _open(self) -> None:
        inbox, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self._inboxes.append(inbox)
        self._modern = None
        self._start(messages)

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.close()


async def read_loop(source: BinaryIO, eras: Eras, wire: Wire) -> None:
    """Feed stdin to the server; at EOF wait for the answers owed, then end the streams."""
    try:
        while True:
            line = await anyio.to_thread.run_sync(read_message, source, abandon_on_cancel=True)
            if line is None:
                break
            if isinstance(line, Refused):
                await wire.refuse(line)
            elif isinstance(line, Batch):
                await dispatch_batch(line, eras, wire)
            else:
                await dispatch(line, eras, wire)
        owed = await wire.drained()
        if owed:
            print(
                f"[thatch] stdin closed; {owed} request(s) still unanswered after "
                f"{DRAIN_SECONDS:.0f} s, exiting",
                file=sys.stderr,
            )
    finally:
        eras.close()


async def dispatch_batch(batch: Batch, eras: Eras, wire: Wire) -> None:
    await wire.handshake_settled()  # the version an initialize in flight negotiates decides
    version = wire.protocol_version
    if version not in BATCH_VERSIONS:
        session = f"protocol {version}" if version else "a session before initialize"
        await wire.refuse(
            Refused(
                mcp_types.INVALID_REQUEST,
                f"Invalid Request: JSON-RPC batches are not part of {session} "
                "(only 2024-11-05 and 2025-03-26 have them); send one message per line",
            )
        )
        return
    messages = [item for item in batch.items if not isinstance(item, Refused)]
    parts = wire.open_batch(batch.items)
    if parts:
        await wire.write_line("[" + ",".join(parts) + "]")
    for message in messages:
        await dispatch(message, eras, wire)


async def dispatch(message: JSONRPCMessage, eras: Eras, wire: Wire) -> None:
    await wire.expect(message)
    await eras.send(with_arguments_set_aside(message))


def with_arguments_set_aside(message: JSONRPCMessage) -> JSONRPCMessage:
    """``message``, or the ``tools/call`` it is with non-object arguments moved to ``_meta``."""
    if not isinstance(message, mcp_types.JSONRPCRequest) or message.method != "tools/call":
        return message
    params: dict[str, Any] = dict(message.params or {})
    arguments = params.get("arguments")
    meta = params.get("_meta") or {}
    if arguments is None or isinstance(arguments, dict) or not isinstance(meta, dict):
        return message
    del params["arguments"]
    params["_meta"] = {**meta, ARGUMENTS_META_KEY: arguments}
    return message.model_copy(update={"params": params})


@contextlib.contextmanager
def wire_descriptors() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """Private duplicates of stdin/stdout for the protocol; fds 0 and 1 diverted meanwhile."""
    if not (_backed_by(sys.stdin, 0) and _backed_by(sys.stdout, 1)):
        yield sys.stdin.buffer, sys.stdout.buffer  # replaced streams (tests): serve in place
        return
    sys.stdout.flush()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        # Never closed: an abandoned reader thread may still block in readline on it.
        yield os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)


def _backed_by(stream: object, fd: int) -> bool:
    try:
        return stream.buffer.fileno() == fd  # type: ignore[attr-defined]  # any object; caught
    except (AttributeError, OSError, ValueError):
        return False


async def serve_stdio(
    server: Server[Any],
    on_written: Callable[[], None] | None = None,
    lead: bytes = b"",
    quiet: Iterable[RequestId] = (),
) -> None:
    """Serve ``server`` on stdin/stdout until stdin ends and every request is answered.

    ``on_written`` is called after every line written (see ``Wire``). ``lead``: bytes the
    quick start read from stdin and left to the server (read before stdin); ``quiet``: the
    ids of requests in it that were answered already."""
    with wire_descriptors() as (source, out):
        if lead:
            source = io.BufferedReader(_Prefixed(lead, source))
        await serve_streams(server, source, out, on_written, quiet)


async def serve_streams(
    server: Server[Any],
    source: BinaryIO,
    out: BinaryIO,
    on_written: Callable[[], None] | None = None,
    quiet: Iterable[RequestId] = (),
) -> None:
    """Serve ``server`` reading ``source`` and writing ``out`` until ``source`` ends."""
    options = server.create_initialization_options()
    # thatch serves tools only; the SDK would also advertise the (empty) prompt and
    # resource lists the server answers.
    options.capabilities = options.capabilities.model_copy(
        update={"prompts": None, "resources": None}
    )
    wire = Wire(out, on_written, quiet)
    async with anyio.create_task_group() as loops:

        def start(messages: MemoryObjectReceiveStream[SessionMessage | Exception]) -> None:
            loops.start_soon(server.run, messages, wire, options)

        # At EOF the reader closes every loop's stream; the group then waits for the
        # loops to answer what they hold. A loop that fails cancels the reader.
        await read_loop(source, Eras(start), wire)


class _Prefixed(io.RawIOBase):
    """``lead``, then whatever ``rest`` holds: stdin as if the quick start had not read."""

    def __init__(self, lead: bytes, rest: BinaryIO) -> None:
        self._lead = memoryview(lead)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._lead:
            n = min(len(buffer), len(self._lead))
            buffer[:n] = self._lead[:n]
            self._lead = self._lead[n:]
            return n
        data = self._rest.read1(len(buffer))  # type: ignore[attr-defined]  # a buffered reader
        buffer[: len(data)] = data
        return len(data)
