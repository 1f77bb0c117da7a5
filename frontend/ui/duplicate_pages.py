"""The Duplicates page of ``thatch ui``: near-duplicate pairs, verdicts and merges."""

from __future__ import annotations

import html as stdhtml

from starlette.requests import Request
from starlette.responses import Response

from thatch.frontend.store.duplicates import PAIRS_GROUPED
from thatch.frontend.store.memory import VERDICTS
from thatch.frontend.tools import formatting as fmt
from thatch.frontend.tools.registry import SPECS_BY_NAME
from thatch.frontend.tools.validation import validate
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import (
    hidden,
    link,
    post_form,
    stored,
    text,
)
from thatch.frontend.ui.page_base import (
    PageBase,
    Problem,
    body_text,
    respond,
    whole_number,
)

__all__ = ["DuplicatePages"]


class DuplicatePages(PageBase):
    # -- Duplicates --------------------------------------------------------------------

    def duplicates(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._duplicates(request))

    def _duplicates(self, request: Request) -> Response:
        params = request.query_params
        name = self._store_name(params.get("store"))
        offset = whole_number(params.get("offset"))
        # The threshold thatch dedup, hygiene and the Stores page count with: the model's.
        threshold = self.tools.configured_thresholds().duplicate
        page = self.tools.duplicate_page(name, threshold, offset)
        stores = " · ".join(link("/duplicates", s, {"store": s}) for s in self.store.store_names())
        blocks = [
            self._done_note(params),
            f"<p>Stores: {stores}</p>",
            f'<p class="muted">Pairs scoring at least {threshold:.2f}, the near-duplicate '
            "threshold of the configured model (as thatch dedup and the Stores page).</p>",
        ]
        if not page.complete:
            blocks.append(
                f"<p>Still comparing memories: {fmt.check_progress(page.progress)}; "
                "reload for the rest.</p>"
            )
        if page.partial:
            blocks.append(
                f"<p>Clusters of the best {PAIRS_GROUPED:,} candidate pairs only; the rest "
                "appear as these are resolved.</p>"
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
        return respond(f"Duplicates in {name}", "".join(blocks))

    def verdict(self, request: Request, form: Form) -> Response:
        def run() -> Response:
            name = self._store_name(form.get("store"))
            status = form.get("status")
            if status not in VERDICTS:
                raise Problem(400, "Refused", f"verdict must be one of {', '.join(VERDICTS)}.")
            message = self.tools.mark_checked(
                name, form.text("label_a"), form.text("label_b"), status
            )
            return self._back_to("/duplicates", {"store": name}, message)

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
        return respond(f"Merge into {keep.label}", content)

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
            return self._back_to("/duplicates", {"store": name}, message)

        return self._safely(run)
