"""The Embedder gRPC service: validation, tokenization, admission and Info.

Handler threads validate, tokenize and queue their texts, then wait; the batcher runs the
model one batch at a time, one-text queries first, larger calls first in, first out (a
lone call's batch on its own handler thread, see ``batching``). Error messages are those
of docs/embedder.md §errors.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import Encoder, ModelSettings
from thatch.embedder.server.batching import Batcher
from thatch.embedder.server.embed_calls import (
    DEADLINE_MESSAGE,
    EmbedCall,
    Limits,
    Overloaded,
    TooLate,
)
from thatch.embedder.v1 import embedder_pb2 as pb
from thatch.embedder.v1 import embedder_pb2_grpc as pb_grpc

__all__ = ["SERVICE_NAME", "EmbedderServicer", "ServerState", "UndecodableRequest", "add_to_server"]

SERVICE_NAME = "thatch.embedder.v1.Embedder"
STARTING = "embedder is starting"
SHUTTING_DOWN = "embedder is shutting down"
KINDS: dict[int, Kind] = {pb.QUERY: Kind.QUERY, pb.PASSAGE: Kind.PASSAGE}
# A deadline further away than this is grpc's "none" (it reports a huge remaining time).
NO_DEADLINE_S = 1e8


def server_version() -> str:
    try:
        return version("thatch")
    except PackageNotFoundError:
        return "0.0.0"


class ServerState:
    """What Info reports and what admission needs; shared by every handler thread."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        limits: Limits | None = None,
        idle_release_seconds: float = 0,
        exit_after_seconds: float = 0,
        auto_started: bool = False,
    ) -> None:
        self.clock = clock
        self.limits = limits or Limits()
        self.idle_release_seconds = idle_release_seconds
        self.exit_after_seconds = exit_after_seconds
        self.auto_started = auto_started
        self.started = clock()
        self.last_call = self.started
        self.requests_served = 0
        self.settings: ModelSettings | None = None
        self.encoder: Encoder | None = None
        self.batcher: Batcher | None = None
        self._phase = "starting"
        self._inflight = 0
        self._cond = threading.Condition()

    @property
    def serving(self) -> bool:
        return self._phase == "serving"

    def ready(self, settings: ModelSettings, encoder: Encoder, batcher: Batcher) -> None:
        with self._cond:
            self.settings, self.encoder, self.batcher = settings, encoder, batcher
            self.last_call = self.clock()
            self._phase = "serving"

    def touch(self) -> None:
        """An Embed or Info call: postpones exit-when-idle (health checks do not)."""
        self.last_call = self.clock()

    def admit(self) -> str | None:
        """Count an Embed call in, or return why it is refused."""
        with self._cond:
            if self._phase == "starting":
                return STARTING
            if self._phase == "stopping":
                return SHUTTING_DOWN
            self._inflight += 1
            return None

    def leave(self, served: bool) -> None:
        with self._cond:
            self._inflight -= 1
            self.requests_served += served
            self._cond.notify_all()

    def begin_shutdown(self) -> None:
        with self._cond:
            self._phase = "stopping"

    def wait_inflight_done(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._inflight == 0, timeout)


class UndecodableRequest:
    """An EmbedRequest protobuf refused: texts not all UTF-8 (``None`` marks the bad ones),
    or bytes that are no EmbedRequest at all (``malformed``)."""

    def __init__(self, texts: list[str | None], kind: int, *, malformed: bool = False) -> None:
        self.texts = texts
        self.kind = kind
        self.malformed = malformed


class MalformedInfoRequest:
    """Bytes protobuf refused as an InfoRequest: grpc answered them an anonymous INTERNAL
    ("Exception deserializing request!"); the servicer names them instead."""


def parse_info_request(data: bytes) -> pb.InfoRequest | MalformedInfoRequest:
    try:
        return pb.InfoRequest.FromString(data)
    except message.DecodeError:
        return MalformedInfoRequest()


