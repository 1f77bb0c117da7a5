"""Small HTML builders: every value from the database goes through ``text``/``stored``.

No templates and no JavaScript: the pages are plain forms and links. Strings returned
here are markup; anything else must be escaped on its way in.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from datetime import datetime
from urllib.parse import urlencode

from thatch.frontend.untrusted import body, inline

__all__ = [
    "STYLE",
    "attr",
    "confidence_bar",
    "hidden",
    "link",
    "moment",
    "page",
    "post_form",
    "stored",
    "table",
    "text",
    "url",
]

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#24313f;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#dfe8f1;text-decoration:none}header b{margin-right:1em}
main{padding:1em 1.6em;max-width:72em}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border-bottom:1px solid #e2e6ea;padding:.35em .6em;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
pre.stored{white-space:pre-wrap;background:#fff;border:1px solid #d5dbe1;
border-left:4px solid #8a99aa;padding:.8em;overflow-wrap:anywhere}
.muted{color:#5f6b78}.tag{background:#e4e9ee;border-radius:3px;padding:0 .35em;font-size:.9em}
.warn{background:#fff4d6;border:1px solid #e8c95d;padding:.6em .9em}
.refused{background:#fde4e1;border:1px solid #d9786c;padding:.8em 1em}
.ok{background:#e2f4e4;border:1px solid #7dbb84;padding:.6em .9em}
form.inline{display:inline}button{cursor:pointer}
textarea{width:100%;min-height:12em;font:14px monospace}
.bar{display:inline-block;height:.7em;background:#5b8bd0;vertical-align:middle}
.barbox{display:inline-block;width:8em;background:#e4e9ee;margin-right:.4em}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em}
time{white-space:nowrap}
"""


def text(value: object) -> str:
    """One line of stored or user text: invisible characters shown, then HTML-escaped."""
    return html.escape(inline(str(value)), quote=True)


def stored(value: str) -> str:
    """Multi-line stored text in its framed box."""
    return f'<pre class="stored">{html.escape(body(value), quote=True)}</pre>'


def moment(value: str | None, now: datetime) -> str:
    """A stored timestamp as people read it: how long ago, never wrapped mid-token, the
    exact UTC time on hover (and in ``datetime``); "never" for none."""
    from thatch.frontend.timefmt import parse_timestamp

    if not value:
        return '<span class="muted">never</span>'
    try:
        then = parse_timestamp(value)
    except ValueError:
        return text(value)  # written by another tool in another format: shown as it is
    seconds = (now - then).total_seconds()
    if seconds < -60:
        ago = then.strftime("%Y-%m-%d %H:%M")
    elif seconds < 60:
        ago = "just now"
    elif seconds < 3600:
        ago = f"{int(seconds // 60)} min ago"
    elif seconds < 86400:
        ago = f"{int(seconds // 3600)} h ago"
    elif seconds < 30 * 86400:
        days = int(seconds // 86400)
        ago = f"{days} day{'s' if days > 1 else ''} ago"
    else:
        ago = then.strftime("%Y-%m-%d")
    return f'<time datetime="{attr(value)}" title="{attr(value)}">{ago}</time>'


def attr(value: object) -> str:
    """A raw value inside an attribute (form field values keep the exact text)."""
    return html.escape(str(value), quote=True)


def url(path: str, params: Mapping[str, object] | None = None) -> str:
    """An escaped href: ``path?params``, parameters with None or "" left out."""
    query = {k: str(v) for k, v in (params or {}).items() if v is not None and v != ""}
    return attr(path + ("?" + urlencode(query) if query else ""))


def link(path: str, label: str, params: Mapping[str, object] | None = None) -> str:
    return f'<a href="{url(path, params)}">{text(label)}</a>'


def table(headers: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """``headers`` are thatch's words (none: no header row); cells are markup made by the
    caller."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    lines = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table>{thead}<tbody>{lines}</tbody></table>"


def hidden(fields: Mapping[str, object]) -> str:
    return "".join(
        f'<input type="hidden" name="{attr(k)}" value="{attr(v)}">'
        for k, v in fields.items()
        if v is not None
    )


def post_form(action: str, csrf: str, fields: Mapping[str, object], button: str) -> str:
    """A one-button form that changes something: POST, with the CSRF token."""
    return (
        f'<form class="inline" method="post" action="{attr(action)}">'
        f"{hidden({'csrf': csrf, **fields})}<button>{html.escape(button)}</button></form>"
    )


def confidence_bar(value: float) -> str:
    width = max(0.0, min(1.0, value)) * 100
    return (
        f'<span class="barbox"><span class="bar" style="width:{width:.0f}%"></span></span>'
        f"{value:.2f}"
    )


NAV = (
    ("/", "Stores"),
    ("/duplicates", "Duplicates"),
    ("/engines", "Engines"),
    ("/chat", "Chat"),
    ("/status", "Status"),
)


def page(title: str, content: str, *, refresh: int | None = None) -> str:
    """The whole document: ``title`` is thatch's words (escaped anyway), ``content`` markup;
    ``refresh``: reload every so many seconds (a live view without JavaScript)."""
    nav = "".join(f'<a href="{href}">{name}</a>' for href, name in NAV)
    reload = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{reload}<title>{text(title)} · thatch</title><style>{STYLE}</style></head>"
        f"<body><header><b>thatch</b>{nav}</header><main><h1>{text(title)}</h1>"
        f"{content}</main></body></html>"
    )
