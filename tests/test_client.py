"""EmbedderClient: decoding, retries, error mapping (fake in-process server) and real vectors."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.support.embedder_cleanup import stop_embedders
from tests.support.goaway_server import going_away
from thatch.embedder.client.embedder_client import EmbedderClient, EmbedResult
from thatch.embedder.client.errors import (
    FIX_OVERLOADED,
    FIX_REMOTE,
    AddressError,
    EmbedderUnavailable,
    EmbedRequestError,
    fix_offline,
)
from thatch.embedder.client.kind import Kind
from thatch.embedder.v1 import embedder_pb2, embedder_pb2_grpc

DIM = 4
OK = "ok"


class ScriptedEmbedder(embedder_pb2_grpc.EmbedderServicer):
    """Answers Embed calls from a script: "ok", "block", a malformed reply or a status code."""

    def __init__(self) -> None:
        self.script: list[object] = []
        self.requests: list[embedder_pb2.EmbedRequest] = []
        self.release = threading.Event()

    def Embed(
        self, request: embedder_pb2.EmbedRequest, context: grpc.ServicerContext
    ) -> embedder_pb2.EmbedResponse:
        self.requests.append(request)
        action = self.script.pop(0) if self.script else OK
        if action == "block":
            self.release.wait(30)
        if isinstance(action, tuple):
            context.abort(action[0], action[1])
        count = len(request.texts) + (1 if action == "malformed" else 0)
        vectors = np.arange(count * DIM, dtype="<f4").reshape(count, DIM)
        return embedder_pb2.EmbedResponse(
            vectors=vectors.tobytes(),
            dim=DIM,
            count=count,
            model_id="fake",
            token_counts=[len(t) for t in request.texts],
            truncated=[False] * len(request.texts),
        )

    def Info(
        self, request: embedder_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> embedder_pb2.InfoResponse:
        return embedder_pb2.InfoResponse(model_id="fake", dim=DIM, pid=4242, loaded=True)


class FakeServer:
    def __init__(self, path: Path) -> None:
        self.address = f"unix://{path}"
        self.embedder = ScriptedEmbedder()
        self.health = health.HealthServicer()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        embedder_pb2_grpc.add_EmbedderServicer_to_server(self.embedder, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.server.add_insecure_port(self.address)

    @property
    def calls(self) -> int:
        return len(self.embedder.requests)


@pytest.fixture
def fake(short_tmp: Path) -> Iterator[FakeServer]:
    server = FakeServer(short_tmp / "fake.sock")
    server.server.start()
    try:
        yield server
    finally:
        server.embedder.release.set()
        server.server.stop(None)


@pytest.fixture
def client(fake: FakeServer) -> Iterator[EmbedderClient]:
    with EmbedderClient(fake.address, autostart=False) as embedder_client:
        yield embedder_client


def unavailable(details: str = "embedder is shutting down") -> tuple[grpc.StatusCode, str]:
    return (grpc.StatusCode.UNAVAILABLE, details)


OVERLOADED = (grpc.StatusCode.RESOURCE_EXHAUSTED, "embedder overloaded: 5000 texts queued")


def test_vectors_decoded_from_response_bytes(client: EmbedderClient) -> None:
    """The response bytes become a float32 [n, dim] array with counts and flags."""
    result = client.embed(["ab", "cde"], Kind.PASSAGE)
    assert isinstance(result, EmbedResult)
    assert result.vectors.dtype == np.float32
    assert result.vectors.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (result.model_id, result.token_counts, result.truncated) == ("fake", [2, 3], [0, 0])


def test_kind_and_texts_sent_as_given(client: EmbedderClient, fake: FakeServer) -> None:
    """QUERY/PASSAGE map to the proto enum; texts arrive unchanged and in order."""
    client.embed(["  ", "x\ty\x00"], Kind.QUERY)
    client.embed(["p"], Kind.PASSAGE)
    first, second = fake.embedder.requests
    assert (list(first.texts), first.kind) == (["  ", "x\ty\x00"], embedder_pb2.QUERY)
    assert second.kind == embedder_pb2.PASSAGE


def test_lone_surrogates_replaced_before_sending(client: EmbedderClient, fake: FakeServer) -> None:
    """A lone surrogate becomes U+FFFD; a surrogate pair becomes its character."""
    client.embed(["a\ud800b", "\ud83d\ude00", "c\udfff"], Kind.PASSAGE)
    assert list(fake.embedder.requests[0].texts) == ["a\ufffdb", "\U0001f600", "c\ufffd"]


def test_overloaded_retried_twice_then_succeeds(client: EmbedderClient, fake: FakeServer) -> None:
    """RESOURCE_EXHAUSTED is retried (100 ms, 300 ms) and the third answer is returned."""
    fake.embedder.script = [OVERLOADED, OVERLOADED, OK]
    assert client.embed(["x"], Kind.QUERY).vectors.shape == (1, DIM)
    assert fake.calls == 3


def test_overloaded_gives_up_after_two_retries(client: EmbedderClient, fake: FakeServer) -> None:
    """A server that stays overloaded yields the 'overloaded' cause after three calls."""
    fake.embedder.script = [OVERLOADED] * 5
    with pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY)
    assert (caught.value.cause, caught.value.fix) == ("the embedder is overloaded", FIX_OVERLOADED)
    assert fake.calls == 3


def test_overload_retry_stays_within_deadline(client: EmbedderClient, fake: FakeServer) -> None:
    """No retry is attempted when its delay would pass the call's deadline."""
    fake.embedder.script = [OVERLOADED] * 5
    with pytest.raises(EmbedderUnavailable, match="overloaded"):
        client.embed(["x"], Kind.QUERY, timeout=0.05)
    assert fake.calls == 1


