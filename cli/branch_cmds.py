"""``thatch restore-branch NAME``: undo the archive of a deleted branch's memories
(docs/cli.md §store-commands, docs/database.md §branch-lifecycle)."""

from __future__ import annotations

import os
import time

import click

from thatch.cli.errors import translate_errors

__all__ = ["restore_branch"]


@click.command("restore-branch")
@click.argument("name")
@click.option(
    "--store",
    "store_name",
    default=None,
    help="The store (default: the project's, detected from the working directory).",
)
def restore_branch(name: str, store_name: str | None) -> None:
    """Unarchive the memories thatch archived when branch NAME was deleted unmerged.

    thatch archives a branch's memories when the branch is deleted without being merged
    (a merged branch's memories become project-wide instead). This brings back the ones
    still archived and still scoped to NAME; the branch itself need not exist.
    """
    from thatch.common.environment import default_db_path
    from thatch.frontend.branch_sync import NothingToRestoreError
    from thatch.frontend.branch_sync import restore_branch as restore
    from thatch.frontend.hooks.hookio import project_dir
    from thatch.frontend.project import project_store
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.timefmt import utc_now

    if not name.strip():
        raise click.ClickException("Invalid arguments: NAME: a branch name is required")
    project = store_name or project_store(project_dir(os.environ, {}), os.environ)
    with translate_errors(), Store.open(default_db_path(os.environ), clock=utc_now) as store:
        try:
            done = restore(store, project, name, time.time_ns() // 10**6)
        except NothingToRestoreError as error:
            raise click.ClickException(str(error)) from None
    from thatch.frontend.branch_sync import shown_branch
    from thatch.frontend.untrusted import quoted

    noun = "memory" if done.restored == 1 else "memories"
    left = ""
    if done.left:
        # Written since the archive (archived again, rescoped, rewritten): a person's later
        # choice, kept; said, so that the count is not taken for all there was.
        rest = "memory changed since stays" if done.left == 1 else "memories changed since stay"
        left = f"; {done.left} {rest} as written"
    click.echo(
        f"Restored {done.restored} {noun} of branch {shown_branch(name)} in store "
        f"{quoted(project)}{left}."
    )
