"""``thatch team join|sync|status|leave`` (docs/team.md §commands, docs/cli.md §team).

A thin adapter over ``thatch.teamsync``: a machine shares a project store through a hub,
one local process (``thatch team sync``) pushes the outbox and pulls the hub's changes.
The member's token comes from ``THATCH_HUB_TOKEN`` or ``--token-file`` (never a flag's
value: every user sees the process list) and is kept in a 0600 file, never in the
database.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from thatch.cli.errors import FixableError, translate_errors
from thatch.cli.groups import SuggestingGroup
from thatch.cli.store_access import emit_json
from thatch.common.shell_words import shell_quote

if TYPE_CHECKING:
    import sqlite3

    from thatch.frontend.store.memory_store import Store
    from thatch.teamsync.engine import LinkOutcome

__all__ = ["team"]


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def team() -> None:
    """Share project stores with a team through a hub (docs/team.md).

    \b
      thatch team join HOST:PORT --store owner/repo   share a store (token: THATCH_HUB_TOKEN)
      thatch team sync                              the sync process (auto-started)
      thatch team status                            links, outbox, refused writes, errors
      thatch team leave --store owner/repo          stop sharing a store
    """


@contextmanager
def _store(env: Mapping[str, str]) -> Iterator[Store]:
    from thatch.common.environment import default_db_path
    from thatch.frontend.store.memory_store import Store

    with translate_errors(), Store.open(default_db_path(env)) as store:
        yield store


def _local_model(env: Mapping[str, str]) -> str | None:
    """The model the local embedder serves (asked; else the configured one): pulled
    vectors of the hub's model are kept only when it is this one."""
    from thatch.frontend.tools.active_model import active_model

    try:
        return active_model(env, timeout=5.0)
    except Exception:  # no model known: pulled rows are saved pending, embedded later
        return None


TOKEN_MAX_BYTES = 4096  # a hub's are 50 characters: thatch_ and 32 random bytes, url-safe


def _token_fix(url: str, store: str) -> str:
    """The join again with the token the team's admin gave: in the variable, or in a file
    (the hub's address and the store shell-quoted, as the user gave them)."""
    from thatch.teamsync.tokens import rejoin_fix

    join = f"thatch team join {shell_quote(url)} --store {shell_quote(store)}"
    return (
        f"{rejoin_fix(url, store)}; or join with a readable file holding it, FILE: "
        f"{join} --token-file FILE"
    )


def _token(token_file: Path | None, env: Mapping[str, str], url: str, store: str) -> str:
    from thatch.frontend.regular_files import read_regular
    from thatch.teamsync.tokens import TOKEN_ENV

    if token_file is not None:
        try:
            token = read_regular(token_file, TOKEN_MAX_BYTES * 2).decode().strip()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "it is not text"
            raise FixableError(
                f"cannot read the token file {token_file}: {reason}", _token_fix(url, store)
            ) from None
        where = f"the token file {token_file}"
    else:
        token = env.get(TOKEN_ENV, "").strip()
        where = TOKEN_ENV
    if not token:
        raise FixableError("no team token given", _token_fix(url, store))
    # A token travels in a gRPC header: anything else failed as "the hub is unavailable
    # (Invalid metadata)" or "metadata size exceeds hard limit", with a fix about the address.
    if len(token) > TOKEN_MAX_BYTES or not (token.isascii() and token.isprintable()):
        raise FixableError(
            f"{where} does not hold a team token (one line of printable ASCII, at most "
            f"{TOKEN_MAX_BYTES} characters)",
            _token_fix(url, store),
        )
    return token