def test_unavailable_retried_once_after_channel_worked(
    client: EmbedderClient, fake: FakeServer
) -> None:
    """UNAVAILABLE on a channel that worked before is retried once, transparently."""
    fake.embedder.script = [OK, unavailable(), OK]
    client.embed(["a"], Kind.QUERY)
    assert client.embed(["b"], Kind.QUERY).vectors.shape == (1, DIM)
    assert fake.calls == 3


def test_unavailable_retried_only_once(client: EmbedderClient, fake: FakeServer) -> None:
    """A second UNAVAILABLE in the same call is an error (no retry loop)."""
    fake.embedder.script = [OK, unavailable(), unavailable(), OK]
    client.embed(["a"], Kind.QUERY)
    with pytest.raises(EmbedderUnavailable):
        client.embed(["b"], Kind.QUERY)
    assert fake.calls == 3


def test_unavailable_on_fresh_channel_not_retried(client: EmbedderClient, fake: FakeServer) -> None:
    """Without a call that worked, UNAVAILABLE (auto-start off) fails at once."""
    fake.embedder.script = [unavailable("embedder is starting")]
    with pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["a"], Kind.QUERY)
    assert caught.value.cause.startswith("the embedder is still starting")
    assert fake.calls == 1


def test_only_the_servers_own_words_mean_still_starting(
    client: EmbedderClient, fake: FakeServer
) -> None:
    """UNAVAILABLE whose text merely contains "starting" (a GOAWAY saying "restarting") is
    an embedder that is not there, not one still starting."""
    fake.embedder.script = [unavailable("GOAWAY received; Debug Text: restarting")]
    with pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["a"], Kind.QUERY)
    assert caught.value.cause == f"nothing is listening at {fake.address}"


def test_a_request_crossing_a_goaway_fails_at_once() -> None:
    """An embedder going away as the first request goes out: that call is an outage, not a
    wait for its whole deadline. gRPC's transparent retries sent it back onto the dying
    connection until the deadline, 2 times in 3 with this server (46 of 70 runs); eight
    servers in a row leave that about one chance in 4,000 of passing. A call that hangs
    fails the assertion when its 60 s deadline passes; a sound one ends in milliseconds."""
    for _ in range(8):
        with going_away("--settings-first") as port:
            address = f"127.0.0.1:{port}"
            with (
                EmbedderClient(address, env={}) as client,
                pytest.raises(EmbedderUnavailable) as caught,
            ):
                client.embed(["a"], Kind.QUERY, timeout=60)
        assert caught.value.cause == f"no embedder answering at {address}"


