"""The engines' own tables (m012; docs/engines.md §default-behaviors) and the indexes of
their rows to re-embed (m032)."""

from __future__ import annotations

import sqlite3

__all__ = [
    "ENGINE_EMBEDDED_TABLES",
    "engine_model_index",
    "engine_pending_index",
    "m012_defaults_off",
    "m032_engine_embeddings",
]

# The engine tables holding embeddings: both engines' matchers and items.
ENGINE_EMBEDDED_TABLES = ("prediction_matchers", "predictions", "behavior_matchers", "behaviors")
# ``rows.USABLE`` and ``rows.MISSING`` as m032 states them (a migration stays as written).
_USABLE = "(typeof(embedding) = 'blob' AND length(embedding) > 0 AND length(embedding) % 4 = 0)"
_MISSING = f"(NOT {_USABLE})"


def engine_model_index(table: str) -> str:
    """m032's index of ``table``'s embedded rows by model."""
    return f"thatch_{table}_embedded_model"


def engine_pending_index(table: str) -> str:
    """m032's index of ``table``'s rows not embedded."""
    return f"thatch_{table}_pending"


def m012_defaults_off(conn: sqlite3.Connection) -> None:
    """The default behaviors a person switched off (docs/engines.md §defaults): seeding
    never brings those back."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS thatch_defaults_off (key TEXT PRIMARY KEY, at TEXT NOT NULL)"
    )


def m032_engine_embeddings(conn: sqlite3.Connection) -> None:
    """The engines' rows by model where embedded, and those not embedded, for the hygiene
    report's engine counts at every session start (``EngineUpkeep.embedding_counts``):
    without them each count read every row of the four tables, however few needed
    re-embedding. Reads every engine row once (``BUILDS_INDEXES``)."""
    for table in ENGINE_EMBEDDED_TABLES:
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {engine_model_index(table)} ON {table} (model) "
            f"WHERE {_USABLE}"
        )
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {engine_pending_index(table)} ON {table} (id) "
            f"WHERE {_MISSING}"
        )