def _report(outcome: LinkOutcome) -> None:
    from thatch.frontend.untrusted import inline, quoted, token

    if outcome.chat is not None:
        # Before the link's error: a round that failed later still had this mail refused.
        for mail in outcome.chat.refusals:
            sender, to = _mail_ends(mail.from_name, mail.to_name, mail.to_peer)
            click.echo(
                f"team sync: team {token(outcome.chat.team)}: chat message #{mail.message_id} "
                f"from {sender} to {to} refused: {quoted(mail.reason)}",
                err=True,
            )
    if outcome.error:
        click.echo(f"team sync: {outcome.store}: {inline(outcome.error)}", err=True)
        return
    if outcome.pushed or outcome.applied:
        click.echo(
            f"team sync: {outcome.store}: pushed {outcome.pushed}, applied {outcome.applied}",
            err=True,
        )
    for slug, kept in outcome.conflicts:
        click.echo(
            f"team sync: {outcome.store}: concurrent edit of {quoted(slug)} kept as "
            f"{quoted(kept)} (merge them: memory-hygiene)",
            err=True,
        )
    for row_id, reason in outcome.refused:
        # The hub's words can quote what was written: shown as a literal, as in team status.
        click.echo(
            f"team sync: {outcome.store}: write {row_id} refused: {quoted(reason)}", err=True
        )


@team.command()
@click.argument("url")
@click.option("--store", "store_name", required=True, help="The store to share (owner/repo).")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file holding the member's token (default: $THATCH_HUB_TOKEN).",
)
@click.option(
    "--no-start", is_flag=True, help="Do not start the sync process (run `thatch team sync`)."
)
def join(url: str, store_name: str, token_file: Path | None, no_start: bool) -> None:
    """Share STORE through the hub at URL (host:port, unix:///path).

    Checks the token with the hub, records the link, queues the store's existing memories
    for upload, syncs once, then starts the sync process.
    """
    from thatch.frontend.identifiers import store_name_problem
    from thatch.hub.client import (
        HubClient,
        HubError,
        HubRefused,
        parse_hub_address,
        plaintext_to,
        token_fix,
    )
    from thatch.teamsync.engine import SyncEngine
    from thatch.teamsync.links import add_link
    from thatch.teamsync.process import HubClients, spawn
    from thatch.teamsync.tokens import rejoin_fix, write_token

    env = dict(os.environ)
    # The address and the store first: the token's fix repeats both, so each is one that
    # the join takes (a fix repeating http://h:1 failed again, on the address).
    try:
        address = parse_hub_address(url)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    if store_name in ("", "global"):
        raise click.UsageError("--store must name a project store (owner/repo), not 'global'")
    problem = store_name_problem(store_name)
    if problem is not None:
        raise click.UsageError(f"--store {problem}")
    token = _token(token_file, env, url, store_name)
    plaintext = plaintext_to(address, env)
    try:
        refused = token_fix(then=rejoin_fix(url, store_name))
        with HubClient(url, token, env=env, plaintext=plaintext, token_refused=refused) as client:
            who = client.stores()
    except HubRefused as error:
        raise FixableError(error.cause, error.fix) from None
    except HubError as error:
        probe = f"thatch hub probe --addr {shell_quote(url)}" + (
            " --plaintext" if plaintext else ""
        )
        raise FixableError(
            error.cause, f"check the address and that the hub runs there: {probe}"
        ) from None
    with _store(env) as store:
        from thatch.teamsync.links import get_link

        old = get_link(store.conn, store_name)
        if old is not None and (old.hub_url, old.team) == (url, who.team):
            # Joining again is how a member replaces a token: the link and its outbox stay.
            write_token(env, url, who.team, token)
            click.echo(f"Store {store_name} was already shared through {url}: token updated.")
            if not no_start:
                spawn(env)
            return
        queued = add_link(
            store.conn,
            store=store_name,
            hub_url=url,
            team=who.team,
            member=who.member,
            hub_model=who.model,
            now=store.tx.now(),
        )
        write_token(env, url, who.team, token)
        clients = HubClients(env)
        try:
            engine = SyncEngine(store.conn, clients, local_model=_local_model(env))
            link = get_link(store.conn, store_name)
            assert link is not None
            outcome = engine.sync(link)
        finally:
            clients.close()
    on_hub = {entry.name: entry.count for entry in who.stores}
    click.echo(
        f"Joined team {who.team} as {who.member}: store {store_name} is shared through "
        f"{url} ({on_hub.get(store_name, 0)} memories on the hub, {queued} local ones "
        f"queued for upload)."
    )
    if outcome.error:
        click.echo(f"The first sync failed; the sync process retries: {outcome.error}", err=True)
    if not no_start:
        started = spawn(env)
        click.echo("Started the team sync process." if started else "The sync process runs.")


