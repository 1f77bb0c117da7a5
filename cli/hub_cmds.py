"""``thatch hub serve|probe|migrate|team add|member add|member revoke`` (docs/cli.md §team-hub).

A thin adapter over ``thatch.hub``: every import of the hub's code (and so of psycopg,
the ``team`` extra) happens inside a command, so ``thatch --help`` and every other
command run without the extra. Connection strings come from the environment, never from
a flag (a flag's value is visible to every user in the process list):
``THATCH_HUB_DATABASE_URL`` (the hub's restricted role) for ``serve``,
``THATCH_HUB_OWNER_URL`` (the owner) for ``migrate`` and the team and member commands.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from thatch.cli.errors import FixableError
from thatch.cli.groups import SuggestingGroup

__all__ = ["hub"]

DATABASE_URL = "THATCH_HUB_DATABASE_URL"
OWNER_URL = "THATCH_HUB_OWNER_URL"
NO_PREPARE = "THATCH_HUB_NO_PREPARE"
DEFAULT_LISTEN = "127.0.0.1:7470"
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"
F = TypeVar("F", bound=Callable[..., Any])


def _need_team_extra() -> None:
    from thatch.hub.extra import INSTALL_TEAM, missing_team_extra

    absent = missing_team_extra()
    if absent:
        raise FixableError(
            f"the team extra is not installed ({', '.join(absent)} missing)", INSTALL_TEAM
        )


def _url(env: Mapping[str, str], name: str, who: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise FixableError(
            f"{name} is not set",
            f"set {name} to the connection string of {who}, e.g. postgresql://USER@HOST/DB "
            "(the password in PGPASSWORD or ~/.pgpass, not in the URL)",
        )
    return value


@contextmanager
def _as_owner() -> Iterator[Any]:
    """An owner connection (THATCH_HUB_OWNER_URL); the hub's errors as one-line errors."""
    _need_team_extra()
    from thatch.hub.admin import AdminError, owner_connection

    url = _url(os.environ, OWNER_URL, "the database owner")
    try:
        with owner_connection(url) as conn:
            yield conn
    except AdminError as error:
        raise FixableError(str(error), error.fix) from None


# Team and member ids name rows, tokens' owners and chat peers (``<name>@<member>``): a
# short word, never a line of text.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _identifier(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if ID_PATTERN.fullmatch(value) is None:
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise click.BadParameter(
            f"{shown!r} is not an id: 1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit"
        )
    return value


def _now() -> datetime:
    return datetime.now(UTC)


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def hub() -> None:
    """Run and administer the team hub (docs/team.md); needs the team extra.

    \b
    As the database's owner (THATCH_HUB_OWNER_URL):
      thatch hub migrate                      create or upgrade the hub's tables
      thatch hub team add ID NAME             a team
      thatch hub member add TEAM MEMBER       a member; prints their token once
      thatch hub member revoke TEAM MEMBER    the member's token stops working
    As the hub's restricted role (THATCH_HUB_DATABASE_URL):
      thatch hub serve --listen HOST:PORT --tls-cert F --tls-key F
    Anywhere:
      thatch hub probe --addr HOST:PORT --ca F   is it SERVING? (exit 0 or 1)
    """


def _file_option(name: str, help_text: str) -> Callable[[F], F]:
    return click.option(
        name,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        metavar="FILE",
        help=help_text,
    )


