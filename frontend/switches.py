"""Per-project switches for thatch's optional parts (docs/tools.md §switches).

``THATCH_ENGINES=off`` and ``THATCH_CHAT=off`` turn the engines (predictions, behaviors)
and chat off: their tool leaves ``tools/list`` and the hooks print none of their lines.
A project sets the variable in thatch's MCP entry (setup keeps it there). Standard
library only: hooks and the MCP quick start read it.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "FEATURES",
    "features_off",
    "is_on",
    "variable",
]


FEATURES = ("engines", "chat")
_OFF = frozenset({"off", "0", "false", "no"})


def variable(feature: str) -> str:
    return f"THATCH_{feature.upper()}"


def features_off(env: Mapping[str, str]) -> frozenset[str]:
    """The features ``env`` switches off."""
    return frozenset(
        feature for feature in FEATURES if env.get(variable(feature), "").strip().lower() in _OFF
    )


def is_on(env: Mapping[str, str], feature: str) -> bool:
    return feature not in features_off(env)