@team.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Seconds between passes (default 3).",
)
@click.option(
    "--max-wait",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Longest wait between passes while a hub fails (default 60).",
)
@click.option("--once", is_flag=True, help="One pass, then exit.")
def sync(interval: float | None, max_wait: float | None, once: bool) -> None:
    """Run the team sync process in the foreground: push, pull, wait; until SIGTERM.

    One per machine (a lock); a hub that is down is retried with a growing wait, writes
    wait in the outbox meanwhile. Auto-started by `thatch team join` and `thatch mcp`.
    """
    from thatch.frontend.tools.context import ToolContext
    from thatch.teamsync.engine import SyncEngine
    from thatch.teamsync.process import (
        DEFAULT_INTERVAL,
        MAX_BACKOFF,
        AlreadyRunning,
        HubClients,
        OutboxWatch,
        hold_lock,
        lock_path,
        run_loop,
        stop_on_signals,
    )

    env = dict(os.environ)
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        with hold_lock(lock_path(env)), translate_errors():
            ctx = ToolContext.from_env(env, autostart=True)
            clients = HubClients(env)
            try:
                engine = SyncEngine(
                    ctx.store.conn,
                    clients,
                    local_model=_local_model(env),
                    chat_for=clients.chat,
                    stop=stop,
                )

                watch = OutboxWatch(ctx.store.conn)

                def ask_model() -> None:
                    watch.before_pass()
                    engine.local_model = _local_model(env)

                def embed_pulled(outcomes: list[LinkOutcome]) -> None:
                    for outcome in outcomes:
                        if outcome.applied:
                            _embed_pending(ctx, outcome.store)

                passes = run_loop(
                    engine,
                    interval=interval or DEFAULT_INTERVAL,
                    stop=stop,
                    report=_report,
                    before_pass=ask_model,
                    after_pass=embed_pulled,
                    once=once,
                    max_wait=max_wait or MAX_BACKOFF,
                    wake=watch,
                )
            finally:
                clients.close()
                ctx.close()
    except AlreadyRunning as error:
        if once:
            raise FixableError(str(error), "stop it first, or let it sync") from None
        click.echo(f"team sync: {error}; exiting", err=True)
        return
    if passes and not stop.is_set() and not once:
        click.echo("team sync: no store is shared any more; exiting", err=True)


def _embed_pending(ctx: Any, store: str) -> None:
    """Pulled rows of another model than the local one arrive pending: embed them here
    (the sync process has the time); a failure leaves them to the next pass or server."""
    try:
        ctx.pending_fill.fill_store(store)
    except Exception as error:
        click.echo(f"team sync: {store}: pulled memories stay pending: {error}", err=True)


@team.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(as_json: bool) -> None:
    """Shared stores: hub, team, cursor, outbox length, refused writes, last sync; the chat
    outbox and its refused mail."""
    from thatch.frontend.untrusted import inline, quoted
    from thatch.teamsync import outbox
    from thatch.teamsync.links import all_links
    from thatch.teamsync.process import is_running, lock_path

    env = dict(os.environ)
    with _store(env) as store:
        chat = _chat_outbox(store.conn)
        rows: list[dict[str, Any]] = []
        for link in all_links(store.conn):
            waiting, _ = outbox.counts(store.conn, link.store)
            refused = outbox.refused(store.conn, link.store)
            conflicts = store.conn.execute(
                "SELECT count(*) FROM team_conflicts WHERE store = ?", (link.store,)
            ).fetchone()[0]
            rows.append(
                {
                    "store": link.store,
                    "hub": link.hub_url,
                    "team": link.team,
                    "member": link.member,
                    "cursor": [link.cursor_txid, link.cursor_seq],
                    "outbox": waiting,
                    "refused": [
                        {"id": row.id, "op": row.op, "label": row.label, "reason": row.refused}
                        for row in refused
                    ],
                    "conflicts": int(conflicts),
                    "last_ok_at": link.last_ok_at,
                    "last_error": link.last_error,
                    "last_error_at": link.last_error_at,
                }
            )
    running = is_running(lock_path(env))
    if as_json:
        emit_json({"sync_process": running, "links": rows, "chat_outbox": chat})
        return
    if not rows:
        click.echo("No store is shared with a team (thatch team join URL --store owner/repo).")
        # Chat mail is kept apart from the links (a leave leaves it): say what waits or failed.
        if chat["waiting"] or chat["refused"]:
            _echo_chat_outbox(chat)
        return
    click.echo(f"sync process: {'running' if running else 'not running'}")
    for row in rows:
        click.echo(f"{row['store']}: team {row['team']} as {row['member']} via {row['hub']}")
        click.echo(f"  outbox: {row['outbox']} waiting, {len(row['refused'])} refused")
        for item in row["refused"]:
            click.echo(
                f"    refused {item['op']} {quoted(item['label'])}: {quoted(item['reason'])}"
            )
        click.echo(f"  conflict versions kept by the hub: {row['conflicts']}")
        click.echo(f"  cursor: {row['cursor'][0]}/{row['cursor'][1]}")
        click.echo(f"  last sync: {row['last_ok_at'] or 'never'}")
        if row["last_error"]:
            click.echo(f"  last error ({row['last_error_at']}): {inline(row['last_error'])}")
    _echo_chat_outbox(chat)


