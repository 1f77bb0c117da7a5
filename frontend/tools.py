"""The tool layer shared by the MCP server and the CLI (spec/tools.md §2-§3).

``Tools(ctx).call(name, arguments)`` validates raw JSON arguments, runs one tool and
returns a ``ToolResult``; it never raises. The CLI calls the typed operations
(``remember``, ``recall`` …) directly and formats their reports its own way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from thatch.embedder.encoder import Kind
from thatch.embedder.errors import EmbedderUnavailable
from thatch.frontend import db
from thatch.frontend import formatting as fmt
from thatch.frontend.after_reply import AfterReply
from thatch.frontend.context import EmbedResultLike, ToolContext
from thatch.frontend.errors import StoreError
from thatch.frontend.labels import derive_label
from thatch.frontend.memory import DuplicatePair, Match, Memory, RememberOutcome
from thatch.frontend.slugs import slugify
from thatch.frontend.timefmt import format_timestamp
from thatch.frontend.tool_specs import SPECS_BY_NAME
from thatch.frontend.validation import ArgumentError, validate

PENDING_BATCH = 32


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False


class Refused(Exception):
    """The requested action did not happen; ``str`` is the tool's one-line message."""


@dataclass(frozen=True)
class RememberReport:
    store: str
    label: str
    slug: str
    similar: list[Match]
    pending_cause: str | None  # set when saved without a vector

    def text(self) -> str:
        parts = [fmt.saved(self.store, self.label)]
        if self.similar:
            parts.append(fmt.similar_warning(self.similar))
        if self.pending_cause is not None:
            parts.append(fmt.pending_notice(self.pending_cause))
        return "\n\n".join(parts)


@dataclass(frozen=True)
class RecallReport:
    stores: list[str]
    matches: list[Match]
    pending: int
    # Set when the recall counts could not be stamped (read-only or full database, lock
    # not obtained): the answer stands, the CLI says so on stderr, MCP skips it silently.
    telemetry_skipped: str | None = None

    def text(self) -> str:
        return fmt.recall_results(self.matches, self.pending)


def embedder_error(error: EmbedderUnavailable) -> str:
    return f"Embedding service unavailable: {error}"


