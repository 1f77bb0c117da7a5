"""The Engines page of ``thatch ui``: predictions and behaviors, and deleting one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS, Engine
from thatch.frontend.tools.engine_tools import engine_store
from thatch.frontend.tools.seed_stamps import default_key, without_stamp
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import (
    confidence_bar,
    post_form,
    table,
    text,
)
from thatch.frontend.ui.page_base import (
    PageBase,
    Problem,
    respond,
)

__all__ = ["EnginePages"]

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


class EnginePages(PageBase):
    # -- Engines -----------------------------------------------------------------------

    def engines(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._engines(request))

    def _engines(self, request: Request) -> Response:
        names = self.store.store_names() or [self.tools.ctx.project_store]
        blocks = [self._done_note(request.query_params)]
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
        return respond("Engines", "".join(blocks))

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
            return self._back_to("/engines", {}, message)

        return self._safely(run)
