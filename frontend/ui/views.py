"""The pages of ``thatch ui`` (docs/ui.md §pages): each a method taking the request (and a
checked form for changes) and returning a response.

Reads and writes go through ``Tools`` and the Store its context holds, as the CLI's do.
Every stored text reaches the page through ``html.text``/``html.stored``.
"""

from __future__ import annotations

import contextlib
import html as stdhtml
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from thatch.embedder.client.errors import EmbedderUnavailable, ThatchEmbedderError
from thatch.embedder.client.kind import Kind
from thatch.frontend.errors import DatabaseDamagedError, StoreError
from thatch.frontend.store import db
from thatch.frontend.store.chat_store import ChatMessage, ChatStore
from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS, Engine
from thatch.frontend.store.memory import VERDICTS, Memory
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools import formatting as fmt
from thatch.frontend.tools.chat_tools import PersonSendRefused, person_send, person_session_id
from thatch.frontend.tools.engine_tools import engine_store
from thatch.frontend.tools.hygiene import StoreHygiene, hygiene
from thatch.frontend.tools.memory_tools import Refused, Tools, embedder_error
from thatch.frontend.tools.registry import SPECS_BY_NAME
from thatch.frontend.tools.seed_stamps import default_key, without_stamp
from thatch.frontend.tools.validation import ArgumentError, validate
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import (
    attr,
    confidence_bar,
    hidden,
    link,
    moment,
    page,
    post_form,
    stored,
    table,
    text,
    url,
)
from thatch.frontend.ui.queries import SORTS, newest_page
from thatch.frontend.untrusted import body, inline

PAGE_SIZE = 100
SEARCH_LIMIT = 50
SIMILAR_THRESHOLD = 0.5
SIMILAR_SHOWN = 5
ARCHIVED_CHOICES = ("live", "all", "archived")
ENGINES: dict[str, Engine] = {"prediction": PREDICTIONS, "behavior": BEHAVIORS}
ENGINE_HELP = {
    "prediction": (
        "What agents expect to happen in a situation (for example that a command fails "
        "without a flag), with a confidence that confirmations raise and surprises lower. "
        "Above the auto-fire threshold a prediction is shown to the agent when a prompt "
        "matches its situations."
    ),
    "behavior": (
        "What agents should do in a situation (for example check for uncommitted work "
        "before wrapping up). Agents confirm or refute them; one that matches a prompt is "
        "shown to the agent. The defaults come with thatch: deleting one switches it off "
        "(thatch behaviors defaults)."
    ),
}
CHAT_SHOWN = 200
CHAT_REFRESH = 5
CHAT_SCRIPT = "/static/chat.js"
T = TypeVar("T")


