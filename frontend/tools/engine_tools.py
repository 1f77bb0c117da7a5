"""The engine tool's actions (engines.md §5) and the texts of the engines' prompt-time blocks.

Handlers take the ``Operations`` (operations.py) and the validated arguments and return the
result text; engine_specs.py holds the tool. Matcher and item texts are
passage-embedded raw, both in one Embed call; a statement named for lookup (delete,
feedback) is passage-embedded too, as the stored statements are; a context is
query-embedded. Every text agents wrote is shown through ``untrusted``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from thatch.embedder.client.kind import Kind
from thatch.frontend.engine_thresholds import auto_fire_thresholds
from thatch.frontend.store.engine_store import (
    BEHAVIORS,
    DEDUP_THRESHOLD,
    PREDICTIONS,
    Engine,
    Item,
    Listed,
    Scored,
)
from thatch.frontend.store.operations import EngineOperations
from thatch.frontend.tools.formatting import new_store
from thatch.frontend.tools.seed_stamps import default_key, without_stamp
from thatch.frontend.tools.validation import shortest
from thatch.frontend.untrusted import inline, quoted, token

if TYPE_CHECKING:
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.tools.operations import Operations

__all__ = [
    "BEHAVIOR_BLOCK_TITLE",
    "NO_PREDICTIONS_MATCH",
    "PREDICTION_BLOCK_TITLE",
    "VERBS",
    "auto_fire_threshold",
    "behavior_codify",
    "behavior_delete",
    "behavior_feedback",
    "behavior_list",
    "confidence_text",
    "deleted_text",
    "engine_store",
    "head",
    "listing",
    "nearest_line",
    "not_found",
    "prediction_delete",
    "prediction_list",
    "prediction_query",
    "prediction_update",
    "prompt_block",
    "prompt_blocks",
    "scope_text",
    "surfaced_line",
]

NO_PREDICTIONS_MATCH = "No matching predictions found."
PREDICTION_BLOCK_TITLE = "[thatch] User decision model"
BEHAVIOR_BLOCK_TITLE = "[thatch] Situational behaviors"
# verb for evidence 0 / for evidence ≥ 1 (engines.md §4)
VERBS = {"prediction": ("you may prefer", "you tend to"), "behavior": ("consider", "do")}


def auto_fire_threshold(env: Mapping[str, str], engine: Engine, model: str) -> float:
    """``THATCH_PREDICTION_THRESHOLD`` / ``THATCH_BEHAVIOR_THRESHOLD`` when a number in
    [0, 1], else the default of ``model``, whose vectors are compared (docs/tools.md
    §thresholds)."""
    return auto_fire_thresholds(env, model)[engine.name]


def engine_store(tools: Operations, engine: Engine) -> EngineOperations:
    return tools.ctx.store.engines(engine)


# -- formatting ------------------------------------------------------------------------------


def confidence_text(item: Item) -> str:
    return (
        f"confidence={item.confidence:.2f} ({shortest(item.confirm)}/{shortest(item.disconfirm)})"
    )


def head(item: Item) -> str:
    return f"[{item.confidence:.2f} conf, {item.evidence} tests]"


def surfaced_line(engine: Engine, scored: Scored) -> str:
    """``[0.58 conf, 1 tests] When <matcher>: <verb> <statement>``."""
    item = scored.item
    verb = VERBS[engine.name][0 if item.evidence == 0 else 1]
    return (
        f"{head(item)} When {inline(scored.matcher.description)}: {verb} {inline(item.statement)}"
    )


def prompt_block(engine: Engine, found: Sequence[Scored]) -> str | None:
    """The prompt-time block of one engine (engines.md §4), None when nothing fires."""
    if not found:
        return None
    title = PREDICTION_BLOCK_TITLE if engine is PREDICTIONS else BEHAVIOR_BLOCK_TITLE
    return "\n".join([title, *(f"- {surfaced_line(engine, s)}" for s in found)])


def scope_text(scope: Sequence[str]) -> str:
    """``"a/b"`` or ``"a/b" or "global"``."""
    return " or ".join(quoted(name) for name in scope)


def listing(engine: Engine, entries: Sequence[Listed], scope: Sequence[str]) -> str:
    if not entries:
        return f"No {engine.name}s in {scope_text(scope)}."
    blocks = []
    for entry in entries:
        item = entry.item
        lines = [f"{head(item)} {inline(item.statement)}", f"  store: {token(item.store)}"]
        if without_stamp(item.rationale):
            lines.append(f"  rationale: {inline(without_stamp(item.rationale))}")
        if entry.matchers:
            lines.append("  matchers:")
            lines += [
                f"    - {quoted(text)} (w:{shortest(weight)})" for text, weight in entry.matchers
            ]
        if entry.provenance:
            lines.append("  provenance:")
            for row in entry.provenance:
                shown = without_stamp(row.detail)
                detail = f": {inline(shown)}" if shown else ""
                lines.append(f"    - [{row.created_at[:10]}] {row.signal}{detail}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def not_found(
    engine: Engine,
    text: str,
    scope: Sequence[str],
    nearest: tuple[Item, float] | None = None,
    *,
    with_id: bool = False,
) -> str:
    """``No <engine> matching "<x>" found in <scope>.``, then the nearest item of the
    scope on a line of its own when there is one: a hint, which nothing acted on."""
    text = f"No {engine.name} matching {quoted(text)} found in {scope_text(scope)}."
    if nearest is None:
        return text
    return f"{text}\n{nearest_line(*nearest, with_id=with_id)}"


def nearest_line(item: Item, cosine: float, *, with_id: bool = False) -> str:
    """``Nearest: [<id> ]"<statement>" in "<S>" (similarity 0.72; a match needs 0.85)``;
    the similarity rounded down, so one short of the threshold never shows as it."""
    shown = math.floor(cosine * 100) / 100
    named = f"{token(item.id)} " if with_id else ""
    return (
        f"Nearest: {named}{quoted(item.statement)} in {quoted(item.store)} "
        f"(similarity {shown:.2f}; a match needs {shortest(DEDUP_THRESHOLD)})"
    )


def prompt_blocks(
    store: Store, scope: Sequence[str], vector: Any, thresholds: Mapping[str, float]
) -> list[str]:
    """The prompt-time blocks (engines.md §4, docs/hooks.md §7 tier 2) for the prompt's one
    query vector: predictions then behaviors, each only when something fires."""
    blocks = []
    for engine in (PREDICTIONS, BEHAVIORS):
        engines = store.engines(engine)
        found = engines.match(scope, vector, thresholds[engine.name], auto_fire=True)
        block = prompt_block(engine, found)
        if block is not None:
            blocks.append(block)
    return blocks


# -- handlers ------------------------------------------------------------------------------


def _scope(tools: Operations, store: str | None) -> list[str]:
    """The named store (one that exists: Refused otherwise, as the memory tools' reads
    are), else the project store plus global."""
    return [tools.existing_store(store)] if store else tools.ctx.default_scope


def _record(
    tools: Operations,
    engine: Engine,
    store: str | None,
    matcher: str,
    statement: str,
    signal: str,
    rationale: str,
) -> str:
    target = tools.store_or_project(store)
    result = tools.embed([matcher, statement], Kind.PASSAGE)
    # As memory_remember says it: a misspelt store name shows at once.
    created = (
        bool(store)
        and target != tools.ctx.project_store
        and not tools.ctx.store.store_exists(target)
    )
    note = f" {new_store(target)}" if created else ""
    recorded = engine_store(tools, engine).record(
        target,
        matcher=matcher,
        matcher_vector=result.vectors[0],
        statement=statement,
        statement_vector=result.vectors[1],
        model=result.model_id,
        signal=signal,
        rationale=rationale,
    )
    item = recorded.item
    creation = signal == engine.creation_signal
    if recorded.created and creation:
        verb = "created" if engine is PREDICTIONS else "codified"
        return f"[{verb}] {token(target)} :: {quoted(item.statement)} for {quoted(matcher)}{note}"
    if creation:
        return f"[linked] {quoted(item.statement)} for {quoted(matcher)} {confidence_text(item)}"
    tag = f"created + {signal}" if recorded.created else signal
    return f"[{tag}] {quoted(item.statement)} {confidence_text(item)}{note}"


def prediction_query(tools: Operations, args: dict[str, Any]) -> str:
    scope = _scope(tools, args["store"])
    result = tools.embed([args["context"]], Kind.QUERY)
    vector = result.vectors[0]
    threshold = auto_fire_threshold(tools.ctx.env, PREDICTIONS, result.model_id)
    found = engine_store(tools, PREDICTIONS).match(scope, vector, threshold)
    if not found:
        return NO_PREDICTIONS_MATCH
    return "\n".join(surfaced_line(PREDICTIONS, scored) for scored in found)


def prediction_update(tools: Operations, args: dict[str, Any]) -> str:
    return _record(
        tools,
        PREDICTIONS,
        args["store"],
        args["matcher"],
        args["prediction"],
        args["signal"],
        args["rationale"],
    )


def behavior_codify(tools: Operations, args: dict[str, Any]) -> str:
    return _record(
        tools,
        BEHAVIORS,
        args["store"],
        args["situation"],
        args["behavior"],
        "codify",
        args["rationale"],
    )


def behavior_feedback(tools: Operations, args: dict[str, Any]) -> str:
    scope = _scope(tools, args["store"])
    vector = tools.embed([args["behavior"]], Kind.PASSAGE).vectors[0]
    signal = "confirm" if args["relevant"] else "disconfirm"
    detail = ("ham: " if args["relevant"] else "spam: ") + args["context"]
    found = engine_store(tools, BEHAVIORS).signal_nearest(scope, vector, signal, detail)
    item = found.item
    if item is None:
        return not_found(BEHAVIORS, args["behavior"], scope, found.nearest)
    return f"[{signal}] {quoted(item.statement)} {confidence_text(item)}"


def _list(tools: Operations, args: dict[str, Any], engine: Engine) -> str:
    scope = _scope(tools, args["store"])
    return listing(engine, engine_store(tools, engine).listing(scope), scope)


def prediction_list(tools: Operations, args: dict[str, Any]) -> str:
    return _list(tools, args, PREDICTIONS)


def behavior_list(tools: Operations, args: dict[str, Any]) -> str:
    return _list(tools, args, BEHAVIORS)


def _delete(tools: Operations, args: dict[str, Any], engine: Engine) -> str:
    scope = _scope(tools, args["store"])
    vector = tools.embed([args["statement"]], Kind.PASSAGE).vectors[0]
    found = engine_store(tools, engine).delete_nearest(scope, vector, switch_off=default_key)
    if found.item is None:
        return not_found(engine, args["statement"], scope, found.nearest)
    return deleted_text(found.item)


def deleted_text(item: Item) -> str:
    """``[deleted] …``; a default also says it stays off (engines.md §defaults)."""
    text = f"[deleted] {quoted(item.statement)} from {quoted(item.store)}"
    key = default_key(item)
    if key is not None:
        text += f" (a default behavior: switched off; thatch behaviors defaults --on {key})"
    return text


def prediction_delete(tools: Operations, args: dict[str, Any]) -> str:
    return _delete(tools, args, PREDICTIONS)


def behavior_delete(tools: Operations, args: dict[str, Any]) -> str:
    return _delete(tools, args, BEHAVIORS)
