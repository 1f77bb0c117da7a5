"""Dynamic batching: request threads enqueue tokenized texts, one batch runs at a time.

Request handlers call ``Batcher.submit`` with an ``EmbedCall`` (one item per text) inside
``arriving()`` and wait on ``call.done``. The inference thread owns loading and releasing
the model and runs the batches: when it finds items after being idle it waits at most
``max_wait_ms`` for companions still on their way, then runs a batch anchored on one call's
oldest pending item, filled first with that call's other items, then with those of the
calls behind it in order, each time the ones closest to the anchor in token length
(``select_batch``). Which call anchors (``Batcher._order``): one-text calls (a typed
prompt, a recall) first, oldest first, so a query waits for the batch running when it
arrived and little more; otherwise the oldest admitted of the larger calls. Larger calls
are served first in, first out: the first admitted completes first instead of all of them
advancing together and none finishing before its deadline (24 concurrent 256-text
requests once all timed out). After a batch anchored on a query the oldest larger call
anchors the next one, so a stream of queries never stalls it. A batch also stops at
``MAX_RUN_TOKENS`` padded tokens, which bounds that batch's duration. One shortcut: the
last call to arrive, finding the model loaded and nothing running, runs the batch on its
own thread, so a lone query pays no hand-off to the inference thread and back (two thread
wake-ups, ~0.2 ms on 2 cores). Either way only one batch runs at a time. Items whose call
expired or was cancelled are dropped before inference, and a call that could not finish
before its deadline behind the work queued ahead is refused at once (``TooLate``) rather
than left to time out (docs/embedder.md §batching).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar, overload

import grpc
import numpy as np
import numpy.typing as npt

from thatch.embedder.encoder import Encoder
from thatch.embedder.server.batch_selection import MAX_RUN_TOKENS, select_batch
from thatch.embedder.server.embed_calls import (
    DEADLINE_MESSAGE,
    Arrival,
    EmbedCall,
    Limits,
    Overloaded,
    TooLate,
)

__all__ = ["Batcher"]

T = TypeVar("T")
Clock = Callable[[], float]
LoadListener = Callable[[bool, str], None]


@dataclass
class _Item:
    call: EmbedCall
    index: int
    n_tokens: int


# Batches of at least this many real tokens time the model for ``TooLate``: smaller ones
# (a lone query) cost mostly fixed overhead per token and would make queued work look slow.
RATE_MIN_TOKENS = 256
RATE_WEIGHT = 0.3  # of the newest batch in the moving average of seconds per token


def _trim_heap() -> None:
    """Hand freed arena pages back to the OS so an idle release actually lowers RSS."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(name).malloc_trim(0)


