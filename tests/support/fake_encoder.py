"""A fast, controllable ``Encoder`` for unit tests of batching and the servicer.

Tokens are the whitespace-separated words plus [CLS]/[SEP]; a vector is a normalised
histogram of token ids, so it depends only on its own text. ``gate`` (when given) holds
every ``encode`` until the test sets it; ``encode_started`` tells the test a batch began.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt
from thatch.embedder.encoder import Kind, ModelSettings, Tokenized
from thatch.embedder.errors import ModelError

CLS, SEP = 101, 102


class FakeEncoder:
    def __init__(
        self,
        *,
        dim: int = 8,
        max_tokens: int = 16,
        gate: threading.Event | None = None,
        loaded: bool = True,
    ) -> None:
        self.settings = ModelSettings(
            model_id="test/fake",
            dim=dim,
            max_tokens=max_tokens,
            pooling="mean",
            query_prefix="query: ",
            quantized=False,
            revision="rev1",
            sha256="ab" * 32,
        )
        self.gate = gate
        self.fail_load: str | None = None
        self.encode_started = threading.Event()
        self.batch_lengths: list[list[int]] = []
        self.threads: dict[str, set[str]] = {"encode": set(), "load": set(), "release": set()}
        self._loaded = loaded

    def tokenize(self, text: str, kind: Kind) -> Tokenized:
        if kind is Kind.QUERY:
            text = self.settings.query_prefix + text
        words = [sum(map(ord, word)) % 1000 + 1000 for word in text.split()]
        ids = [CLS, *words, SEP]
        truncated = len(ids) > self.settings.max_tokens
        if truncated:
            ids = [*ids[: self.settings.max_tokens - 1], SEP]
        return Tokenized(ids=np.array(ids, dtype=np.int64), truncated=truncated)

    def encode(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        self.threads["encode"].add(threading.current_thread().name)
        self.batch_lengths.append([item.n_tokens for item in batch])
        self.encode_started.set()
        if self.gate is not None and not self.gate.wait(30):
            raise RuntimeError("test gate never opened")
        out = np.zeros((len(batch), self.settings.dim), dtype=np.float32)
        for row, item in enumerate(batch):
            for position, token in enumerate(item.ids):
                out[row, (int(token) + position) % self.settings.dim] += 1.0
            out[row] /= np.linalg.norm(out[row])
        return out

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        self.threads["load"].add(threading.current_thread().name)
        if self.fail_load is not None:
            raise ModelError(self.fail_load)
        self._loaded = True

    def release(self) -> None:
        self.threads["release"].add(threading.current_thread().name)
        self._loaded = False

    def expected(self, text: str, kind: Kind = Kind.PASSAGE) -> npt.NDArray[np.float32]:
        """The vector this encoder gives ``text`` alone."""
        gate, self.gate = self.gate, None
        try:
            return self.encode([self.tokenize(text, kind)])[0]
        finally:
            self.gate = gate
            self.batch_lengths.pop()
