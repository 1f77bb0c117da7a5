"""The engines' auto-fire thresholds from the environment (engines.md §2), standard library
only: the prompt hook's warm path reads them without importing the engine store."""

from __future__ import annotations

import math
from collections.abc import Mapping

DEFAULT_AUTO_FIRE = 0.60
VARIABLES = {
    "prediction": "THATCH_PREDICTION_THRESHOLD",
    "behavior": "THATCH_BEHAVIOR_THRESHOLD",
}


def auto_fire_thresholds(env: Mapping[str, str]) -> dict[str, float]:
    """``{"prediction": t, "behavior": t}``: each variable when a number in [0, 1], else 0.60."""
    found = {}
    for engine, name in VARIABLES.items():
        try:
            number = float(env.get(name, "").strip())
        except ValueError:
            number = DEFAULT_AUTO_FIRE
        found[engine] = number if not math.isnan(number) and 0 <= number <= 1 else DEFAULT_AUTO_FIRE
    return found
