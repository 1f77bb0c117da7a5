"""Similarity thresholds belong to the model that made the vectors (docs/tools.md §thresholds).

Cosine scores are not comparable across models: all-MiniLM-L6-v2 scores a related
prompt/memory pair around 0.39 (median on the development set) where bge-small-en-v1.5
scores well above 0.55, so one built-in number cannot serve both. Each registered model
has its own defaults; a variable still wins over them:

| threshold | variable | used by |
|---|---|---|
| recall_nudge | THATCH_RECALL_THRESHOLD | the prompt hook's recall nudge |
| recall_floor | THATCH_RECALL_FLOOR | memory_recall / thatch search drop scores below it |
| duplicate | THATCH_DUPLICATE_THRESHOLD | near-duplicate warning; find_duplicates, hygiene |
| prediction | THATCH_PREDICTION_THRESHOLD | the prediction block's auto-fire |
| behavior | THATCH_BEHAVIOR_THRESHOLD | the behavior block's auto-fire |

all-MiniLM-L6-v2 (both registered ids and the short name) was calibrated by
``bench/thresholds.py`` on bench/data/thresholds_devset.json (64 memories an agent would
save, 128 prompts that should recall them, 16 unrelated prompts, 12 paraphrased
memories; 128 related and 9,088 unrelated prompt/memory pairs). int8 file (fp32 within
0.01 everywhere):
- recall_nudge 0.35: F1 0.655 (precision 0.72, recall 0.60) of "the nudge names the memory
  iff it is related" among the 5 best; at the old 0.55, F1 0.21. The issue's example
  ("how do I run the tests in this repo?" against ``run-tests``) scores 0.39 here.
- recall_floor 0.15 (the largest 0.05 step at or below the 5th percentile of related
  pairs): keeps 96.1 % of related pairs, drops 86.9 % of unrelated ones; a search for one of
  the 16 unrelated prompts returns 1.6 results on average (6 of them none), where the old
  0.05 (2nd percentile) returned 8.8 of 10 for every one of them.
- duplicate 0.66: F1 1.0 (paraphrases score 0.705 to 0.95, median 0.88; every other pair
  at most 0.614: the threshold is the middle of that gap); at the old 0.85, F1 0.80.
- prediction / behavior 0.42: F0.5 0.57 (labels standing in for situations, 3 best); at
  the old 0.60, F0.5 0.41.

all-MiniLM-L6-v2-code (MiniLM with thatch's adapter, docs/embedder.md §adapters), same set
and rules, int8: recall_nudge 0.38 (F1 0.652), recall_floor 0.10 (keeps 98.4 % of related
pairs; its unrelated scores sit lower, median 0.05), duplicate 0.67 (F1 1.0: paraphrases
≥ 0.744, other pairs ≤ 0.592), prediction / behavior 0.44 (F0.5 0.55).

bge-small-en-v1.5 keeps the numbers thatch shipped with (0.55, 0.85, 0.60): no BGE
checkpoint can be loaded here (the hub is unreachable), so nothing was measured that would
justify moving them. Its floor, 0.30, is likewise not measured: BGE v1.5 scores unrelated
English text mostly between 0.3 and 0.5, so 0.30 removes only results that are noise for it.
Any other model (``mock``, a local import under another id) gets the built-in numbers
and the floor 0.0 (negative scores dropped, nothing else).

Standard library only: the prompt hook reads these on its hot path. Keys are literal
model ids and short names (``registry.py`` imports numpy); tests/test_thresholds.py fails
when a registered model has none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "BUILT_IN",
    "NAMES",
    "SIMILAR_FLOOR",
    "VARIABLES",
    "InForce",
    "ModelThresholds",
    "defaults_for",
    "in_force",
]


# The similarity from which a text is named as like another without being taken for it:
# the "Nearest:" hint of an engine lookup that matched nothing (engines.md §5: the CLI's
# Fix then names that item's id) and the UI's "Similar memories" of a memory. With MiniLM,
# reworded statements meant for an item score 0.53-0.79 and unrelated ones 0.15-0.38
# (review of the hint, 36 statements), so below it the one named would be unrelated. One
# number for every model, unlike the thresholds below: it only decides what is shown.
SIMILAR_FLOOR = 0.50


class ModelThresholds(NamedTuple):
    recall_nudge: float
    recall_floor: float
    duplicate: float
    prediction: float
    behavior: float


NAMES: tuple[str, ...] = ModelThresholds._fields
VARIABLES: Mapping[str, str] = {
    "recall_nudge": "THATCH_RECALL_THRESHOLD",
    "recall_floor": "THATCH_RECALL_FLOOR",
    "duplicate": "THATCH_DUPLICATE_THRESHOLD",
    "prediction": "THATCH_PREDICTION_THRESHOLD",
    "behavior": "THATCH_BEHAVIOR_THRESHOLD",
}

BUILT_IN = ModelThresholds(
    recall_nudge=0.55, recall_floor=0.0, duplicate=0.85, prediction=0.60, behavior=0.60
)
_BGE = BUILT_IN._replace(recall_floor=0.30)
_MINILM = ModelThresholds(
    recall_nudge=0.35, recall_floor=0.15, duplicate=0.66, prediction=0.42, behavior=0.42
)
_MINILM_CODE = ModelThresholds(
    recall_nudge=0.38, recall_floor=0.10, duplicate=0.67, prediction=0.44, behavior=0.44
)

_BY_MODEL: Mapping[str, ModelThresholds] = {
    "Xenova/bge-small-en-v1.5": _BGE,
    "bge-small-en-v1.5": _BGE,
    "Xenova/all-MiniLM-L6-v2": _MINILM,
    "all-MiniLM-L6-v2": _MINILM,
    "sentence-transformers/all-MiniLM-L6-v2": _MINILM,
    "thatch/all-MiniLM-L6-v2-code": _MINILM_CODE,
    "all-MiniLM-L6-v2-code": _MINILM_CODE,
}


def defaults_for(model: str) -> ModelThresholds | None:
    """The calibrated defaults of a registered model id or short name, else None."""
    return _BY_MODEL.get(model.strip())


class InForce(NamedTuple):
    """The thresholds a process uses, and where each came from."""

    values: ModelThresholds
    # per field: the variable's name, or "default for <model>" (the id as inline shows it)
    sources: tuple[str, ...]
    problems: tuple[str, ...]  # variables ignored (not a number in [0, 1]), one line each

    def source(self, name: str) -> str:
        return self.sources[NAMES.index(name)]


def _number(text: str) -> float | None:
    try:
        number = float(text.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None


def in_force(env: Mapping[str, str], model: str) -> InForce:
    """Each threshold: its variable when a number in [0, 1], else ``model``'s default
    (the built-in one for a model without calibrated numbers)."""
    from thatch.frontend.untrusted import inline  # a model directory's name is its id: data

    calibrated = defaults_for(model)
    base = calibrated or BUILT_IN
    shown = inline(model)
    where = f"default for {shown}" if calibrated else f"built-in default ({shown} not calibrated)"
    values: list[float] = []
    sources: list[str] = []
    problems: list[str] = []
    for name in NAMES:
        variable = VARIABLES[name]
        raw = env.get(variable, "")
        number = _number(raw) if raw.strip() else None
        if number is None:
            if raw.strip():
                from thatch.frontend.untrusted import quoted  # the environment's: data

                problems.append(f"ignoring {variable}={quoted(raw)}: not a number between 0 and 1")
            values.append(getattr(base, name))
            sources.append(where)
        else:
            values.append(number)
            sources.append(variable)
    return InForce(ModelThresholds(*values), tuple(sources), tuple(problems))
