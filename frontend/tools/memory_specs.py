"""The memory tools (docs/tools.md §tools): their specs and handlers, validated arguments
to the typed operations of ``operations.Operations``."""

from __future__ import annotations

from typing import Any

from thatch.frontend.identifiers import session_id_problem, store_name_problem
from thatch.frontend.store.memory import VERDICTS
from thatch.frontend.tools import formatting as fmt
from thatch.frontend.tools.operations import Operations
from thatch.frontend.tools.spec import ToolSpec
from thatch.frontend.tools.validation import (
    CONTENT_MAX,
    LABEL_MAX,
    QUERY_MAX,
    SESSION_ID_MAX,
    Param,
)

__all__ = [
    "BRANCH_MAX",
    "MEMORY_SPECS",
    "store_param",
]

BRANCH_MAX = LABEL_MAX


def store_param(*, creates: bool = False) -> Param:
    """``store``: omitted means the project store (the default scope for reads across
    stores); only a tool that creates stores refuses odd names: memories already saved
    under "global " or a control character stay listable, showable and forgettable."""
    return Param(
        "store",
        "string",
        "",
        max_length=LABEL_MAX,
        single_line=True,
        blank_is_omitted=True,
        check=store_name_problem if creates else None,
    )


def _label(*, required: bool = True) -> Param:
    return Param(
        "label",
        "string",
        "",
        required=required,
        non_empty=required,
        max_length=LABEL_MAX,
        single_line=True,
    )


def _branch(description: str) -> Param:
    return Param(
        "branch",
        "string",
        description,
        max_length=BRANCH_MAX,
        single_line=True,
        no_control=True,
        blank_is_omitted=True,
    )


def _session_id(description: str, *, required: bool) -> Param:
    return Param(
        "session_id",
        "string",
        description,
        required=required,
        non_empty=required,
        max_length=SESSION_ID_MAX,
        single_line=True,
        check=session_id_problem,
        blank_is_omitted=not required,
    )


def _pair_label(name: str) -> Param:
    return Param(
        name, "string", "", required=True, non_empty=True, max_length=LABEL_MAX, single_line=True
    )


# -- handlers ------------------------------------------------------------------------------


def _remember(tools: Operations, args: dict[str, Any]) -> str:
    return tools.remember(
        label=args["label"],
        content=args["content"],
        store=args["store"],
        branch=args["branch"],
        confidence=args["confidence"],
        overwrite=args["overwrite"],
        archived=args["archived"],
        anchors=args["anchors"] or (),
        related=args["related"] or (),
    ).text()


def _recall(tools: Operations, args: dict[str, Any]) -> str:
    stores = [tools.existing_store(args["store"])] if args["store"] else None
    return tools.recall(
        query=args["query"],
        stores=stores,
        branch=args["branch"],
        limit=args["limit"],
        include_archived=args["includeArchived"],
    ).text()


def _list(tools: Operations, args: dict[str, Any]) -> str:
    store = tools.existing_store(args["store"])
    memories, total = tools.ctx.store.list_first(store, fmt.LISTED_AT_MOST)
    return fmt.memory_list(store, memories, total)


def _show(tools: Operations, args: dict[str, Any]) -> str:
    store = tools.existing_store(args["store"])
    memory = tools.ctx.store.show(store, args["label"])
    return fmt.show(memory) if memory else fmt.not_found(args["label"].strip(), store)


def _forget(tools: Operations, args: dict[str, Any]) -> str:
    store = tools.existing_store(args["store"])
    memory = tools.ctx.store.forget(store, args["label"])
    if memory is None:
        return fmt.not_found(args["label"].strip(), store)
    return fmt.forgotten(store, memory.label)


def _store_list(tools: Operations, _args: dict[str, Any]) -> str:
    return fmt.store_list(tools.ctx.store.store_names())


def _find_duplicates(tools: Operations, args: dict[str, Any]) -> str:
    store = tools.existing_store(args["store"])
    threshold = args["threshold"]
    if threshold is None:
        threshold = tools.configured_thresholds().duplicate
    offset = args["offset"] or 0
    return fmt.duplicate_page(store, tools.duplicate_page(store, threshold, offset), threshold)


