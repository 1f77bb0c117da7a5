"""``thatch ui`` (docs/ui.md) through a real uvicorn server on 127.0.0.1, a real SQLite file
and a real (mock-model) embedder process: every page, every action, every refusal."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows
from tests.support.ui_client import Page, UiClient, running_ui
from thatch.cli.main import cli
from thatch.frontend.store.chat_store import ChatStore
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.ui.security import Guard

XSS_LABEL = 'Deploy <script>alert("label")</script>'
XSS_CONTENT = "push a tag <img src=x onerror=alert(1)> then </pre><script>alert(2)</script>"
XSS_CHAT = "<script>alert('chat')</script><iframe src=//evil>"
XSS_STATEMENT = "<b onmouseover=alert(3)>run the linter</b>"
RAW_MARKUP = re.compile(r"<(script|img|iframe|b |i>)", re.IGNORECASE)

MEMORY_TABLE = "SELECT store, slug, label, content, archived FROM entries ORDER BY 1, 2"


@pytest.fixture
def ctx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> Iterator[ToolContext]:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    with ToolContext.from_env() as context:
        tools = Tools(context)
        tools.remember(label=XSS_LABEL, content=XSS_CONTENT, branch="main", confidence=7)
        tools.remember(label="Tabs", content="the user likes tabs")
        yield context


@pytest.fixture
def ui(ctx: ToolContext) -> Iterator[tuple[UiClient, Guard]]:
    with running_ui(ctx) as (client, guard):
        entered = client.get("/", token=guard.token)
        assert entered.status == 303 and entered.headers["location"] == "/"
        yield client, guard


def db_path(ctx: ToolContext) -> Path:
    assert ctx.store.path is not None
    return Path(ctx.store.path)


OWN_SCRIPT = '<script src="/static/chat.js" defer></script>'


def no_markup(page: Page) -> None:
    """No stored text came back as markup: the page holds no element a payload made (the
    Chat page's own script tag aside)."""
    body = page.body.replace(OWN_SCRIPT, "", 1)
    assert RAW_MARKUP.search(body) is None, RAW_MARKUP.search(body)


# -- the token and the cookie ------------------------------------------------------------


def test_token_in_url_becomes_an_httponly_strict_cookie(ctx: ToolContext) -> None:
    with running_ui(ctx) as (client, guard):
        first = client.get("/memories", token=guard.token, store="proj")
        assert first.status == 303
        assert first.headers["location"] == "/memories?store=proj"  # the token leaves the URL
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{guard.cookie_name}={guard.token};")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        page = client.get("/memories", store="proj")
        assert page.status == 200 and "Tabs" in page.body
        policy = page.headers["content-security-policy"]
        # Only the app's own script files, never inline script, talking only to the app.
        assert (
            "script-src 'self';" in policy and "unsafe-inline" not in policy.split("style-src")[0]
        )
        assert "connect-src 'self'" in policy and "default-src 'none'" in policy
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["referrer-policy"] == "no-referrer"


def test_token_redirect_stays_on_this_page(ctx: ToolContext) -> None:
    with running_ui(ctx) as (client, guard):
        page = client.request("GET", f"//evil.example/x?token={guard.token}")
        assert page.status == 303 and page.headers["location"] == "/evil.example/x"


def test_each_run_has_its_own_token(ctx: ToolContext) -> None:
    with running_ui(ctx) as (_a, first), running_ui(ctx) as (_b, second):
        assert first.token != second.token and first.csrf != second.csrf
        assert len(first.token) >= 40


@pytest.mark.parametrize(
    ("how", "status", "words"),
    [
        ("no cookie", 403, "missing or wrong token"),
        ("wrong cookie", 403, "missing or wrong token"),
        ("wrong token in URL", 403, "missing or wrong token"),
        ("foreign Host", 400, "unknown host name"),
        ("loopback name, other port", 400, "unknown host name"),
        ("no Host", 400, "unknown host name"),
    ],
)
def test_requests_without_the_token_or_from_a_foreign_host_are_refused(
    ui: tuple[UiClient, Guard], ctx: ToolContext, how: str, status: int, words: str
) -> None:
    """Reads and changes alike: a clear page, and the database unchanged."""
    client, guard = ui
    before = rows(db_path(ctx), MEMORY_TABLE)
    csrf = client.get("/memory", store="proj", label="Tabs").csrf()
    form = {"csrf": csrf, "store": "proj", "label": "Tabs"}
    for method, path, body in (
        ("GET", "/memories?store=proj", None),
        ("POST", "/memory/forget", form),
        ("POST", "/memory/archive", {**form, "archived": "1"}),
    ):
        host = None
        cookies = True
        if how == "no cookie":
            cookies = False
        elif how == "wrong cookie":
            client.cookies[guard.cookie_name] = guard.token[:-1] + "x"
        elif how == "wrong token in URL":
            path += ("&" if "?" in path else "?") + "token=" + guard.token.upper()
        elif how == "foreign Host":
            host = f"evil.example:{guard.port}"
        elif how == "loopback name, other port":
            host = f"localhost:{guard.port + 1}"
        elif how == "no Host":
            host = ""
        page = client.request(method, path, form=body, host=host, cookies=cookies)
        assert page.status == status, (method, path, page.body[-600:])
        assert words in page.body and "Nothing was changed." in page.body
        assert "Tabs" not in page.body
        client.cookies[guard.cookie_name] = guard.token
    assert rows(db_path(ctx), MEMORY_TABLE) == before


def test_loopback_names_are_accepted(ui: tuple[UiClient, Guard]) -> None:
    client, guard = ui
    for host in (f"localhost:{guard.port}", f"[::1]:{guard.port}", f"LOCALHOST:{guard.port}"):
        assert client.request("GET", "/", host=host).status == 200, host


# -- changes: POST only, with the form token ----------------------------------------------


@pytest.mark.parametrize(
    "path", ["/memory/archive", "/memory/edit", "/duplicates/verdict", "/engines/delete"]
)  # (forget's and merge's GET are their confirmation pages)
def test_get_on_a_changing_route_is_refused(
    ui: tuple[UiClient, Guard], ctx: ToolContext, path: str
) -> None:
    client, guard = ui
    before = rows(db_path(ctx), MEMORY_TABLE)
    page = client.get(path, store="proj", label="Tabs", archived="1", content="x", csrf=guard.csrf)
    assert page.status == 405
    assert "changes need a form" in page.body and "Nothing was changed." in page.body
    assert rows(db_path(ctx), MEMORY_TABLE) == before


def test_forget_by_get_only_asks_for_confirmation(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    client, _guard = ui
    before = rows(db_path(ctx), MEMORY_TABLE)
    page = client.get("/memory/forget", store="proj", label="Tabs")
    assert page.status == 200 and "Forget this memory" in page.body
    assert 'action="/memory/forget"' in page.body and 'method="post"' in page.body
    assert rows(db_path(ctx), MEMORY_TABLE) == before


@pytest.mark.parametrize("how", ["missing", "wrong", "other run's", "foreign Origin", "json"])
def test_posts_without_this_runs_form_token_are_refused(
    ui: tuple[UiClient, Guard], ctx: ToolContext, how: str
) -> None:
    client, guard = ui
    before = rows(db_path(ctx), MEMORY_TABLE)
    form = {"store": "proj", "label": "Tabs", "csrf": guard.csrf}
    headers: dict[str, str] = {}
    if how == "missing":
        del form["csrf"]
    elif how == "wrong":
        form["csrf"] = guard.csrf[:-2] + "zz"
    elif how == "other run's":
        form["csrf"] = Guard.for_bind("127.0.0.1", guard.port).csrf
    elif how == "foreign Origin":
        headers["Origin"] = "http://evil.example"
    if how == "json":  # the token is there, but not in a form of this page
        document = f'{{"store": "proj", "label": "Tabs", "csrf": "{guard.csrf}"}}'
        page = client.request(
            "POST",
            "/memory/forget",
            body=document.encode(),
            headers={"Content-Type": "application/json"},
        )
    else:
        page = client.request("POST", "/memory/forget", form=form, headers=headers)
    assert page.status == 403, page.body[-500:]
    assert "Refused: not this page&#x27;s form" in page.body and "Nothing was changed." in page.body
    assert rows(db_path(ctx), MEMORY_TABLE) == before


def test_oversized_form_is_refused(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, guard = ui
    before = rows(db_path(ctx), MEMORY_TABLE)
    form = {"csrf": guard.csrf, "store": "proj", "label": "Tabs", "content": "x" * 600_000}
    page = client.post("/memory/edit", form)
    assert page.status == 413 and "Nothing was changed." in page.body
    assert rows(db_path(ctx), MEMORY_TABLE) == before


# -- stored text is escaped everywhere ------------------------------------------------------


def test_stored_text_comes_back_escaped_on_every_page(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    client, _guard = ui
    tools = Tools(ctx)
    # The payload as a store name, a branch, an engine statement and chat bodies.
    tools.remember(label="x", content="y", store="<script>s</script>", branch="<img src=x>")
    result = tools.call(
        "engine",
        {
            "action": "behavior_codify",
            "situation": "<script>alert(4)</script>",
            "behavior": XSS_STATEMENT,
            "rationale": "r",
        },
    )
    assert not result.is_error, result.text
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    sender = chat.register_server(project="<i>p</i>", host_kind="claude", worktree="/w")
    receiver = chat.register_server(project="proj", host_kind="cursor", worktree="/w")
    chat.set_topic(sender.session_id, "<script>topic</script>")
    assert chat.send(sender.session_id, receiver.session_id, [XSS_CHAT])

    pages = {
        "stores": client.get("/"),
        "memories": client.get("/memories", store="proj"),
        "other store": client.get("/memories", store="<script>s</script>"),
        "search": client.get("/memories", store="proj", q="<script>deploy</script>"),
        "memory": client.get("/memory", store="proj", label=XSS_LABEL),
        "forget": client.get("/memory/forget", store="proj", label=XSS_LABEL),
        "duplicates": client.get("/duplicates", store="proj"),
        "merge": client.get("/duplicates/merge", store="proj", keep=XSS_LABEL, drop="Tabs"),
        "engines": client.get("/engines"),
        "chat": client.get("/chat"),
        "status": client.get("/status"),
        "unknown store": client.get("/memories", store="<script>nope</script>"),
    }
    for name, page in pages.items():
        assert page.status in (200, 404), (name, page.status, page.body[-500:])
        no_markup(page)
    assert "Deploy &lt;script&gt;alert(&quot;label&quot;)&lt;/script&gt;" in pages["memories"].body
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages["memory"].body
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in pages["memory"].body
    assert "&lt;script&gt;alert(&#x27;chat&#x27;)&lt;/script&gt;" in pages["chat"].body
    assert "&lt;b onmouseover=alert(3)&gt;" in pages["engines"].body
    assert "&lt;img src=x&gt;" in pages["other store"].body
    assert pages["unknown store"].status == 404


def test_invisible_characters_in_labels_are_shown(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    """A bidi override in a label cannot reorder what the page shows."""
    client, _guard = ui
    Tools(ctx).remember(label="safe\u202egnp.exe", content="c")
    page = client.get("/memories", store="proj")
    assert "\u202e" not in page.body and "safe\\u202egnp.exe" in page.body


# -- pages and actions ---------------------------------------------------------------------


def test_stores_page_counts_and_hygiene(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, _guard = ui
    tools = Tools(ctx)
    tools.remember(label="Old", content="archived thing", archived=True)
    tools.remember(label="Tabs again", content="the user likes tabs")  # a duplicate of Tabs
    page = client.get("/")
    assert page.status == 200
    cells = re.findall(
        r"<tr><td><a href=\"/memories\?store=proj\">proj</a></td>(.*?)</tr>", page.body
    )
    assert len(cells) == 1
    numbers = re.findall(r"<td>(?:<a [^>]*>)?(\d+)", cells[0])
    # memories, archived, unembedded, other model, memories with duplicate candidates, stale
    assert numbers == ["4", "1", "0", "0", "2", "0"]
    assert "2 memories with duplicate candidates pending review" in page.body
    assert "(<code>thatch hygiene</code>): Store &quot;proj&quot;: 2 memories with dup" in page.body


@pytest.mark.parametrize("indexed", [True, False])
def test_stores_page_counts_a_big_store_up_to_a_cap(
    ui: tuple[UiClient, Guard], ctx: ToolContext, indexed: bool
) -> None:
    """Past 10,000 memories a store's count says "more than 10,000" (as the Memories page
    does): an exact count read the whole store's key index at every visit. The same counts
    without the created-rows index (a file read with its own older schema), where stepping
    along it would scan and sort the table at each store."""
    client, _guard = ui
    with contextlib.closing(sqlite3.connect(db_path(ctx))) as conn, conn:
        if not indexed:
            conn.execute("DROP INDEX thatch_entries_created")
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, created_at, updated_at) "
            "VALUES (?, ?, ?, 'x', 't', 't')",
            [(f"m{i}", "big", f"m{i}") for i in range(10_001)]
            + [(f"m{i}", "exact", f"m{i}") for i in range(10_000)],
        )
    page = client.get("/")
    assert page.status == 200
    counts = dict(
        re.findall(
            r"<tr><td><a href=\"/memories\?store=(\w+)\">\w+</a></td><td>([^<]*)<", page.body
        )
    )
    assert counts == {"big": "more than 10,000", "exact": "10000", "global": "0", "proj": "2"}
    # Not one of them embedded: the unembedded count (a hygiene count) stops there too,
    # written as the memories column writes it (it said "more than 10000" beside it).
    unembedded = {
        name: re.findall(r"<td>([^<]*)</td>", row)[2]
        for name, row in re.findall(
            r"<tr><td><a href=\"/memories\?store=(\w+)\">\w+</a></td>(.*?)</tr>", page.body
        )
    }
    assert unembedded == {"big": "more than 10,000", "exact": "10000", "global": "0", "proj": "0"}


@pytest.mark.parametrize("changed", [True, False])
def test_stores_page_says_which_code_anchors_it_did_not_check(
    ui: tuple[UiClient, Guard], ctx: ToolContext, tmp_path: Path, changed: bool
) -> None:
    """A pass reads a store's first 5,000 anchors: past them the page says they were not
    checked, and the memories it found changed are "at least" that many (it said "1
    memory" and nothing of the 5,000 it never read). With none found changed it says
    nothing: the same line at every session start, with nothing to do."""
    client, _guard = ui
    code = tmp_path / "code.py"
    code.write_text("def f():\n    return 1\n")
    stat = code.stat()
    with contextlib.closing(sqlite3.connect(db_path(ctx))) as conn, conn:
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, created_at, updated_at) "
            "VALUES (?, 'anchored', ?, 'x', 't', 't')",
            [(f"m{i:05}", f"m{i:05}") for i in range(5_001)],
        )
        # m00000 was saved on another version of the file; the rest on this one.
        conn.executemany(
            "INSERT INTO thatch_anchors (store, slug, seq, root, path, blob, mtime_ns, size) "
            "VALUES ('anchored', ?, 0, '', ?, ?, ?, ?)",
            [("m00000", str(code), "other", 1, 1)] * changed
            + [
                (f"m{i:05}", str(code), "x", stat.st_mtime_ns, stat.st_size)
                for i in range(1 if changed else 0, 5_001)
            ],
        )
    page = html.unescape(client.get("/").body)
    found = "<b>anchored</b>: at least 1 memory whose code changed since saved" in page
    unread = "code anchors past the first 5000 not checked" in page
    assert (found, unread) == (changed, changed)


def test_memories_page_newest_first_with_filters_and_search(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    client, _guard = ui
    tools = Tools(ctx)
    tools.remember(label="Newest", content="written last", branch="feature")
    tools.remember(label="Hidden", content="archived one", archived=True)
    page = client.get("/memories", store="proj")
    order = re.findall(r'<a href="/memory\?[^"]*">([^<]+)</a>', page.body)
    assert order[0] == "Newest" and "Hidden" not in order and len(order) == 3
    assert "Tabs" in order
    assert "3 memories, newest first" in page.body
    on_branch = client.get("/memories", store="proj", branch="feature")
    assert re.findall(r'<a href="/memory\?[^"]*">([^<]+)</a>', on_branch.body) == ["Newest"]
    only_archived = client.get("/memories", store="proj", archived="archived")
    assert re.findall(r'<a href="/memory\?[^"]*">([^<]+)</a>', only_archived.body) == ["Hidden"]
    everything = client.get("/memories", store="proj", archived="all")
    assert "4 memories" in everything.body
    found = client.get("/memories", store="proj", q="the user likes tabs")
    assert found.status == 200 and "ranked as memory_recall ranks" in found.body
    labels = re.findall(r'<a href="/memory\?[^"]*">([^<]+)</a>', found.body)
    assert labels[0] == "Tabs"  # the mock model: identical text scores 1.0
    counts = sqlite3.connect(db_path(ctx)).execute("SELECT sum(recall_count) FROM entries")
    assert counts.fetchone()[0] == 0  # a person's search: recall counts are agents'
    by_label = client.get("/memories", store="proj", sort="label")
    assert re.findall(r'<a href="/memory\?[^"]*">([^<]+)</a>', by_label.body) == sorted(
        order, key=str.lower
    )
    assert "3 memories, by label" in by_label.body
    oldest = client.get("/memories", store="proj", sort="oldest")
    assert re.findall(r'<a href="/memory\?[^"]*">([^<]+)</a>', oldest.body)[-1] == "Newest"
    assert client.get("/memories", store="proj", sort="random").status == 400
    bad = client.get("/memories", store="proj", archived="maybe")
    assert bad.status == 400 and "archived must be one of" in bad.body


def test_memory_page_edit_archive_forget(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, _guard = ui
    path = db_path(ctx)
    page = client.get("/memory", store="proj", label="Tabs")
    assert page.status == 200
    assert "the user likes tabs" in page.body and "Similar memories" in page.body
    assert "last recalled" in page.body
    csrf = page.csrf()
    ident = {"csrf": csrf, "store": "proj", "label": "Tabs"}

    edited = client.post(
        "/memory/edit", {**ident, "content": "tabs, width 4", "branch": "dev", "confidence": "9"}
    )
    assert edited.status == 303, edited.body[-500:]
    assert rows(
        path,
        "SELECT content, branch, confidence, model IS NOT NULL FROM entries WHERE slug = 'tabs'",
    ) == [("# Tabs\n\ntabs, width 4", "dev", 9, 1)]
    shown = client.get(edited.headers["location"])
    assert "saved and re-embedded" in shown.body and "tabs, width 4" in shown.body

    refused = client.post("/memory/edit", {**ident, "content": "", "confidence": "11"})
    assert refused.status == 400 and "content: must not be empty" in refused.body
    assert rows(path, "SELECT content FROM entries WHERE slug = 'tabs'") == [
        ("# Tabs\n\ntabs, width 4",)
    ]

    assert client.post("/memory/archive", {**ident, "archived": "1"}).status == 303
    assert rows(path, "SELECT archived FROM entries WHERE slug = 'tabs'") == [(1,)]
    assert "Unarchive" in client.get("/memory", store="proj", label="Tabs").body
    assert client.post("/memory/archive", {**ident, "archived": "0"}).status == 303
    assert rows(path, "SELECT archived, content FROM entries WHERE slug = 'tabs'") == [
        (0, "# Tabs\n\ntabs, width 4")
    ]

    gone = client.post("/memory/forget", ident)
    assert gone.status == 303 and gone.headers["location"].startswith("/memories?store=proj")
    assert rows(path, "SELECT slug FROM entries WHERE slug = 'tabs'") == []
    again = client.post("/memory/forget", ident)
    assert again.status == 404 and "Nothing was changed." in again.body
    missing = client.get("/memory", store="proj", label="Tabs")
    assert missing.status == 404 and "No memory labeled" in missing.body


def test_an_edit_leaves_an_odd_branch_as_it_was_and_the_filter_finds_it(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    """The edit form sent back the branch as the page showed it: escaped, so each save
    added a backslash; the branch filter's options were escaped the same way."""
    client, _guard = ui
    odd = '[thatch] br"<b>'
    Tools(ctx).remember(label="Odd", content="on an odd branch", branch=odd)
    page = client.get("/memory", store="proj", label="Odd")
    field = re.search(r'<input name="branch"([^>]*)>', page.body)
    assert field is not None
    value = re.search(r'value="([^"]*)"', field.group(1))
    sent = html.unescape(value.group(1)) if value else ""  # as a browser submits it
    form = {"csrf": page.csrf(), "store": "proj", "label": "Odd", "content": "edited"}
    assert client.post("/memory/edit", {**form, "branch": sent}).status == 303
    assert rows(db_path(ctx), "SELECT branch, content FROM entries WHERE slug = 'odd'") == [
        (odd, "# Odd\n\nedited")
    ]

    listing = client.get("/memories", store="proj")
    options = [html.unescape(v) for v in re.findall(r'<option value="([^"]*)"', listing.body)]
    assert odd in options
    filtered = client.get("/memories", store="proj", branch=odd)
    assert ">Odd</a>" in filtered.body and "Tabs</a>" not in filtered.body


def test_a_store_of_many_branches_gets_a_branch_box(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    client, _guard = ui
    with contextlib.closing(sqlite3.connect(db_path(ctx))) as conn, conn:
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, branch, created_at, updated_at) "
            "VALUES (?, 'proj', ?, 'x', ?, 't', 't')",
            [(f"s{i}", f"s{i}", f"branch-{i}") for i in range(201)],
        )
    page = client.get("/memories", store="proj", branch="branch-7")
    assert '<input name="branch" value="branch-7"' in page.body
    assert '<select name="branch">' not in page.body
    assert ">s7</a>" in page.body and ">s8</a>" not in page.body


def test_duplicates_page_and_verdicts(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, _guard = ui
    Tools(ctx).remember(label="Tabs again", content="the user likes tabs")
    page = client.get("/duplicates", store="proj")
    assert "Cluster 1 (2 memories)" in page.body
    assert page.body.count('name="status"') == 4  # the verdicts of dedup_mark_checked
    verdict = client.post(
        "/duplicates/verdict",
        {
            "csrf": page.csrf(),
            "store": "proj",
            "label_a": "Tabs",
            "label_b": "Tabs again",
            "status": "supplement",
        },
    )
    assert verdict.status == 303
    assert rows(db_path(ctx), "SELECT slug_a, slug_b, status FROM dedup_pairs") == [
        ("tabs", "tabs-again", "supplement")
    ]
    after = client.get(verdict.headers["location"])
    assert "No duplicate candidates" in after.body and "[checked]" in after.body
    bogus = client.post(
        "/duplicates/verdict",
        {
            "csrf": page.csrf(),
            "store": "proj",
            "label_a": "Tabs",
            "label_b": "Tabs again",
            "status": "delete-everything",
        },
    )
    assert bogus.status == 400


def test_merge_then_forget(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, _guard = ui
    Tools(ctx).remember(label="Tabs again", content="the user likes tabs")
    page = client.get("/duplicates", store="proj")
    assert "Keep this one, merge the other in" in page.body
    confirm = client.get("/duplicates/merge", store="proj", keep="Tabs", drop="Tabs again")
    assert confirm.status == 200
    assert "the user likes tabs\n\nthe user likes tabs</textarea>" in confirm.body
    assert rows(db_path(ctx), "SELECT count(*) FROM entries WHERE store = 'proj'") == [(3,)]
    fields = {"csrf": confirm.csrf(), "store": "proj", "keep": "Tabs", "drop": "Tabs again"}
    refused = client.post("/duplicates/merge", {**fields, "content": ""})
    assert refused.status == 400
    assert rows(db_path(ctx), "SELECT count(*) FROM entries WHERE store = 'proj'") == [(3,)]
    merged = client.post("/duplicates/merge", {**fields, "content": "tabs, width 4"})
    assert merged.status == 303
    assert rows(db_path(ctx), "SELECT slug, content FROM entries WHERE slug LIKE 'tabs%'") == [
        ("tabs", "# Tabs\n\ntabs, width 4")
    ]
    assert "[forgotten] proj :: Tabs again" in client.get(merged.headers["location"]).body
    itself = client.get("/duplicates/merge", store="proj", keep="Tabs", drop="tabs")
    assert itself.status == 400


def test_engines_page_and_delete(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, _guard = ui
    result = Tools(ctx).call(
        "engine",
        {
            "action": "behavior_codify",
            "situation": "before a commit",
            "behavior": "run the linter",
            "rationale": "CI fails",
        },
    )
    assert not result.is_error, result.text
    page = client.get("/engines")
    assert "run the linter" in page.body and "before a commit" in page.body
    assert "codify" in page.body and 'class="bar"' in page.body
    item_id = re.search(r'name="id" value="([^"]+)"', page.body)
    assert item_id is not None
    deleted = client.post(
        "/engines/delete", {"csrf": page.csrf(), "engine": "behavior", "id": item_id.group(1)}
    )
    assert deleted.status == 303
    assert rows(db_path(ctx), "SELECT count(*) FROM behaviors") == [(0,)]
    missing = client.post(
        "/engines/delete", {"csrf": page.csrf(), "engine": "behavior", "id": item_id.group(1)}
    )
    assert missing.status == 404


def test_chat_page_follows_by_reloading(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    client, _guard = ui
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    one = chat.register_server(project="proj", host_kind="claude", worktree="/w")
    two = chat.register_server(project="proj", host_kind="cursor", worktree="/w")
    assert chat.send(one.session_id, two.session_id, ["message-one"])
    plain = client.get("/chat")
    assert "message-one" in plain.body and 'http-equiv="refresh"' not in plain.body
    assert chat.send(two.session_id, one.session_id, ["message-two"])
    followed = client.get("/chat", follow="1")
    assert '<meta http-equiv="refresh" content="5">' in followed.body
    assert followed.body.index("message-two") < followed.body.index("message-one")  # newest first
    assert f"{one.name} → {two.name}" in followed.body and "unread" in followed.body


def test_chat_page_counts_unread_as_the_store_does(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    """Only ``read_at IS NULL`` is unread (chat read, unread counts): a message another
    writer marked read with ``read_at = ''`` is read on the page and in the live stream,
    like one read at a time; the page's unread ones are the store's unread count."""
    client, _guard = ui
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    one = chat.register_server(project="proj", host_kind="claude", worktree="/w")
    two = chat.register_server(project="proj", host_kind="cursor", worktree="/w")
    assert chat.send(one.session_id, two.session_id, ["never read", "read at no time", "read"])
    ids = [message.id for message in chat.messages_after(0)]
    with contextlib.closing(sqlite3.connect(db_path(ctx))) as other, other:
        other.execute("UPDATE chat_messages SET read_at = '' WHERE id = ?", (ids[1],))
        other.execute(
            "UPDATE chat_messages SET read_at = '2026-12-05T10:00:00Z' WHERE id = ?", (ids[2],)
        )
    assert chat.unread_count(two.session_id) == 1
    page = client.get("/chat").body
    states = dict(re.findall(r"<b>#(\d+)</b>.*? · (read|unread)</span>", page))
    assert states == {str(ids[0]): "unread", str(ids[1]): "read", str(ids[2]): "read"}
    with contextlib.closing(client.stream("/chat/stream?after=0")) as stream:
        streamed = [json.loads(stream.next_event()["data"]) for _ in ids]
    assert [(event["id"], event["state"]) for event in streamed] == [
        (ids[0], "unread"),
        (ids[1], "read"),
        (ids[2], "read"),
    ]


def test_a_person_replies_from_the_chat_page(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    """The Chat page sends as the person identity (issue 23); hostile or empty input is
    refused with a page, nothing sent; a message to yourself is refused."""
    client, _guard = ui
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    agent = chat.register_server(project="proj", host_kind="claude", worktree="/w")
    page = client.get("/chat")
    assert f'<option value="{agent.name}"' in page.body and 'action="/chat/send"' in page.body
    sent = client.post(
        "/chat/send", {"csrf": page.csrf(), "to": agent.name, "body": "<b>ship it</b>"}
    )
    assert sent.status == 303
    (message,) = chat.messages_after(0, 10)
    assert message.body == "<b>ship it</b>" and (message.from_name or "").startswith("person-")
    confirmed = client.get(sent.headers["location"]).body
    assert f'<p class="ok">sent to {agent.name}' in confirmed, confirmed[-1500:]
    shown = client.get("/chat").body
    assert "&lt;b&gt;ship it&lt;/b&gt;" in shown and "<b>ship it</b>" not in shown
    empty = client.post("/chat/send", {"csrf": page.csrf(), "to": agent.name, "body": "  "})
    assert empty.status == 400 and "must not be empty" in empty.body
    nobody = client.post("/chat/send", {"csrf": page.csrf(), "to": "nobody-00001", "body": "x"})
    assert nobody.status == 400 and "no chat session named" in nobody.body
    myself = client.post(
        "/chat/send", {"csrf": page.csrf(), "to": message.from_name or "", "body": "x"}
    )
    assert myself.status == 400 and "cannot send a message to yourself" in myself.body
    forged = client.post("/chat/send", {"csrf": "wrong", "to": agent.name, "body": "x"})
    assert forged.status != 303
    assert len(chat.messages_after(0, 10)) == 1


def send_as_another_process(env: dict[str, str], to: str, body: str) -> None:
    """``thatch chat send`` in its own process, on the same database file."""
    sent = subprocess.run(
        [str(Path(sys.executable).parent / "thatch"), "chat", "send", to, body],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(f"[sent] → {to}")


def test_chat_page_loads_its_live_script(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    """Without JavaScript the page is whole; with it, one same-origin script file."""
    client, _guard = ui
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    one = chat.register_server(project="proj", host_kind="claude", worktree="/w")
    assert chat.send(one.session_id, one.session_id, ["hello"])
    newest = chat.messages_after(0)[-1].id
    page = client.get("/chat")
    assert page.body.count("<script") == 1 and OWN_SCRIPT in page.body
    assert f'<div id="chat-messages" data-after="{newest}">' in page.body
    assert "hello" in page.body
    script = client.get("/static/chat.js")
    assert script.status == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert 'new EventSource("/chat/stream?after="' in script.body
    assert ".textContent = message.body" in script.body and "innerHTML" not in script.body
    assert "script-src 'self'" in script.headers["content-security-policy"]
    following = client.get("/chat", follow="1")
    assert "<script" not in following.body  # following reloads; no stream on top of it


def test_chat_stream_is_guarded(ui: tuple[UiClient, Guard]) -> None:
    client, _guard = ui
    for path in ("/chat/stream", "/static/chat.js"):
        refused = client.request("GET", path, cookies=False)
        assert refused.status == 403 and "missing or wrong token" in refused.body
        foreign = client.request("GET", path, host="evil.example:80")
        assert foreign.status == 400
    bad = client.get("/chat/stream", after="1e9")
    assert bad.status == 400 and "must be a message id" in bad.body
    posted = client.request("POST", "/chat/stream", form={"x": "y"})
    assert posted.status == 405


def test_chat_stream_sends_messages_written_by_another_process(ctx: ToolContext) -> None:
    """A message sent by ``thatch chat send`` in another process arrives as an event, its
    body as written (the stream escapes nothing; the script inserts it as text); the
    server stops promptly with the stream open, and the stream then ends."""
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    agent = chat.register_server(project="proj", host_kind="claude", worktree="/w")
    assert chat.send(agent.session_id, agent.session_id, ["before the page"])
    newest = chat.messages_after(0)[-1].id
    with contextlib.ExitStack() as closing:
        with running_ui(ctx) as (client, guard):
            assert client.get("/", token=guard.token).status == 303
            stream = client.stream(f"/chat/stream?after={newest}")
            closing.callback(stream.close)
            assert stream.status == 200
            assert (stream.header("content-type") or "").startswith("text/event-stream")
            assert stream.next_block() == {"retry": "2000"}
            send_as_another_process(dict(os.environ), agent.name, XSS_CHAT + "\nline two")
            event = stream.next_event()
            assert event["event"] == "chat" and int(event["id"]) > newest
            data = json.loads(event["data"])
            assert data["body"] == XSS_CHAT + "\nline two"  # raw: the client inserts text
            assert data["to"] == agent.name and data["state"] == "unread"
            assert data["id"] == int(event["id"])
            # A reconnecting browser resumes after the last id it saw: nothing repeated.
            send_as_another_process(dict(os.environ), agent.name, "third")
            resumed = client.stream("/chat/stream?after=0", last_event_id=event["id"])
            closing.callback(resumed.close)
            assert json.loads(resumed.next_event()["data"])["body"] == "third"
            assert json.loads(stream.next_event()["data"])["body"] == "third"
        # running_ui asserted the server thread stopped; the open stream was ended.
        with pytest.raises(EOFError):
            stream.next_event()


DOCTOR_TABLE = "<th>status</th><th>check</th><th>detail</th><th>fix</th>"
DAMAGE_READ = re.compile(r"Last read <time datetime=\"([^\"]+)\"")


def test_status_page(ui: tuple[UiClient, Guard], ctx: ToolContext) -> None:
    """A visit shows the doctor's checks without reading the whole file for damage (PRAGMA
    quick_check, linear in the file): that read runs only from the page's button, and its
    result is shown as of when it ran, never as the file's state now."""
    client, _guard = ui
    page = client.get("/status")
    assert page.status == 200
    assert str(db_path(ctx)) in page.body
    assert "embedder model" in page.body and "mock" in page.body
    shown_db = f"<td>ok</td><td>database</td><td>{db_path(ctx)} ("
    assert DOCTOR_TABLE in page.body and shown_db in page.body
    assert "whole file not read for damage (--skip-integrity)" in page.body
    assert "Not read since this page started." in page.body
    assert page.body.count(DOCTOR_TABLE) == 1
    ran = client.post("/status/doctor", {"csrf": page.csrf()})
    assert ran.status == 303 and ran.headers["location"].startswith("/status?")
    shown = client.get(ran.headers["location"])
    assert "Not read since" not in shown.body and shown.body.count(DOCTOR_TABLE) == 2
    damage = shown.body[shown.body.index("<h2>Damage</h2>") :]
    assert shown_db in damage and "--skip-integrity" not in damage
    first = DAMAGE_READ.search(shown.body)
    assert first is not None
    # A later visit shows that same read, with its time: nothing was read since.
    again = client.get("/status")
    again_read = DAMAGE_READ.search(again.body)
    assert again_read is not None and again_read.group(1) == first.group(1)
    assert client.request("GET", "/status/doctor").status == 405
    assert client.post("/status/doctor", {"csrf": "wrong"}).status == 403


def test_status_page_shows_the_doctors_escaped_paths_once(
    ui: tuple[UiClient, Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The doctor shows a path holding a newline as `\\n` already: the page shows that,
    not `\\\\n`; what a detail leaves raw (a bidi override) is still escaped."""
    from thatch.frontend import doctor
    from thatch.frontend.doctor import Check

    said = [Check("ok", "database", "/p\\nok  forged (1 memory in 1 store)"),
            Check("warn", "model", "m\u202e", "fix /p\\n")]  # fmt: skip
    monkeypatch.setattr(doctor, "checks_in_child", lambda *args, **kwargs: said)
    client, _guard = ui
    page = client.get("/status").body
    assert "<td>/p\\nok  forged (1 memory in 1 store)</td>" in page
    assert "<td>m\\u202e</td><td>fix /p\\n</td>" in page


def test_unknown_address_and_method_are_clear_pages(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    client, guard = ui
    page = client.get("/nothing-here")
    assert page.status == 404 and "no such address" in page.body
    before = rows(db_path(ctx), MEMORY_TABLE)
    form = {"csrf": guard.csrf, "store": "proj", "label": "Tabs"}
    for method in ("DELETE", "PUT"):
        refused = client.request(method, "/memory/forget", form=form)
        assert refused.status == 405 and "method not allowed" in refused.body
    assert rows(db_path(ctx), MEMORY_TABLE) == before


def test_only_thatchs_own_confirmations_are_shown(ui: tuple[UiClient, Guard]) -> None:
    """A link from elsewhere (`?done=…`) showed its words in the green box as thatch's."""
    client, guard = ui
    forged = 'forgot "Deploy" and every memory of this store'
    for path in ("/memories", "/memory", "/duplicates", "/engines", "/chat"):
        page = client.get(path, store="proj", label="Tabs", done=forged, seal="0" * 24)
        assert page.status == 200 and 'class="ok"' not in page.body, path
        assert "every memory of this store" not in page.body, path
    form = {"csrf": guard.csrf, "store": "proj", "label": "Tabs", "archived": "1"}
    archived = client.post("/memory/archive", form)
    assert archived.status == 303
    assert '<p class="ok">' in client.get(archived.headers["location"]).body


def test_page_numbers_past_any_integer_are_clear_pages(ui: tuple[UiClient, Guard]) -> None:
    client, _guard = ui
    for huge in ("9" * 17, "1" + "0" * 40):
        page = client.get("/memories", store="proj", page=huge)
        assert page.status == 200 and "Tabs" not in page.body, page.body[-600:]
        assert client.get("/duplicates", store="proj", offset=huge).status == 200


def test_a_database_file_moved_from_under_the_ui_is_refused_not_written_into(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    client, guard = ui
    path = db_path(ctx)
    form = {"csrf": guard.csrf, "store": "proj", "label": "Tabs", "content": "tabs, width 8"}
    # A copy renamed over the path, as a restore or a sync tool does, the old file's
    # -wal and -shm removed first (SQLite would replay them onto the new file).
    copy = path.with_name("restored.db")
    with (
        contextlib.closing(sqlite3.connect(path)) as source,
        contextlib.closing(sqlite3.connect(copy)) as target,
    ):
        source.backup(target)
        target.execute("PRAGMA journal_mode = DELETE")
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink()
    os.replace(copy, path)
    before = rows(path, MEMORY_TABLE)
    edit = client.post("/memory/edit", form)
    assert edit.status >= 400 and "was replaced by another file" in edit.body, edit.body[-800:]
    assert "restart this thatch process" in edit.body
    page = client.get("/memories", store="proj")
    assert page.status >= 400 and "was replaced by another file" in page.body
    assert rows(path, MEMORY_TABLE) == before

    for name in os.listdir(path.parent):
        if name.startswith(path.name):
            os.unlink(path.parent / name)
    edit = client.post("/memory/edit", form)
    assert edit.status >= 400 and "was deleted or moved" in edit.body, edit.body[-800:]
    assert not path.exists()


# -- the command -----------------------------------------------------------------------------


def test_non_loopback_host_needs_a_token() -> None:
    refused = CliRunner().invoke(cli, ["ui", "--host", "0.0.0.0", "--no-browser"])
    assert refused.exit_code == 2
    assert "pass --token" in refused.stderr
    short = CliRunner().invoke(cli, ["ui", "--token", "abc", "--no-browser"])
    assert short.exit_code == 2 and "at least 16 characters" in short.stderr


def test_a_host_that_is_not_this_machines_gets_a_host_fix() -> None:
    args = ["ui", "--no-browser", "--token", "0123456789abcdefXYZ"]
    for host in ("nonexistent.invalid", "192.0.2.1"):  # unresolvable; not an own address
        failed = CliRunner().invoke(cli, [*args, "--host", host])
        assert failed.exit_code == 1, failed.output
        assert f"Error: cannot listen on {host}:7788" in failed.stderr
        assert "Fix: give --host" in failed.stderr and "--port" not in failed.stderr


def test_non_loopback_host_warns_before_serving(tmp_path: Path) -> None:
    """With --token the command warns (plain HTTP, reachable by others); a taken port is
    a one-line error with its fix, and nothing is served."""
    import socket

    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen(1)
    try:
        port = str(taken.getsockname()[1])
        result = CliRunner().invoke(
            cli, ["ui", "--host", "0.0.0.0", "--token", "s" * 24, "--port", port, "--no-browser"]
        )
    finally:
        taken.close()
    assert result.exit_code == 1
    assert "warning: serving on 0.0.0.0" in result.stderr and "no TLS" in result.stderr
    assert f"cannot listen on 0.0.0.0:{port}" in result.stderr and "--port" in result.stderr


def test_guard_host_names() -> None:
    guard = Guard.for_bind("127.0.0.1", 7788)
    for good in ("127.0.0.1:7788", "localhost:7788", "[::1]:7788", "localhost"):
        assert guard.host_allowed(good), good
    for bad in (
        "evil.example:7788",
        "127.0.0.1:7789",
        "127.0.0.1.evil:7788",
        "",
        "::1:7788",
        "localhost:77x8",
        "[::1",
        None,
    ):
        assert not guard.host_allowed(bad), bad
    lan = Guard.for_bind("192.168.1.5", 7788, token="t" * 20)
    assert lan.host_allowed("192.168.1.5:7788") and lan.token == "t" * 20
    assert not lan.host_allowed("192.168.1.6:7788")
    assert guard.origin_allowed(None) and guard.origin_allowed("http://localhost:7788")
    assert not guard.origin_allowed("null") and not guard.origin_allowed("http://evil:7788")
    # No port in an Origin means the scheme's default: a page on another server.
    for foreign in ("http://localhost", "https://127.0.0.1", "ftp://localhost:7788"):
        assert not guard.origin_allowed(foreign), foreign
    assert Guard.for_bind("127.0.0.1", 80).origin_allowed("http://localhost")


def test_embedder_down_reads_work_search_says_why_edit_saves_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    """No embedder answers (and none is started): lists and pages still work, a search is
    a clear 503 page, and an edit is saved without a vector, as memory_remember saves it."""
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{short_tmp / 'none.sock'}")
    with ToolContext.from_env(autostart=False, start_wait=0) as context:
        saved = Tools(context).remember(label="Tabs", content="the user likes tabs")
        assert saved.pending_cause is not None
        with running_ui(context) as (client, guard):
            assert client.get("/", token=guard.token).status == 303
            listed = client.get("/memories", store="proj")
            assert listed.status == 200 and "not embedded" in listed.body
            search = client.get("/memories", store="proj", q="tabs")
            assert search.status == 503 and "Embedding service unavailable" in search.body
            page = client.get("/memory", store="proj", label="Tabs")
            assert page.status == 200 and "Not embedded yet" in page.body
            edited = client.post(
                "/memory/edit",
                {"csrf": page.csrf(), "store": "proj", "label": "Tabs", "content": "spaces now"},
            )
            assert edited.status == 303
            assert "saved; " in client.get(edited.headers["location"]).body
        assert rows(db_path(context), "SELECT content, embedding IS NULL FROM entries") == [
            ("# Tabs\n\nspaces now", 1)
        ]


def test_duplicates_page_pages_through_clusters(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    """25 clusters: the page shows 20 and links the rest; the next page shows the others,
    numbered on, with no further link (issue 21 §2)."""
    import numpy as np

    client, _guard = ui
    rng = np.random.default_rng(0)
    for c in range(25):
        base = rng.normal(size=32)
        for k in range(2):
            vector = (base + rng.normal(size=32) * 0.01).astype(np.float32)
            ctx.store.remember("proj", f"pair {c} {k}", "# x", vector, "m")
    page = client.get("/duplicates", store="proj")
    assert page.status == 200
    assert page.body.count("<h2>Cluster ") == 20 and "Cluster 20 (2 memories)" in page.body
    assert "Clusters 1–20 of 25." in page.body and "offset=20" in page.body
    rest = client.get("/duplicates", store="proj", offset="20")
    assert rest.body.count("<h2>Cluster ") == 5 and "Cluster 21 (2 memories)" in rest.body
    assert "Next clusters" not in rest.body


def test_duplicates_page_uses_the_models_threshold(
    ui: tuple[UiClient, Guard], ctx: ToolContext
) -> None:
    """The Duplicates page counts with the threshold thatch dedup and the Stores page use
    (the configured model's, or THATCH_DUPLICATE_THRESHOLD), not a fixed 0.85 (issue 23)."""
    import numpy as np

    client, _guard = ui
    base = np.zeros(32, dtype=np.float32)
    base[0] = 1.0
    near = np.zeros(32, dtype=np.float32)
    near[0], near[1] = 0.7, 0.714  # cosine 0.70 with base
    ctx.store.remember("proj", "First", "# First", base, "m")
    ctx.store.remember("proj", "Second", "# Second", near, "m")
    assert "No duplicate candidates" in client.get("/duplicates", store="proj").body
    ctx.env = {**ctx.env, "THATCH_DUPLICATE_THRESHOLD": "0.66"}
    page = client.get("/duplicates", store="proj").body
    assert "Cluster 1 (2 memories)" in page and "at least 0.66" in page


def test_duplicates_page_counts_the_check_up_to_the_session_starts_cap(
    ui: tuple[UiClient, Guard], ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While memories of an upgraded file wait to be compared, the page says how many as
    the session start does: counted up to its cap (here 3), "more than" past it, never
    every memory of the store at every load."""
    import numpy as np

    from thatch.frontend.store import db as dbmod
    from thatch.frontend.tools import hygiene, operations

    client, _guard = ui
    monkeypatch.setattr(hygiene, "COUNTED_UP_TO", 3)
    monkeypatch.setattr(operations, "CHECK_SECONDS", 0.0)  # this load compares none of them
    with dbmod.atomic(ctx.store.conn):  # in a transaction: not compared at write
        for i in range(3):
            ctx.store.remember("proj", f"Old {i}", "# x", np.eye(32, dtype=np.float32)[i], "m")
    page = client.get("/duplicates", store="proj").body
    assert (
        "Still comparing memories: 3 of more than 3 memories not checked yet; reload for the rest."
        in page
    )
    monkeypatch.setattr(operations, "CHECK_SECONDS", 60.0)
    assert "Still comparing" not in client.get("/duplicates", store="proj").body