def _raw_request_class() -> type[message.Message]:
    """EmbedRequest's wire twin with ``bytes`` texts, to find which text is not UTF-8."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="thatch_raw_embed_request.proto", package="thatch.embedder.raw", syntax="proto3"
    )
    raw = proto.message_type.add(name="RawEmbedRequest")
    raw.field.add(
        name="texts",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    raw.field.add(
        name="kind",
        number=2,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("thatch.embedder.raw.RawEmbedRequest")
    )


def validate(texts: Sequence[str | None], kind: int, limits: Limits) -> str | None:
    """The INVALID_ARGUMENT message for a request, or None when it is valid."""
    if not texts:
        return "texts must not be empty"
    if len(texts) > limits.max_texts_per_request:
        return f"too many texts: {len(texts)} (max {limits.max_texts_per_request})"
    if kind not in KINDS:
        return "kind must be QUERY or PASSAGE"
    for i, text in enumerate(texts):
        if text is None:
            return f"texts[{i}] is not valid UTF-8"
        if not text:
            return f"texts[{i}] is empty"
        if len(text) > limits.max_chars_per_text:
            return (
                f"texts[{i}] is too long: {len(text)} characters (max {limits.max_chars_per_text})"
            )
    return None


class EmbedderServicer(pb_grpc.EmbedderServicer):
    def __init__(self, state: ServerState, *, logger: logging.Logger | None = None) -> None:
        self.state = state
        self._log = logger or logging.getLogger("thatch.embedder")
        raw = _raw_request_class()
        self._raw_request = raw.FromString

    def parse_request(self, data: bytes) -> pb.EmbedRequest | UndecodableRequest:
        """Deserialize Embed requests without losing invalid UTF-8 to a generic error.

        protobuf refuses to parse a proto3 string that is not UTF-8, which grpc would turn
        into an anonymous INTERNAL error; reparsing as bytes lets us name the text.
        """
        try:
            return pb.EmbedRequest.FromString(data)
        except message.DecodeError:
            try:
                raw = self._raw_request(data)
            except message.DecodeError:
                return UndecodableRequest([], 0, malformed=True)
            texts: list[str | None] = []
            for item in raw.texts:  # type: ignore[attr-defined]
                try:
                    texts.append(item.decode("utf-8"))
                except UnicodeDecodeError:
                    texts.append(None)
            return UndecodableRequest(texts, raw.kind)  # type: ignore[attr-defined]

    def Embed(
        self, request: pb.EmbedRequest | UndecodableRequest, context: grpc.ServicerContext
    ) -> pb.EmbedResponse:
        received = time.perf_counter()
        self.state.touch()
        refusal = self.state.admit()
        if refusal is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, refusal)
        served = False
        try:
            response = self._embed(request, context, received)
            served = True
            return response
        finally:
            self.state.leave(served)

    def _embed(
        self,
        request: pb.EmbedRequest | UndecodableRequest,
        context: grpc.ServicerContext,
        received: float,
    ) -> pb.EmbedResponse:
        state = self.state
        if isinstance(request, UndecodableRequest) and request.malformed:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request is not a valid EmbedRequest")
        texts = list(request.texts)
        problem = validate(texts, request.kind, state.limits)
        if problem is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        assert state.encoder is not None and state.batcher is not None
        encoder, batcher = state.encoder, state.batcher
        kind = KINDS[request.kind]
        try:
            call, tokenized, tokenize_s = self._arrive(texts, kind, context, encoder, batcher)
        except Overloaded as error:  # refused on arrival, before any tokenizing
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        debug = self._log.isEnabledFor(logging.DEBUG)  # the hot path skips building the args
        if debug:
            self._log.debug("Embed call: %d %s texts queued", len(tokenized), kind.value)
        self._wait(call, batcher)
        if call.error is not None:
            context.abort(*call.error)
        start = call.first_batch_start if call.first_batch_start is not None else call.arrived
        response = pb.EmbedResponse(
            vectors=call.vectors.tobytes(),  # little-endian float32 (EmbedCall's dtype)
            dim=encoder.settings.dim,
            count=len(tokenized),
            model_id=encoder.settings.model_id,
            token_counts=[t.n_tokens for t in tokenized],
            truncated=[t.truncated for t in tokenized],
        )
        timing = response.timing
        timing.queue_us = _us(start - call.arrived)
        timing.tokenize_us = _us(tokenize_s)
        timing.inference_us = _us(call.inference_s)
        timing.total_us = _us(time.perf_counter() - received)
        if debug:
            self._log.debug(
                "Embed %d %s texts, %d tokens: queue %d us, inference %d us, total %d us",
                len(tokenized),
                kind.value,
                sum(response.token_counts),
                timing.queue_us,
                timing.inference_us,
                timing.total_us,
            )
        return response

    def _arrive(
        self,
        texts: Sequence[str | None],
        kind: Kind,
        context: grpc.ServicerContext,
        encoder: Encoder,
        batcher: Batcher,
    ) -> tuple[EmbedCall, list[Any], float]:
        """Tokenize ``texts`` and queue them as one call (``Overloaded``: refused first)."""
        state = self.state
        with batcher.arriving(len(texts)) as arrival:
            began = time.perf_counter()
            tokenized = []
            for text in texts:
                # A caller gone (cancelled, past its deadline) stops the tokenizing: 256
                # texts of 60,000 characters are 16 s of CPU nobody would read.
                if not context.is_active():
                    context.abort(grpc.StatusCode.CANCELLED, "call cancelled")
                if text is not None:
                    tokenized.append(encoder.tokenize(text, kind))
            tokenize_s = time.perf_counter() - began
            remaining = context.time_remaining()
            now = state.clock()
            no_deadline = remaining is None or remaining >= NO_DEADLINE_S
            deadline = None if no_deadline else now + remaining
            call = EmbedCall(tokenized, encoder.settings.dim, deadline, arrived=now)
            context.add_callback(
                lambda: batcher.cancel(call, grpc.StatusCode.CANCELLED, "call cancelled")
            )
            try:
                batcher.submit(call, arrival)
            except TooLate as error:
                context.abort(error.code, str(error))
            except Overloaded as error:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        return call, tokenized, tokenize_s

    def _wait(self, call: EmbedCall, batcher: Batcher) -> None:
        """Wait for the call's vectors; fail it at its deadline or if inference stopped."""
        while True:
            timeout = 0.5
            if call.deadline is not None:
                timeout = min(timeout, max(call.deadline - self.state.clock(), 0))
            if call.done.wait(timeout):
                return
            if call.deadline is not None and self.state.clock() >= call.deadline:
                message = DEADLINE_MESSAGE if not call.started else "deadline exceeded"
                batcher.cancel(call, grpc.StatusCode.DEADLINE_EXCEEDED, message)
                return
            if not batcher.alive:
                batcher.cancel(call, grpc.StatusCode.INTERNAL, "the inference thread stopped")
                return

    def Info(
        self, request: pb.InfoRequest | MalformedInfoRequest, context: grpc.ServicerContext
    ) -> pb.InfoResponse:
        if isinstance(request, MalformedInfoRequest):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request is not a valid InfoRequest")
        state = self.state
        state.touch()
        settings = state.settings
        limits = state.limits
        response = pb.InfoResponse(
            normalize=True,
            loaded=state.encoder is not None and state.encoder.loaded,
            server_version=server_version(),
            limits=pb.Limits(
                max_texts_per_request=limits.max_texts_per_request,
                max_chars_per_text=limits.max_chars_per_text,
                max_batch_tokens=limits.max_batch_tokens,
                max_batch_size=limits.max_batch_size,
                max_queued_texts=limits.max_queued_texts,
                max_wait_ms=limits.max_wait_ms,
            ),
            idle_release_seconds=int(state.idle_release_seconds),
            exit_after_seconds=int(state.exit_after_seconds),
            auto_started=state.auto_started,
            pid=os.getpid(),
            uptime_s=int(state.clock() - state.started),
            requests_served=state.requests_served,
        )
        if settings is not None:
            response.model_id = settings.model_id
            response.model_revision = settings.revision
            response.model_sha256 = settings.sha256
            response.dim = settings.dim
            response.max_tokens = settings.max_tokens
            response.pooling = settings.pooling
            response.query_prefix = settings.query_prefix
            response.quantized = settings.quantized
        return response


def _us(seconds: float) -> int:
    return max(int(seconds * 1_000_000), 0)


def add_to_server(servicer: EmbedderServicer, server: grpc.Server) -> None:
    """Register the service like the generated helper, with the UTF-8-aware parser."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Embed": grpc.unary_unary_rpc_method_handler(
            servicer.Embed,
            request_deserializer=servicer.parse_request,
            response_serializer=pb.EmbedResponse.SerializeToString,
        ),
        "Info": grpc.unary_unary_rpc_method_handler(
            servicer.Info,
            request_deserializer=parse_info_request,
            response_serializer=pb.InfoResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
