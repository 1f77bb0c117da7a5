"""Dynamic batching: batch selection, one batch at a time, drops and invariance."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_encoder import FakeEncoder
from tests.support.polling import poll
from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import Tokenized
from thatch.embedder.models.resolve import resolve_model
from thatch.embedder.models.runtime import encode_truncated, load_tokenizer
from thatch.embedder.server.batch_selection import MAX_PADDED_RATIO, MAX_RUN_TOKENS, select_batch
from thatch.embedder.server.batching import Batcher
from thatch.embedder.server.embed_calls import EmbedCall, Limits, Overloaded
from thatch.embedder.v1 import embedder_pb2 as pb

# -- select_batch -------------------------------------------------------------------------


def test_select_batch_always_takes_the_oldest_item() -> None:
    """The oldest item goes first even when it is far from every other length."""
    assert select_batch([500, 10, 10, 10], max_batch_tokens=1000, max_batch_size=64) == [0]
    assert select_batch([10, 500, 10, 10], max_batch_tokens=1000, max_batch_size=64) == [0, 2, 3]


def test_select_batch_leaves_out_items_that_would_be_mostly_padding() -> None:
    """Padded size stays within MAX_PADDED_RATIO × real tokens; the rest waits its turn."""
    lengths = [40, 38, 44, 4, 120, 41]
    chosen = select_batch(lengths, max_batch_tokens=8192, max_batch_size=64)
    assert chosen == [0, 1, 2, 5]
    real = sum(lengths[i] for i in chosen)
    assert max(lengths[i] for i in chosen) * len(chosen) <= MAX_PADDED_RATIO * real


def test_select_batch_builds_around_the_anchor_it_is_given() -> None:
    """With an anchor other than the oldest, that item goes in with the lengths nearest it."""
    lengths = [500, 10, 500, 12, 9]
    assert select_batch(lengths, max_batch_tokens=1000, max_batch_size=64, anchor=3) == [1, 3, 4]
    assert select_batch(lengths, max_batch_tokens=1000, max_batch_size=64, anchor=2) == [0, 2]


def test_select_batch_fills_by_rank_then_nearness() -> None:
    """Items of a lower rank (the anchor's call, then the calls next in line) go first,
    however far their lengths; within a rank the nearest, then the older."""
    lengths, ranks = [10, 10, 10, 12, 11, 12], [2, 2, 0, 0, 1, 1]
    chosen = select_batch(lengths, max_batch_tokens=1000, max_batch_size=3, anchor=2, ranks=ranks)
    assert chosen == [2, 3, 4]  # the anchor's 12 and rank 1's 11 before the 10s of rank 2
    # Past the budget a rank's long item is skipped, and shorter ones of later ranks fit.
    lengths, ranks = [10, 40, 10, 10], [1, 0, 0, 1]
    chosen = select_batch(lengths, max_batch_tokens=35, max_batch_size=64, anchor=2, ranks=ranks)
    assert chosen == [0, 2, 3]


def test_select_batch_prefers_lengths_closest_to_the_oldest() -> None:
    """Companions are the pending items nearest in token length, not the next in line."""
    lengths = [20, 90, 21, 5, 19, 40]
    assert select_batch(lengths, max_batch_tokens=4 * 21, max_batch_size=64) == [0, 2, 3, 4]


def test_select_batch_breaks_ties_by_age() -> None:
    """Of two items equally close in length, the older one is taken."""
    assert select_batch([10, 12, 8, 12], max_batch_tokens=24, max_batch_size=64) == [0, 1]


def test_select_batch_respects_the_padded_token_budget() -> None:
    """max_len × n never exceeds max_batch_tokens."""
    lengths = [100, 100, 100, 100, 100]
    chosen = select_batch(lengths, max_batch_tokens=350, max_batch_size=64)
    assert chosen == [0, 1, 2]
    assert max(lengths[i] for i in chosen) * len(chosen) <= 350


def test_select_batch_respects_the_batch_size() -> None:
    """No batch holds more than max_batch_size items."""
    assert select_batch([3] * 100, max_batch_tokens=8192, max_batch_size=64) == list(range(64))


def test_select_batch_of_nothing_is_empty() -> None:
    """An empty queue gives an empty batch."""
    assert select_batch([], max_batch_tokens=8192, max_batch_size=64) == []


# -- Batcher with a fake encoder ----------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave the inference thread blocked


def make_call(encoder: FakeEncoder, texts: list[str], deadline: float | None = None) -> EmbedCall:
    tokens = [encoder.tokenize(text, Kind.PASSAGE) for text in texts]
    return EmbedCall(tokens, encoder.settings.dim, deadline, arrived=time.monotonic())


def hold_the_model(batcher: Batcher, encoder: FakeEncoder, text: str = "x") -> EmbedCall:
    """Submit a call and return once its batch is running (held there by the gate)."""
    call = make_call(encoder, [text])
    batcher.submit(call)
    assert encoder.encode_started.wait(10)
    return call


def arrive_and_submit(batcher: Batcher, call: EmbedCall) -> None:
    """What a request handler does: submit inside arriving() with its handle."""
    with batcher.arriving() as arrival:
        batcher.submit(call, arrival)


def started(batcher: Batcher, **limits: int) -> Batcher:
    batcher.start()
    batcher.load().result(10)
    return batcher


def test_results_come_back_in_input_order() -> None:
    """Each row of a call's vectors is its own text's vector, in input order."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder))
    texts = ["alpha beta", "gamma", "delta epsilon zeta", "eta"]
    call = make_call(encoder, texts)
    batcher.submit(call)
    assert call.done.wait(10) and call.error is None
    expected = np.stack([encoder.expected(text) for text in texts])
    np.testing.assert_array_equal(call.vectors, expected)
    assert call.started and call.inference_s >= 0
    batcher.stop(10)


def test_model_calls_run_on_the_inference_thread_only() -> None:
    """Submitted outside arriving(), load, encode and release all run on the inference thread."""
    encoder = FakeEncoder(loaded=False)
    batcher = started(Batcher(encoder, idle_release_seconds=0.05))
    call = make_call(encoder, ["one two"])
    batcher.submit(call)
    assert call.done.wait(10)
    assert poll(lambda: not encoder.loaded)
    assert encoder.threads == {
        "encode": {"inference"},
        "load": {"inference"},
        "release": {"inference"},
    }
    batcher.stop(10)


def test_arrivals_during_a_run_form_the_next_batch(gate: threading.Event) -> None:
    """Texts queued while a batch runs are batched together right after it."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder))
    first = hold_the_model(batcher, encoder, "a")
    later = [make_call(encoder, ["b c"]), make_call(encoder, ["d e f", "g"])]
    for call in later:
        batcher.submit(call)
    gate.set()
    assert all(call.done.wait(10) for call in [first, *later])
    assert encoder.batch_lengths == [[3], [4, 5, 3]]
    batcher.stop(10)


def test_calls_on_their_way_join_the_batch() -> None:
    """While another call is still arriving (tokenizing), the queued one waits for it."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, limits=Limits(max_wait_ms=60_000)))
    first = make_call(encoder, ["a"])
    second = make_call(encoder, ["b c"])
    with batcher.arriving() as later:
        with batcher.arriving() as arrival:
            batcher.submit(first, arrival)
        assert not first.done.wait(0.2)  # held back for the call on its way
        batcher.submit(second, later)
    assert first.done.is_set() and second.done.is_set()
    assert encoder.batch_lengths == [[3, 4]]
    batcher.stop(10)


def test_the_inference_thread_stops_gathering_after_max_wait() -> None:
    """A call still on its way holds the queued ones back for max_wait_ms, not longer."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, limits=Limits(max_wait_ms=50)))
    first = make_call(encoder, ["a"])
    with batcher.arriving():
        with batcher.arriving() as arrival:
            batcher.submit(first, arrival)
        assert first.done.wait(10) and first.error is None  # the other never submits
    assert encoder.threads["encode"] == {"inference"}
    batcher.stop(10)


def test_a_lone_call_does_not_wait_for_companions() -> None:
    """With nobody on the way, a call runs at once rather than after max_wait_ms."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, limits=Limits(max_wait_ms=600_000)))
    call = make_call(encoder, ["alone"])
    batcher.submit(call)
    assert call.done.wait(10) and call.error is None
    batcher.stop(10)


def test_a_lone_arrival_runs_its_batch_on_its_own_thread() -> None:
    """The last call on its way, with the model idle, runs the batch without a hand-off."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, limits=Limits(max_wait_ms=600_000)))
    call = make_call(encoder, ["alone", "and another"])
    with batcher.arriving() as arrival:
        batcher.submit(call, arrival)
    assert call.done.is_set() and call.error is None  # finished before arriving() returned
    expected = np.stack([encoder.expected(text) for text in ["alone", "and another"]])
    np.testing.assert_array_equal(call.vectors, expected)
    assert encoder.threads["encode"] == {threading.current_thread().name}
    batcher.stop(10)


def test_an_arrival_while_a_batch_runs_leaves_it_to_the_inference_thread(
    gate: threading.Event,
) -> None:
    """Never two batches at once: an arrival during a run returns and waits its turn."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder))
    hold_the_model(batcher, encoder)
    later = make_call(encoder, ["y z"])
    arrive_and_submit(batcher, later)
    assert not later.done.is_set()
    gate.set()
    assert later.done.wait(10) and later.error is None
    assert encoder.threads["encode"] == {"inference"}
    assert encoder.batch_lengths == [[3], [4]]
    batcher.stop(10)


def test_a_released_model_is_reloaded_on_the_inference_thread() -> None:
    """A lone arrival does not reload the model itself: loading stays on one thread."""
    encoder = FakeEncoder(loaded=False)
    batcher = Batcher(encoder)
    batcher.start()
    call = make_call(encoder, ["hello"])
    with batcher.arriving() as arrival:
        batcher.submit(call, arrival)
    assert call.done.wait(10) and call.error is None
    assert encoder.threads["load"] == {"inference"}
    assert encoder.threads["encode"] == {"inference"}
    batcher.stop(10)


def test_many_arriving_callers_never_run_the_model_twice_at_once() -> None:
    """16 threads arriving and submitting: correct vectors, one model call at a time."""
    encoder = FakeEncoder(work_seconds=0.0005)
    batcher = started(Batcher(encoder, idle_release_seconds=0.01))
    texts = [" ".join(["word"] * (1 + i % 7) + [f"w{i}"]) for i in range(320)]

    def one(text: str) -> EmbedCall:
        call = make_call(encoder, [text])
        with batcher.arriving() as arrival:
            batcher.submit(call, arrival)
        assert call.done.wait(10)
        return call

    with ThreadPoolExecutor(16) as pool:
        calls = list(pool.map(one, texts))
    batcher.stop(10)
    for text, call in zip(texts, calls, strict=True):
        assert call.error is None
        np.testing.assert_array_equal(call.vectors[0], encoder.expected(text))
    assert encoder.most_at_once == 1


def test_submitting_outside_arriving_never_waits_for_a_call_on_its_way() -> None:
    """A call submitted without an arrival handle is not held back by another's arrival."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder))  # max_wait_ms 2
    call = make_call(encoder, ["a"])
    with batcher.arriving():  # on its way for as long as the test likes
        batcher.submit(call)
        assert call.done.wait(10) and call.error is None
    batcher.stop(10)


def test_stop_waits_for_a_batch_a_caller_runs(gate: threading.Event) -> None:
    """stop() returns only after a batch running on a request thread has finished."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder))
    call = make_call(encoder, ["held"])
    caller = threading.Thread(target=arrive_and_submit, args=(batcher, call), name="caller")
    caller.start()
    assert encoder.encode_started.wait(10)
    stopper = threading.Thread(target=batcher.stop, args=(10,))
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive() and batcher.alive
    gate.set()
    stopper.join(15)
    caller.join(15)
    assert not batcher.alive
    assert call.done.is_set() and call.error is None
    assert encoder.threads["encode"] == {"caller"}


def test_an_error_after_submit_still_runs_the_call() -> None:
    """If the arriving block raises after submitting, the queued call is still served."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, limits=Limits(max_wait_ms=600_000)))
    call = make_call(encoder, ["queued anyway"])
    with pytest.raises(RuntimeError), batcher.arriving() as arrival:
        batcher.submit(call, arrival)
        raise RuntimeError("the handler failed after submitting")
    assert call.done.wait(10) and call.error is None
    assert encoder.threads["encode"] == {"inference"}
    batcher.stop(10)


def test_an_expired_call_is_dropped_on_the_callers_path_too() -> None:
    """A lone arrival whose deadline passed is refused before inference, not run."""
    clock = FakeClock()
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, clock=clock))
    call = make_call(encoder, ["too late"], deadline=clock.now + 1)
    with batcher.arriving() as arrival:
        batcher.submit(call, arrival)
        clock.now += 2
    assert call.done.wait(10)
    assert call.error == (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before inference")
    assert encoder.batch_lengths == []
    batcher.stop(10)


def test_idle_release_still_happens_after_batches_run_by_callers() -> None:
    """Callers running every batch do not stop the inference thread releasing the model."""
    encoder = FakeEncoder()
    batcher = started(Batcher(encoder, idle_release_seconds=0.05))
    call = make_call(encoder, ["one"])
    arrive_and_submit(batcher, call)
    assert call.done.is_set()
    assert poll(lambda: not encoder.loaded)
    assert encoder.threads["release"] == {"inference"}
    again = make_call(encoder, ["two"])
    arrive_and_submit(batcher, again)  # released: the inference thread reloads and runs it
    assert again.done.wait(10) and again.error is None
    assert encoder.threads["load"] == {"inference"}
    batcher.stop(10)


class WrongRowCount(FakeEncoder):
    def encode(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        return np.concatenate([super().encode(batch), super().encode(batch[:1])])


@pytest.mark.parametrize("via", ["caller", "inference thread"])
def test_a_model_returning_the_wrong_row_count_fails_the_calls(via: str) -> None:
    """Every call of the batch gets INTERNAL; none hangs; the batcher keeps serving."""
    encoder = WrongRowCount()
    batcher = started(Batcher(encoder))
    call = make_call(encoder, ["a b", "c"])
    if via == "caller":
        arrive_and_submit(batcher, call)
    else:
        batcher.submit(call)
    assert call.done.wait(10)
    assert call.error == (
        grpc.StatusCode.INTERNAL,
        "inference failed: the model returned 3 vectors for 2 texts",
    )
    assert batcher.alive
    batcher.stop(10)


def test_a_caller_runs_only_a_batch_holding_its_own_call() -> None:
    """A short lone arrival does not run an older long call's batch in its own thread."""
    encoder = FakeEncoder(max_tokens=64)
    batcher = started(Batcher(encoder, limits=Limits(max_wait_ms=600_000)))
    long_call = make_call(encoder, [" ".join(["w"] * 40)])
    short = make_call(encoder, ["s"])
    with batcher.arriving() as outer:
        arrive_and_submit(batcher, long_call)  # queued; the inference thread gathers
        batcher.submit(short, outer)
    # The oldest (long) item goes first, and the short one would be mostly padding next
    # to it: that batch is not the caller's, so the inference thread runs both.
    assert long_call.done.wait(10) and short.done.wait(10)
    assert encoder.batch_lengths == [[42], [3]]
    assert encoder.threads["encode"] == {"inference"}
    batcher.stop(10)


def test_expired_items_are_dropped_before_inference(gate: threading.Event) -> None:
    """A call whose deadline passed while queued gets DEADLINE_EXCEEDED and is never run."""
    clock = FakeClock()
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder, clock=clock, limits=Limits(max_wait_ms=0)))
    blocker = hold_the_model(batcher, encoder)
    late = make_call(encoder, ["never run at all"], deadline=clock.now + 1)
    batcher.submit(late)
    clock.now += 2
    gate.set()
    assert late.done.wait(10)
    assert late.error == (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before inference")
    assert blocker.done.wait(10) and blocker.error is None
    batcher.stop(10)
    assert encoder.batch_lengths == [[3]]


def test_cancelled_items_are_dropped_before_inference(gate: threading.Event) -> None:
    """A call cancelled while queued is never run."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder))
    blocker = hold_the_model(batcher, encoder)
    cancelled = make_call(encoder, ["gone before its turn"])
    batcher.submit(cancelled)
    batcher.cancel(cancelled, grpc.StatusCode.CANCELLED, "call cancelled")
    gate.set()
    assert blocker.done.wait(10)
    batcher.stop(10)
    assert cancelled.error == (grpc.StatusCode.CANCELLED, "call cancelled")
    assert encoder.batch_lengths == [[3]]


def test_a_full_queue_refuses_at_once(gate: threading.Event) -> None:
    """Beyond max_queued_texts pending texts, submit raises Overloaded with the count."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder, limits=Limits(max_queued_texts=4)))
    hold_the_model(batcher, encoder)
    batcher.submit(make_call(encoder, ["a", "b", "c"]))
    with pytest.raises(Overloaded) as raised:
        batcher.submit(make_call(encoder, ["d", "e"]))
    assert str(raised.value) == "embedder overloaded: 3 texts queued (max 4); retry shortly"
    batcher.submit(make_call(encoder, ["d"]))
    assert batcher.pending_count() == 4
    gate.set()
    batcher.stop(10)


def test_a_call_that_would_overfill_the_queue_is_refused_on_arrival(
    gate: threading.Event,
) -> None:
    """Refused before it is tokenized: texts other calls are still tokenizing count too
    (a flood of 15 MB calls each tokenized for seconds before submit refused it)."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder, limits=Limits(max_queued_texts=4)))
    hold_the_model(batcher, encoder)
    batcher.submit(make_call(encoder, ["a"]))
    with batcher.arriving(2):  # another call, tokenizing its two texts
        with pytest.raises(Overloaded) as raised, batcher.arriving(2):
            pytest.fail("entered")
        assert str(raised.value) == "embedder overloaded: 3 texts queued (max 4); retry shortly"
        with batcher.arriving(1) as arrival:
            batcher.submit(make_call(encoder, ["b"]), arrival)
    with batcher.arriving(2) as arrival:  # the tokenizing call left: room again
        batcher.submit(make_call(encoder, ["c", "d"]), arrival)
    assert batcher.pending_count() == 4
    gate.set()
    batcher.stop(10)


class _Aborted(Exception):
    pass


class _GoneAfter:
    """A ServicerContext whose caller goes away after ``active`` checks."""

    def __init__(self, active: int) -> None:
        self.active = active
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def is_active(self) -> bool:
        self.active -= 1
        return self.active >= 0

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise _Aborted()


def test_a_caller_gone_mid_tokenizing_stops_it(gate: threading.Event) -> None:
    """A cancelled or expired call was tokenized to the end (16 s of CPU for 256 long
    texts), slowing every query behind it; now its tokenizing stops, nothing is queued."""
    from thatch.embedder.server.servicer import EmbedderServicer, ServerState

    encoder = FakeEncoder(gate=gate)
    tokenized: list[str] = []
    tokenize = encoder.tokenize

    def counting(text: str, kind: Kind) -> Tokenized:
        tokenized.append(text)
        return tokenize(text, kind)

    encoder.tokenize = counting  # type: ignore[method-assign]
    batcher = started(Batcher(encoder))
    context = _GoneAfter(active=3)
    with pytest.raises(_Aborted):
        EmbedderServicer(ServerState())._arrive(
            [f"text {i}" for i in range(256)],
            Kind.PASSAGE,
            context,  # type: ignore[arg-type]
            encoder,  # type: ignore[arg-type]
            batcher,
        )
    assert context.aborted == (grpc.StatusCode.CANCELLED, "call cancelled")
    assert len(tokenized) == 3 and batcher.pending_count() == 0
    gate.set()
    batcher.stop(10)


def test_a_deadline_shorter_than_the_work_itself_is_deadline_exceeded() -> None:
    """With nothing queued ahead, "overloaded ... retry shortly" was wrong: the deadline
    cannot be met at all."""
    from thatch.embedder.server.embed_calls import TooLate

    alone = TooLate(0, 0.012, 0.001)
    assert alone.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert str(alone) == (
        "deadline exceeded: embedding these texts takes about 0.012 s, and this call's "
        "deadline leaves 0.001 s"
    )
    behind = TooLate(3840, 41.6, 4.99)
    assert behind.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(behind) == (
        "embedder overloaded: 3840 texts queued ahead would take about 42 s, past this "
        "call's deadline in 5 s; retry shortly"
    )


def test_failed_reload_fails_the_queued_calls_then_recovers() -> None:
    """A reload error gives FAILED_PRECONDITION with its cause; a later load serves again."""
    events: list[tuple[bool, str]] = []
    encoder = FakeEncoder(loaded=False)
    batcher = Batcher(encoder, on_load=lambda ok, cause: events.append((ok, cause)))
    batcher.start()
    encoder.fail_load = "model.onnx vanished"
    call = make_call(encoder, ["hello"])
    batcher.submit(call)
    assert call.done.wait(10)
    assert call.error == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "model could not be loaded: model.onnx vanished",
    )
    encoder.fail_load = None
    again = make_call(encoder, ["hello"])
    batcher.submit(again)
    assert again.done.wait(10) and again.error is None
    assert events == [(False, "model.onnx vanished"), (True, "")]
    batcher.stop(10)


def test_stop_finishes_queued_work(gate: threading.Event) -> None:
    """stop() lets every queued call finish before the thread ends."""
    encoder = FakeEncoder(gate=gate)
    batcher = started(Batcher(encoder))
    calls = [make_call(encoder, [f"text {i}"]) for i in range(5)]
    for call in calls:
        batcher.submit(call)
    assert encoder.encode_started.wait(10)
    stopper = threading.Thread(target=batcher.stop, args=(10,))
    stopper.start()
    gate.set()
    stopper.join(15)
    assert not batcher.alive
    assert all(call.done.is_set() and call.error is None for call in calls)


# -- order between calls: first in, first out; queries go ahead -------------------------


class SteppedEncoder(FakeEncoder):
    """A FakeEncoder whose batches run only when the test allows them, one at a time.

    ``batches`` records each batch's items (the calls' own Tokenized objects) in run order.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batches: list[list[Tokenized]] = []
        self._steps = threading.Condition()
        self._allowed = 0

    def encode(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        with self._steps:
            self.batches.append(list(batch))
            self._steps.notify_all()
            if not self._steps.wait_for(lambda: self._allowed > 0, 30):
                raise RuntimeError("the test never allowed this batch")
            self._allowed -= 1
        return super().encode(batch)

    def wait_started(self, batches: int) -> None:
        """Return once ``batches`` batches have begun (the last one is held)."""
        with self._steps:
            assert self._steps.wait_for(lambda: len(self.batches) >= batches, 10)

    def allow(self, batches: int = 1) -> None:
        with self._steps:
            self._allowed += batches
            self._steps.notify_all()

    def allow_all(self) -> None:
        self.allow(1_000_000)

    def ran(self, calls: dict[str, EmbedCall]) -> list[list[tuple[str, int]]]:
        """Each batch as (call name, text index) pairs, in the order the batches ran."""
        where = {
            id(tokens): (name, index)
            for name, call in calls.items()
            for index, tokens in enumerate(call.texts)
        }
        return [[where[id(tokens)] for tokens in batch] for batch in self.batches]


@pytest.fixture
def stepped() -> Iterator[SteppedEncoder]:
    encoder = SteppedEncoder()
    yield encoder
    encoder.allow_all()  # never leave the inference thread blocked


def full_texts(count: int) -> list[str]:
    """Distinct texts that all fill the FakeEncoder's 16 tokens: 4 to a 64-token batch."""
    return [" ".join(f"t{i}w{j}" for j in range(14)) for i in range(count)]


def in_fours(name: str, count: int) -> list[list[tuple[str, int]]]:
    return [[(name, i) for i in range(start, start + 4)] for start in range(0, count, 4)]


def test_a_small_call_runs_right_after_the_batch_it_arrived_during(
    stepped: SteppedEncoder,
) -> None:
    """A one-text call arriving mid-request runs next, not after the rest of the request."""
    batcher = started(Batcher(stepped, limits=Limits(max_batch_tokens=64)))
    texts = full_texts(40)
    calls = {"big": make_call(stepped, texts), "small": make_call(stepped, ["quick query"])}
    batcher.submit(calls["big"])
    stepped.wait_started(1)
    stepped.allow(2)  # the big call's first two batches
    stepped.wait_started(3)  # its third is running
    arrive_and_submit(batcher, calls["small"])
    assert not calls["small"].done.is_set()
    stepped.allow_all()
    assert all(call.done.wait(10) and call.error is None for call in calls.values())
    batcher.stop(10)
    big_batches = in_fours("big", 40)
    assert stepped.ran(calls) == [*big_batches[:3], [("small", 0)], *big_batches[3:]]
    expected = np.stack([stepped.expected(text) for text in texts])
    np.testing.assert_array_equal(calls["big"].vectors, expected)
    np.testing.assert_array_equal(calls["small"].vectors[0], stepped.expected("quick query"))


def test_a_large_request_still_advances_under_a_stream_of_small_calls(
    stepped: SteppedEncoder,
) -> None:
    """A small call arriving during every batch: each waits for at most one big batch
    besides the running one, and the big call still gets every third batch at least."""
    batcher = started(Batcher(stepped, limits=Limits(max_batch_tokens=64)))
    calls = {"big": make_call(stepped, full_texts(20))}  # five batches of 4
    batcher.submit(calls["big"])
    arrived_during = {}
    for n in range(1, 13):
        stepped.wait_started(n)
        name = f"query {n:02d}"
        calls[name] = make_call(stepped, [name])
        arrive_and_submit(batcher, calls[name])
        arrived_during[name] = n - 1  # the index of the batch running when it came
        stepped.allow()
    stepped.allow_all()
    assert all(call.done.wait(10) and call.error is None for call in calls.values())
    batcher.stop(10)
    ran = stepped.ran(calls)
    is_big = [batch[0][0] == "big" for batch in ran]
    for ran_in, batch in enumerate(ran):
        for name, _ in batch if not is_big[ran_in] else []:
            assert sum(is_big[arrived_during[name] + 1 : ran_in]) <= 1, (name, ran_in)
    small_runs = "".join("b" if big else "s" for big in is_big).split("b")
    assert max(len(run) for run in small_runs[:-1]) <= 2  # until big's last batch
    assert [batch for batch, big in zip(ran, is_big, strict=True) if big] == in_fours("big", 20)


def test_larger_calls_run_first_in_first_out_and_queries_go_ahead(
    stepped: SteppedEncoder,
) -> None:
    """Larger calls run in admission order, each to its end before the next (nothing
    advances them all together); a query arriving meanwhile runs in the next batch."""
    batcher = started(Batcher(stepped, limits=Limits(max_batch_tokens=64)))
    calls = {
        "first": make_call(stepped, full_texts(12)),
        "second": make_call(stepped, full_texts(8)),
        "third": make_call(stepped, full_texts(4)),
        "query": make_call(stepped, ["late query"]),
    }
    batcher.submit(calls["first"])
    stepped.wait_started(1)
    batcher.submit(calls["second"])  # both arrive during first's batch 1
    batcher.submit(calls["third"])
    stepped.allow(1)
    stepped.wait_started(2)  # first's batch 2 runs
    batcher.submit(calls["query"])
    stepped.allow_all()
    assert all(call.done.wait(10) and call.error is None for call in calls.values())
    batcher.stop(10)
    owners = [{name for name, _ in batch} for batch in stepped.ran(calls)]
    assert owners == [
        {"first"},
        {"first"},
        {"query"},
        {"first"},
        {"second"},
        {"second"},
        {"third"},
    ]


def test_a_batch_never_exceeds_the_run_token_ceiling() -> None:
    """Long texts run MAX_RUN_TOKENS at a time, below the spec's 8192 padded tokens."""
    encoder = FakeEncoder(max_tokens=512)
    batcher = started(Batcher(encoder))
    call = make_call(encoder, [" ".join(["w"] * 600)] * 16)  # each truncated to 512 tokens
    batcher.submit(call)
    assert call.done.wait(10) and call.error is None
    batcher.stop(10)
    per_batch = MAX_RUN_TOKENS // 512
    assert encoder.batch_lengths == [[512] * per_batch] * (16 // per_batch)


# -- tokenizing a maximal request ---------------------------------------------------------


def long_texts() -> dict[str, str]:
    """Texts far over max_tokens, with what could make a cut at a space change the tokens."""
    words = SENTENCE.split()
    return {
        "prose": " ".join(words[i % len(words)] for i in range(12_000))[:65_000],
        "combining mark after each space": "ab \u0301cd e\u0301 " * 7_000,
        "control characters glued to words": "ab\x1ccd ef\x00gh \ufffd " * 5_000,
        "cjk": "漢字かな 混じり文 " * 9_000,
        "punctuation": "a.b,c!d? (e) " * 8_000,
        "no plain space": "word\n\t" * 14_000,
        "one huge word": "x" * 99_000,
        "mostly spaces": "start" + " " * 95_000 + " end of the text",
        "uppercase and accents": "Ärger ÜBER Straße ÉTÉ " * 4_000,
    }


def test_long_texts_tokenize_as_if_read_whole(minilm_dir: Path) -> None:
    """Reading a long text only up to a space past what truncation keeps gives the same
    tokens and truncation flag as tokenizing all of it (which held the GIL for 60 ms)."""
    settings = resolve_model(str(minilm_dir), env={})
    tokenizer, _ = load_tokenizer(settings)
    read_in_part = set()
    for name, text in long_texts().items():
        whole = tokenizer.encode(text, add_special_tokens=True)
        read = encode_truncated(tokenizer, text, settings.max_tokens)
        assert read.ids == whole.ids, name
        assert bool(read.overflowing) == bool(whole.overflowing), name
        if len(read.overflowing) < len(whole.overflowing):
            read_in_part.add(name)
    assert read_in_part == set(long_texts()) - {"no plain space", "one huge word", "mostly spaces"}


# -- invariance over the real server and model --------------------------------------------

SENTENCE = (
    "the embedder batches texts of similar length together so padding stays small while "
    "the oldest request always goes first and nothing starves under load"
)
WORDS = tuple(SENTENCE.split())


def mixed_texts(seed: int, count: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        " ".join(rng.choice(WORDS, size=int(rng.integers(1, 60))).tolist()) for _ in range(count)
    ]


def test_concurrent_callers_get_the_vectors_they_get_alone(minilm_server: EmbedderProcess) -> None:
    """32 concurrent mixed-length calls get their solo vectors (≤1e-5), in input order."""
    stub = minilm_server.stub()
    requests = [mixed_texts(seed, 1 + seed % 2) for seed in range(32)]
    alone = []
    for texts in requests:
        response = stub.Embed(pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=60)
        alone.append(np.frombuffer(response.vectors, dtype="<f4").reshape(response.count, -1))
    barrier = threading.Barrier(32)

    def call(texts: list[str]) -> pb.EmbedResponse:
        barrier.wait(30)
        return stub.Embed(pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=120)

    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(call, requests))
    for texts, solo, response in zip(requests, alone, together, strict=True):
        assert response.count == len(texts) and response.dim == 384
        vectors = np.frombuffer(response.vectors, dtype="<f4").reshape(response.count, 384)
        assert np.max(np.abs(vectors - solo)) <= 1e-5
    # Calls answered by one shared batch report the same inference time: batching happened.
    assert len({response.timing.inference_us for response in together}) < len(together)
