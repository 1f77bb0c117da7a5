"""``thatch mcp``: run the MCP server on stdio (docs/cli.md §host-integration, docs/tools.md
§server)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

__all__ = ["mcp", "serve_after_quick_start"]


@click.command("mcp", context_settings={"help_option_names": ["-h", "--help"]})
def mcp() -> None:
    """Run the MCP server on stdio (one per host session)."""
    serve_mcp()


def serve_mcp(lead: bytes = b"", quiet: Sequence[str | int] = ()) -> None:
    """The server; ``lead``/``quiet``: what the quick start read and answered."""
    from thatch.cli.errors import translate_errors
    from thatch.frontend.errors import StoreError
    from thatch.frontend.mcp.server import run_stdio
    from thatch.frontend.tools.context import ToolContext, setup_prefix

    with translate_errors():
        if sys.stdin is None or sys.stdout is None:
            # Started with fd 0 or 1 closed: the database would open on that descriptor.
            raise click.ClickException(
                "thatch mcp speaks MCP on stdin and stdout, and one of them is closed."
            )
        try:
            ctx = ToolContext.from_env(fill_later=True)  # run_stdio starts the backfills
        except StoreError as error:
            raise click.ClickException(str(error)) from None
        # At EOF: the background fill stops after its batch, then Store and client close.
        # (SIGTERM ends the process at once; SQLite transactions make that safe.)
        try:
            ctx.first_result_prefix = setup_prefix(ctx)
            run_stdio(ctx, lead, quiet)
        finally:
            ctx.close()


def serve_after_quick_start(lead: bytes, quiet: Sequence[str | int]) -> None:
    """``serve_mcp`` outside click's command runner: its errors as click prints them."""
    try:
        serve_mcp(lead, quiet)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
