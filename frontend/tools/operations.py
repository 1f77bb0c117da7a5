"""The typed operations of the tools (docs/tools.md §common-rules, §tools): ``remember``,
``recall`` … over one ``ToolContext``.

The tool handlers (memory_specs.py, engine_tools.py, chat_specs.py) and the CLI call them;
the CLI formats their reports its own way. ``memory_tools.Tools`` adds dispatch by tool
name, which needs the registry: kept apart so that the handlers can name this class
without an import cycle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.embedder.client.kind import Kind
from thatch.frontend.anchors.check import Drift
from thatch.frontend.errors import StoreError
from thatch.frontend.store import db
from thatch.frontend.store.anchor_queries import Anchor
from thatch.frontend.store.duplicates import DuplicatePage
from thatch.frontend.store.memory import Match, Memory, RememberOutcome
from thatch.frontend.store.slugs import slugify
from thatch.frontend.thresholds import ModelThresholds, in_force
from thatch.frontend.timefmt import format_timestamp
from thatch.frontend.tools import formatting as fmt
from thatch.frontend.tools.after_reply import AfterReply
from thatch.frontend.tools.chat_tools import ChatTools
from thatch.frontend.tools.context import EmbedResultLike, ToolContext
from thatch.frontend.tools.labels import derive_label
from thatch.frontend.tools.validation import ArgumentError

__all__ = [
    "CHECK_SECONDS",
    "Operations",
    "RecallReport",
    "Refused",
    "RememberReport",
    "above",
    "embedder_error",
    "one_line",
]

# How long one find_duplicates call may spend comparing memories no write compared (an
# upgraded database): ~3,000 memories a second at 100k; the rest waits for the next call.
CHECK_SECONDS = 5.0
# How many memories whose code changed an extraction payload names for revisiting.
REVISIT_MAX = 10
# A recall counts the memories its scope holds not indexed yet up to this, then says
# "more than 10000": the exact count read every pending row of the scope at every recall
# (8-19 ms at 100k, docs/tools.md §memory_recall), which must stay flat in store size.
PENDING_COUNTED_UP_TO = 10_000


class Refused(Exception):
    """The requested action did not happen; ``str`` is the tool's one-line message and
    ``cli`` the same said with the CLI's options, when they differ."""

    def __init__(self, message: str, cli: str | None = None) -> None:
        super().__init__(message)
        self.cli = cli or message


@dataclass(frozen=True)
class RememberReport:
    store: str
    label: str
    slug: str
    similar: list[Match]
    pending_cause: str | None  # set when saved without a vector
    created_store: bool = False
    pending_fix: str | None = None  # what gets the service back, with pending_cause

    def text(self) -> str:
        parts = [fmt.saved(self.store, self.label)]
        if self.created_store:
            parts[0] += " " + fmt.new_store(self.store)
        if self.similar:
            parts.append(fmt.similar_warning(self.similar))
        if self.pending_cause is not None:
            parts.append(fmt.pending_notice(self.pending_cause, self.pending_fix))
        return "\n\n".join(parts)


@dataclass(frozen=True)
class RecallReport:
    stores: list[str]
    matches: list[Match]
    pending: int
    # Set when the recall counts could not be stamped (read-only or full database, lock
    # not obtained): the answer stands, the CLI says so on stderr, MCP skips it silently.
    telemetry_skipped: str | None = None
    # The returned memories whose anchored code changed since saved, by (store, slug).
    drift: Mapping[tuple[str, str], Drift] = field(default_factory=dict)
    # More than ``pending`` (PENDING_COUNTED_UP_TO): the count stopped there.
    pending_more: bool = False

    def text(self) -> str:
        return fmt.recall_results(self.matches, self.pending, self.drift, self.pending_more)


class _SearchOptions(TypedDict):
    """The keyword arguments recall passes to Store.recall, and to Store.search after it."""

    branch: str | None
    limit: int
    include_archived: bool


def embedder_error(error: EmbedderUnavailable) -> str:
    return f"Embedding service unavailable: {error}"


