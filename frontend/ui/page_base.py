"""What every page of ``thatch ui`` shares (docs/ui.md §pages): the page base class with
the store, error pages and lookups, and the helpers that answer a request.

Reads and writes go through ``Tools`` and the Store its context holds, as the CLI's do.
Every stored text reaches the page through ``html.text``/``html.stored``.
"""

from __future__ import annotations

import hmac
import html as stdhtml
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.responses import HTMLResponse, RedirectResponse, Response

from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.frontend.errors import StoreError
from thatch.frontend.store import db
from thatch.frontend.store.memory import Memory
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.tools.operations import Refused, embedder_error
from thatch.frontend.tools.validation import ArgumentError
from thatch.frontend.ui.html import (
    moment,
    page,
    text,
    url,
)

__all__ = [
    "PageBase",
    "Problem",
    "back_to",
    "body_text",
    "done_note",
    "problem_page",
    "respond",
    "whole_number",
]


class Problem(Exception):
    """A request the page cannot serve: shown as a clear page, nothing changed."""

    def __init__(self, status: int, title: str, why: str, fix: str | None = None) -> None:
        super().__init__(why)
        self.status = status
        self.title = title
        self.why = why
        self.fix = fix


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


def respond(
    title: str, content: str, status: int = 200, *, refresh: int | None = None
) -> HTMLResponse:
    return HTMLResponse(page(title, content, refresh=refresh), status_code=status)


def problem_page(problem: Problem) -> HTMLResponse:
    return respond(
        problem.title,
        f'<div class="refused"><p>{stdhtml.escape(problem.why)}</p>'
        + (f"<p>Fix: {stdhtml.escape(problem.fix)}</p>" if problem.fix else "")
        + "<p>Nothing was changed.</p></div>",
        problem.status,
    )


def done_note(message: str | None) -> str:
    return f'<p class="ok">{text(message)}</p>' if message else ""


def back_to(path: str, params: dict[str, object], message: str) -> RedirectResponse:
    """After a change: back to a page that shows ``message`` (303: the browser GETs it)."""
    target = url(path, {**params, "done": message})
    return RedirectResponse(stdhtml.unescape(target), status_code=303)


# Past any store's size, and times a page's length still an SQLite integer (a larger
# OFFSET overflowed into a 500 page and a traceback).
LARGEST_NUMBER = 10**15


def whole_number(value: str | None) -> int:
    """A query parameter as a whole number from 0 to LARGEST_NUMBER (anything else: 0)."""
    try:
        return min(max(0, int(value or "0")), LARGEST_NUMBER)
    except ValueError:
        return 0


@dataclass
class PageBase:
    """The pages' shared state and plumbing; each page class extends it."""

    tools: Tools
    csrf: str

    def _moment(self, value: str | None) -> str:
        return moment(value, self.store.clock())

    def _seal(self, message: str) -> str:
        key = self.csrf.encode()
        return hmac.new(key, message.encode("utf-8", "replace"), "sha256").hexdigest()[:24]

    def _back_to(self, path: str, params: dict[str, object], message: str) -> RedirectResponse:
        """``back_to`` with the message sealed by this run's secret: a link from elsewhere
        (``?done=forgot …``) would otherwise show its words as thatch's confirmation."""
        return back_to(path, {**params, "seal": self._seal(message)}, message)

    def _done_note(self, params: Mapping[str, str]) -> str:
        message, seal = params.get("done"), params.get("seal")
        if not message or seal is None or not hmac.compare_digest(seal, self._seal(message)):
            return ""
        return done_note(message)

    @property
    def store(self) -> Store:
        return self.tools.ctx.store

    def _safely(self, operation: Callable[[], Response]) -> Response:
        """Library errors as clear pages; stored text that is not UTF-8 read leniently."""
        try:
            db.refuse_moved(self.store.conn)
            return db.read_leniently(self.store.conn, operation)
        except Problem as problem:
            return problem_page(problem)
        except (ArgumentError, Refused) as error:
            return problem_page(Problem(400, "Refused", str(error)))
        except EmbedderUnavailable as error:
            return problem_page(Problem(503, "Embedder unavailable", embedder_error(error)))
        except StoreError as error:
            return problem_page(Problem(500, "Database error", str(error), error.fix))
        except sqlite3.Error as error:
            return problem_page(
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
