"""SIGTERM and SIGINT for a server's lifetime (the embedder's and the hub's ``serve``)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = [
    "no_signals",
    "stop_signals",
]


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
