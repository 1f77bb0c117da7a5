"""SIGTERM and SIGINT for a server's lifetime (the embedder's and the hub's ``serve``)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = [
    "no_signals",
    "stop_signals",
    "wait_for_stop",
    "wait_in_slices",
]

# The longest a signal taken by another thread waits for its handler (see wait_in_slices).
SIGNAL_CHECK_SECONDS = 0.5


@contextmanager
def stop_signals(
    on_first: Callable[[str], None], on_second: Callable[[], None] | None = None
) -> Iterator[None]:
    """Within the block, the first SIGTERM or SIGINT calls ``on_first`` with its name; a
    later one calls ``on_second`` (``on_first`` again without it). The handlers before are
    put back after."""
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1 or on_second is None:
            on_first(signal.Signals(signum).name)
        else:
            on_second()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def no_signals() -> Iterator[None]:
    """In place of ``stop_signals`` where the caller owns the signals (tests, threads)."""
    yield


def wait_in_slices(wait: Callable[[float], bool], seconds: float | None = None) -> bool:
    """Call ``wait(timeout)`` (an ``Event.wait``, a ``join`` answering whether it is over)
    with timeouts of at most ``SIGNAL_CHECK_SECONDS`` until it answers True or ``seconds``
    have passed (None: until it answers True); whether it did.

    The kernel gives a process's signal to any thread not blocking it, and Python runs the
    handler on the main thread only when that thread next runs: a main thread blocked in
    one long wait sleeps on while a grpc thread took the SIGTERM (for ever, without a
    timeout). Waking to check is what lets the handler run."""
    if seconds is not None and not seconds >= 0:  # NaN included: no wait, as Event.wait
        seconds = 0.0
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        left = SIGNAL_CHECK_SECONDS if deadline is None else deadline - time.monotonic()
        if wait(max(0.0, min(left, SIGNAL_CHECK_SECONDS))):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def wait_for_stop(stop: threading.Event, seconds: float | None = None) -> bool:
    """``stop.wait(seconds)`` that sees a stop asked by a signal any thread took within
    ``SIGNAL_CHECK_SECONDS``; whether ``stop`` is set."""
    return wait_in_slices(stop.wait, seconds)
