"""``thatch hygiene [--json]``: the store's hygiene report for people (docs/cli.md
§store-commands)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from thatch.cli.errors import translate_errors
from thatch.cli.store_access import emit_json

if TYPE_CHECKING:
    from thatch.frontend.store.memory_store import Store

__all__ = ["check_unchecked_duplicates", "hygiene"]


def _active_model() -> str:
    # A report command: ask a running embedder, never start one.
    from thatch.frontend.tools.active_model import active_model

    return active_model(os.environ, timeout=2.0)


def _fill_pending() -> None:
    """Embed what waits for the embedder when one is serving (never start one): a memory
    saved while it was down must not stay "not embedded yet" here until the next search."""
    from thatch.frontend.tools.context import ToolContext

    with ToolContext.from_env(autostart=False, start_wait=0) as ctx:
        if ctx.store.pending_count(up_to=0):  # any at all: one row read, not the backlog
            ctx.pending_fill.fill_opportunistically()


def check_unchecked_duplicates(store: Store, name: str) -> None:
    """Compare the memories no write compared, saying so first when there are any (how
    many counted up to the session start's cap: one row read when there are none)."""
    from thatch.frontend.store.db import read_leniently
    from thatch.frontend.tools.hygiene import COUNTED_UP_TO

    cap = COUNTED_UP_TO
    progress = read_leniently(store.conn, lambda: store.duplicate_progress(name, up_to=cap))
    if not progress.complete:
        count = progress.total - progress.checked
        noun = "memory" if count == 1 and not progress.unchecked_more else "memories"
        many = f"more than {count}" if progress.unchecked_more else str(count)
        click.echo(
            f"[thatch] comparing {many} {noun} for duplicates (once: later "
            "writes are compared as they are saved)…",
            err=True,
        )
    read_leniently(store.conn, lambda: store.check_all_duplicates(name, up_to=cap))


@click.command("hygiene")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON document.")
def hygiene(as_json: bool) -> None:
    """Report duplicates, stale, orphaned, other-model and pending memories.

    Prints the report and names what it counts (the first page of duplicate clusters, the stale
    memories, the memories of deleted branches), or "Store is healthy." when there is
    nothing to tend. Exits 0 either way; thatch never deletes anything for hygiene.
    Memories waiting for an embedding are embedded first when an embedder is serving.
    """
    import time

    from thatch.common.environment import default_db_path
    from thatch.frontend.branch_sync import session_sync
    from thatch.frontend.hooks.hookio import project_dir
    from thatch.frontend.project import project_store
    from thatch.frontend.store.db import read_leniently
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.thresholds import in_force
    from thatch.frontend.timefmt import utc_now
    from thatch.frontend.tools.hygiene import hygiene as compute_hygiene
    from thatch.frontend.tools.hygiene import named

    directory = project_dir(os.environ, {})
    project = project_store(directory, os.environ)
    with translate_errors():  # damaged or unreadable files included: one line, no traceback
        _fill_pending()
        store = Store.open(default_db_path(os.environ), clock=utc_now)
        try:
            # Branch memory follows git first (docs/database.md §branch-lifecycle), as at a
            # session start: deleted branches' memories are counted after their sync.
            session_sync(store, project, directory, os.environ, time.time_ns() // 10**6)
            # Compare the memories no write compared (an upgraded database), in short
            # chunks: the count below is then complete, not "counting".
            check_unchecked_duplicates(store, project)
            model = _active_model()
            now = utc_now()
            result = read_leniently(
                store.conn,
                # Exact counts (the session start stops past COUNTED_UP_TO): a command
                # someone ran can read every row, as ``named`` below does anyway.
                lambda: compute_hygiene(
                    store, project, directory, model, env=os.environ, now=now, up_to=None
                ),
            )
            threshold = in_force(os.environ, model).values.duplicate
            parts = read_leniently(store.conn, lambda: named(store, result, threshold, now))
        finally:
            store.close()
    if as_json:
        emit_json({**result.as_json(), **parts.as_json()})
    elif result.report:
        click.echo("\n".join([result.report, *parts.lines(project)]))
    else:
        click.echo("Store is healthy.")
