"""``thatch reembed``: fill pending embeddings and migrate memories to the active model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from thatch.cli.errors import translate_errors
from thatch.cli.store_access import emit_json
from thatch.common.shell_words import shell_quote

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
        active = _active_model(ctx, need_embedder=not (dry_run or missing), migrate=not missing)
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
                memories = _plural(len(plan.memories), "memory", "memories")
                stores = _plural(len(plan.stores), "store", "stores")
                click.echo(f"Would re-embed {memories} in {stores}.")
                if engine_rows:
                    rows = _plural(len(engine_rows), "engine row", "engine rows")
                    click.echo(f"Would re-embed {rows}.")
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
        filled = _plural(summary.filled, "memory", "memories")
        click.echo(f"Re-embedded {filled} ({summary.skipped} skipped: changed meanwhile).")
        if engine_rows:
            rows = _plural(engine_done, "engine row", "engine rows")
            click.echo(f"Re-embedded {rows} ({engine_skipped} skipped: changed meanwhile).")


def _starting() -> None:
    click.echo("Starting embedder…", err=True)


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _active_model(ctx: ToolContext, *, need_embedder: bool, migrate: bool) -> str:
    """The model id the embedder serves; for a dry run, the configured one if none answers.

    A real run needs the embedder anyway, so it asks it (auto-starting it if needed);
    the model tag written afterwards is always the one each Embed response carries.
    ``migrate`` (not --missing): an embedder serving another model than the one in use
    (``thatch model use`` since it started) is refused, with how to switch it: the run
    would count every memory as current and re-embed none.
    """
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import EmbedderUnavailable
    from thatch.frontend.tools.active_model import configured_model_id

    client = ctx.embedder
    if isinstance(client, EmbedderClient):
        try:
            if need_embedder:
                client.ensure_started(wait=CLI_START_WAIT)
            served = client.info(timeout=2.0).model_id
        except EmbedderUnavailable:
            if need_embedder:
                raise
        else:
            if migrate:
                remote = None if client.address.is_unix else str(client.address)
                _refuse_another_model(ctx.env, served, remote)
            return served
    return configured_model_id(ctx.env)


def _refuse_another_model(env: Mapping[str, str], served: str, remote: str | None) -> None:
    """FixableError when the embedder serves another model than the one in use;
    ``remote``: its address, when it is not a local embedder thatch starts."""

    from thatch.cli.errors import FixableError
    from thatch.frontend.doctor import RESTART_FIX
    from thatch.frontend.tools.active_model import model_in_use
    from thatch.frontend.untrusted import inline

    in_use = model_in_use(env)
    if in_use is None or in_use[0] == served:
        return
    model_id, origin = in_use
    if origin == "default":
        # Nobody chose a model here: a shared embedder's (or the host's THATCH_MODEL's)
        # is the active one, as it always was; restarting would switch the host's sessions.
        return
    where = f"the embedder at {inline(remote)}" if remote else "the running embedder"
    cause = (
        f"{where} serves {inline(served)}, not the model in use {inline(model_id)} "
        f"(from {inline(origin)}): re-embedding now would keep every memory on {inline(served)}"
    )
    if remote:
        fix = (
            f"use the model it serves: thatch model use {inline(shell_quote(served))}; or "
            f"point THATCH_EMBEDDER_ADDR at one serving {inline(model_id)}"
        )
    else:
        fix = f"restart it, then re-embed: {RESTART_FIX} && thatch reembed"
    raise FixableError(cause, fix)
