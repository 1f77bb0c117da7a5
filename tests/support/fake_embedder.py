"""A deterministic stand-in for ``EmbedderClient`` in fast tool-layer unit tests.

A vector is the normalised bag of the text's lowercase words hashed into ``dim`` buckets,
so texts sharing words have a positive cosine and equal texts score 1. ``unavailable``
(a cause string) makes every call raise ``EmbedderUnavailable`` like a missing server.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.errors import FIX_START, EmbedderUnavailable
from thatch.embedder.client.kind import Kind
from thatch.frontend.tools.context import ToolContext

MODEL_ID = "test/fake-embedder"


@dataclass(frozen=True)
class FakeResult:
    vectors: npt.NDArray[np.float32]
    model_id: str


def bag_vector(text: str, dim: int) -> npt.NDArray[np.float32]:
    vector = np.zeros(dim, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()):
        bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % dim
        vector[bucket] += 1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


@dataclass
class FakeEmbedder:
    dim: int = 256
    unavailable: str | None = None
    calls: list[tuple[list[str], Kind, float]] = field(default_factory=list)
    started: int = 0
    closed: int = 0

    def embed(
        self, texts: Sequence[str], kind: Kind, *, timeout: float = 30.0, start_wait: float = 20.0
    ) -> FakeResult:
        self.calls.append((list(texts), kind, start_wait))
        if self.unavailable is not None:
            raise EmbedderUnavailable(self.unavailable, FIX_START)
        return FakeResult(np.stack([bag_vector(t, self.dim) for t in texts]), MODEL_ID)

    def ensure_started(self, *, wait: float) -> None:
        self.started += 1

    def close(self) -> None:
        self.closed += 1


def tool_context(
    tmp_path: Path, embedder: object | None = None, *, project_store: str = "o/r"
) -> ToolContext:
    """A ToolContext over a real SQLite file in ``tmp_path`` and (by default) a FakeEmbedder;
    the caller closes it (``with tool_context(...) as ctx``), embedder included."""
    from thatch.frontend.store.memory_store import Store

    return ToolContext(
        store=Store.open(tmp_path / "thatch.db"),
        embedder=embedder if embedder is not None else FakeEmbedder(),  # type: ignore[arg-type]
        project_store=project_store,
        project_dir=tmp_path,
        host=None,
        env={},
        queue_dir=tmp_path / "queue",
    )


def rows(
    db_path: Path, sql: str = "SELECT store, slug, label FROM entries ORDER BY 1, 2"
) -> list[Any]:
    """Rows read through a separate connection: what is really in the file."""
    import sqlite3

    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