@hub.command()
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="Address to serve at: host:port (port 0 picks one) or unix:///path. Plaintext "
    "only on loopback or a unix socket.",
)
@_file_option("--tls-cert", "Serve TLS with this certificate (PEM); needs --tls-key.")
@_file_option("--tls-key", "Private key (PEM) of --tls-cert.")
@click.option(
    "--embedder",
    metavar="ADDR",
    help="The embedder serving the team's pinned model "
    "[default: as the frontends find theirs, THATCH_EMBEDDER_ADDR or the local socket].",
)
@click.option(
    "--grace-seconds",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="On SIGTERM, how long calls in flight may finish.",
)
@click.option(
    "--pool-size",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Database connections of this replica.",
)
@click.option(
    "--no-prepare",
    is_flag=True,
    envvar=NO_PREPARE,
    help="Never use prepared statements: for PgBouncer older than 1.21 in transaction "
    f"mode between the hub and PostgreSQL (or set {NO_PREPARE}=1).",
)
def serve(
    listen: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    embedder: str | None,
    grace_seconds: float,
    pool_size: int,
    no_prepare: bool,
) -> None:
    """Serve the hub in the foreground until SIGTERM or Ctrl-C.

    Connects as THATCH_HUB_DATABASE_URL (the restricted role the migrations granted, never
    the owner); health reports SERVING once the role is checked and every migration is
    found applied. Logs go to stderr. Any number of replicas may serve one database.
    """
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key must be given together")
    _need_team_extra()
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.hub.server import HubOptions, HubStartError, HubTls
    from thatch.hub.server import serve as run_hub

    env = dict(os.environ)
    options = HubOptions(
        listen=listen,
        database_url=_url(env, DATABASE_URL, "the restricted role of the hub"),
        tls=HubTls(tls_cert, tls_key) if tls_cert is not None and tls_key is not None else None,
        grace_seconds=grace_seconds,
        pool_size=pool_size,
        prepare=not no_prepare,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger = logging.getLogger("thatch.hub")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        try:
            client = EmbedderClient(embedder, env=env, autostart=False)
        except ThatchEmbedderError as error:
            raise FixableError(f"--embedder: {error}") from None
        with client:
            status = run_hub(options, logger=logger, embedder=client)
    except HubStartError as error:
        logger.error("%s", error)
        raise FixableError(str(error)) from None
    finally:
        logger.removeHandler(handler)
    sys.exit(status)


@hub.command()
@click.option(
    "--addr",
    metavar="HOST:PORT",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="The hub to check (host:port, dns:///host:port or unix:///path).",
)
@click.option(
    "--ca",
    "ca_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Trust the hub's certificate when it chains to this CA (PEM) "
    "[default: THATCH_HUB_CA, else the system's roots].",
)
@click.option(
    "--plaintext",
    is_flag=True,
    help="Check without TLS (a hub on loopback or a unix socket only).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the answer.",
)
def probe(addr: str, ca_file: Path | None, plaintext: bool, timeout: float) -> None:
    """Exit 0 and print SERVING when the hub at --addr reports SERVING, else say why and
    exit 1 (a readiness probe: grpc.health.v1 over TLS, no token, starts nothing)."""
    from thatch.hub.client import HubError, probe_health

    try:
        status, why = probe_health(addr, ca_file=ca_file, plaintext=plaintext, timeout=timeout)
    except HubError as error:
        raise click.ClickException(str(error)) from None
    if status != "SERVING":
        raise click.ClickException(why or f"the hub at {addr} is {status}")
    click.echo("SERVING")


@hub.command()
@click.option(
    "--hub-role",
    default="thatch_hub",
    show_default=True,
    help="The restricted role the hub serves as; it must exist (CREATE ROLE … LOGIN).",
)
def migrate(hub_role: str) -> None:
    """Create or upgrade the hub's tables, as the owner (THATCH_HUB_OWNER_URL).

    Safe to run again, and from several replicas at once: each migration runs once.
    """
    with _as_owner() as conn:
        from thatch.hub.admin import AdminError, migrate_database, vector_warning
        from thatch.hub.memories import EXACT_SCANS_ONLY
        from thatch.hub.schema import VECTOR_FIX

        try:
            applied = migrate_database(conn, hub_role, _now())
        except AdminError as error:
            raise FixableError(str(error), error.fix) from None
        problem = vector_warning(conn)
    if applied:
        click.echo("Applied: " + ", ".join(applied))
    else:
        click.echo("Up to date: nothing to apply.")
    if problem is not None:
        click.echo(f"Warning: {problem}; {EXACT_SCANS_ONLY}.\nFix: {VECTOR_FIX}", err=True)


@hub.group()
def team() -> None:
    """Teams (as the owner, THATCH_HUB_OWNER_URL)."""


@team.command("add")
@click.argument("team_id", metavar="ID", callback=_identifier)
@click.argument("name")
def team_add(team_id: str, name: str) -> None:
    """Add the team ID, shown as NAME."""
    with _as_owner() as conn:
        from thatch.hub.admin import AdminError, add_team

        try:
            add_team(conn, team_id, name, _now())
        except AdminError as error:
            raise FixableError(str(error), error.fix) from None
    click.echo(f"Added team {team_id}.")


@hub.group()
def member() -> None:
    """Members and their tokens (as the owner, THATCH_HUB_OWNER_URL)."""


@member.command("add")
@click.argument("team_id", metavar="TEAM", callback=_identifier)
@click.argument("member_id", metavar="MEMBER", callback=_identifier)
def member_add(team_id: str, member_id: str) -> None:
    """Add MEMBER to TEAM and print their token, once: only its SHA-256 is stored.

    Hand the token to the member over a private channel. A revoked member can be added
    again; they get a new token.
    """
    with _as_owner() as conn:
        from thatch.hub.admin import AdminError, add_member, new_token

        token = new_token()
        try:
            add_member(conn, team_id, member_id, token, _now())
        except AdminError as error:
            raise FixableError(str(error), error.fix) from None
    click.echo(token)
    click.echo(
        f"Added {member_id} to {team_id}. The line above is their token; it is not shown again.",
        err=True,
    )


@member.command("revoke")
@click.argument("team_id", metavar="TEAM", callback=_identifier)
@click.argument("member_id", metavar="MEMBER", callback=_identifier)
def member_revoke(team_id: str, member_id: str) -> None:
    """Revoke MEMBER's token: every hub refuses it from the next call on."""
    with _as_owner() as conn:
        from thatch.hub.admin import revoke_member

        revoked = revoke_member(conn, team_id, member_id, _now())
    if not revoked:
        raise FixableError(f"{team_id} has no member {member_id} with a live token")
    click.echo(f"Revoked {member_id}'s token in {team_id}.")