class Batcher:
    """The queue and the one inference thread."""

    def __init__(
        self,
        encoder: Encoder,
        *,
        limits: Limits | None = None,
        idle_release_seconds: float = 0,
        clock: Clock = time.monotonic,
        on_load: LoadListener | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        # Batch invariance of int8 graphs (per-tensor activation scales) is the encoder's
        # job: OnnxEncoder runs such graphs one text per run, whatever batch it is given.
        self.encoder = encoder
        self.limits = limits or Limits()
        self.idle_release_seconds = idle_release_seconds
        self._clock = clock
        self._on_load = on_load
        self._log = logger or logging.getLogger("thatch.embedder")
        self._cond = threading.Condition()
        self._pending: deque[_Item] = deque()
        self._tasks: deque[tuple[Callable[[], object], concurrent.futures.Future[object]]] = deque()
        self._stopping = False
        self._arriving = 0  # calls between arrival and submit (validating, tokenizing)
        self._arriving_texts = 0  # their texts: counted against the queue's limit already
        self._busy = False  # the model runtime is in use: a batch, a load or a release
        self._wanted = False  # the inference thread waits for a caller's batch to end
        self._idle = True
        self._admitted = 0  # calls admitted so far: the next one's ``seq``
        self._query_went_last = False  # the last batch was anchored on a one-text call
        self._seconds_per_token: float | None = None  # recent batches' pace (see TooLate)
        self._last_embed = clock()
        self._thread = threading.Thread(target=self._run, name="inference", daemon=True)

    # -- request threads -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def pending_count(self) -> int:
        """Queued texts still wanted (cancelled or failed calls' texts do not count)."""
        with self._cond:
            return self._live_pending()

    def _live_pending(self) -> int:
        return sum(not item.call.finished for item in self._pending)

    def submit(self, call: EmbedCall, arrival: Arrival | None = None) -> None:
        """Queue every text of ``call``; raises ``Overloaded`` when the queue is full, or
        ``TooLate`` when what is queued ahead of it would outlast its deadline.

        ``arrival`` is the handle of the ``arriving()`` block the call was made in.
        """
        with self._cond:
            queued = self._live_pending()
            if queued + len(call.texts) > self.limits.max_queued_texts:
                raise Overloaded(queued, self.limits.max_queued_texts)
            late = self._too_late(call)
            if late is not None:
                raise late
            call.seq = self._admitted
            self._admitted += 1
            for index, tokenized in enumerate(call.texts):
                self._pending.append(_Item(call, index, tokenized.n_tokens))
            self._last_embed = self._clock()
            if arrival is not None:
                arrival.call = call
            if arrival is None or self._arriving != 1:
                self._cond.notify_all()
            # else this is the only call on its way: leaving arriving() decides who runs it

    def _too_late(self, call: EmbedCall) -> TooLate | None:
        """Under the lock: ``TooLate`` when the texts that run before ``call`` (queries:
        the queued queries; larger calls: everything queued, first in, first out) and its
        own, at the pace of recent full batches, would take longer than its deadline allows.
        No estimate before such a batch ran, nor for a call without a deadline."""
        rate = self._seconds_per_token
        if rate is None or call.deadline is None:
            return None
        query = len(call.texts) == 1
        ahead = [
            item
            for item in self._pending
            if not item.call.finished and (not query or len(item.call.texts) == 1)
        ]
        tokens = sum(item.n_tokens for item in ahead) + sum(t.n_tokens for t in call.texts)
        needed = tokens * rate
        left = call.deadline - self._clock()
        return TooLate(len(ahead), needed, left) if needed > left else None

    @contextlib.contextmanager
    def arriving(self, texts: int = 0) -> Iterator[Arrival]:
        """Mark a call of ``texts`` texts from its arrival until it is submitted (or refused).

        Raises ``Overloaded`` at once when those texts, with the ones queued and the ones
        other calls are tokenizing, would pass the queue's limit: refused before its
        tokenizing (a 15 MB call takes seconds of CPU), not after.

        The inference thread waits for companions (at most ``max_wait_ms``) only while
        some call is on its way: a lone request runs at once instead of paying the wait.
        On a normal exit, the last call on its way runs the next batch itself when nothing
        else is using the model and that batch holds its own call (see the module docstring).
        """
        arrival = Arrival()
        with self._cond:
            queued = self._live_pending() + self._arriving_texts
            if queued + texts > self.limits.max_queued_texts:
                raise Overloaded(queued, self.limits.max_queued_texts)
            self._arriving += 1
            self._arriving_texts += texts
        try:
            yield arrival
        except BaseException:
            with self._cond:
                self._arriving -= 1
                self._arriving_texts -= texts
                self._cond.notify_all()
            raise
        batch = None
        with self._cond:
            self._arriving -= 1
            self._arriving_texts -= texts
            try:
                batch = self._claim_batch(arrival.call)
            finally:
                if batch is None:
                    self._cond.notify_all()
        if batch is not None:
            self._run_claimed(batch)

    def _claim_batch(self, own: EmbedCall | None) -> list[_Item] | None:
        """Under the lock: take the next batch for the calling thread, if it may run it."""
        if own is None or self._arriving or self._busy or self._tasks or self._stopping:
            return None
        if not self.encoder.loaded:
            return None  # reloading is the inference thread's job (with its logging)
        self._drop_dead(self._clock())
        batch = self._take_batch(containing=own)
        if batch is not None:
            self._busy = True
            self._idle = False
        return batch

    def _run_claimed(self, batch: list[_Item]) -> None:
        try:
            self._run_batch(batch)
        except Exception:  # keep serving; the batch's calls are already finished
            self._log.exception("inference error")
        finally:
            with self._cond:
                self._busy = False
                if self._pending or self._tasks or self._stopping or self._wanted:
                    self._cond.notify_all()
                else:
                    self._idle = True

    def cancel(self, call: EmbedCall, code: grpc.StatusCode, message: str) -> None:
        """Finish ``call`` with an error; its queued items are dropped before inference."""
        with self._cond:
            self._finish(call, (code, message))
            self._cond.notify_all()

    def run_in_thread(self, func: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``func`` on the inference thread (the model runtime lives there)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._cond:
            self._tasks.append((func, future))  # type: ignore[arg-type]
            self._cond.notify_all()
        return future

    def load(self) -> concurrent.futures.Future[None]:
        """Load and warm up the model on the inference thread."""
        return self.run_in_thread(self._load)

    def stop(self, timeout: float | None = None) -> bool:
        """Finish the queued work, then end the thread; False if it is still running."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- inference thread ------------------------------------------------------------

    def _finish(self, call: EmbedCall, error: tuple[grpc.StatusCode, str] | None) -> None:
        if call.finished:
            return
        call.error = error
        call.done.set()

    def _drop_dead(self, now: float) -> None:
        if not any(
            item.call.finished or (item.call.deadline is not None and item.call.deadline <= now)
            for item in self._pending
        ):
            return
        alive: deque[_Item] = deque()
        for item in self._pending:
            call = item.call
            if not call.finished and call.deadline is not None and call.deadline <= now:
                self._finish(call, (grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_MESSAGE))
            if not call.finished:
                alive.append(item)
        self._pending = alive

    @overload
    def _take_batch(self) -> list[_Item]: ...

    @overload
    def _take_batch(self, containing: EmbedCall) -> list[_Item] | None: ...

    def _take_batch(self, containing: EmbedCall | None = None) -> list[_Item] | None:
        """Under the lock: remove the next batch from the queue and mark its calls started.

        With ``containing``, only a batch holding one of that call's items is taken (else
        None, and the queue is left as it was).
        """
        if not self._pending:
            return None if containing is not None else []
        if len(self._pending) == 1:
            batch = [self._pending[0]]
            rest: deque[_Item] = deque()
            anchored_on = batch[0].call
        else:
            order = self._order()
            rank = {id(call): place for place, call in enumerate(order)}
            ranks = [rank[id(item.call)] for item in self._pending]
            anchored_on = order[0]
            chosen = select_batch(
                [item.n_tokens for item in self._pending],
                max_batch_tokens=min(self.limits.max_batch_tokens, MAX_RUN_TOKENS),
                max_batch_size=self.limits.max_batch_size,
                anchor=ranks.index(0),  # the anchor call's oldest pending item
                ranks=ranks,
            )
            chosen_set = set(chosen)
            batch = [self._pending[i] for i in chosen]
            rest = deque(item for i, item in enumerate(self._pending) if i not in chosen_set)
        if containing is not None and all(item.call is not containing for item in batch):
            return None
        self._pending = rest
        self._query_went_last = len(anchored_on.texts) == 1
        start = self._clock()
        for item in batch:
            if item.call.first_batch_start is None:
                item.call.first_batch_start = start
        return batch

    def _order(self) -> list[EmbedCall]:
        """Under the lock: the calls with pending items in the order they are served; the
        first anchors the next batch.

        One-text calls (queries) go first, oldest first, so a query waits for the batch
        running when it arrived, not for the larger calls queued before it. Larger calls
        follow in admission order (first in, first out): the first admitted completes
        first. After a batch anchored on a query, the oldest larger call anchors the next
        one (queries then still fill it first), so queries arriving during every batch
        cannot stall the larger calls: they get every other batch at least.
        """
        queries: list[EmbedCall] = []
        larger: list[EmbedCall] = []
        seen: set[int] = set()
        for item in self._pending:  # in admission order: items are queued call by call
            call = item.call
            if id(call) not in seen:
                seen.add(id(call))
                (queries if len(call.texts) == 1 else larger).append(call)
        if larger and (self._query_went_last or not queries):
            return [larger[0], *queries, *larger[1:]]
        return [*queries, *larger]

    def _next_action(self) -> Callable[[], None] | None:
        """Block until there is something to do; None means the thread should end."""
        gather_until: float | None = None
        with self._cond:
            while True:
                if self._busy:  # a request thread is running a batch
                    self._wanted = True
                    self._cond.wait()
                    continue
                self._wanted = False
                if self._tasks:
                    func, future = self._tasks.popleft()
                    self._busy = True
                    return lambda: self._run_task(func, future)
                now = self._clock()
                self._drop_dead(now)
                if self._pending:
                    wait_ms = self.limits.max_wait_ms
                    gathering = self._idle and wait_ms > 0 and not self._stopping
                    if gathering and self._arriving > 0:
                        if gather_until is None:
                            gather_until = now + wait_ms / 1000
                        if now < gather_until and len(self._pending) < self.limits.max_batch_size:
                            self._cond.wait(gather_until - now)
                            continue
                    batch = self._take_batch()
                    # Whatever arrives while this batch runs forms the next one at once.
                    self._idle = False
                    self._busy = True
                    return lambda: self._run_batch(batch)
                gather_until = None
                self._idle = True
                if self._stopping:
                    return None
                timeout = None
                if self.idle_release_seconds > 0 and self.encoder.loaded:
                    timeout = self._last_embed + self.idle_release_seconds - now
                    if timeout <= 0:
                        self._busy = True
                        return self._release
                self._cond.wait(timeout)

    def _run(self) -> None:
        while True:
            action = self._next_action()
            if action is None:
                return
            try:
                action()
            except Exception:  # keep serving; the failure is already reported to callers
                self._log.exception("inference thread error")
            finally:
                with self._cond:
                    self._busy = False

    def _run_task(
        self, func: Callable[[], object], future: concurrent.futures.Future[object]
    ) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(func())
        except BaseException as error:
            future.set_exception(error)

    def _load(self) -> None:
        try:
            self.encoder.load()
        except Exception as error:
            if self._on_load:
                self._on_load(False, str(error))
            raise
        with self._cond:
            self._last_embed = self._clock()
        if self._on_load:
            self._on_load(True, "")

    def _release(self) -> None:
        idle = self.idle_release_seconds
        self.encoder.release()
        _trim_heap()
        self._log.info("released the model session after %g s without Embed calls", idle)

    def _run_batch(self, batch: list[_Item]) -> None:
        if not self.encoder.loaded:
            self._log.info("reloading the model session")
            try:
                self._load()
            except Exception as error:
                self._log.error("model could not be loaded: %s", error)
                self._fail_all(batch, f"model could not be loaded: {error}")
                return
        began = time.perf_counter()
        try:
            rows = [item.call.texts[item.index] for item in batch]
            vectors = self.encoder.encode(rows)
            elapsed = time.perf_counter() - began
            with self._cond:
                self._deliver(batch, vectors, elapsed)
        except Exception as error:
            self._log.exception("inference failed")
            with self._cond:
                for item in batch:
                    self._finish(
                        item.call, (grpc.StatusCode.INTERNAL, f"inference failed: {error}")
                    )

    def _deliver(
        self, batch: list[_Item], vectors: npt.NDArray[np.float32], elapsed: float
    ) -> None:
        """Under the lock: each item's row to its call; a call with every row is done."""
        if len(vectors) != len(batch):
            raise ValueError(f"the model returned {len(vectors)} vectors for {len(batch)} texts")
        tokens = sum(item.n_tokens for item in batch)
        if tokens >= RATE_MIN_TOKENS:
            rate = elapsed / tokens
            old = self._seconds_per_token
            self._seconds_per_token = rate if old is None else old + RATE_WEIGHT * (rate - old)
        counted: set[int] = set()
        for item, row in zip(batch, vectors, strict=True):
            call = item.call
            if call.finished:
                continue
            call.vectors[item.index] = row
            if id(call) not in counted:
                call.inference_s += elapsed
                counted.add(id(call))
            call.remaining -= 1
            if call.remaining == 0:
                self._finish(call, None)
        self._last_embed = max(self._last_embed, self._clock())

    def _fail_all(self, batch: list[_Item], message: str) -> None:
        """A failed reload fails this batch and everything queued: no reload storm."""
        with self._cond:
            for item in [*batch, *self._pending]:
                self._finish(item.call, (grpc.StatusCode.FAILED_PRECONDITION, message))
            self._pending.clear()