def _mail_ends(sender: str | None, to: str | None, to_peer: int) -> tuple[str, str]:
    """A refused mail's sender and recipient as thatch's lines show them: stored names as
    tokens (a name another writer stored cannot pass for thatch's words)."""
    from thatch.frontend.untrusted import token

    return (
        token(sender) if sender else "unknown",
        token(to) if to else f"team peer #{int(to_peer)}",
    )


def _echo_chat_outbox(chat: dict[str, Any]) -> None:
    """``_chat_outbox``'s lines: the counts, then each refused mail listed."""
    from thatch.frontend.untrusted import quoted

    click.echo(f"chat outbox: {chat['waiting']} waiting, {chat['refused']} refused")
    for mail in chat["refused_mail"]:
        sender, to = _mail_ends(mail["from"], mail["to"], mail["to_peer"])
        told = "sender told" if mail["told_at"] else "sender not told yet"
        click.echo(
            f"  refused chat message #{mail['message_id']} from {sender} to {to} "
            f"({told}): {quoted(mail['reason'])}"
        )


def _chat_outbox(conn: sqlite3.Connection) -> dict[str, Any]:
    """The chat outbox's waiting and refused mail (the newest refused listed). A file
    without m027 keeps no refusal, but its mail waits there since m018: all of it is
    waiting."""
    from thatch.frontend.store import chat_remote
    from thatch.frontend.store.migrations.tables import table_columns
    from thatch.frontend.store.schema_lag import CHAT_REFUSED, schema_lag

    if CHAT_REFUSED in schema_lag(conn).migrations:
        waiting = 0
        if table_columns(conn, "chat_outbox"):  # none in a file without m018 either
            (waiting,) = conn.execute("SELECT count(*) FROM chat_outbox").fetchone()
        return {"waiting": int(waiting), "refused": 0, "refused_mail": []}
    waiting, refused = chat_remote.outbox_counts(conn)
    listed = [
        {
            "team": mail.team,
            "message_id": int(mail.message_id),
            "from": mail.from_name,
            "to": mail.to_name,
            "to_peer": int(mail.to_peer),
            "reason": mail.reason,
            "queued_at": mail.queued_at,
            "told_at": mail.told_at,
        }
        for mail in chat_remote.refused_mail(conn)
    ]
    return {"waiting": waiting, "refused": refused, "refused_mail": listed}


@team.command()
@click.option("--store", "store_name", required=True, help="The shared store (owner/repo).")
def leave(store_name: str) -> None:
    """Stop sharing STORE: its memories stay here as a personal copy; writes not yet
    pushed are dropped (the count is printed)."""
    from thatch.teamsync.links import all_links, get_link, remove_link
    from thatch.teamsync.tokens import token_path

    env = dict(os.environ)
    with _store(env) as store:
        link = get_link(store.conn, store_name)
        dropped = remove_link(store.conn, store_name)
        rest = all_links(store.conn)
    if link is not None and not any(
        (other.hub_url, other.team) == (link.hub_url, link.team) for other in rest
    ):
        token_path(env, link.hub_url, link.team).unlink(missing_ok=True)
    click.echo(
        f"Store {store_name} is no longer shared ({dropped} unpushed writes dropped); "
        "its memories stay on this machine."
    )
