"""A POST's fields, already checked against the CSRF token by the app."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Form"]


@dataclass(frozen=True)
class Form:
    """The first value of each field."""

    fields: Mapping[str, str]

    def get(self, name: str) -> str | None:
        return self.fields.get(name)

    def text(self, name: str) -> str:
        return self.fields.get(name, "")
