"""What the tool layer needs of an embedder client: ``EmbedderClient`` is one, tests pass
their own. Kept apart from context.py so that what the context holds (the pending fill)
can name it without importing the context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.kind import Kind

__all__ = [
    "EmbedResultLike",
    "Embedder",
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
