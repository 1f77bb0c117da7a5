"""Value types the store hands out: memories, matches, duplicate pairs, remember outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "DUPLICATE_THRESHOLD",
    "STALE_DAYS",
    "VERDICTS",
    "DuplicatePair",
    "Match",
    "Memory",
    "RememberOutcome",
]


@dataclass(frozen=True)
class Memory:
    """One ``entries`` row, without its vector (``dim`` says whether it has a usable one)."""

    slug: str
    store: str
    label: str
    content: str  # the stored text "# label\n\n...", exactly what was embedded
    model: str | None
    branch: str | None
    confidence: int | None
    archived: bool
    created_at: str
    updated_at: str
    recall_count: int
    last_recalled_at: str | None
    dim: int | None  # None when the embedding is NULL (pending) or an unusable BLOB

    @property
    def pending(self) -> bool:
        """True when the memory has no usable embedding yet (invisible to searches)."""
        return self.dim is None


@dataclass(frozen=True)
class Match:
    memory: Memory
    score: float


@dataclass(frozen=True)
class DuplicatePair:
    slug_a: str  # the smaller slug
    label_a: str
    slug_b: str
    label_b: str
    score: float


class RememberOutcome(Enum):
    SAVED = "saved"
    EXISTS = "exists"
    ARCHIVED_GUARD = "archived_guard"


VERDICTS = ("duplicate", "supplement", "contradiction", "unrelated")
STALE_DAYS = 90
DUPLICATE_THRESHOLD = 0.85
