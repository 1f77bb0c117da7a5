"""The built-in ``mock`` model (docs/embedder.md §mock-model): hashed bag of words, no onnxruntime.

Deterministic and instant, so tests and demos get real-looking vectors: texts sharing
words have positive cosine, identical texts 1.0. "Tokens" are the lowercase ``\\w+`` words;
their count is what ``Tokenized.n_tokens`` reports (ids are word indices, never truncated).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import ModelSettings, Tokenized

__all__ = ["MOCK_DIM", "MockEncoder", "mock_settings", "mock_vector"]

MOCK_DIM = 384
_WORD = re.compile(r"\w+")


def mock_settings() -> ModelSettings:
    return ModelSettings(
        model_id="mock",
        dim=MOCK_DIM,
        max_tokens=0,  # the mock never truncates
        pooling="mean",
        query_prefix="",
        quantized=False,
        source="mock",
    )


def mock_vector(text: str) -> npt.NDArray[np.float32]:
    """The mock embedding of one text: ±1 per word at a hashed index, L2-normalised."""
    vector = np.zeros(MOCK_DIM, dtype=np.float64)
    for word in _WORD.findall(text.lower()):
        digest = hashlib.sha256(word.encode("utf-8")).digest()
        index = int.from_bytes(digest[:4], "big") % MOCK_DIM
        vector[index] += 1.0 if digest[4] % 2 == 0 else -1.0
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        vector[:] = 0.0
        vector[0] = 1.0
        norm = 1.0
    return (vector / norm).astype(np.float32)


class MockEncoder:
    """``Encoder`` for the mock model; keeps the text itself so ``encode`` can hash it."""

    def __init__(self, settings: ModelSettings | None = None) -> None:
        self.settings = settings or mock_settings()
        self._loaded = False

    def tokenize(self, text: str, kind: Kind) -> Tokenized:
        words = _WORD.findall(text.lower())
        return _MockTokenized(ids=np.arange(len(words), dtype=np.int64), truncated=False, text=text)

    def encode(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        if not self._loaded:
            self.load()
        out = np.zeros((len(batch), MOCK_DIM), dtype=np.float32)
        for row, item in enumerate(batch):
            if not isinstance(item, _MockTokenized):
                raise TypeError("MockEncoder.encode needs items from MockEncoder.tokenize")
            out[row] = mock_vector(item.text)
        return out

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        self._loaded = True

    def release(self) -> None:
        self._loaded = False


@dataclass(frozen=True)
class _MockTokenized(Tokenized):
    """A ``Tokenized`` that remembers its text (the mock hashes words, not ids)."""

    text: str
