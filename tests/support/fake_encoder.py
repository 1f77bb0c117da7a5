"""A fast, controllable ``Encoder`` for unit tests of batching and the servicer.

Tokens are the whitespace-separated words plus [CLS]/[SEP]; a vector is a normalised
histogram of token ids, so it depends only on its own text. ``gate`` (when given) holds
every ``encode`` until the test sets it; ``encode_started`` tells the test a batch began.
``most_at_once`` is the largest number of model-runtime calls (load, encode, release) seen
running at the same time; ``work_seconds`` makes each ``encode`` take that long, like a model.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import ModelSettings, Tokenized

CLS, SEP = 101, 102


class FakeEncoder:
    def __init__(
        self,
        *,
        dim: int = 8,
        max_tokens: int = 16,
        gate: threading.Event | None = None,
        loaded: bool = True,
        work_seconds: float = 0.0,
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
        self.work_seconds = work_seconds
        self.most_at_once = 0
        self._running = 0
        self._counter = threading.Lock()
        self._loaded = loaded

    @contextlib.contextmanager
    def _in_use(self, what: str) -> Iterator[None]:
        self.threads[what].add(threading.current_thread().name)
        with self._counter:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        try:
            yield
        finally:
            with self._counter:
                self._running -= 1

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
        with self._in_use("encode"):
            self.batch_lengths.append([item.n_tokens for item in batch])
            self.encode_started.set()
            if self.gate is not None and not self.gate.wait(30):
                raise RuntimeError("test gate never opened")
            if self.work_seconds:
                time.sleep(self.work_seconds)  # the model's compute time, not a synchronisation
            return self._vectors(batch)

    def _vectors(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
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
        with self._in_use("load"):
            if self.fail_load is not None:
                raise ModelError(self.fail_load)
            self._loaded = True

    def release(self) -> None:
        with self._in_use("release"):
            self._loaded = False

    def expected(self, text: str, kind: Kind = Kind.PASSAGE) -> npt.NDArray[np.float32]:
        """The vector this encoder gives ``text`` alone (not counted as a model call)."""
        return self._vectors([self.tokenize(text, kind)])[0]
