"""Embed requests complete in order of admission while one-text queries go ahead: a real
MiniLM embedder process and concurrent gRPC clients; only the order of completions is
asserted, never a time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from tests.support.embedder_cleanup import wait_until
from tests.support.embedder_proc import EmbedderProcess, embedder_process
from thatch.embedder.v1 import embedder_pb2 as pb

SENTENCE = (
    "the embedder runs requests in the order it admitted them so the first large request "
    "finishes first while a short query typed by a user is put into the next batch"
)
WORDS = tuple(SENTENCE.split())


def passages(seed: int, count: int, words: int = 60) -> list[str]:
    """``count`` distinct passages of ``words`` words (about as many tokens)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=words).tolist()) for _ in range(count)]


@pytest.fixture
def embedder(minilm_dir: Path, short_tmp: Path) -> Iterator[EmbedderProcess]:
    """A MiniLM embedder of this test's own (debug log: it says when it queued a call)."""
    with embedder_process(str(minilm_dir), socket_dir=short_tmp) as proc:
        yield proc


class Completions:
    """Names of calls in the order their answers came back (or their error codes)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.errors: dict[str, grpc.StatusCode] = {}
        self._lock = threading.Lock()

    def call(
        self, stub: object, name: str, texts: list[str], timeout: float = 600
    ) -> threading.Thread:
        def run() -> None:
            try:
                response = stub.Embed(  # type: ignore[attr-defined]
                    pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=timeout
                )
                assert response.count == len(texts)
                with self._lock:
                    self.order.append(name)
            except grpc.RpcError as error:
                with self._lock:
                    self.errors[name] = error.code()

        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread


def test_big_requests_complete_in_admission_order_and_a_query_goes_ahead(
    embedder: EmbedderProcess,
) -> None:
    """Four big requests, each admitted before the next is sent, smaller ones later (taking
    turns would finish the smallest first); then a one-word query: the big ones complete
    in admission order, the query before every big request but possibly the first."""
    sizes = {"big 1": 192, "big 2": 96, "big 3": 48, "big 4": 24}
    stub = embedder.stub()
    done = Completions()
    threads = []
    for n, (name, size) in enumerate(sizes.items(), start=1):
        threads.append(done.call(stub, name, passages(n, size)))
        queued = f"Embed call: {size} passage texts queued"
        assert embedder.wait_for_log(queued, timeout=120), embedder.output()
    threads.append(done.call(stub, "query", ["deploy"]))
    for thread in threads:
        thread.join(600)
    assert done.errors == {}
    bigs = [name for name in done.order if name != "query"]
    assert bigs == list(sizes), done.order
    assert done.order.index("query") <= done.order.index("big 2"), done.order


def test_requests_beyond_the_queue_are_refused_at_once(embedder: EmbedderProcess) -> None:
    """24 requests of 256 long passages at once (the issue's load): what does not fit in the
    4096 queued texts (or could not finish before its deadline behind them) is refused with
    RESOURCE_EXHAUSTED, not left to time out; the rest is admitted, and the server answers
    a query once they are cancelled."""
    stub = embedder.stub()
    futures: list[Any] = [
        stub.Embed.future(
            pb.EmbedRequest(texts=passages(100 + n, 256, words=250), kind=pb.PASSAGE), timeout=600
        )
        for n in range(24)
    ]

    def refused() -> list[Any]:  # answered without being queued (an admitted
        # request can complete meanwhile: the first in line needs only its own 256 texts)
        return [f for f in futures if f.done() and f.code() != grpc.StatusCode.OK]

    def settled() -> bool:  # every request either queued or refused
        queued = embedder.log_text().count("Embed call: 256 passage texts queued")
        return queued + len(refused()) >= 24

    try:
        wait_until(settled, 300, "every request to be queued or refused")
        answered = refused()
        assert answered, "the queue holds 4096 texts: some of 6144 must be refused"
        for future in answered:
            assert future.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert future.details().startswith("embedder overloaded: ")
            assert future.details().endswith("; retry shortly")
    finally:
        for future in futures:
            future.cancel()
    response = stub.Embed(pb.EmbedRequest(texts=["deploy"], kind=pb.QUERY), timeout=600)
    assert response.count == 1


def test_a_request_that_cannot_finish_before_its_deadline_is_refused_at_once(
    embedder: EmbedderProcess,
) -> None:
    """Behind 3840 queued long passages, a 256-text request with a 5 s deadline cannot be
    done in time at any pace the server has shown: RESOURCE_EXHAUSTED at once, saying so,
    instead of DEADLINE_EXCEEDED after 5 s of waiting."""
    stub = embedder.stub()
    warm = stub.Embed(
        pb.EmbedRequest(texts=passages(7, 16, words=250), kind=pb.PASSAGE), timeout=600
    )
    assert warm.count == 16  # full batches ran: the server knows its pace
    futures = [
        stub.Embed.future(
            pb.EmbedRequest(texts=passages(200 + n, 256, words=250), kind=pb.PASSAGE), timeout=600
        )
        for n in range(15)
    ]

    def settled() -> bool:  # each queued, or refused (on a slow machine, too late already)
        queued = embedder.log_text().count("Embed call: 256 passage texts queued")
        return queued + sum(f.done() and f.code() != grpc.StatusCode.OK for f in futures) >= 15

    try:
        wait_until(settled, 300, "every request to be queued or refused")
        late = stub.Embed.future(
            pb.EmbedRequest(texts=passages(300, 256, words=250), kind=pb.PASSAGE), timeout=5
        )
        assert late.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, late.details()
        assert "queued ahead would take about" in late.details()
        assert late.details().endswith("; retry shortly")
    finally:
        for future in futures:
            future.cancel()
    query = stub.Embed(pb.EmbedRequest(texts=["deploy"], kind=pb.QUERY), timeout=600)
    assert query.count == 1
