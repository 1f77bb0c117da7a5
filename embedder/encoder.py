"""The interface between the gRPC server and a model runtime.

The server (batching, lifecycle) only talks to an ``Encoder``: tokenize in the request
thread, run batches one at a time (from whichever thread runs the batch), release/reload
the session when idle (always from the inference thread).
``thatch.embedder.models.runtime.OnnxEncoder`` is the real one,
``thatch.embedder.models.mock.MockEncoder`` the test model of docs/embedder.md §mock-model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.kind import Kind

__all__ = ["Encoder", "ModelSettings", "Tokenized"]


@dataclass(frozen=True)
class ModelSettings:
    """What a resolved model is and how to run it (docs/embedder.md §models)."""

    model_id: str
    dim: int
    max_tokens: int
    pooling: str  # "mean" | "cls"
    query_prefix: str
    quantized: bool
    revision: str = ""
    sha256: str = ""  # of the ONNX file; "" for mock, or when not computed (model list)
    path: Path | None = None  # model directory; None for mock
    onnx_path: Path | None = None
    tokenizer_path: Path | None = None
    source: str = ""  # "mock" | "local dir" | "hub cache" | "downloaded" | "needs download"
    files: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Tokenized:
    """One text after prefixing and tokenization (special tokens included)."""

    ids: npt.NDArray[np.int64]
    truncated: bool

    @property
    def n_tokens(self) -> int:
        return int(self.ids.shape[0])


class Encoder(Protocol):
    settings: ModelSettings

    def tokenize(self, text: str, kind: Kind) -> Tokenized:
        """Apply the query prefix for QUERY, tokenize, truncate to max_tokens."""
        ...

    def encode(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        """Run one padded batch: [len(batch), dim] float32, L2-normalised, input order.

        Loads the session first when it was released.
        """
        ...

    @property
    def loaded(self) -> bool: ...

    def load(self) -> None:
        """Create the inference session (idempotent) and warm it up."""
        ...

    def release(self) -> None:
        """Drop the inference session, keep the tokenizer (idle release)."""
        ...
