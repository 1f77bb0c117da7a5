"""What the memory commands share (docs/cli.md): the tools over the configured database,
library errors as one clear line, argument checks with the MCP tools' own validation,
and the JSON shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from thatch.cli.errors import FixableError, debug_traceback, translate_errors
from thatch.common.shell_words import shell_quote
from thatch.frontend.untrusted import json_document, quoted

if TYPE_CHECKING:
    from thatch.frontend.store.memory import Memory
    from thatch.frontend.tools.memory_tools import Tools

__all__ = [
    "all_scope",
    "check_argument",
    "emit_json",
    "leniently",
    "list_store",
    "memory_json",
    "not_found",
    "open_tools",
    "reading_store",
    "store_argument",
    "store_errors",
]

CLI_START_WAIT = 120.0
T = TypeVar("T")


@contextmanager
def store_errors() -> Iterator[None]:
    """Library errors → ``Error: …`` (exit 1); refused arguments → usage errors (exit 2)."""
    from thatch.frontend.errors import StoreError
    from thatch.frontend.tools.memory_tools import Refused
    from thatch.frontend.tools.validation import ArgumentError

    with translate_errors():
        try:
            yield
        except Refused as error:
            debug_traceback()
            raise click.ClickException(error.cli) from None
        except StoreError as error:
            debug_traceback()
            raise FixableError(str(error), error.fix) from None
        except ArgumentError as error:
            raise click.UsageError(str(error)) from None


def open_tools() -> Tools:
    """The tools over a ToolContext that closes when the command ends (after its output)."""
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Tools

    def notice() -> None:
        click.echo("Starting embedder…", err=True)

    ctx = ToolContext.from_env(start_wait=CLI_START_WAIT, notice=notice)
    click.get_current_context().call_on_close(ctx.close)
    return Tools(ctx)


def leniently(tools: Tools, operation: Callable[[], T]) -> T:
    """``operation()``, read again with replacement characters if a stored text is not UTF-8."""
    from thatch.frontend.store.db import read_leniently

    return read_leniently(tools.ctx.store.conn, operation)


def emit_json(document: object) -> None:
    """Every ``--json`` output: one JSON document on one line, format and control
    characters escaped (docs/cli.md §one-voice)."""
    click.echo(json_document(document))


def check_argument(param_name: str, tool: str, value: object) -> Any:
    """One value through the tool's (or engine action's) own parameter rules (same limits
    and messages)."""
    from thatch.frontend.tools.registry import declared_params
    from thatch.frontend.tools.validation import validate

    params = [p for p in declared_params(tool) if p.name == param_name]
    return validate(params, {param_name: value})[param_name]


def all_scope(tools: Tools) -> list[str]:
    """What ``all`` reads: the default scope, and a store named ``all`` made before the
    name was reserved."""
    from thatch.frontend.identifiers import ALL_STORES

    scope = list(tools.ctx.default_scope)
    if ALL_STORES not in scope and tools.ctx.store.store_exists(ALL_STORES):
        scope.append(ALL_STORES)
    return scope


def reading_store(tools: Tools, store: str | None) -> str:
    """The store to read: project store when omitted; a named one must exist."""
    if store is None or not store.strip():
        return tools.ctx.project_store
    if not tools.ctx.store.store_exists(store):
        from thatch.frontend.identifiers import store_name_problem

        problem = store_name_problem(store)
        if problem is not None:  # existing stores stay readable whatever their name
            raise click.ClickException(f"Invalid arguments: store: {problem}")
        from thatch.frontend.tools import formatting as fmt

        raise click.ClickException(fmt.no_store(store, tools.ctx.store.store_names(), cli=True))
    return store


def list_store(tools: Tools, name: str) -> list[Memory]:
    return leniently(tools, lambda: tools.ctx.store.list(name))


def memory_json(memory: Memory, *, content: bool = False) -> dict[str, Any]:
    document: dict[str, Any] = {
        "store": memory.store,
        "label": memory.label,
        "slug": memory.slug,
        "branch": memory.branch,
        "confidence": memory.confidence,
        "archived": memory.archived,
        "embedding": "pending" if memory.pending else "ok",
        "model": memory.model,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "recall_count": memory.recall_count,
        "last_recalled_at": memory.last_recalled_at,
    }
    if content:
        document["content"] = memory.content
    return document


def not_found(
    label: str, store: str, tools: Tools | None = None, command: str = "show"
) -> click.ClickException:
    """No such memory in ``store``; the fix names the command for the store that holds it."""
    message = f"no memory labeled {quoted(label)} in {quoted(store)}."
    if tools is not None:
        for other in tools.ctx.default_scope:
            if other != store and tools.ctx.store.show(other, label) is not None:
                return FixableError(
                    f"{message[:-1]}; it is in {quoted(other)}.",
                    f"thatch {command} {shell_quote(label)} --store {shell_quote(other)}",
                )
        if not tools.ctx.store.store_exists(store):
            # Nothing was saved there yet: `thatch list --store` would refuse the name.
            return FixableError(message, "see the stores there are: thatch stores")
    return FixableError(message, f"thatch list --store {shell_quote(store)}")


def store_argument(positional: str | None, option: str | None) -> str | None:
    """STORE given positionally or as --store (both accepted, as by the other commands)."""
    if positional is not None and option is not None and positional != option:
        raise click.UsageError(
            f"two stores given ({quoted(positional)} and --store {quoted(option)}); give one"
        )
    return option if option is not None else positional