class Operations:
    """The typed operations over one ``ToolContext``.

    With ``after_reply`` (the MCP server), recall counts, which do not change an answer,
    are queued there to be written once the answer is out; without it (the CLI, tests)
    they are written within the call. Pending embeddings are never filled inline: the
    context's ``pending_fill`` is scheduled.
    """

    def __init__(self, ctx: ToolContext, after_reply: AfterReply | None = None) -> None:
        self.ctx = ctx
        self.after_reply = after_reply
        # Holds this process's default chat identity (docs/chat.md §2): one per server.
        self.chat = ChatTools.over(ctx)

    # -- embedding ---------------------------------------------------------------------

    def embed(self, texts: list[str], kind: Kind) -> EmbedResultLike:
        return self.ctx.embedder.embed(
            texts, kind, timeout=self.ctx.embed_timeout, start_wait=self.ctx.start_wait
        )

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
        anchors: Sequence[str] = (),
        related: Sequence[str] = (),
    ) -> RememberReport:
        """Save one memory (docs/tools.md §memory_remember); raises ArgumentError or Refused.
        ``anchors`` (docs/tools.md §code-anchors) are captured before anything is written:
        one that names no readable file, symbol or span refuses the save. ``related``
        labels the memories of its store it depends on: one that is not there refuses."""
        if label is not None and not label.strip():
            # Deriving is for a label not given at all; an empty one is a mistake to report.
            raise ArgumentError(
                "Invalid arguments: label: must not be empty (omit it to derive one from "
                "the content)"
            )
        label = (label or "").strip()
        if not label:
            derived = derive_label(content)
            if not derived.label:
                raise ArgumentError(
                    "Invalid arguments: label: could not be derived from content; pass a label"
                )
            label, content = derived.label, derived.content
        name = self.store_or_project(store)
        captured = self._capture(anchors) if anchors else []
        stored_text = f"# {label}\n\n{content}"
        slug = slugify(label)
        targets = self._related(name, slug, related) if related else []
        vector, model, cause, fix = None, None, None, None
        try:
            result = self.embed([stored_text], Kind.PASSAGE)
            vector, model = result.vectors[0], result.model_id
        except EmbedderUnavailable as error:
            cause, fix = error.cause, error.fix
        db = self.ctx.store
        # Said only for a store named explicitly: a project's store appears on its first
        # write as documented, while a typo in a store name must show at once.
        created = bool(store) and name != self.ctx.project_store and not db.store_exists(name)
        similar = []
        if vector is not None:
            cut = self.thresholds(model or "").duplicate
            similar = db.find_similar(name, vector, threshold=cut, exclude_slug=slug)
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
            anchors=captured,
            related=targets,
        )
        if outcome is RememberOutcome.EXISTS:
            existing = db.show(name, label)
            shown = existing.label if existing else label
            raise Refused(fmt.label_exists(shown, name), fmt.label_exists(shown, name, cli=True))
        if outcome is RememberOutcome.ARCHIVED_GUARD:
            existing = db.show(name, label)
            shown = existing.label if existing else label
            raise Refused(fmt.archived_guard(shown), fmt.archived_guard(shown, cli=True))
        if vector is not None:
            self._schedule_fill()  # the embedder is up: index what waits for it
        return RememberReport(name, label, slug, list(similar), cause, created, fix)

    def _capture(self, anchors: Sequence[str]) -> list[Anchor]:
        from thatch.frontend.anchors.capture import AnchorProblem, capture_anchors

        try:
            captured = capture_anchors(anchors, self.ctx.project_dir, self.ctx.env)
        except AnchorProblem as problem:
            raise ArgumentError(f"Invalid arguments: anchors: {problem}") from None
        self._remember_worktrees({anchor.root for anchor in captured if anchor.root})
        return captured

    def _remember_worktrees(self, roots: set[str]) -> None:
        """Which main checkout each checkout among ``roots`` belongs to (a main one: itself,
        so a row left from a worktree once at that path no longer names another): once a
        worktree is removed, its main checkout alone may take its anchors over."""
        from thatch.frontend.anchors.recheck import worktree_main

        for root in roots:
            main = worktree_main(root) or root
            # The cache only decides what a later pass may move: a refusal costs that.
            with contextlib.suppress(sqlite3.Error, StoreError):
                if self.ctx.store.worktree_mains([root]).get(root) != main:
                    self.ctx.store.remember_worktree(root, main, self.ctx.project_store)

    def _related(self, store: str, slug: str, labels: Sequence[str]) -> list[str]:
        """The slugs ``labels`` name in ``store``; ArgumentError for the first that is the
        memory itself or names no memory there (links stay within one store)."""
        from thatch.frontend.anchors.spec import MAX_ANCHORS
        from thatch.frontend.untrusted import quoted

        if len(labels) > MAX_ANCHORS:
            raise ArgumentError(
                f"Invalid arguments: related: at most {MAX_ANCHORS} memories ({len(labels)} given)"
            )
        targets = []
        for label in labels:
            target = slugify(label)
            problem = None
            if target == slug:
                problem = f"{quoted(label.strip())} is this memory itself"
            elif self.ctx.store.show(store, target) is None:
                problem = f"no memory {quoted(label.strip())} in store {quoted(store)}"
                holding = self.ctx.store.stores_holding(target)
                if holding:
                    elsewhere = ", ".join(quoted(name) for name in holding)
                    problem += f" (found in {elsewhere}; related memories share a store)"
            if problem is not None:
                raise ArgumentError(f"Invalid arguments: related: {problem}")
            targets.append(target)
        return targets

    def existing_store(self, store: str | None) -> str:
        """The store a read names (the project store when omitted); Refused when a named
        store does not exist: every reading verb answers so, CLI and MCP alike."""
        if not store:
            return self.ctx.project_store
        if not self.ctx.store.store_exists(store):
            names = self.ctx.store.store_names()
            raise Refused(fmt.no_store(store, names), cli=fmt.no_store(store, names, cli=True))
        return store

    def recall(
        self,
        *,
        query: str,
        stores: list[str] | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
        stamp: bool = True,
    ) -> RecallReport:
        """Search and stamp telemetry (docs/tools.md §memory_recall); raises EmbedderUnavailable.

        ``stamp=False`` for a person looking (``thatch search``, the UI): recall counts
        say what agents were given, which hygiene's "stale" relies on.
        """
        scope = stores if stores else self.ctx.default_scope
        result = self.embed([query], Kind.QUERY)
        # Memories saved while the embedder was down get indexed off this request; until
        # then the answer counts them as not indexed.
        self._schedule_fill()
        options: _SearchOptions = {
            "branch": branch or None,
            "limit": limit,
            "include_archived": include_archived,
        }
        skipped = None
        floor = self.thresholds(result.model_id).recall_floor
        if not stamp:
            matches = above(
                self.ctx.store.search(scope, result.vectors[0], text=query, **options), floor
            )
            return self._with_drift(self._recall_report(scope, matches))
        if self.after_reply is not None:
            matches = above(
                self.ctx.store.search(scope, result.vectors[0], text=query, **options), floor
            )
            report = self._recall_report(scope, matches)
            if matches:  # stamped as of now, written once the answer is out
                at = format_timestamp(self.ctx.store.clock())
                self.after_reply.defer(functools.partial(self._stamp_quietly, matches, at))
            return self._with_drift(report)
        try:
            matches = above(
                self.ctx.store.recall(scope, result.vectors[0], floor=floor, text=query, **options),
                floor,
            )
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
            matches = above(
                self.ctx.store.search(scope, result.vectors[0], text=query, **options), floor
            )
        return self._with_drift(self._recall_report(scope, matches, skipped))

    def _recall_report(
        self, scope: list[str], matches: Sequence[Match], skipped: str | None = None
    ) -> RecallReport:
        """The answer, with the scope's memories not indexed yet counted up to
        PENDING_COUNTED_UP_TO (one row past it says "more than")."""
        cap = PENDING_COUNTED_UP_TO
        pending = self.ctx.store.pending_count_in(scope, up_to=cap)
        more = pending > cap
        return RecallReport(scope, list(matches), min(pending, cap), skipped, pending_more=more)

    def _with_drift(self, report: RecallReport) -> RecallReport:
        """The report with its memories' anchors checked (docs/tools.md §code-anchors):
        a memory whose code changed is marked and ranked after the unmarked ones, never
        dropped. A check that fails leaves the answer unmarked."""
        if not report.matches:
            return report
        keys = [(match.memory.store, match.memory.slug) for match in report.matches]
        gone_checkouts: set[str] = set()
        try:
            drift = self.ctx.anchor_check.drift(self.ctx.store, keys, gone_checkouts=gone_checkouts)
            if any(found.gone for found in drift.values()) or self._unasked(gone_checkouts):
                # A file gone from its checkout may have been renamed, and a checkout gone
                # (a removed worktree) may be this repository's: git says so off the
                # answer's path in thatch mcp (the next recall follows), within the call
                # elsewhere (this one does).
                if self.after_reply is not None:
                    self.after_reply.defer(self._follow_renames, keep=False, key="renames")
                else:
                    self._follow_renames()
                    drift = self.ctx.anchor_check.drift(self.ctx.store, keys)
        except (sqlite3.Error, StoreError, OSError):
            return report
        if not drift:
            return report
        ranked = sorted(
            report.matches,
            key=lambda match: (match.memory.store, match.memory.slug) in drift,
        )
        return dataclasses.replace(report, matches=ranked, drift=drift)

    def thresholds(self, model: str) -> ModelThresholds:
        """The thresholds for vectors of ``model``, variables first (docs/tools.md §thresholds)."""
        return in_force(self.ctx.env, model).values

    def configured_thresholds(self) -> ModelThresholds:
        """For stored vectors compared with each other: the configured model's thresholds."""
        from thatch.frontend.tools.active_model import configured_model_id

        return self.thresholds(configured_model_id(self.ctx.env))

    def _unasked(self, gone_checkouts: set[str]) -> bool:
        from thatch.frontend.anchors.recheck import unasked_gone

        # A gone checkout this one was already asked about at its HEAD: no pass, no git.
        try:
            return bool(gone_checkouts) and unasked_gone(
                self.ctx.store, gone_checkouts, self.ctx.project_dir
            )
        except sqlite3.Error:
            # A file this release could not migrate (read-only) lacks the table: no pass,
            # and the drift already found still marks the answer.
            return False

    def _follow_renames(self) -> None:
        from thatch.frontend.anchors.recheck import follow_renames

        # A database refusing the write: the anchors stay put until a later pass.
        with contextlib.suppress(sqlite3.Error, StoreError):
            follow_renames(self.ctx.store, self.ctx.env, self.ctx.project_dir)

    def _schedule_fill(self) -> None:
        # Nothing pending (the usual case, one indexed row read): no pass, no thread woken. In
        # thatch mcp a pass waits until the answer is written: started at once it would take
        # the Store's lock (and the GIL) while this call is still answering.
        with contextlib.suppress(sqlite3.Error, StoreError):
            if not self.ctx.store.pending_count(up_to=0):
                return
        if self.after_reply is None:
            self.ctx.pending_fill.schedule()
        else:
            # keep=False: at shutdown the request is dropped; the next frontend fills.
            self.after_reply.defer(self.ctx.pending_fill.schedule, keep=False, key="fill")

    def _stamp_quietly(self, matches: list[Match], at: str) -> None:
        # The answer is out: a database that refuses the write is skipped silently, as
        # within a call (RecallReport.telemetry_skipped, which MCP never shows).
        with contextlib.suppress(sqlite3.Error, StoreError):
            self.ctx.store.stamp_recalls(matches, at)

    def duplicate_page(
        self, store: str, threshold: float | None = None, offset: int = 0
    ) -> DuplicatePage:
        """One page of clusters at ``threshold`` (default: the model's), from ``offset``."""
        if threshold is None:
            threshold = self.configured_thresholds().duplicate
        if self.ctx.store.pending_count(store, up_to=0):  # any: one row read, not the backlog
            self.ctx.pending_fill.fill_store(store)
        self._check_duplicates(store)
        return self.ctx.store.duplicate_page(store, threshold, offset=offset)

    def _check_duplicates(self, store: str) -> None:
        """Compare what no write compared yet (an upgraded database, the earlier release's
        rows), for at most ``CHECK_SECONDS``: the page then says how far it got."""
        import time

        self.ctx.store.check_all_duplicates(store, deadline=time.monotonic() + CHECK_SECONDS)

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

    def extraction_done(self, session_id: str | None) -> str:
        """Acknowledge extraction; with a session id, drain exactly the records that
        ``get_extraction_payload`` handed out for it (docs/hooks.md §snapshot)."""
        if session_id:
            from thatch.frontend import queue

            try:
                queue.complete(self.ctx.queue_dir, session_id, project=str(self.ctx.project_dir))
            except queue.QueueError as error:
                raise Refused(str(error)) from None
        return fmt.ACKNOWLEDGED

    def extraction_payload(self, session_id: str) -> str:
        """The session's queued tool interactions as JSON, the project's carried-over
        calls adopted first (what a nudge announced for this session, wherever a
        session-end has moved it); they stay queued, handed out (the nudge quiets) until
        ``extraction_done`` drains them."""
        from thatch.frontend import queue

        try:
            records = queue.accept(
                self.ctx.queue_dir, session_id, project=str(self.ctx.project_dir)
            )
        except queue.QueueError as error:
            raise Refused(str(error)) from None
        changed = self._code_changed() if records else []
        payload = queue.build_payload(records, self.ctx.project_store, changed)
        return payload if payload else fmt.NO_QUEUE

    def _code_changed(self) -> list[dict[str, object]]:
        """The project store's memories whose anchored code changed since saved, then
        those that depend on one of them (``via`` its label; at most ``REVISIT_MAX`` in
        all), for the extractor to revisit (docs/tools.md §code-anchors); none when the
        check fails: the payload matters more."""
        from thatch.frontend.anchors.recheck import drifted

        store = self.ctx.project_store
        found: list[dict[str, object]] = []
        try:
            for slug, drift in drifted(self.ctx.store, store, self.ctx.anchor_check).items():
                memory = self.ctx.store.show(store, slug)
                if memory is not None:
                    via = {"via": drift.via} if drift.via is not None else {}
                    found.append({"label": memory.label, "paths": list(drift.paths), **via})
                if len(found) == REVISIT_MAX:
                    break
        except (sqlite3.Error, StoreError, OSError):
            return []
        return found


def above(matches: Sequence[Match], floor: float) -> list[Match]:
    """Results scoring at least the model's floor: lower ones are noise, not answers."""
    return [match for match in matches if match.score >= floor]


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if text else type(error).__name__
