"""The engines' auto-fire thresholds (engines.md §2), standard library only: the prompt
hook's warm path reads them without importing the engine store.

Defaults belong to the model that embedded the prompt (frontend/thresholds.py);
``THATCH_PREDICTION_THRESHOLD`` / ``THATCH_BEHAVIOR_THRESHOLD`` override them.
"""

from __future__ import annotations

from collections.abc import Mapping

from thatch.frontend.thresholds import VARIABLES, defaults_for, in_force

__all__ = ["auto_fire_overrides", "auto_fire_thresholds", "resolve"]

ENGINES = ("prediction", "behavior")


def auto_fire_thresholds(env: Mapping[str, str], model: str) -> dict[str, float]:
    """``{"prediction": t, "behavior": t}`` for vectors of ``model``."""
    values = in_force(env, model).values
    return {"prediction": values.prediction, "behavior": values.behavior}


def auto_fire_overrides(env: Mapping[str, str]) -> dict[str, float | None]:
    """Each engine's variable when it is a number in [0, 1], else None (the model decides)."""
    found: dict[str, float | None] = {}
    forced = in_force(env, "")
    for engine in ENGINES:
        found[engine] = (
            getattr(forced.values, engine) if forced.source(engine) == VARIABLES[engine] else None
        )
    return found


def resolve(overrides: Mapping[str, float | None], model: str) -> dict[str, float]:
    """Overrides where given, else ``model``'s defaults (the built-in ones when uncalibrated)."""
    from thatch.frontend.thresholds import BUILT_IN

    base = defaults_for(model) or BUILT_IN
    return {
        engine: value if (value := overrides.get(engine)) is not None else getattr(base, engine)
        for engine in ENGINES
    }
