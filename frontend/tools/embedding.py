"""What the tool layer needs of an embedder client: ``EmbedderClient`` is one, tests pass
their own. Kept apart from context.py so that what the context holds (the pending fill)
can name it without importing the context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.embedder.client.kind import Kind

__all__ = [
    "EmbedResultLike",
    "Embedder",
    "UnusableEmbedder",
]


class EmbedResultLike(Protocol):
    @property
    def vectors(self) -> npt.NDArray[np.float32]: ...

    @property
    def model_id(self) -> str: ...


class Embedder(Protocol):
    """The part of ``EmbedderClient`` the frontends use."""

    def embed(
        self,
        texts: Sequence[str],
        kind: Kind,
        *,
        timeout: float = ...,
        start_wait: float = ...,
    ) -> EmbedResultLike: ...

    def ensure_started(self, *, wait: float) -> None:
        """Start a local embedder if none runs; wait up to ``wait`` s (0: do not wait)."""
        ...

    def close(self) -> None: ...


class UnusableEmbedder:
    """Stands in for a client the configuration cannot make: a malformed or too long
    THATCH_EMBEDDER_ADDR, TLS files that cannot be read. Every call is an outage with that
    cause, so ``thatch mcp`` keeps serving (a save is kept pending, a search says what to
    fix) where it used to exit after ``initialize`` and take every tool with it."""

    def __init__(self, error: EmbedderUnavailable) -> None:
        self.error = error

    @classmethod
    def from_error(cls, error: Exception) -> UnusableEmbedder:
        if isinstance(error, EmbedderUnavailable):
            return cls(error)
        fix = (
            "set THATCH_EMBEDDER_ADDR to a shorter unix:/// path"
            if "too long" in str(error)
            else "set THATCH_EMBEDDER_ADDR to unix:///path, host:port or dns:///host:port, "
            "or unset it for the local embedder"
        )
        return cls(EmbedderUnavailable(str(error), fix))

    def embed(
        self,
        texts: Sequence[str],
        kind: Kind,
        *,
        timeout: float = 30.0,
        start_wait: float = 20.0,
    ) -> EmbedResultLike:
        raise self.error

    def ensure_started(self, *, wait: float) -> None:
        """Nothing to start: the address itself is what is wrong."""

    def close(self) -> None:
        pass