def _mark_checked(tools: Operations, args: dict[str, Any]) -> str:
    store = tools.existing_store(args["store"])
    return tools.mark_checked(store, args["label_a"], args["label_b"], args["status"])


def _extraction_done(tools: Operations, args: dict[str, Any]) -> str:
    return tools.extraction_done(args["session_id"])


def _extraction_payload(tools: Operations, args: dict[str, Any]) -> str:
    return tools.extraction_payload(args["session_id"])


# -- the table (descriptions say what and when; docs/tools.md says the rest) ----------------

MEMORY_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "memory_remember",
        "Save one self-contained fact, convention, gotcha, command or preference. Recall "
        "first; to update a topic, reuse its label with overwrite: true. "
        "label defaults to the content's first line.",
        (
            _label(required=False),
            Param(
                "content",
                "string",
                "",
                required=True,
                non_empty=True,
                max_length=CONTENT_MAX,
            ),
            store_param(creates=True),
            _branch("only when it holds on this branch alone"),
            Param(
                "confidence",
                "integer",
                "1-2 weak, 5 moderate, 9 stated by the user, 10 hard constraint",
                minimum=1,
                maximum=10,
            ),
            Param("overwrite", "boolean", "", default=False),
            Param(
                "archived",
                "boolean",
                "needed to overwrite an archived memory",
            ),
            # At most 10 (anchors.spec.MAX_ANCHORS), checked at capture: not published, to
            # spare the tool budget.
            Param(
                "anchors",
                "array",
                "code it is about: path, path:symbol, path:N-M",
                max_length=LABEL_MAX,
            ),
            # At most 10 too, checked by the operation.
            Param("related", "array", "labels of memories it depends on", max_length=LABEL_MAX),
        ),
        _remember,
        drains_queue=True,
    ),
    ToolSpec(
        "memory_recall",
        "Search memories by meaning (project store and global). Use it before "
        "answering about the project, its conventions or the user, and before saving.",
        (
            Param(
                "query",
                "string",
                "",
                required=True,
                non_empty=True,
                max_length=QUERY_MAX,
            ),
            store_param(),
            _branch("that branch's memories plus unscoped ones"),
            Param("limit", "integer", "", minimum=1, maximum=20, default=10),
            Param("includeArchived", "boolean", "", default=False),
        ),
        _recall,
    ),
    ToolSpec(
        "memory_list",
        "List the labels of a store's memories (no content).",
        (store_param(),),
        _list,
    ),
    ToolSpec(
        "memory_show",
        "Show one memory by its exact label.",
        (_label(), store_param()),
        _show,
    ),
    ToolSpec(
        "memory_forget",
        "Delete one memory by label.",
        (_label(), store_param()),
        _forget,
    ),
    ToolSpec("store_list", "List the memory stores.", (), _store_list),
    ToolSpec(
        "find_duplicates",
        "One page of near-duplicate clusters to consolidate, judged pairs "
        "skipped; the last line gives the next offset.",
        (
            store_param(),
            Param("threshold", "number", "", minimum=0, maximum=1),
            Param("offset", "integer", "", minimum=0),
        ),
        _find_duplicates,
    ),
    ToolSpec(
        "dedup_mark_checked",
        "Record your verdict on a pair find_duplicates reported.",
        (
            _pair_label("label_a"),
            _pair_label("label_b"),
            Param("status", "string", "", required=True, enum=VERDICTS),
            store_param(),
        ),
        _mark_checked,
    ),
    ToolSpec(
        "extraction_done",
        "Acknowledge extraction: the fact-extractor calls it last with the parent "
        "session's id, even when nothing was saved.",
        (_session_id("", required=False),),
        _extraction_done,
        drains_queue=True,
    ),
    ToolSpec(
        "get_extraction_payload",
        "The queued tool interactions of the nudge's session id, as JSON (for the "
        "thatch-fact-extractor skill).",
        (_session_id("", required=True),),
        _extraction_payload,
    ),
)
