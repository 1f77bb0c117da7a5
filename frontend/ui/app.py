"""The ``thatch ui`` application: routes, the guard in front of them, the page handlers.

Every operation goes through the tool layer (``Tools`` over the caller's ``ToolContext``)
or the Store it holds, exactly as the CLI's: the page keeps no state of its own beyond the
per-run secrets. Handlers run in Starlette's thread pool, one at a time (``_lock``): the
page has one user, and the tools assume one caller per context.
"""

from __future__ import annotations

import asyncio
import html
import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.ui import views
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import page
from thatch.frontend.ui.security import Guard

__all__ = ["GuardMiddleware", "UiApp", "build_app"]

MAX_FORM_BYTES = 512 * 1024  # a memory is at most 50,000 characters; room for UTF-8 and fields

SECURITY_HEADERS = {
    # Only this app's own script files run (never inline script), and they talk only to
    # this app: stored text that smuggles markup or script in stays inert.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; "
        "style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def refusal(status: int, title: str, why: str, fix: str | None = None) -> HTMLResponse:
    """A clear page saying what was refused and why; nothing was changed."""
    parts = [f'<div class="refused"><p>{html.escape(why)}</p>']
    if fix:
        parts.append(f"<p>Fix: {html.escape(fix)}</p>")
    parts.append("<p>Nothing was changed.</p></div>")
    return HTMLResponse(page(title, "".join(parts)), status_code=status, headers=SECURITY_HEADERS)


class GuardMiddleware:
    """Host check, then the token (query once, then cookie), before any route runs."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._check(request)
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    def _check(self, request: Request) -> Response | None:
        guard = self.guard
        if not guard.host_allowed(request.headers.get("host")):
            return refusal(
                400,
                "Refused: unknown host name",
                "This page answers only to the name it was started on; a request naming "
                "another host (a DNS rebinding attempt, or a proxy) is refused.",
                "open the exact URL that `thatch ui` printed.",
            )
        presented = request.query_params.get("token")
        if presented is not None:
            if not guard.token_ok(presented):
                return _token_refusal()
            # Trade the URL's token for a cookie, and drop it from the address bar.
            params = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            # One leading slash: "//host" would send the browser to another site.
            target = (
                "/" + request.url.path.lstrip("/") + ("?" + urlencode(params) if params else "")
            )
            response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
            response.set_cookie(
                guard.cookie_name,
                guard.token,
                httponly=True,
                samesite="strict",
                path="/",
            )
            return response
        if not guard.token_ok(request.cookies.get(guard.cookie_name)):
            return _token_refusal()
        return None


def _token_refusal() -> HTMLResponse:
    return refusal(
        403,
        "Refused: missing or wrong token",
        "Every visit needs the token of this run of `thatch ui`: it is in the URL the "
        "command printed, and a cookie keeps it after the first visit.",
        "open the URL that `thatch ui` printed (a new run prints a new token).",
    )


STATIC_DIR = Path(__file__).parent / "static"
STATIC_FILES = {"/static/chat.js": "chat.js"}
STREAM_POLL_SECONDS = 1.0  # how often the live stream looks for new chat messages
STREAM_STOP_CHECK_SECONDS = 0.1  # how soon an open stream notices the server stopping
STREAM_BATCH = 200
STREAM_KEEPALIVE_POLLS = 15  # a comment line now and then: a gone browser is noticed
STREAM_RETRY_MS = 2000


def sse_event(event: str, event_id: int, data: object) -> str:
    """One server-sent event. JSON keeps the data on one ``data:`` line (it escapes line
    breaks); it escapes nothing for HTML: the page's script inserts it as text."""
    return f"event: {event}\nid: {event_id}\ndata: {json.dumps(data)}\n\n"


def _stream_start(request: Request) -> int | None:
    """The id after which to stream: a reconnecting browser's Last-Event-ID, else
    ``?after=``; None when malformed."""
    value = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        return None
    return int(value)


Read = Callable[[views.Views, Request, None], Response]
Change = Callable[[views.Views, Request, Form], Response]


class UiApp:
    """Routes over one ToolContext (owned by the caller) and one Guard."""

    def __init__(
        self,
        ctx: ToolContext,
        guard: Guard,
        stopping: threading.Event,
        banner: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.guard = guard
        self.banner = banner  # thatch's words above every page (``thatch ui --demo``)
        self.views = views.Views(Tools(ctx), guard.csrf)
        self.stopping = stopping  # set when the server stops: open streams end then
        self._lock = threading.Lock()

    def asgi(self) -> ASGIApp:
        reads: dict[str, Read] = {
            "/": views.Views.stores,
            "/memories": views.Views.memories,
            "/memory": views.Views.memory,
            "/memory/forget": views.Views.forget_confirm,
            "/duplicates/merge": views.Views.merge_confirm,
            "/duplicates": views.Views.duplicates,
            "/engines": views.Views.engines,
            "/chat": views.Views.chat,
            "/status": views.Views.status,
        }
        changes: dict[str, Change] = {
            "/memory/forget": views.Views.forget,
            "/memory/archive": views.Views.archive,
            "/memory/edit": views.Views.edit,
            "/duplicates/verdict": views.Views.verdict,
            "/duplicates/merge": views.Views.merge,
            "/engines/delete": views.Views.engine_delete,
            "/chat/send": views.Views.chat_send,
            "/status/doctor": views.Views.run_doctor,
        }
        routes = []
        for path in sorted({*reads, *changes}):
            routes.append(
                Route(
                    path,
                    self._endpoint(reads.get(path), changes.get(path)),
                    methods=["GET", "POST"],
                )
            )
        routes.append(Route("/chat/stream", self._chat_stream, methods=["GET"]))
        routes.extend(Route(path, self._static, methods=["GET"]) for path in STATIC_FILES)
        starlette = Starlette(
            routes=routes,
            exception_handlers={404: _not_found, 405: _not_allowed, Exception: _failed},
        )
        return GuardMiddleware(starlette, self.guard)

    def _endpoint(self, read: Read | None, change: Change | None) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            if request.method == "POST":
                if change is None:
                    return refusal(405, "Refused: nothing to change here", "This page only shows.")
                refused, form = await self._form(request)
                if refused is not None:
                    return refused
                assert form is not None
                return await run_in_threadpool(self._run, lambda: change(self.views, request, form))
            if read is None:
                return refusal(
                    405,
                    "Refused: changes need a form",
                    "This address changes data, so it answers only to the page's own "
                    "buttons (POST with the page's form token), never to a link or a "
                    "typed URL.",
                    "use the button on the memory's page.",
                )
            return await run_in_threadpool(self._run, lambda: read(self.views, request, None))

        return endpoint

    async def _static(self, request: Request) -> Response:
        script = (STATIC_DIR / STATIC_FILES[request.url.path]).read_bytes()
        return Response(
            script,
            media_type="text/javascript; charset=utf-8",
            headers=SECURITY_HEADERS,
        )

    async def _chat_stream(self, request: Request) -> Response:
        """The Chat page's live stream: a ``chat`` event per new message, oldest first."""
        start = _stream_start(request)
        if start is None:
            return refusal(400, "Refused: bad stream position", "`after` must be a message id.")
        headers = dict(SECURITY_HEADERS, **{"X-Accel-Buffering": "no"})
        return StreamingResponse(
            self._chat_events(start), media_type="text/event-stream", headers=headers
        )

    async def _chat_events(self, after: int) -> AsyncIterator[str]:
        yield f"retry: {STREAM_RETRY_MS}\n\n"
        polls = 0
        while not self.stopping.is_set():
            events = await run_in_threadpool(self._chat_stream_events, after)
            for event in events:
                after = int(str(event["id"]))
                yield sse_event("chat", after, event)
            polls += 1
            if polls % STREAM_KEEPALIVE_POLLS == 0:
                yield ": keepalive\n\n"
            if len(events) == STREAM_BATCH:
                continue  # more are waiting
            waited = 0.0
            while waited < STREAM_POLL_SECONDS and not self.stopping.is_set():
                await asyncio.sleep(STREAM_STOP_CHECK_SECONDS)
                waited += STREAM_STOP_CHECK_SECONDS

    def _chat_stream_events(self, after: int) -> list[dict[str, object]]:
        with self._lock:
            return self.views.chat_stream_events(after, STREAM_BATCH)

    async def _form(self, request: Request) -> tuple[Response | None, Form | None]:
        if not self.guard.origin_allowed(request.headers.get("origin")):
            return _csrf_refusal("The form came from another site."), None
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return _csrf_refusal("The request is not one of this page's forms."), None
        data = bytearray()
        async for chunk in request.stream():
            data.extend(chunk)
            if len(data) > MAX_FORM_BYTES:
                return (
                    refusal(413, "Refused: form too large", "The form holds too much text."),
                    None,
                )
        try:
            parsed = parse_qs(data.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            return refusal(400, "Refused: unreadable form", "The form is not UTF-8."), None
        form = Form({name: values[0] for name, values in parsed.items()})
        if not self.guard.csrf_ok(form.get("csrf")):
            return _csrf_refusal("The form's token is missing or wrong."), None
        return None, form

    def _run(self, handler: Callable[[], Response]) -> Response:
        with self._lock:
            response = handler()
        if self.banner is not None and isinstance(response, HTMLResponse):
            notice = f'<p class="warn">{html.escape(self.banner)}</p>'.encode()
            response = HTMLResponse(
                bytes(response.body).replace(b"<main>", b"<main>" + notice, 1),
                status_code=response.status_code,
                headers={
                    k: v for k, v in response.headers.items() if k.lower() != "content-length"
                },
            )
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


async def _not_found(request: Request, exc: Exception) -> Response:
    return refusal(
        404, "Not found", "This page has no such address.", "start from the Stores page."
    )


async def _failed(request: Request, exc: Exception) -> Response:
    # An error no handler names: one line here, the traceback in the terminal (uvicorn).
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return HTMLResponse(
        page(
            "thatch ui failed",
            f'<div class="refused"><p>{html.escape(detail)}</p><p>The terminal running '
            "<code>thatch ui</code> shows the details.</p></div>",
        ),
        status_code=500,
        headers=SECURITY_HEADERS,
    )


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return refusal(
        405,
        "Refused: method not allowed",
        "These pages answer GET (to show) and POST from their own forms (to change).",
    )


def _csrf_refusal(why: str) -> HTMLResponse:
    return refusal(
        403,
        "Refused: not this page's form",
        why + " Changes are accepted only from the buttons of this run's pages.",
        "reload the page (a new run of `thatch ui` issues new form tokens) and try again.",
    )


def build_app(
    ctx: ToolContext, guard: Guard, stopping: threading.Event, banner: str | None = None
) -> ASGIApp:
    """The guarded app over ``ctx``. Like ``thatch mcp``, a long-lived frontend: memories
    saved without a vector are filled on the context's background thread (started here,
    stopped when the caller closes the context). ``stopping`` is the server's (see
    ``server.make_server``): open event streams end when it is set. ``banner``: a line of
    thatch's own shown at the top of every page."""
    ctx.pending_fill.start()
    return UiApp(ctx, guard, stopping, banner).asgi()