def test_invalid_argument_is_a_request_error(client: EmbedderClient, fake: FakeServer) -> None:
    """INVALID_ARGUMENT becomes EmbedRequestError (a ValueError) with the server's text."""
    fake.embedder.script = [(grpc.StatusCode.INVALID_ARGUMENT, "texts[0] is empty")]
    with pytest.raises(EmbedRequestError) as caught:
        client.embed([""], Kind.QUERY)
    assert str(caught.value) == "texts[0] is empty"
    assert isinstance(caught.value, ValueError)
    assert not isinstance(caught.value, EmbedderUnavailable)


def test_deadline_exceeded_is_unavailable(client: EmbedderClient, fake: FakeServer) -> None:
    """A server that does not answer within the deadline gives a clear unavailable error."""
    fake.embedder.script = ["block"]
    with pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY, timeout=0.3)
    assert caught.value.cause == "the embedder did not answer within 0.3 s"


def test_a_deadline_shorter_than_the_work_says_so(client: EmbedderClient, fake: FakeServer) -> None:
    """The server's own estimate, nothing queued ahead: it read "did not answer within
    30 s" with the overload fix, the server's words dropped."""
    said = "deadline exceeded: embedding these texts takes about 0.012 s, and this call's"
    fake.embedder.script = [(grpc.StatusCode.DEADLINE_EXCEEDED, f"{said} deadline leaves 0 s")]
    with pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY)
    assert caught.value.cause == f"{said} deadline leaves 0 s"
    assert caught.value.fix == "send fewer or shorter texts at a time"


def test_offline_model_failure_gets_offline_fix(client: EmbedderClient, fake: FakeServer) -> None:
    """FAILED_PRECONDITION naming an uncached model offline gets the model-pull fix."""
    detail = "model could not be loaded: model org/m is not in the local cache and HF_HUB_OFFLINE=1"
    fake.embedder.script = [(grpc.StatusCode.FAILED_PRECONDITION, detail)]
    with pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY)
    assert caught.value.cause == "model org/m is not in the local cache and HF_HUB_OFFLINE=1"
    assert caught.value.fix == fix_offline("org/m")


def test_malformed_response_is_unavailable(client: EmbedderClient, fake: FakeServer) -> None:
    """A response whose vector count does not match the texts is refused."""
    fake.embedder.script = ["malformed"]
    with pytest.raises(EmbedderUnavailable, match="malformed response"):
        client.embed(["x"], Kind.QUERY)


@pytest.mark.parametrize(
    ("texts", "kind", "message"),
    [
        ([], Kind.QUERY, "texts must not be empty"),
        ("just a string", Kind.QUERY, "texts must be a list of strings, not a single string"),
        (["ok", 3], Kind.QUERY, "texts[1] must be a string, not int"),
        (["ok"], "query", "kind must be QUERY or PASSAGE"),
    ],
)
def test_bad_input_rejected_before_sending(
    client: EmbedderClient, fake: FakeServer, texts: object, kind: object, message: str
) -> None:
    """Malformed input is an EmbedRequestError with one clear line; nothing is sent."""
    with pytest.raises(EmbedRequestError) as caught:
        client.embed(texts, kind)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert fake.calls == 0


def test_oversized_request_rejected_before_sending(
    client: EmbedderClient, fake: FakeServer
) -> None:
    """A request over the 16 MiB message limit is refused locally, naming its size."""
    with pytest.raises(EmbedRequestError, match=r"request too large: \d+ bytes \(max 16777216\)"):
        client.embed(["é" * 100_000] * 90, Kind.PASSAGE)
    assert fake.calls == 0


def test_health_reports_serving_not_serving_unreachable(
    client: EmbedderClient, fake: FakeServer, short_tmp: Path
) -> None:
    """health() follows the server's health status, and UNREACHABLE when nobody listens."""
    assert client.health(timeout=5) == "SERVING"
    fake.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert client.health(timeout=5) == "NOT_SERVING"
    with EmbedderClient(f"unix://{short_tmp}/nobody.sock", autostart=False) as nobody:
        assert nobody.health(timeout=5) == "UNREACHABLE"


