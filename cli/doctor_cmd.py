"""``thatch doctor [--json]``: check the installation, change nothing (docs/cli.md §doctor)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from thatch.cli.main import CONTEXT_SETTINGS
from thatch.cli.store_access import emit_json
from thatch.common.version import thatch_version

__all__ = ["doctor"]


@click.command("doctor", context_settings=CONTEXT_SETTINGS)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as one JSON document.")
@click.option(
    "--skip-integrity",
    is_flag=True,
    help="Do not read the whole database file for damage (PRAGMA quick_check): seconds "
    "on a big file.",
)
def doctor(as_json: bool, skip_integrity: bool) -> None:
    """Check the database, queue, embedder, model, memories and host setup.

    Prints one line per check (ok, warn or FAIL) with a fix under each problem, and exits
    1 if any check failed. Doctor only looks: it starts no embedder, downloads nothing and
    creates no file.
    """
    from thatch.cli.doctor_model import check_model
    from thatch.common.environment import project_dir_from_env
    from thatch.frontend.doctor import exit_code, run_checks
    from thatch.frontend.setup.hosts import resolve_bin

    env = dict(os.environ)
    checks = run_checks(
        env,
        project_dir=project_dir_from_env(env) or Path.cwd(),
        bin_path=resolve_bin(sys.argv[0], env),
        version=thatch_version(),
        check_model=check_model,
        integrity=not skip_integrity,
    )
    if as_json:
        document = [check.as_json() for check in checks]
        emit_json(document)
    else:
        for check in checks:
            for line in check.lines():
                click.echo(line)
    if exit_code(checks):
        click.get_current_context().exit(1)
