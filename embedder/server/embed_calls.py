"""One Embed request in flight and the limits it is admitted under (docs/embedder.md
§batching, §errors): what the servicer hands the ``Batcher`` and reads back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import grpc
import numpy as np
import numpy.typing as npt

from thatch.embedder.encoder import Tokenized

__all__ = ["DEADLINE_MESSAGE", "Arrival", "EmbedCall", "Limits", "Overloaded", "TooLate"]

DEADLINE_MESSAGE = "deadline exceeded before inference"


@dataclass(frozen=True)
class Limits:
    """The server's limits, reported verbatim by ``Info`` (docs/embedder.md §batching, §errors)."""

    max_texts_per_request: int = 256
    max_chars_per_text: int = 100_000
    max_batch_tokens: int = 8192
    max_batch_size: int = 64
    max_queued_texts: int = 4096
    max_wait_ms: int = 2


class Overloaded(Exception):
    """The queue is full; ``str`` is the RESOURCE_EXHAUSTED message."""

    def __init__(self, queued: int, limit: int) -> None:
        super().__init__(f"embedder overloaded: {queued} texts queued (max {limit}); retry shortly")


class TooLate(Overloaded):
    """The texts queued ahead of a call would outlast its deadline: refused at once rather
    than left to time out (``str`` is the RESOURCE_EXHAUSTED message)."""

    def __init__(self, ahead: int, needed: float, left: float) -> None:
        self.ahead = ahead
        if ahead:
            message = (
                f"embedder overloaded: {ahead} texts queued ahead would take about "
                f"{needed:.2g} s, past this call's deadline in {max(left, 0):.2g} s; retry shortly"
            )
        else:  # nothing queued: the deadline itself is too short, retrying cannot help
            message = (
                f"deadline exceeded: embedding these texts takes about {needed:.2g} s, and "
                f"this call's deadline leaves {max(left, 0):.2g} s"
            )
        Exception.__init__(self, message)

    @property
    def code(self) -> grpc.StatusCode:
        if self.ahead:
            return grpc.StatusCode.RESOURCE_EXHAUSTED
        return grpc.StatusCode.DEADLINE_EXCEEDED


@dataclass
class EmbedCall:
    """One Embed request in flight: its tokenized texts, and where the results go.

    Mutated only under the batcher's lock; ``done`` is set once, with either every row of
    ``vectors`` filled or ``error`` set.
    """

    texts: list[Tokenized]
    dim: int
    deadline: float | None  # on the batcher's clock; None = no deadline
    arrived: float
    vectors: npt.NDArray[np.float32] = field(init=False)
    remaining: int = field(init=False)
    error: tuple[grpc.StatusCode, str] | None = None
    first_batch_start: float | None = None
    inference_s: float = 0.0
    # Admission order (set by Batcher.submit under its lock): larger calls run by it.
    seq: int = -1
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        # Little-endian, as EmbedResponse.vectors carries them: tobytes() needs no conversion.
        self.vectors = np.zeros((len(self.texts), self.dim), dtype="<f4")
        self.remaining = len(self.texts)

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    @property
    def started(self) -> bool:
        return self.first_batch_start is not None


class Arrival:
    """What ``Batcher.arriving()`` yields: pass it to ``submit`` for the call it carries."""

    def __init__(self) -> None:
        self.call: EmbedCall | None = None
