"""Every error of docs/embedder.md §errors (status and exact message), states and Info.

These run the real grpc server (``create_server``) on a temporary unix socket around a
fake encoder, so overload, deadlines and cancellation can be made deterministic.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health

from tests.support.fake_encoder import FakeEncoder
from tests.support.polling import poll
from thatch.embedder.client.kind import Kind
from thatch.embedder.client.settings import parse_address
from thatch.embedder.server.batching import Batcher
from thatch.embedder.server.embed_calls import Limits
from thatch.embedder.server.grpc_server import MAX_MESSAGE_BYTES, create_server
from thatch.embedder.server.servicer import EmbedderServicer, ServerState
from thatch.embedder.v1 import embedder_pb2 as pb
from thatch.embedder.v1 import embedder_pb2_grpc as pb_grpc

EMBED = "/thatch.embedder.v1.Embedder/Embed"
INFO = "/thatch.embedder.v1.Embedder/Info"


@dataclass
class Running:
    stub: pb_grpc.EmbedderStub
    channel: grpc.Channel
    state: ServerState
    encoder: FakeEncoder
    batcher: Batcher


@contextmanager
def running_server(
    encoder: FakeEncoder, *, limits: Limits | None = None, ready: bool = True
) -> Iterator[Running]:
    directory = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    limits = limits or Limits()
    state = ServerState(limits=limits, idle_release_seconds=600, exit_after_seconds=0)
    batcher = Batcher(encoder, limits=limits)
    batcher.start()
    address = parse_address(f"unix://{directory}/s.sock")
    server, _ = create_server(EmbedderServicer(state), health.HealthServicer(), address)
    server.start()
    if ready:
        state.ready(encoder.settings, encoder, batcher)
    channel = grpc.insecure_channel(
        address.target, options=[("grpc.max_send_message_length", 2 * MAX_MESSAGE_BYTES)]
    )
    try:
        yield Running(pb_grpc.EmbedderStub(channel), channel, state, encoder, batcher)
    finally:
        if encoder.gate is not None:
            encoder.gate.set()
        channel.close()
        server.stop(None).wait()
        batcher.stop(10)
        address.path.unlink(missing_ok=True)  # type: ignore[union-attr]
        directory.rmdir()


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    with running_server(FakeEncoder()) as running:
        yield running


def embed_error(stub: pb_grpc.EmbedderStub, texts: list[str], kind: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        stub.Embed(pb.EmbedRequest(texts=texts, kind=kind), timeout=10)
    return raised.value


@pytest.mark.parametrize(
    ("texts", "kind", "message"),
    [
        ([], pb.PASSAGE, "texts must not be empty"),
        (["a"] * 257, pb.PASSAGE, "too many texts: 257 (max 256)"),
        (["fine", ""], pb.QUERY, "texts[1] is empty"),
        (
            ["ok", "ok", "x" * 100_001],
            pb.PASSAGE,
            "texts[2] is too long: 100001 characters (max 100000)",
        ),
        (["ok"], pb.KIND_UNSPECIFIED, "kind must be QUERY or PASSAGE"),
        (["ok"], 7, "kind must be QUERY or PASSAGE"),
    ],
    ids=["empty", "too-many", "empty-text", "too-long", "kind-unspecified", "kind-unknown"],
)
def test_invalid_requests_get_invalid_argument(
    server: Running, texts: list[str], kind: int, message: str
) -> None:
    """Each validation rule answers INVALID_ARGUMENT with the spec's exact message."""
    error = embed_error(server.stub, texts, kind)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == message


def raw_embed(channel: grpc.Channel, payload: bytes) -> grpc.RpcError:
    call: Any = channel.unary_unary(EMBED, response_deserializer=pb.EmbedResponse.FromString)
    with pytest.raises(grpc.RpcError) as raised:
        call(payload, timeout=10)
    return raised.value


