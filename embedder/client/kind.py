"""What a text is embedded as: the query side gets the model's query prefix."""

from __future__ import annotations

from enum import Enum

__all__ = ["Kind"]


class Kind(Enum):
    QUERY = "query"
    PASSAGE = "passage"