def test_info_returns_server_facts(client: EmbedderClient) -> None:
    """info() returns the server's InfoResponse."""
    info = client.info()
    assert (info.model_id, info.dim, info.pid, info.loaded) == ("fake", DIM, 4242, True)


@pytest.mark.parametrize("value", ["foo", "http://host:1", "unix://relative.sock", "host:99999"])
def test_invalid_address_text(value: str) -> None:
    """An invalid address, given or from THATCH_EMBEDDER_ADDR, is an AddressError per spec."""
    expected = (
        f'invalid THATCH_EMBEDDER_ADDR "{value}": expected unix:///path, host:port or '
        "dns:///host:port"
    )
    with pytest.raises(AddressError) as given:
        EmbedderClient(value)
    with pytest.raises(AddressError) as from_env:
        EmbedderClient(env={"THATCH_EMBEDDER_ADDR": value})
    assert str(given.value) == str(from_env.value) == expected


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("scheme", ["", "dns:///"])
def test_unreachable_remote_address(scheme: str, isolated_env: Path) -> None:
    """A TCP or dns address nobody answers gives the remote cause and fix; nothing is spawned."""
    address = f"dns:///localhost:{free_port()}" if scheme else f"127.0.0.1:{free_port()}"
    with EmbedderClient(address) as remote:
        with pytest.raises(EmbedderUnavailable) as caught:
            remote.embed(["x"], Kind.QUERY, timeout=5)
        with pytest.raises(EmbedderUnavailable) as waited:
            remote.ensure_started(wait=0.3)
    assert caught.value.cause == waited.value.cause == f"no embedder answering at {address}"
    assert caught.value.fix == FIX_REMOTE
    assert not (isolated_env / ".cache" / "thatch" / "embedder.log").exists()


def test_unreadable_ca_file_is_reported(tmp_path: Path) -> None:
    """THATCH_EMBEDDER_CA pointing nowhere is a clear error, not a TLS traceback."""
    env = {"THATCH_EMBEDDER_CA": str(tmp_path / "missing.pem")}
    with pytest.raises(EmbedderUnavailable, match="cannot read THATCH_EMBEDDER_CA"):
        EmbedderClient("127.0.0.1:1", env=env)


# -- the real embedder with the real imported MiniLM ----------------------------------------


def reference_encode(model_dir: Path, texts: list[str]) -> np.ndarray:
    """Encode one text at a time with tokenizers + onnxruntime, independently of thatch."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    meta = json.loads((model_dir / "thatch_model.json").read_text())
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    session = ort.InferenceSession(
        str(model_dir / meta["onnx"]), providers=["CPUExecutionProvider"]
    )
    rows = []
    for text in texts:
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        mask = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0][0]
        pooled = hidden.mean(axis=0)
        rows.append(pooled / np.linalg.norm(pooled))
    return np.array(rows, dtype=np.float32)


def test_minilm_vectors_equal_in_process_encode(
    minilm_dir: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vectors from an auto-started MiniLM embedder equal a direct encode within 1e-5."""
    socket_path = short_tmp / "e.sock"
    monkeypatch.setenv("THATCH_MODEL", str(minilm_dir))
    texts = ["The cat sat on the mat.", "SQLite stores memories in WAL mode", "x", "  "]
    try:
        with EmbedderClient(f"unix://{socket_path}") as real:
            # One text per call: batch independence is the server's claim, tested there.
            singles = [real.embed([text], Kind.PASSAGE, start_wait=120) for text in texts]
            query = real.embed(texts[:1], Kind.QUERY)
            together = real.embed(texts, Kind.PASSAGE)
    finally:
        stop_embedders(str(socket_path))
    expected = reference_encode(minilm_dir, texts)
    vectors = np.concatenate([single.vectors for single in singles])
    assert {single.model_id for single in singles} == {"sentence-transformers/all-MiniLM-L6-v2"}
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    np.testing.assert_allclose(query.vectors, expected[:1], atol=1e-5)  # MiniLM: no prefix
    assert singles[0].token_counts == [len(texts[0].split()) + 3]  # words, ".", [CLS], [SEP]
    # Several texts in one call come back in input order.
    assert (together.vectors @ expected.T).argmax(axis=1).tolist() == [0, 1, 2, 3]