def test_invalid_utf8_is_named_by_index(server: Running) -> None:
    """A text that is not UTF-8 (protobuf refuses to parse it) is reported by its index."""
    good = pb.EmbedRequest(texts=["fine"], kind=pb.PASSAGE).SerializeToString()
    bad_text = b"\x0a\x03a\xff\xfe"  # field 1, 3 bytes, not UTF-8
    error = raw_embed(server.channel, good + bad_text)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "texts[1] is not valid UTF-8"


def test_garbage_bytes_are_an_invalid_argument(server: Running) -> None:
    """Bytes that are no EmbedRequest at all get a clear INVALID_ARGUMENT, not INTERNAL."""
    error = raw_embed(server.channel, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "request is not a valid EmbedRequest"


def test_garbage_bytes_to_info_are_an_invalid_argument(server: Running) -> None:
    """A lone Info call with bytes that are no InfoRequest got INTERNAL "Exception
    deserializing request!"."""
    call: Any = server.channel.unary_unary(INFO, response_deserializer=pb.InfoResponse.FromString)
    with pytest.raises(grpc.RpcError) as raised:
        call(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "request is not a valid InfoRequest"
    assert server.stub.Info(pb.InfoRequest(), timeout=10).model_id == "test/fake"


def test_whitespace_and_control_characters_are_valid(server: Running) -> None:
    """Whitespace-only texts and control characters embed fine; limits are inclusive."""
    texts = ["   ", "\t\n", "bell\x07 nul\x00 esc\x1b", "x" * 100_000]
    response = server.stub.Embed(pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=10)
    assert response.count == 4
    full = server.stub.Embed(pb.EmbedRequest(texts=["t"] * 256, kind=pb.QUERY), timeout=10)
    assert full.count == 256


def test_response_carries_vectors_in_input_order_and_metadata(server: Running) -> None:
    """vectors are count×dim little-endian float32 in input order, with per-text details."""
    encoder = server.encoder
    texts = [
        "short",
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
    ]
    response = server.stub.Embed(pb.EmbedRequest(texts=texts, kind=pb.QUERY), timeout=10)
    assert (response.count, response.dim, response.model_id) == (2, 8, "test/fake")
    assert len(response.vectors) == 2 * 8 * 4
    vectors = np.frombuffer(response.vectors, dtype="<f4").reshape(2, 8)
    expected = np.stack([encoder.expected(text, Kind.QUERY) for text in texts])
    np.testing.assert_array_equal(vectors, expected)
    assert list(response.token_counts) == [4, 16]  # [CLS] query: short [SEP]; cut at 16
    assert list(response.truncated) == [False, True]
    timing = response.timing
    assert timing.total_us >= timing.queue_us + timing.inference_us
    assert timing.total_us >= timing.tokenize_us


def test_info_reports_every_field_when_serving(server: Running) -> None:
    """Info fills the model, limits and process fields."""
    info = server.stub.Info(pb.InfoRequest(), timeout=10)
    assert (info.model_id, info.model_revision, info.model_sha256) == (
        "test/fake",
        "rev1",
        "ab" * 32,
    )
    assert (info.dim, info.max_tokens, info.pooling) == (8, 16, "mean")
    assert (info.normalize, info.query_prefix, info.quantized) == (True, "query: ", False)
    assert info.loaded and info.server_version
    assert info.limits == pb.Limits(
        max_texts_per_request=256,
        max_chars_per_text=100_000,
        max_batch_tokens=8192,
        max_batch_size=64,
        max_queued_texts=4096,
        max_wait_ms=2,
    )
    assert (info.idle_release_seconds, info.exit_after_seconds, info.auto_started) == (
        600,
        0,
        False,
    )
    assert info.pid > 0 and info.requests_served >= 0


def test_embed_before_ready_is_unavailable_but_info_answers() -> None:
    """While starting, Embed gets UNAVAILABLE "embedder is starting"; Info still answers."""
    with running_server(FakeEncoder(), ready=False) as running:
        error = embed_error(running.stub, ["hello"], pb.PASSAGE)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details() == "embedder is starting"
        info = running.stub.Info(pb.InfoRequest(), timeout=10)
        assert not info.loaded and info.model_id == "" and info.limits.max_batch_size == 64


def test_embed_during_shutdown_is_unavailable() -> None:
    """After shutdown begins, Embed gets UNAVAILABLE "embedder is shutting down"."""
    with running_server(FakeEncoder()) as running:
        running.state.begin_shutdown()
        error = embed_error(running.stub, ["hello"], pb.PASSAGE)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details() == "embedder is shutting down"
        assert running.stub.Info(pb.InfoRequest(), timeout=10).model_id == "test/fake"


def test_queue_full_is_resource_exhausted() -> None:
    """With the queue at its limit, the next call is refused at once with the count."""
    gate = threading.Event()
    with running_server(FakeEncoder(gate=gate), limits=Limits(max_queued_texts=4)) as running:
        stub = running.stub
        first = stub.Embed.future(pb.EmbedRequest(texts=["run"], kind=pb.PASSAGE), timeout=30)
        assert running.encoder.encode_started.wait(10)
        queued = stub.Embed.future(pb.EmbedRequest(texts=list("abcd"), kind=pb.PASSAGE), timeout=30)
        assert poll(lambda: running.batcher.pending_count() == 4)
        error = embed_error(stub, ["one more"], pb.PASSAGE)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.details() == "embedder overloaded: 4 texts queued (max 4); retry shortly"
        gate.set()
        assert first.result().count == 1 and queued.result().count == 4


def test_deadline_passing_in_the_queue_drops_the_call() -> None:
    """A call whose deadline passes while queued gets DEADLINE_EXCEEDED and never runs."""
    gate = threading.Event()
    with running_server(FakeEncoder(gate=gate)) as running:
        first = running.stub.Embed.future(pb.EmbedRequest(texts=["run"], kind=pb.PASSAGE))
        assert running.encoder.encode_started.wait(10)
        with pytest.raises(grpc.RpcError) as raised:
            running.stub.Embed(pb.EmbedRequest(texts=["too late"], kind=pb.PASSAGE), timeout=0.3)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert poll(lambda: running.batcher.pending_count() == 0)
        gate.set()
        assert first.result(10).count == 1
        assert running.encoder.batch_lengths == [[3]]


def test_cancelled_call_is_dropped_before_inference() -> None:
    """A call the client cancels while it is queued is never run."""
    gate = threading.Event()
    with running_server(FakeEncoder(gate=gate)) as running:
        first = running.stub.Embed.future(pb.EmbedRequest(texts=["run"], kind=pb.PASSAGE))
        assert running.encoder.encode_started.wait(10)
        doomed = running.stub.Embed.future(pb.EmbedRequest(texts=["x y z"], kind=pb.PASSAGE))
        assert poll(lambda: running.batcher.pending_count() == 1)
        doomed.cancel()
        assert poll(lambda: running.batcher.pending_count() == 0)
        gate.set()
        assert first.result(10).count == 1
        assert doomed.cancelled()
        assert running.encoder.batch_lengths == [[3]]


def test_failed_reload_is_failed_precondition() -> None:
    """When a released model cannot be reloaded, Embed gets FAILED_PRECONDITION and why."""
    encoder = FakeEncoder(loaded=False)
    encoder.fail_load = "no such file: model.onnx"
    with running_server(encoder) as running:
        error = embed_error(running.stub, ["hello"], pb.PASSAGE)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error.details() == "model could not be loaded: no such file: model.onnx"
        encoder.fail_load = None
        assert running.stub.Embed(pb.EmbedRequest(texts=["hello"], kind=pb.PASSAGE)).count == 1


def test_requests_served_counts_successful_embeds() -> None:
    """requests_served grows by one per answered Embed call, not for refused ones."""
    with running_server(FakeEncoder()) as running:
        running.stub.Embed(pb.EmbedRequest(texts=["a"], kind=pb.PASSAGE), timeout=10)
        embed_error(running.stub, [], pb.PASSAGE)
        running.stub.Embed(pb.EmbedRequest(texts=["b"], kind=pb.QUERY), timeout=10)
        assert running.stub.Info(pb.InfoRequest(), timeout=10).requests_served == 2
