"""``thatch reembed``: fill pending embeddings and migrate memories to the active model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from thatch.cli.errors import translate_errors
from thatch.cli.store_access import emit_json

if TYPE_CHECKING:
    from thatch.frontend.tools.context import ToolContext

__all__ = ["reembed"]

CLI_START_WAIT = 120.0


def _progress(done: int, total: int) -> None:
    click.echo(f"\rRe-embedding {done}/{total}", err=True, nl=done == total)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--missing", is_flag=True, help="Only memories saved without an embedding.")
@click.option("--store", "store_name", metavar="S", help="Only this store.")
@click.option(
    "--batch",
    type=click.IntRange(1, 256),
    default=32,
    show_default=True,
    help="Texts per embedding call.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be re-embedded; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def reembed(
    missing: bool, store_name: str | None, batch: int, dry_run: bool, as_json: bool
) -> None:
    """Re-embed memories (and the engines' matchers and items) from their stored text.

    Fills memories saved while the embedder was unreachable and, unless --missing,
    migrates memories embedded with another model than the one the embedder serves.
    Memories changed meanwhile are skipped, never overwritten.
    """
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.reembed import (
        REEMBED_TIMEOUT_S,
        plan_engine_reembed,
        plan_reembed,
        reembed_engine_rows,
    )

    with translate_errors():
        ctx = ToolContext.from_env(start_wait=CLI_START_WAIT, notice=_starting)
        click.get_current_context().call_on_close(ctx.close)
        if store_name is not None and not ctx.store.store_exists(store_name):
            from thatch.frontend.tools.formatting import no_store

            # Its stores on a line of their own, as every command's (store_access): a
            # FixableError's message is shown as one line.
            raise click.ClickException(no_store(store_name, ctx.store.store_names(), cli=True))
        active = _active_model(ctx, need_embedder=not (dry_run or missing))
        plan = plan_reembed(ctx.store, active, store_name=store_name, missing_only=missing)
        engine_rows = plan_engine_reembed(
            ctx.store, active, store_name=store_name, missing_only=missing
        )
        if dry_run:
            if as_json:
                emit_json(
                    {
                        "would_reembed": len(plan.memories),
                        "stores": plan.stores,
                        "would_reembed_engine_rows": len(engine_rows),
                    }
                )
            else:
                click.echo(
                    f"Would re-embed {len(plan.memories)} memories in {len(plan.stores)} stores."
                )
                if engine_rows:
                    click.echo(f"Would re-embed {len(engine_rows)} engine rows.")
            return
        summary = ctx.pending_fill.fill(
            plan.memories,
            batch=batch,
            timeout=REEMBED_TIMEOUT_S,
            start_wait=CLI_START_WAIT,
            progress=None if as_json else _progress,
        )
        engine_done, engine_skipped = reembed_engine_rows(
            ctx.store,
            ctx.embedder,
            engine_rows,
            batch=batch,
            timeout=REEMBED_TIMEOUT_S,
            start_wait=CLI_START_WAIT,
            progress=None if as_json else _progress,
        )
    if as_json:
        emit_json(
            {
                "reembedded": summary.filled,
                "skipped": summary.skipped,
                "engine_reembedded": engine_done,
                "engine_skipped": engine_skipped,
            }
        )
    else:
        click.echo(
            f"Re-embedded {summary.filled} memories ({summary.skipped} skipped: changed meanwhile)."
        )
        if engine_rows:
            click.echo(
                f"Re-embedded {engine_done} engine rows "
                f"({engine_skipped} skipped: changed meanwhile)."
            )


def _starting() -> None:
    click.echo("Starting embedder…", err=True)


def _active_model(ctx: ToolContext, *, need_embedder: bool) -> str:
    """The model id the embedder serves; for a dry run, the configured one if none answers.

    A real run needs the embedder anyway, so it asks it (auto-starting it if needed);
    the model tag written afterwards is always the one each Embed response carries.
    """
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import EmbedderUnavailable
    from thatch.frontend.tools.active_model import configured_model_id

    client = ctx.embedder
    if isinstance(client, EmbedderClient):
        try:
            if need_embedder:
                client.ensure_started(wait=CLI_START_WAIT)
            return client.info(timeout=2.0).model_id
        except EmbedderUnavailable:
            if need_embedder:
                raise
    return configured_model_id(ctx.env)
