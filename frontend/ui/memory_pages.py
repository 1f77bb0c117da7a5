"""The memory pages of ``thatch ui``: Stores, Memories, one memory, and the changes made
there (forget, archive, edit)."""

from __future__ import annotations

import html as stdhtml
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.embedder.client.kind import Kind
from thatch.frontend.store.memory import Memory
from thatch.frontend.thresholds import SIMILAR_FLOOR
from thatch.frontend.tools import formatting as fmt
from thatch.frontend.tools.hygiene import AnchorRefresh, Hygiene, StoreHygiene, hygiene
from thatch.frontend.tools.operations import embedder_error
from thatch.frontend.tools.registry import SPECS_BY_NAME
from thatch.frontend.tools.validation import validate
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import (
    attr,
    hidden,
    link,
    post_form,
    stored,
    table,
    text,
)
from thatch.frontend.ui.page_base import (
    PageBase,
    Problem,
    body_text,
    respond,
    whole_number,
)
from thatch.frontend.ui.queries import (
    BRANCH_CHOICES,
    COUNTED_UP_TO,
    SORTS,
    archived_count,
    branch_choices,
    newest_page,
    store_sizes,
)

__all__ = ["MemoryPages"]

PAGE_SIZE = 100
SEARCH_LIMIT = 50
SIMILAR_SHOWN = 5
ARCHIVED_CHOICES = ("live", "all", "archived")


class MemoryPages(PageBase):
    # -- Stores ------------------------------------------------------------------------

    def stores(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._stores(request))

    def _stores(self, request: Request) -> Response:
        ctx = self.tools.ctx
        counts = store_sizes(self.store)
        model = self._active_model()
        rows = []
        reports = []
        project_report: str | None = None
        results = self._hygiene_of(
            sorted(counts, key=lambda name: name != ctx.project_store), model
        )
        for name in sorted(counts):
            result = results[name]
            counted: StoreHygiene = result.project
            archived = archived_count(self.store, name)
            rows.append(
                [
                    link("/memories", name, {"store": name}),
                    _count(
                        COUNTED_UP_TO if counts[name].more else counts[name].memories,
                        counts[name].more,
                    ),
                    str(archived),
                    _count(counted.pending, counted.pending_more),
                    _count(counted.other_model, counted.other_model_more),
                    link(
                        "/duplicates",
                        _count(counted.duplicates, counted.duplicates_more),
                        {"store": name},
                    ),
                    _count(counted.stale, counted.stale_more),
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
        return respond("Stores", "".join(content))

    def _hygiene_of(self, names: Sequence[str], model: str) -> dict[str, Hygiene]:
        """Each store's hygiene, in the order of ``names``. The git events and renames
        are taken once (they cover every store's anchors), and the stores share one
        re-check budget, the first store first: a whole pass per store cost a page of 20
        stores 3 s."""
        from thatch.frontend.anchors.recheck import HYGIENE_BUDGET

        ctx = self.tools.ctx
        deadline = time.monotonic() + HYGIENE_BUDGET
        results: dict[str, Hygiene] = {}
        for name in names:
            # Deleted branches are known only for the project's own repository.
            branches: Callable[[Path], Sequence[str]] | None = (
                None if name == ctx.project_store else (lambda _dir: [])
            )
            refresh = AnchorRefresh(
                renames=not results, budget=max(0.0, deadline - time.monotonic())
            )
            results[name] = hygiene(
                self.store, name, ctx.project_dir, model, list_branches=branches, refresh=refresh
            )
        return results

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
        page_no = max(1, whole_number(params.get("page")))
        known_branches = branch_choices(self.store, name)
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
                notes.append(fmt.not_indexed(report.pending, report.pending_more))
            total, more = len(shown), False
            visible = shown[start : start + PAGE_SIZE]
            next_page = start + PAGE_SIZE < total
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
            total, more, visible = listed.total, listed.more, listed.memories
            next_page = listed.next_page
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
        if known_branches is None:
            branch_field = (
                f'branch <input name="branch" value="{attr(branch or "")}" '
                f'placeholder="any (over {BRANCH_CHOICES})"> '
            )
        else:
            options = "".join(
                f'<option value="{attr(b)}"{" selected" if b == branch else ""}>{text(b)}</option>'
                for b in known_branches
            )
            branch_field = (
                f'branch <select name="branch"><option value="">any</option>{options}</select> '
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
            f'<input name="q" size="40" placeholder="search by meaning" value="{attr(query)}"> '
            + branch_field
            + f'<select name="archived">{choices}</select> '
            f'sort <select name="sort">{sorts}</select> <button>Show</button></form>'
        )
        pager = []
        base = {"store": name, "branch": branch, "archived": archived, "q": query, "sort": sort}
        if page_no > 1:
            pager.append(link("/memories", "← previous", {**base, "page": page_no - 1}))
        if next_page:
            pager.append(link("/memories", "next →", {**base, "page": page_no + 1}))
        summary = (
            f"<p>{f'more than {COUNTED_UP_TO:,}' if more else total} "
            f"{'match' if query and total == 1 else 'matches' if query else 'memories'}"
            + (
                f" for <b>{text(query)}</b> (ranked as memory_recall ranks)"
                if query
                else f", {SORTS[sort][1]}"
            )
            + "</p>"
        )
        content = [
            self._done_note(params),
            search,
            summary,
            "".join(f'<p class="warn">{text(n)}</p>' for n in notes),
            table(headers, rows) if rows else "<p>Nothing to show.</p>",
            "<p>" + " · ".join(pager) + "</p>",
        ]
        return respond(f"Memories of {name}", "".join(content))

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
            # Empty keeps the stored branch: a prefilled value would send back the shown
            # (escaped) text, and a browser drops line breaks from an input's value.
            f'branch <input name="branch" placeholder="{text(memory.branch or "")}"> '
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
            self._done_note(params),
            f"<p>{link('/memories', f'← {name}', {'store': name})}</p>",
            stored(body_text(memory)),
            telemetry,
            "<h2>Similar memories</h2>",
            similar,
            f"<h2>Change</h2><p>{archive} {forget}</p>",
            "<h3>Edit</h3>",
            edit,
        ]
        return respond(memory.label, "".join(content))

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
            threshold=SIMILAR_FLOOR,
            limit=SIMILAR_SHOWN,
            exclude_slug=memory.slug,
        )
        if not found:
            return f"<p class=muted>None above {SIMILAR_FLOOR:.2f}.</p>"
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
        return respond(f"Forget {memory.label}?", content)

    # -- changes -----------------------------------------------------------------------

    def forget(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            memory = self._memory(name, form.get("label"))
            forgotten = self.store.forget(name, memory.label)
            if forgotten is None:
                raise Problem(404, "No such memory", "It was already forgotten.")
            return self._back_to("/memories", {"store": name}, fmt.forgotten(name, forgotten.label))

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
            return self._back_to("/memory", {"store": name, "label": report.label}, f"{word}")

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
            return self._back_to("/memory", {"store": name, "label": report.label}, message)

        return self._safely(run)


def _count(count: int, more: bool) -> str:
    """A count as the Stores page shows it: past its cap, ``more than <cap>`` with a
    thousands separator (``more than 10,000``), every column alike."""
    return f"more than {count:,}" if more else str(count)
