"""``thatch mcp``: run the MCP server on stdio (docs/cli.md §host-integration, docs/tools.md
§server)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from thatch.frontend.tools.context import ToolContext

__all__ = ["mcp", "serve_after_quick_start"]


@click.command("mcp", context_settings={"help_option_names": ["-h", "--help"]})
def mcp() -> None:
    """Run the MCP server on stdio (one per host session)."""
    serve_mcp()


def serve_mcp(lead: bytes = b"", quiet: Sequence[str | int] = ()) -> None:
    """The server; ``lead``/``quiet``: what the quick start read and answered."""
    from thatch.cli.errors import translate_errors
    from thatch.frontend.mcp.server import run_stdio

    with translate_errors():
        if sys.stdin is None or sys.stdout is None:
            # Started with fd 0 or 1 closed: the database would open on that descriptor.
            raise click.ClickException(
                "thatch mcp speaks MCP on stdin and stdout, and one of them is closed."
            )
        env = dict(os.environ)
        # A database that does not open (damaged, not one, a directory) leaves the server
        # up: each tool call answers the error with its Fix and tries again (backend.py).
        # At EOF: the background fill stops after its batch, then Store and client close.
        # (SIGTERM ends the process at once; SQLite transactions make that safe.)
        run_stdio(env, lambda: _open_context(env), lead, quiet)


def _open_context(env: dict[str, str]) -> ToolContext:
    """The server's database, embedder client and project, with the setup warning for
    the first result and the team sync started; raises ``StoreError``."""
    from thatch.frontend.tools.context import ToolContext, setup_prefix

    ctx = ToolContext.from_env(env, fill_later=True)  # run_stdio starts the backfills
    ctx.first_result_prefix = setup_prefix(ctx)
    _start_team_sync(ctx)
    return ctx


def _start_team_sync(ctx: ToolContext) -> None:
    """A store is shared: make sure this machine's team sync process runs (docs/team.md),
    as a frontend makes sure the embedder runs. Never a reason for the server to fail."""
    try:
        from thatch.frontend.store.team_links import any_linked

        with ctx.store.lock:
            linked = any_linked(ctx.store.conn)
        if linked:
            from thatch.teamsync.process import spawn

            spawn(ctx.env)
    except Exception as error:
        print(f"[thatch] team sync process not started: {error}", file=sys.stderr)


def serve_after_quick_start(lead: bytes, quiet: Sequence[str | int]) -> None:
    """``serve_mcp`` outside click's command runner: its errors as click prints them."""
    try:
        serve_mcp(lead, quiet)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
