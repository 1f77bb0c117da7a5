"""``thatch hygiene [--json]``: the store's hygiene report for people (cli.md §2)."""

from __future__ import annotations

import json
import os

import click
from thatch.cli.errors import FixableError, debug_traceback


def _active_model() -> str:
    # A report command: ask a running embedder, never start one.
    from thatch.frontend.active_model import active_model

    return active_model(os.environ, timeout=2.0)


@click.command("hygiene")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON document.")
def hygiene(as_json: bool) -> None:
    """Report duplicates, stale, orphaned, other-model and pending memories.

    Prints the report, or "Store is healthy." when there is nothing to tend. Exits 0
    either way; thatch never deletes anything for hygiene.
    """
    from thatch.frontend.db import default_db_path
    from thatch.frontend.errors import StoreError
    from thatch.frontend.hookio import project_dir
    from thatch.frontend.hygiene import hygiene as compute_hygiene
    from thatch.frontend.project import project_store
    from thatch.frontend.store import Store
    from thatch.frontend.timefmt import utc_now

    directory = project_dir(os.environ, {})
    project = project_store(directory, os.environ)
    try:
        store = Store.open(default_db_path(os.environ), clock=utc_now)
        try:
            result = compute_hygiene(store, project, directory, _active_model())
        finally:
            store.close()
    except StoreError as error:
        debug_traceback()
        raise FixableError(str(error)) from None
    if as_json:
        click.echo(json.dumps(result.as_json(), ensure_ascii=False))
    else:
        click.echo(result.report or "Store is healthy.")
