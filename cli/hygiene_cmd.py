"""``thatch hygiene [--json]``: the store's hygiene report for people (docs/cli.md
§store-commands)."""

from __future__ import annotations

import json
import os

import click

from thatch.cli.errors import translate_errors


def _active_model() -> str:
    # A report command: ask a running embedder, never start one.
    from thatch.frontend.tools.active_model import active_model

    return active_model(os.environ, timeout=2.0)


@click.command("hygiene")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON document.")
def hygiene(as_json: bool) -> None:
    """Report duplicates, stale, orphaned, other-model and pending memories.

    Prints the report, or "Store is healthy." when there is nothing to tend. Exits 0
    either way; thatch never deletes anything for hygiene.
    """
    from thatch.common.environment import default_db_path
    from thatch.frontend.hooks.hookio import project_dir
    from thatch.frontend.project import project_store
    from thatch.frontend.store.db import read_leniently
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.timefmt import utc_now
    from thatch.frontend.tools.hygiene import hygiene as compute_hygiene

    directory = project_dir(os.environ, {})
    project = project_store(directory, os.environ)
    with translate_errors():  # damaged or unreadable files included: one line, no traceback
        store = Store.open(default_db_path(os.environ), clock=utc_now)
        try:
            result = read_leniently(
                store.conn, lambda: compute_hygiene(store, project, directory, _active_model())
            )
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps(result.as_json(), ensure_ascii=False))
    else:
        click.echo(result.report or "Store is healthy.")