class Tools:
    """The phase-1 tools over one ``ToolContext``.

    With ``after_reply`` (the MCP server), what does not change an answer — recall counts,
    filling pending embeddings — is queued there to run once the answer is written;
    without it (the CLI, tests) it runs within the call.
    """

    def __init__(self, ctx: ToolContext, after_reply: AfterReply | None = None) -> None:
        self.ctx = ctx
        self.after_reply = after_reply
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "memory_remember": self._remember_tool,
            "memory_recall": self._recall_tool,
            "memory_list": self._list_tool,
            "memory_show": self._show_tool,
            "memory_forget": self._forget_tool,
            "store_list": self._store_list_tool,
            "find_duplicates": self._duplicates_tool,
            "dedup_mark_checked": self._mark_checked_tool,
            "extraction_done": self._extraction_done_tool,
            "get_extraction_payload": self._payload_tool,
        }

    # -- dispatch ----------------------------------------------------------------------

    def call(self, name: str, arguments: object) -> ToolResult:
        """Run tool ``name`` with raw JSON ``arguments``; every failure is an isError result."""
        spec = SPECS_BY_NAME.get(name)
        if spec is None:
            return ToolResult(f"Unknown tool: {name}", True)
        try:
            values = validate(spec.params, arguments)
            # Reads fail before any write, so a retry with lenient decoding is safe.
            text = db.read_leniently(self.ctx.store.conn, lambda: self._handlers[name](values))
            return ToolResult(text)
        except sqlite3.Error as error:
            return ToolResult(str(db.store_error(error, self.ctx.store.path)), True)
        except (ArgumentError, Refused, StoreError) as error:
            return ToolResult(str(error), True)
        except EmbedderUnavailable as error:
            return ToolResult(embedder_error(error), True)
        except Exception as error:  # the agent gets one line, never a traceback
            if os.environ.get("THATCH_DEBUG") == "1":
                traceback.print_exc(file=sys.stderr)
            return ToolResult(f"Tool error: {one_line(error)}", True)

    # -- embedding ---------------------------------------------------------------------

    def embed(self, texts: list[str], kind: Kind) -> EmbedResultLike:
        return self.ctx.embedder.embed(
            texts, kind, timeout=self.ctx.embed_timeout, start_wait=self.ctx.start_wait
        )

    def fill_pending_opportunistically(self) -> None:
        """Up to 32 pending memories, after an Embed call succeeded; failures ignored."""
        from thatch.frontend.reembed import fill_pending_opportunistically

        fill_pending_opportunistically(
            self.ctx.store, self.ctx.embedder, timeout=self.ctx.embed_timeout
        )

    def fill_pending_soon(self) -> None:
        """``fill_pending_opportunistically`` now, or after the answer (one queued at most)."""
        if self.after_reply is None:
            self.fill_pending_opportunistically()
        else:
            self.after_reply.defer(self.fill_pending_opportunistically, keep=False, key="fill")

    def fill_pending_in(self, store: str) -> None:
        """Every pending memory of ``store``; raises EmbedderUnavailable when needed.

        Rows the embedder refuses stay pending (and are not asked for again here).
        """
        from thatch.frontend.reembed import embed_stored_texts

        refused: set[tuple[str, str]] = set()
        while True:
            pending = [
                memory
                for memory in self.ctx.store.pending_memories(
                    limit=PENDING_BATCH + len(refused), store=store
                )
                if (memory.slug, memory.store) not in refused
            ]
            if not pending:
                return
            pairs, model_id, rejected = embed_stored_texts(
                self.ctx.embedder,
                pending,
                timeout=self.ctx.embed_timeout,
                start_wait=self.ctx.start_wait,
            )
            refused.update((memory.slug, memory.store) for memory in rejected)
            filled = [
                self.ctx.store.fill_embedding(memory, vector, model_id) for memory, vector in pairs
            ]
            if not any(filled) and not rejected:  # every row changed meanwhile
                return

    # -- typed operations (also used by the CLI) ---------------------------------------

    def store_or_project(self, store: str | None) -> str:
        return store if store else self.ctx.project_store

    def remember(
        self,
        *,
        label: str | None,
        content: str,
        store: str | None = None,
        branch: str | None = None,
        confidence: int | None = None,
        overwrite: bool = False,
        archived: bool | None = None,
    ) -> RememberReport:
        """Save one memory (tools.md §3.1); raises ArgumentError or Refused."""
        label = (label or "").strip()
        if not label:
            derived = derive_label(content)
            if not derived.label:
                raise ArgumentError(
                    "Invalid arguments: label: could not be derived from content; pass a label"
                )
            label, content = derived.label, derived.content
        name = self.store_or_project(store)
        stored_text = f"# {label}\n\n{content}"
        slug = slugify(label)
        vector, model, cause = None, None, None
        try:
            result = self.embed([stored_text], Kind.PASSAGE)
            vector, model = result.vectors[0], result.model_id
        except EmbedderUnavailable as error:
            cause = error.cause
        db = self.ctx.store
        similar = db.find_similar(name, vector, exclude_slug=slug) if vector is not None else []
        outcome = db.remember(
            name,
            label,
            stored_text,
            vector,
            model,
            branch=branch or None,
            confidence=confidence,
            overwrite=overwrite,
            archived=archived,
        )
        if outcome is RememberOutcome.EXISTS:
            existing = db.show(name, label)
            raise Refused(fmt.label_exists(existing.label if existing else label, name))
        if outcome is RememberOutcome.ARCHIVED_GUARD:
            existing = db.show(name, label)
            raise Refused(fmt.archived_guard(existing.label if existing else label))
        if vector is not None:
            self.fill_pending_soon()
        return RememberReport(name, label, slug, list(similar), cause)

    def recall(
        self,
        *,
        query: str,
        stores: list[str] | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
    ) -> RecallReport:
        """Search and stamp telemetry (tools.md §3.2); raises EmbedderUnavailable."""
        scope = stores if stores else self.ctx.default_scope
        result = self.embed([query], Kind.QUERY)
        # Filling first lets a memory saved while the embedder was down be found now; the
        # MCP server fills after the answer instead (the count below still names them).
        self.fill_pending_soon()
        options = {"branch": branch or None, "limit": limit, "include_archived": include_archived}
        skipped = None
        if self.after_reply is not None:
            matches = self.ctx.store.search(scope, result.vectors[0], **options)
            pending = self.ctx.store.pending_count_in(scope)
            if matches:  # stamped as of now, written once the answer is out
                at = format_timestamp(self.ctx.store.clock())
                self.after_reply.defer(functools.partial(self._stamp_quietly, matches, at))
            return RecallReport(scope, list(matches), pending)
        try:
            matches = self.ctx.store.recall(scope, result.vectors[0], **options)
        except (sqlite3.OperationalError, StoreError) as error:
            # Stamping recall counts is telemetry: a database that refuses the write still
            # answers. Reads that fail the same way fail again below, with their error.
            if not db.is_write_refused(error):
                raise
            skipped = str(
                db.store_error(error, self.ctx.store.path)
                if isinstance(error, sqlite3.Error)
                else error
            )
            matches = self.ctx.store.search(scope, result.vectors[0], **options)
        pending = self.ctx.store.pending_count_in(scope)
        return RecallReport(scope, list(matches), pending, skipped)

    def _stamp_quietly(self, matches: list[Match], at: str) -> None:
        # The answer is out: a database that refuses the write is skipped silently, as
        # within a call (RecallReport.telemetry_skipped, which MCP never shows).
        with contextlib.suppress(sqlite3.Error, StoreError):
            self.ctx.store.stamp_recalls(matches, at)

    def duplicate_pairs(self, store: str, threshold: float) -> list[DuplicatePair]:
        if self.ctx.store.pending_count(store):
            self.fill_pending_in(store)
        return list(self.ctx.store.find_duplicates(store, threshold))

    def mark_checked(self, store: str, label_a: str, label_b: str, status: str) -> str:
        slug_a, slug_b = slugify(label_a), slugify(label_b)
        if slug_a == slug_b:
            raise Refused(f'label_a and label_b name the same memory ("{slug_a}")')
        found: list[Memory] = []
        missing: list[str] = []
        for label in (label_a, label_b):
            memory = self.ctx.store.show(store, label)
            if memory is None:
                missing.append(label)
            else:
                found.append(memory)
        if missing:
            raise Refused(fmt.not_recorded(missing, store))
        self.ctx.store.mark_checked(store, found[0].slug, found[1].slug, status)
        return fmt.checked(store, found[0].label, found[1].label, status)

    # -- tool adapters -----------------------------------------------------------------

    def _remember_tool(self, args: dict[str, Any]) -> str:
        return self.remember(
            label=args["label"],
            content=args["content"],
            store=args["store"],
            branch=args["branch"],
            confidence=args["confidence"],
            overwrite=args["overwrite"],
            archived=args["archived"],
        ).text()

    def _recall_tool(self, args: dict[str, Any]) -> str:
        stores = [args["store"]] if args["store"] else None
        return self.recall(
            query=args["query"],
            stores=stores,
            branch=args["branch"],
            limit=args["limit"],
            include_archived=args["includeArchived"],
        ).text()

    def _list_tool(self, args: dict[str, Any]) -> str:
        store = self.store_or_project(args["store"])
        return fmt.memory_list(store, self.ctx.store.list(store))

    def _show_tool(self, args: dict[str, Any]) -> str:
        store = self.store_or_project(args["store"])
        memory = self.ctx.store.show(store, args["label"])
        return fmt.show(memory) if memory else fmt.not_found(args["label"].strip(), store)

    def _forget_tool(self, args: dict[str, Any]) -> str:
        store = self.store_or_project(args["store"])
        memory = self.ctx.store.forget(store, args["label"])
        if memory is None:
            return fmt.not_found(args["label"].strip(), store)
        return fmt.forgotten(store, memory.label)

    def _store_list_tool(self, _args: dict[str, Any]) -> str:
        return fmt.store_list(self.ctx.store.store_names())

    def _duplicates_tool(self, args: dict[str, Any]) -> str:
        store = self.store_or_project(args["store"])
        threshold = args["threshold"]
        return fmt.duplicates(store, self.duplicate_pairs(store, threshold), threshold)

    def _mark_checked_tool(self, args: dict[str, Any]) -> str:
        store = self.store_or_project(args["store"])
        return self.mark_checked(store, args["label_a"], args["label_b"], args["status"])

    def _extraction_done_tool(self, args: dict[str, Any]) -> str:
        if args["session_id"]:
            from thatch.frontend import queue

            try:
                queue.drain(self.ctx.queue_dir, args["session_id"])
            except queue.QueueError as error:
                raise Refused(str(error)) from None
        return fmt.ACKNOWLEDGED

    def _payload_tool(self, args: dict[str, Any]) -> str:
        from thatch.frontend import queue

        try:
            records = queue.peek_records(self.ctx.queue_dir, args["session_id"])
        except queue.QueueError as error:
            raise Refused(str(error)) from None
        payload = queue.build_payload(records, self.ctx.project_store)
        return payload if payload else fmt.NO_QUEUE


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if text else type(error).__name__


def call_tool(ctx: ToolContext, name: str, arguments: Mapping[str, Any] | object) -> ToolResult:
    """Convenience for one-off calls: ``Tools(ctx).call(name, arguments)``."""
    return Tools(ctx).call(name, arguments)
