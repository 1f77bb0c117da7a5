"""The engines' shapes (engines.md §1-§3): their tables, constants and rows.

``Engine`` names one engine's tables (``PREDICTIONS``, ``BEHAVIORS``); ``Item``,
``Matcher``, ``Scored``, ``Listed``, ``Recorded``, ``Lookup`` and ``SeedPlan`` are what the
engine store reads and writes; ``cosines`` compares stored BLOBs with a query (the dimension guard).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from thatch.frontend.store.rows import USABLE
from thatch.frontend.store.vectors import decode

__all__ = [
    "AUTO_FIRE_THRESHOLD",
    "BEHAVIORS",
    "CONFIDENCE_FLOOR",
    "DEDUP_THRESHOLD",
    "DELTAS",
    "FLOOR_EVIDENCE",
    "ITEMS_SURFACED",
    "ITEM_COLUMNS",
    "LINKED_ITEM_COLUMNS",
    "MATCHERS_CONSIDERED",
    "NOISE_FLOOR",
    "P0",
    "PREDICTIONS",
    "PROVENANCE_KEPT",
    "PROVENANCE_SHOWN",
    "PROVENANCE_TRIM",
    "W_SOFT",
    "Engine",
    "Item",
    "K",
    "Listed",
    "Lookup",
    "Matcher",
    "Provenance",
    "Recorded",
    "Scored",
    "SeedPlan",
    "cosines",
    "evidence_of",
    "item_from_row",
    "marks",
]

# engines.md §2
K = 5.0
P0 = 0.5
W_SOFT = 0.25
DEDUP_THRESHOLD = 0.85
AUTO_FIRE_THRESHOLD = 0.60
MATCHERS_CONSIDERED = 5
ITEMS_SURFACED = 5
NOISE_FLOOR = 0.01
CONFIDENCE_FLOOR = 0.35
FLOOR_EVIDENCE = 3
PROVENANCE_SHOWN = 10
PROVENANCE_KEPT = 100  # rows of provenance kept per item (docs/engines.md), newest first
PROVENANCE_TRIM = 500  # older rows deleted per signal at most

# signal → (confirm delta, disconfirm delta); creation signals change no count.
DELTAS: dict[str, tuple[float, float]] = {
    "create": (0.0, 0.0),
    "codify": (0.0, 0.0),
    "confirm": (1.0, 0.0),
    "disconfirm": (0.0, 1.0),
    "soft": (0.0, W_SOFT),
}


@dataclass(frozen=True)
class Engine:
    """The tables of one engine (store.md §3) and the signals it records."""

    name: str  # "prediction" / "behavior"
    matchers: str
    items: str
    edges: str
    provenance: str
    item_column: str
    signals: tuple[str, ...]
    creation_signal: str


PREDICTIONS = Engine(
    "prediction",
    "prediction_matchers",
    "predictions",
    "prediction_edges",
    "prediction_provenance",
    "prediction_id",
    ("create", "confirm", "disconfirm", "soft"),
    "create",
)
BEHAVIORS = Engine(
    "behavior",
    "behavior_matchers",
    "behaviors",
    "behavior_edges",
    "behavior_provenance",
    "behavior_id",
    ("codify", "confirm", "disconfirm"),
    "codify",
)


def evidence_of(confirm: float, disconfirm: float) -> int:
    return math.floor(confirm + disconfirm + 0.5)


@dataclass(frozen=True)
class Item:
    """One prediction or behavior, without its vector."""

    id: str
    store: str
    statement: str
    rationale: str | None
    model: str | None
    confidence: float
    confirm: float
    disconfirm: float
    created_at: str
    updated_at: str
    dim: int | None

    @property
    def evidence(self) -> int:
        return evidence_of(self.confirm, self.disconfirm)

    @property
    def fires(self) -> bool:
        """False under the confidence floor: rejected often enough never to auto-fire."""
        return not (self.confidence < CONFIDENCE_FLOOR and self.evidence >= FLOOR_EVIDENCE)


@dataclass(frozen=True)
class Matcher:
    id: str
    store: str
    description: str


@dataclass(frozen=True)
class Scored:
    """An item reached through ``matcher`` at ``cosine``: score = cosine × weight × confidence."""

    item: Item
    matcher: Matcher
    cosine: float
    score: float


@dataclass(frozen=True)
class Provenance:
    signal: str
    detail: str | None
    created_at: str


@dataclass(frozen=True)
class Listed:
    item: Item
    matchers: list[tuple[str, float]]  # (description, weight)
    provenance: list[Provenance]  # newest first, at most PROVENANCE_SHOWN


@dataclass(frozen=True)
class Recorded:
    """What ``record`` did: ``created`` a new item or reused one; the item after the write."""

    item: Item
    created: bool
    matcher: Matcher


@dataclass(frozen=True)
class Lookup:
    """What a lookup by statement found (show, delete, feedback): ``item``, the nearest at
    cosine ≥ the threshold (the one a write acts on); else None and ``nearest``, the
    closest item of the scope below it with its cosine (≥ ``SIMILAR_FLOOR``): a hint to
    show, never acted on (None when the scope holds none)."""

    item: Item | None
    nearest: tuple[Item, float] | None = None


@dataclass
class SeedPlan:
    """One default to write (engines.md §6): ``existing`` None creates it, else upgrades."""

    statement: str
    rationale: str
    situation: str
    statement_vector: Any
    situation_vector: Any
    model: str
    existing: Item | None = None
    detail: str = ""
    stamp_check: str = ""  # the rationale the existing row must still hold (re-checked)
    key: str | None = None  # the default's key: a create re-checks it is not switched off


def _item_columns(prefix: str = "") -> str:
    names = [
        "id",
        "store",
        "statement",
        "rationale",
        "model",
        "confidence",
        "confirm_count",
        "disconfirm_count",
        "created_at",
        "updated_at",
    ]
    usable = USABLE.replace("embedding", f"{prefix}embedding")
    return ", ".join(prefix + name for name in names) + (
        f", CASE WHEN {usable} THEN length({prefix}embedding) / 4 END"
    )


ITEM_COLUMNS = _item_columns()
LINKED_ITEM_COLUMNS = _item_columns("i.")


def item_from_row(row: Sequence[Any]) -> Item:
    return Item(
        id=row[0],
        store=row[1],
        statement=row[2],
        rationale=row[3],
        model=row[4],
        confidence=float(row[5]),
        confirm=float(row[6]),
        disconfirm=float(row[7]),
        created_at=row[8],
        updated_at=row[9],
        dim=row[10],
    )


def cosines(blobs: Sequence[object], query: Any) -> list[float | None]:
    """float64 cosine of each BLOB to ``query``; None for a missing or other-dimension vector
    (the dimension guard: vectors of another model never compare)."""
    q = np.asarray(query, dtype=np.float64)
    q_norm = float(np.linalg.norm(q))
    out: list[float | None] = []
    for blob in blobs:
        vector = decode(blob)
        if vector is None or vector.shape != q.shape:
            out.append(None)
            continue
        v = vector.astype(np.float64)
        norms = float(np.linalg.norm(v)) * q_norm
        out.append(float(np.dot(v, q) / norms) if norms else 0.0)
    return out


def marks(names: Sequence[str]) -> str:
    return ", ".join("?" for _ in names)
