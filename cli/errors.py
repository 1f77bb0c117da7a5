"""Translate library errors into click errors at the CLI's edge.

The embedder's part (and ``FixableError``) lives in ``thatch.embedder.client.cli_errors``, which
``thatch-embedder`` uses without the frontend; this adds the store's errors.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import click

from thatch.embedder.client.cli_errors import (
    FixableError,
    debug_traceback,
    translate_embedder_errors,
)

__all__ = ["FixableError", "debug_traceback", "translate_errors"]


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn thatch's own exceptions into one-line CLI errors (exit 1)."""
    from thatch.frontend.errors import StoreError

    with translate_embedder_errors():
        try:
            yield
        except click.ClickException:
            raise
        except sqlite3.Error as error:  # one the store layer did not name: name it here
            debug_traceback()
            from thatch.common.environment import default_db_path
            from thatch.frontend.store.db import store_error

            named = store_error(error, default_db_path(os.environ))
            raise FixableError(str(named), named.fix) from None
        except StoreError as error:
            debug_traceback()
            raise FixableError(str(error), error.fix) from None
        except UnicodeEncodeError as error:
            # An argument or stdin with bytes that are not UTF-8 (Python reads them as lone
            # surrogates): refused where no validation named the parameter first.
            if "surrogates" not in str(error.reason):
                raise
            debug_traceback()
            from thatch.frontend.untrusted import quoted

            text = error.object if len(error.object) <= 60 else error.object[:59] + "…"
            raise click.UsageError(
                f"text must be UTF-8, and {quoted(text)} holds bytes that are not"
            ) from None