class Problem(Exception):
    """A request the page cannot serve: shown as a clear page, nothing changed."""

    def __init__(self, status: int, title: str, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.title = title
        self.why = why


def body_text(memory: Memory) -> str:
    """The stored text without its ``# <label>`` line and the blank line after it (what
    ``memory_remember`` takes as content and puts that header back on)."""
    header = f"# {memory.label}\n"
    content = memory.content
    if content.startswith(header):
        content = content[len(header) :]
        if content.startswith("\n"):
            content = content[1:]
    return content


def _html(
    title: str, content: str, status: int = 200, *, refresh: int | None = None
) -> HTMLResponse:
    return HTMLResponse(page(title, content, refresh=refresh), status_code=status)


def _problem_page(problem: Problem) -> HTMLResponse:
    return _html(
        problem.title,
        f'<div class="refused"><p>{stdhtml.escape(problem.why)}</p>'
        "<p>Nothing was changed.</p></div>",
        problem.status,
    )


def _done(message: str | None) -> str:
    return f'<p class="ok">{text(message)}</p>' if message else ""


def _back(path: str, params: dict[str, object], message: str) -> RedirectResponse:
    """After a change: back to a page that shows ``message`` (303: the browser GETs it)."""
    target = url(path, {**params, "done": message})
    return RedirectResponse(stdhtml.unescape(target), status_code=303)


def _whole(value: str | None) -> int:
    """A query parameter as a whole number ≥ 0 (anything else: 0)."""
    try:
        return max(0, int(value or "0"))
    except ValueError:
        return 0


@dataclass
class Views:
    tools: Tools
    csrf: str

    # -- plumbing ----------------------------------------------------------------------

    def _moment(self, value: str | None) -> str:
        return moment(value, self.store.clock())

    @property
    def store(self) -> Store:
        return self.tools.ctx.store

    def _safely(self, operation: Callable[[], Response]) -> Response:
        """Library errors as clear pages; stored text that is not UTF-8 read leniently."""
        try:
            return db.read_leniently(self.store.conn, operation)
        except Problem as problem:
            return _problem_page(problem)
        except (ArgumentError, Refused) as error:
            return _problem_page(Problem(400, "Refused", str(error)))
        except EmbedderUnavailable as error:
            return _problem_page(Problem(503, "Embedder unavailable", embedder_error(error)))
        except StoreError as error:
            return _problem_page(Problem(500, "Database error", str(error)))
        except sqlite3.Error as error:
            return _problem_page(
                Problem(500, "Database error", str(db.store_error(error, self.store.path)))
            )

    def _store_name(self, value: str | None) -> str:
        if value is None or not value:
            return self.tools.ctx.project_store
        if not self.store.store_exists(value):
            raise Problem(404, "No such store", f"There is no store named {value!r}.")
        return value

    def _memory(self, store: str, label: str | None) -> Memory:
        if not label:
            raise Problem(400, "Refused", "Which memory? The request names no label.")
        memory = self.store.show(store, label)
        if memory is None:
            raise Problem(404, "No such memory", f"No memory labeled {label!r} in {store!r}.")
        return memory

    def _active_model(self) -> str:
        from thatch.frontend.tools.active_model import active_model

        return active_model(self.tools.ctx.env, timeout=2.0)

    # -- Stores ------------------------------------------------------------------------

    def stores(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._stores(request))

    def _stores(self, request: Request) -> Response:
        ctx = self.tools.ctx
        counts = self.store.store_counts()
        model = self._active_model()
        rows = []
        reports = []
        project_report: str | None = None
        for name in sorted(counts):
            # Deleted branches are known only for the project's own repository.
            branches: Callable[[Path], Sequence[str]] | None = (
                None if name == ctx.project_store else (lambda _dir: [])
            )
            result = hygiene(self.store, name, ctx.project_dir, model, list_branches=branches)
            counted: StoreHygiene = result.project
            archived = newest_page(
                self.store, name, branch=None, archived="archived", offset=0, limit=0
            ).total
            rows.append(
                [
                    link("/memories", name, {"store": name}),
                    str(counts[name]),
                    str(archived),
                    str(counted.pending),
                    str(counted.other_model),
                    link("/duplicates", str(counted.duplicates), {"store": name}),
                    str(counted.stale),
                ]
            )
            if name == ctx.project_store:
                project_report = result.report
            parts = counted.parts()
            if parts:
                reports.append(f"<li><b>{text(name)}</b>: {text('; '.join(parts))}.</li>")
        headers = [
            "store",
            "memories",
            "archived",
            "unembedded",
            "other model",
            "duplicate candidates",
            "stale (90+ days)",
        ]
        content = [
            f"<p>Project store: <b>{text(ctx.project_store)}</b>. Active model: "
            f"<code>{text(model)}</code>.</p>",
            table(headers, rows) if rows else "<p>No stores yet: nothing was saved.</p>",
            "<h2>Hygiene</h2>",
            f"<ul>{''.join(reports)}</ul>" if reports else "<p>Every store is healthy.</p>",
            "<p>The report a session of this project gets at start (<code>thatch hygiene</code>): "
            f"{text(project_report) if project_report else 'healthy.'}</p>",
        ]
        return _html("Stores", "".join(content))

    # -- Memories ----------------------------------------------------------------------

    def memories(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._memories(request))

    def _memories(self, request: Request) -> Response:
        params = request.query_params
        name = self._store_name(params.get("store"))
        branch = params.get("branch") or None
        archived = params.get("archived") or "live"
        if archived not in ARCHIVED_CHOICES:
            raise Problem(400, "Refused", f"archived must be one of {', '.join(ARCHIVED_CHOICES)}.")
        query = (params.get("q") or "").strip()
        sort = params.get("sort") or "newest"
        if sort not in SORTS:
            raise Problem(400, "Refused", f"sort must be one of {', '.join(SORTS)}.")
        try:
            page_no = max(1, int(params.get("page") or "1"))
        except ValueError:
            page_no = 1
        known_branches = self.store.branches_in_store(name)
        scores: dict[str, float] = {}
        notes: list[str] = []
        start = (page_no - 1) * PAGE_SIZE
        if query:
            checked = validate(
                SPECS_BY_NAME["memory_recall"].params, {"query": query, "branch": branch}
            )
            report = self.tools.recall(
                query=checked["query"],
                stores=[name],
                branch=checked["branch"],
                limit=SEARCH_LIMIT,
                include_archived=archived != "live",
                stamp=False,  # a person looking: recall counts are agents'
            )
            shown = [m.memory for m in report.matches]
            scores = {m.memory.slug: m.score for m in report.matches}
            if archived == "archived":
                shown = [m for m in shown if m.archived]
            if report.pending:
                notes.append(fmt.not_indexed(report.pending))
            total = len(shown)
            visible = shown[start : start + PAGE_SIZE]
        else:
            listed = newest_page(
                self.store,
                name,
                branch=branch,
                archived=archived,
                offset=start,
                limit=PAGE_SIZE,
                sort=sort,
            )
            total, visible = listed.total, listed.memories
        rows = []
        for memory in visible:
            first = body_text(memory).strip().split("\n", 1)[0][:160]
            tags = []
            if memory.branch:
                tags.append(f'<span class="tag">branch: {text(memory.branch)}</span>')
            if memory.archived:
                tags.append('<span class="tag">archived</span>')
            if memory.pending:
                tags.append('<span class="tag">not embedded</span>')
            cells = [
                link("/memory", memory.label, {"store": name, "label": memory.label})
                + " "
                + " ".join(tags)
                + f'<br><span class="muted">{text(first)}</span>',
                self._moment(memory.created_at),
                str(memory.recall_count),
            ]
            if query:
                cells.insert(0, fmt.score(scores.get(memory.slug, 0.0)))
            rows.append(cells)
        headers = ["memory", "created", "recalls"]
        if query:
            headers.insert(0, "score")
        options = "".join(
            f'<option value="{text(b)}"{" selected" if b == branch else ""}>{text(b)}</option>'
            for b in known_branches
        )
        choices = "".join(
            f"<option{' selected' if c == archived else ''}>{c}</option>" for c in ARCHIVED_CHOICES
        )
        sorts = "".join(
            f'<option value="{key}"{" selected" if key == sort else ""}>{words}</option>'
            for key, (_order, words) in SORTS.items()
        )
        search = (
            f'<form method="get" action="/memories">{hidden({"store": name})}'
            f'<input name="q" size="40" placeholder="search by meaning" value="{text(query)}"> '
            f'branch <select name="branch"><option value="">any</option>{options}</select> '
            f'<select name="archived">{choices}</select> '
            f'sort <select name="sort">{sorts}</select> <button>Show</button></form>'
        )
        pager = []
        base = {"store": name, "branch": branch, "archived": archived, "q": query, "sort": sort}
        if page_no > 1:
            pager.append(link("/memories", "← previous", {**base, "page": page_no - 1}))
        if start + PAGE_SIZE < total:
            pager.append(link("/memories", "next →", {**base, "page": page_no + 1}))
        summary = (
            f"<p>{total} {'match' if query and total == 1 else 'matches' if query else 'memories'}"
            + (
                f" for <b>{text(query)}</b> (ranked as memory_recall ranks)"
                if query
                else f", {SORTS[sort][1]}"
            )
            + "</p>"
        )
        content = [
            _done(params.get("done")),
            search,
            summary,
            "".join(f'<p class="warn">{text(n)}</p>' for n in notes),
            table(headers, rows) if rows else "<p>Nothing to show.</p>",
            "<p>" + " · ".join(pager) + "</p>",
        ]
        return _html(f"Memories of {name}", "".join(content))

    # -- one memory --------------------------------------------------------------------

    def memory(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._memory_page(request))

    def _memory_page(self, request: Request) -> Response:
        params = request.query_params
        name = self._store_name(params.get("store"))
        memory = self._memory(name, params.get("label"))
        ident = {"store": name, "label": memory.label}
        telemetry = table(
            [
                "store",
                "branch",
                "confidence",
                "archived",
                "embedding",
                "created",
                "updated",
                "recalls",
                "last recalled",
            ],
            [
                [
                    text(memory.store),
                    text(memory.branch or "—"),
                    str(memory.confidence or "—"),
                    "yes" if memory.archived else "no",
                    "not embedded yet" if memory.pending else text(memory.model or "?"),
                    self._moment(memory.created_at),
                    self._moment(memory.updated_at),
                    str(memory.recall_count),
                    self._moment(memory.last_recalled_at),
                ]
            ],
        )
        similar = self._similar(memory)
        edit = (
            f'<form method="post" action="/memory/edit">{hidden({"csrf": self.csrf, **ident})}'
            f'<textarea name="content">{stdhtml.escape(body_text(memory))}</textarea><br>'
            f'branch <input name="branch" value="{text(memory.branch or "")}"> '
            f'confidence <input name="confidence" size="3" value="{memory.confidence or ""}"> '
            "<button>Save (re-embeds)</button></form>"
        )
        archive = post_form(
            "/memory/archive",
            self.csrf,
            {**ident, "archived": "0" if memory.archived else "1"},
            "Unarchive" if memory.archived else "Archive",
        )
        forget = link("/memory/forget", "Forget…", ident)
        content = [
            _done(params.get("done")),
            f"<p>{link('/memories', f'← {name}', {'store': name})}</p>",
            stored(body_text(memory)),
            telemetry,
            "<h2>Similar memories</h2>",
            similar,
            f"<h2>Change</h2><p>{archive} {forget}</p>",
            "<h3>Edit</h3>",
            edit,
        ]
        return _html(memory.label, "".join(content))

    def _similar(self, memory: Memory) -> str:
        if memory.pending:
            return "<p class=muted>Not embedded yet: similar memories show once it is.</p>"
        try:
            vector = self.tools.embed([memory.content], Kind.PASSAGE).vectors[0]
        except EmbedderUnavailable as error:
            return f'<p class="warn">{text(embedder_error(error))}</p>'
        found = self.store.find_similar(
            memory.store,
            vector,
            threshold=SIMILAR_THRESHOLD,
            limit=SIMILAR_SHOWN,
            exclude_slug=memory.slug,
        )
        if not found:
            return "<p class=muted>None above 0.50.</p>"
        return table(
            ["score", "memory"],
            [
                [
                    fmt.score(m.score),
                    link(
                        "/memory",
                        m.memory.label,
                        {"store": m.memory.store, "label": m.memory.label},
                    ),
                ]
                for m in found
            ],
        )

    def forget_confirm(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._forget_confirm(request))

    def _forget_confirm(self, request: Request) -> Response:
        params = request.query_params
        name = self._store_name(params.get("store"))
        memory = self._memory(name, params.get("label"))
        ident = {"store": name, "label": memory.label}
        content = (
            f'<p class="warn">Forget this memory of <b>{text(name)}</b>? It is deleted '
            "for every agent; this cannot be undone.</p>"
            + stored(body_text(memory))
            + post_form("/memory/forget", self.csrf, ident, "Forget it")
            + " "
            + link("/memory", "Keep it", ident)
        )
        return _html(f"Forget {memory.label}?", content)

    # -- changes -----------------------------------------------------------------------

    def forget(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            memory = self._memory(name, form.get("label"))
            forgotten = self.store.forget(name, memory.label)
            if forgotten is None:
                raise Problem(404, "No such memory", "It was already forgotten.")
            return _back("/memories", {"store": name}, fmt.forgotten(name, forgotten.label))

        return self._safely(run)

    def archive(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            memory = self._memory(name, form.get("label"))
            flag = form.get("archived")
            if flag not in ("0", "1"):
                raise Problem(400, "Refused", "archived must be 0 or 1.")
            report = self.tools.remember(
                label=memory.label,
                content=body_text(memory),
                store=name,
                overwrite=True,
                archived=flag == "1",
            )
            word = "archived" if flag == "1" else "unarchived"
            return _back("/memory", {"store": name, "label": report.label}, f"{word}")

        return self._safely(run)

    def edit(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            memory = self._memory(name, form.get("label"))
            confidence_text = form.text("confidence").strip()
            values = validate(
                SPECS_BY_NAME["memory_remember"].params,
                {
                    "label": memory.label,
                    "content": form.text("content").replace("\r\n", "\n"),
                    "store": name,
                    "branch": form.text("branch").strip() or None,
                    "confidence": int(confidence_text)
                    if confidence_text.isdigit()
                    else (confidence_text or None),
                },
            )
            report = self.tools.remember(
                label=values["label"],
                content=values["content"],
                store=name,
                branch=values["branch"],
                confidence=values["confidence"],
                overwrite=True,
                archived=memory.archived,
            )
            message = "saved and re-embedded"
            if report.pending_cause is not None:
                message = "saved; " + fmt.pending_notice(report.pending_cause, report.pending_fix)
            return _back("/memory", {"store": name, "label": report.label}, message)

        return self._safely(run)

    # -- Duplicates --------------------------------------------------------------------

    def duplicates(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._duplicates(request))

    def _duplicates(self, request: Request) -> Response:
        params = request.query_params
        name = self._store_name(params.get("store"))
        offset = _whole(params.get("offset"))
        # The threshold thatch dedup, hygiene and the Stores page count with: the model's.
        threshold = self.tools.configured_thresholds().duplicate
        page = self.tools.duplicate_page(name, threshold, offset)
        stores = " · ".join(link("/duplicates", s, {"store": s}) for s in self.store.store_names())
        blocks = [
            _done(params.get("done")),
            f"<p>Stores: {stores}</p>",
            f'<p class="muted">Pairs scoring at least {threshold:.2f}, the near-duplicate '
            "threshold of the configured model (as thatch dedup and the Stores page).</p>",
        ]
        if not page.complete:
            blocks.append(
                f"<p>Still comparing memories: {page.checked} of {page.total} checked; "
                "reload for the rest.</p>"
            )
        if not page.clusters:
            blocks.append(f"<p>No duplicate candidates in <b>{text(name)}</b>.</p>")
        for number, cluster in enumerate(page.clusters, offset + 1):
            blocks.append(f"<h2>Cluster {number} ({cluster.size} memories)</h2>")
            if cluster.more_pairs:
                blocks.append(
                    f"<p>Its {len(cluster.pairs)} closest pairs; {cluster.more_pairs} more "
                    "appear as these are resolved.</p>"
                )
            for pair in cluster.pairs:
                sides = []
                for label, other in ((pair.label_a, pair.label_b), (pair.label_b, pair.label_a)):
                    memory = self.store.show(name, label)
                    shown = stored(body_text(memory)) if memory else "<p>(gone)</p>"
                    ident = {"store": name, "label": label}
                    merge = {"store": name, "keep": label, "drop": other}
                    sides.append(
                        f"<div><b>{link('/memory', label, ident)}</b>{shown}"
                        f"{link('/duplicates/merge', 'Keep this one, merge the other in…', merge)}"
                        f" · {link('/memory/forget', 'Forget this one…', ident)}</div>"
                    )
                buttons = " ".join(
                    post_form(
                        "/duplicates/verdict",
                        self.csrf,
                        {
                            "store": name,
                            "label_a": pair.label_a,
                            "label_b": pair.label_b,
                            "status": verdict,
                        },
                        verdict,
                    )
                    for verdict in VERDICTS
                )
                blocks.append(
                    f"<p>similarity {fmt.score(pair.score)}</p>"
                    f'<div class="pair">{"".join(sides)}</div><p>Verdict: {buttons}</p>'
                )
        if page.next_offset is not None:
            nxt = {"store": name, "offset": str(page.next_offset)}
            blocks.append(
                f"<p>Clusters {offset + 1}–{offset + len(page.clusters)} of "
                f"{page.total_clusters}. {link('/duplicates', 'Next clusters', nxt)}</p>"
            )
        return _html(f"Duplicates in {name}", "".join(blocks))

    def verdict(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            status = form.get("status")
            if status not in VERDICTS:
                raise Problem(400, "Refused", f"verdict must be one of {', '.join(VERDICTS)}.")
            message = self.tools.mark_checked(
                name, form.text("label_a"), form.text("label_b"), status
            )
            return _back("/duplicates", {"store": name}, message)

        return self._safely(run)

    def merge_confirm(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._merge_confirm(request))

    def _merge_confirm(self, request: Request) -> Response:
        params = request.query_params
        name = self._store_name(params.get("store"))
        keep = self._memory(name, params.get("keep"))
        drop = self._memory(name, params.get("drop"))
        if keep.slug == drop.slug:
            raise Problem(400, "Refused", "A memory cannot be merged into itself.")
        merged = body_text(keep).rstrip() + "\n\n" + body_text(drop).strip()
        fields = {"csrf": self.csrf, "store": name, "keep": keep.label, "drop": drop.label}
        content = (
            f"<p>Merge <b>{text(drop.label)}</b> into <b>{text(keep.label)}</b>: edit the "
            f"text below, then save. <b>{text(keep.label)}</b> is saved with it (re-embedded) "
            f"and only then is <b>{text(drop.label)}</b> forgotten.</p>"
            f'<form method="post" action="/duplicates/merge">{hidden(fields)}'
            f'<textarea name="content">{stdhtml.escape(merged)}</textarea><br>'
            "<button>Save and forget the other</button></form>"
            f"<h3>{text(drop.label)} (to be forgotten)</h3>{stored(body_text(drop))}"
            f"<p>{link('/duplicates', 'Cancel', {'store': name})}</p>"
        )
        return _html(f"Merge into {keep.label}", content)

    def merge(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            keep = self._memory(name, form.get("keep"))
            drop = self._memory(name, form.get("drop"))
            if keep.slug == drop.slug:
                raise Problem(400, "Refused", "A memory cannot be merged into itself.")
            values = validate(
                SPECS_BY_NAME["memory_remember"].params,
                {"label": keep.label, "content": form.text("content").replace("\r\n", "\n")},
            )
            self.tools.remember(
                label=keep.label,
                content=values["content"],
                store=name,
                overwrite=True,
                archived=keep.archived,
            )
            self.store.forget(name, drop.label)
            message = f"merged into {keep.label}; " + fmt.forgotten(name, drop.label)
            return _back("/duplicates", {"store": name}, message)

        return self._safely(run)

    # -- Engines -----------------------------------------------------------------------

    def engines(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._engines(request))

    def _engines(self, request: Request) -> Response:
        names = self.store.store_names() or [self.tools.ctx.project_store]
        blocks = [_done(request.query_params.get("done"))]
        for kind, engine in ENGINES.items():
            entries = engine_store(self.tools, engine).listing(names)
            blocks.append(f"<h2>{'Predictions' if kind == 'prediction' else 'Behaviors'}</h2>")
            blocks.append(f'<p class="muted">{ENGINE_HELP[kind]}</p>')
            if not entries:
                blocks.append("<p>None yet.</p>")
                continue
            rows = []
            for entry in entries:
                item = entry.item
                matchers = "<br>".join(
                    f"{text(d)} <span class=muted>×{w:.2f}</span>" for d, w in entry.matchers
                )
                provenance = "<br>".join(
                    f"{text(p.signal)} {self._moment(p.created_at)}"
                    + (
                        f" <span class=muted>{text(without_stamp(p.detail))}</span>"
                        if without_stamp(p.detail)
                        else ""
                    )
                    for p in entry.provenance
                )
                statement = text(item.statement)
                if without_stamp(item.rationale):
                    rationale = text(without_stamp(item.rationale))
                    statement += f'<br><span class="muted">{rationale}</span>'
                if default_key(item) is not None:
                    statement += ' <span class="tag">default: deleting switches it off</span>'
                if not item.fires:
                    statement += ' <span class="tag">below the floor: never auto-fires</span>'
                rows.append(
                    [
                        text(item.store),
                        statement,
                        confidence_bar(item.confidence),
                        f"{item.evidence} ({item.confirm:g}/{item.disconfirm:g})",
                        matchers,
                        provenance,
                        post_form(
                            "/engines/delete", self.csrf, {"engine": kind, "id": item.id}, "Delete"
                        ),
                    ]
                )
            blocks.append(
                table(
                    [
                        "store",
                        "statement",
                        "confidence",
                        "evidence (+/−)",
                        "matchers",
                        "provenance",
                        "",
                    ],
                    rows,
                )
            )
        return _html("Engines", "".join(blocks))

    def engine_delete(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            kind = form.text("engine")
            engine = ENGINES.get(kind)
            if engine is None:
                raise Problem(400, "Refused", "engine must be prediction or behavior.")
            deleted = engine_store(self.tools, engine).delete(
                form.text("id"), switch_off=default_key
            )
            if deleted is None:
                raise Problem(404, "Not found", f"No {kind} with that id.")
            message = f"deleted {kind}: {deleted.statement}"
            key = default_key(deleted)
            if key is not None:
                message += f" (a default: switched off; thatch behaviors defaults --on {key})"
            return _back("/engines", {}, message)

        return self._safely(run)

    # -- Chat --------------------------------------------------------------------------

    def chat(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._chat(request))

    def _chat(self, request: Request) -> Response:
        chat = self.tools.chat.store
        now = self.store.clock()
        sessions = sorted(chat.sessions(), key=lambda s: s.last_seen, reverse=True)
        rows = [
            [
                text(s.name),
                "active" if s.is_active(now) else '<span class="muted">stale</span>',
                text(s.host_kind),
                text(s.project or "—"),
                text(s.topic or ""),
                text(s.last_seen),
            ]
            for s in sessions
        ]
        messages = chat.messages_after(0, CHAT_SHOWN)
        names = chat.names()
        items = []
        for message in reversed(messages):
            sender = message.from_name or "unknown"
            receiver = names.get(message.to_session, "unknown")
            state = "read" if message.read_at else "unread"
            items.append(
                f'<div class="chat-message"><p><b>#{message.id}</b> {text(sender)} → '
                f'{text(receiver)} <span class="muted">{self._moment(message.created_at)} · {state}'
                f"{' · broadcast' if message.via_broadcast else ''}</span></p>"
                + stored(message.body)
                + "</div>"
            )
        newest = messages[-1].id if messages else 0
        me = person_session_id()
        targets = "".join(
            f'<option value="{attr(s.name)}"'
            f"{' selected' if s.name == request.query_params.get('to') else ''}>"
            f"{text(s.name)}</option>"
            for s in sessions
            if s.session_id != me
        )
        reply = (
            f'<form method="post" action="/chat/send">{hidden({"csrf": self.csrf})}'
            f'Send as yourself (a person, not an agent) to <select name="to">{targets}</select>'
            '<textarea name="body" required></textarea><button>Send</button></form>'
            if targets
            else ""
        )
        content = [
            reply,
            "<h2>Sessions</h2>",
            table(["name", "state", "host", "project", "topic", "last seen"], rows)
            if rows
            else "<p>No chat sessions.</p>",
            f"<h2>Messages (newest first, last {CHAT_SHOWN})</h2>",
            # The script (static/chat.js, when JavaScript runs) adds what arrives after
            # ``data-after`` at the top of this list.
            '<p id="chat-live" class="muted"></p>',
            f'<div id="chat-messages" data-after="{newest}">',
            "".join(items) or '<p id="chat-empty">No messages.</p>',
            "</div>",
        ]
        follow = request.query_params.get("follow") == "1"
        if follow:
            content.insert(
                0,
                f"<p>Following: this page reloads every {CHAT_REFRESH} s. "
                f"{link('/chat', 'Stop following')}</p>",
            )
        else:
            content.insert(
                0,
                f"<p>{link('/chat', 'Follow new messages', {'follow': 1})} "
                f"(reloads every {CHAT_REFRESH} s; with JavaScript, new messages appear "
                "on their own).</p>",
            )
            content.append(f'<script src="{CHAT_SCRIPT}" defer></script>')
        return _html("Chat", "".join(content), refresh=CHAT_REFRESH if follow else None)

    def chat_send(self, request: Request, form: Form) -> Response:
        """A person's message to a session, as ``thatch chat send`` sends it."""

        def run() -> Response:
            ctx = self.tools.ctx
            try:
                sent = person_send(
                    self.tools.chat.store,
                    form.text("to"),
                    form.text("body"),
                    env=ctx.env,
                    project_dir=str(ctx.project_dir),
                )
            except PersonSendRefused as refused:
                raise Problem(400, "Refused", f"{refused}. {refused.fix}.") from None
            if sent.duplicate:
                return _back("/chat", {}, f"already sent to {sent.recipient} a moment ago")
            return _back("/chat", {}, f"sent to {sent.recipient} as {sent.sender}")

        return self._safely(run)

    def chat_stream_events(self, after: int, limit: int) -> list[dict[str, object]]:
        """The messages after id ``after`` (oldest first, at most ``limit``) as the live
        stream sends them; read leniently like every page."""
        chat = self.tools.chat.store
        return db.read_leniently(
            self.store.conn, lambda: chat_events(chat, chat.messages_after(after, limit))
        )

    # -- Status ------------------------------------------------------------------------

    def status(self, request: Request, form: None) -> Response:
        return self._safely(self._status)

    def _status(self) -> Response:
        from thatch.embedder.client.embedder_client import EmbedderClient
        from thatch.frontend.doctor import checks_in_child, damage_found

        ctx = self.tools.ctx
        path = self.store.path
        size = 0
        if path is not None:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    size += os.stat(f"{path}{suffix}").st_size
        facts = [
            ["database", text(path or "(in memory)")],
            ["size (with WAL)", f"{size / 1e6:.2f} MB"],
            ["project", text(ctx.project_dir)],
            ["project store", text(ctx.project_store)],
        ]
        try:
            client = EmbedderClient(env=ctx.env, autostart=False)
            try:
                info = client.info(timeout=2.0)
            finally:
                client.close()
            facts += [
                ["embedder model", text(info.model_id)],
                ["dimension", str(info.dim)],
                ["int8", "yes" if info.quantized else "no"],
                ["model loaded", "yes" if info.loaded else "no (released while idle)"],
                ["idle release", f"{info.idle_release_seconds} s"],
                [
                    "exit after idle",
                    f"{info.exit_after_seconds} s" if info.exit_after_seconds else "never",
                ],
                ["requests served", str(info.requests_served)],
                ["embedder pid, uptime", f"{info.pid}, {info.uptime_s} s"],
                ["embedder version", text(info.server_version)],
            ]
        except ThatchEmbedderError as error:
            facts.append(["embedder", text(f"not answering: {error}")])
        # In a child: this process holds the database open (docs/database.md
        # §who-opens-the-file), and the checks open the file themselves.
        checks = checks_in_child(ctx.env, project_dir=ctx.project_dir)
        damage = damage_found(checks, path) if path is not None else None
        if path is not None and damage is not None:  # from now on writes are refused
            db.note_damage(self.store.conn, DatabaseDamagedError(path, damage), path)
        check_rows = [
            [text(c.status), text(c.name), text(c.detail), text(c.fix or "")] for c in checks
        ]
        content = [
            table([], facts),
            "<h2>Doctor</h2>",
            table(["status", "check", "detail", "fix"], check_rows),
        ]
        return _html("Status", "".join(content))


def chat_events(chat: ChatStore, messages: list[ChatMessage]) -> list[dict[str, object]]:
    """Messages as plain text fields (invisible characters shown as the CLI shows them, no
    HTML escaping: the page escapes them, the script inserts them as text)."""
    names = chat.names() if messages else {}
    return [
        {
            "id": message.id,
            "from": inline(message.from_name or "unknown"),
            "to": inline(names.get(message.to_session, "unknown")),
            "created_at": inline(message.created_at),
            "state": "read" if message.read_at else "unread",
            "broadcast": bool(message.via_broadcast),
            "body": body(message.body),
        }
        for message in messages
    ]
