"""``thatch predictions`` and ``thatch behaviors``: list, show, delete (engines.md §5).

Thin adapters over the engine tool's operations: the same scopes (project + global when
``--store`` is omitted), the same texts, and ``--json`` documents. ``show`` and ``delete``
find an item by its statement (a paraphrase only at similarity ≥ 0.85 with the configured
model, so they need the embedder) or by its exact id (no embedder); a statement that
finds none names the nearest item's id, never acting on it, and the id of an item in
another store names that store, never matched as a statement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from thatch.cli.errors import FixableError
from thatch.cli.groups import SuggestingGroup
from thatch.cli.store_access import (
    all_scope,
    check_argument,
    emit_json,
    leniently,
    open_tools,
    reading_store,
    store_errors,
)
from thatch.cli.store_cmds import SETTINGS
from thatch.common.shell_words import shell_quote

if TYPE_CHECKING:
    from thatch.frontend.store.engine_store import Engine, Listed, Lookup
    from thatch.frontend.store.operations import EngineOperations
    from thatch.frontend.tools.memory_tools import Tools

__all__ = ["behaviors", "predictions"]


def _engine(name: str) -> Engine:
    from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS

    return PREDICTIONS if name == "prediction" else BEHAVIORS


def _open(engine: Engine) -> tuple[Tools, EngineOperations]:
    from thatch.frontend.tools.engine_tools import engine_store

    tools = open_tools()
    return tools, engine_store(tools, engine)


def _scope(tools: Tools, store: str | None) -> list[str]:
    """``--store`` (one that exists: every reading verb refuses an unknown store, with
    the names there are), else the project store plus global; ``all`` means that default
    scope, as for thatch list and search (and a store named all made before the name was
    reserved)."""
    from thatch.frontend.identifiers import ALL_STORES

    if store == ALL_STORES:
        return all_scope(tools)
    if store and store.strip():
        return [reading_store(tools, store)]
    return tools.ctx.default_scope


def _item_json(entry: Listed) -> dict[str, Any]:
    from thatch.frontend.tools.seed_stamps import default_key, without_stamp

    item = entry.item
    return {
        "id": item.id,
        "store": item.store,
        "statement": item.statement,
        "rationale": without_stamp(item.rationale),
        "default": default_key(item),
        "confidence": item.confidence,
        "confirm": item.confirm,
        "disconfirm": item.disconfirm,
        "evidence": item.evidence,
        "model": item.model,
        "embedding": "ok" if item.dim else "pending",
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "matchers": [{"description": d, "weight": w} for d, w in entry.matchers],
        "provenance": [
            {"signal": p.signal, "detail": without_stamp(p.detail), "created_at": p.created_at}
            for p in entry.provenance
        ],
    }


def _find(
    tools: Tools, engines: EngineOperations, scope: list[str], statement: str, command: str
) -> Lookup:
    """The item with this exact id in scope, else the nearest statement ≥ 0.85 (else the
    nearest below, only to name it). The id of an item in a store outside the scope is an
    error naming that store: embedded as a statement, it matched whatever an id resembles."""
    from thatch.embedder.client.kind import Kind
    from thatch.frontend.store.engine_store import Lookup
    from thatch.frontend.tools.engine_tools import scope_text
    from thatch.frontend.untrusted import quoted, token

    by_id = engines.item(statement.strip())
    if by_id is not None:
        if by_id.store in scope:
            return Lookup(by_id)
        engine = engines.engine
        raise FixableError(
            f"no {engine.name} {token(by_id.id)} in {scope_text(scope)}; it is in "
            f"{quoted(by_id.store)}.",
            f"thatch {engine.name}s {command} {shell_quote(by_id.id)} "
            f"--store {shell_quote(by_id.store)}",
        )
    vector = tools.embed([statement], Kind.PASSAGE).vectors[0]
    return engines.lookup(scope, vector)


def _not_found(
    engine: Engine,
    statement: str,
    scope: list[str],
    found: Lookup,
    command: str,
    store: str | None,
) -> click.ClickException:
    """Not found; the nearest item below the threshold, when there is one, is named with
    the command that takes it by id (never acted on here)."""
    from thatch.frontend.tools.engine_tools import not_found

    nearest = found.nearest
    message = not_found(engine, statement.strip(), scope, nearest, with_id=True)
    if nearest is not None:
        fix = f"thatch {engine.name}s {command} {shell_quote(nearest[0].id)}"
        if store and store.strip():
            fix += f" --store {shell_quote(store)}"
        message += f"\nFix: {fix}"
    return click.ClickException(message)


def _group(kind: str) -> click.Group:
    tool = f"{kind}_delete"

    @click.group(
        f"{kind}s",
        cls=SuggestingGroup,
        context_settings=SETTINGS,
        invoke_without_command=True,
        help=f"List, show or delete {kind}s (default: list, which takes --store and --json).",
    )
    @click.option("--store", help="Without a command: list only this store.")
    @click.option("--json", "as_json", is_flag=True, help="Without a command: print JSON.")
    @click.pass_context
    def group(ctx: click.Context, store: str | None, as_json: bool) -> None:
        if ctx.invoked_subcommand is None:
            ctx.invoke(list_cmd, store=store, as_json=as_json)
        elif store is not None or as_json:
            raise click.UsageError(
                f"--store and --json go after the command: thatch {kind}s "
                f"{ctx.invoked_subcommand} … --json"
            )

    @group.command("list", context_settings=SETTINGS, help=f"List the {kind}s by confidence.")
    @click.option("--store", help="Only this store (default: the project store plus global).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def list_cmd(store: str | None = None, as_json: bool = False) -> None:
        from thatch.frontend.tools.engine_tools import listing

        engine = _engine(kind)
        with store_errors():
            if store is not None:
                store = check_argument("store", tool, store)
            tools, engines = _open(engine)
            scope = _scope(tools, store)
            entries = leniently(tools, lambda: engines.listing(scope))
        if as_json:
            emit_json([_item_json(entry) for entry in entries])
        else:
            click.echo(listing(engine, entries, scope))

    @group.command("show", context_settings=SETTINGS)
    @click.argument("statement")
    @click.option("--store", help="Only this store (default: the project store plus global).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def show(statement: str, store: str | None, as_json: bool) -> None:
        """Show one by its id or its STATEMENT. A paraphrase matches only at similarity
        ≥ 0.85 with the configured model (with MiniLM few do): below that, the error
        names the nearest one's id."""
        from thatch.frontend.tools.engine_tools import listing

        engine = _engine(kind)
        with store_errors():
            statement = check_argument("statement", tool, statement)
            if store is not None:
                store = check_argument("store", tool, store)
            tools, engines = _open(engine)
            scope = _scope(tools, store)
            found = leniently(tools, lambda: _find(tools, engines, scope, statement, "show"))
            item = found.item
            entry = None
            if item is not None:
                entry = next(
                    (e for e in engines.listing([item.store]) if e.item.id == item.id), None
                )
        if entry is None:
            raise _not_found(engine, statement, scope, found, "show", store)
        if as_json:
            emit_json(_item_json(entry))
        else:
            click.echo(f"id: {entry.item.id}\n" + listing(engine, [entry], scope))

    @group.command("delete", context_settings=SETTINGS)
    @click.argument("statement")
    @click.option("--store", help="Only this store (default: the project store plus global).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def delete(statement: str, store: str | None, as_json: bool) -> None:
        """Delete one by its id or its STATEMENT; its situations go too when nothing else
        uses them, and a default behavior deleted stays off. A paraphrase matches only at
        similarity ≥ 0.85 with the configured model (with MiniLM few do): below that
        nothing is deleted, and the error names the nearest one's id."""
        from thatch.frontend.tools.engine_tools import deleted_text
        from thatch.frontend.tools.seed_stamps import default_key

        engine = _engine(kind)
        with store_errors():
            statement = check_argument("statement", tool, statement)
            if store is not None:
                store = check_argument("store", tool, store)
            tools, engines = _open(engine)
            scope = _scope(tools, store)
            found = leniently(tools, lambda: _find(tools, engines, scope, statement, "delete"))
            deleted = None
            if found.item is not None:
                deleted = engines.delete(found.item.id, switch_off=default_key)
        if deleted is None:
            raise _not_found(engine, statement, scope, found, "delete", store)
        if as_json:
            emit_json(
                {
                    "deleted": deleted.id,
                    "store": deleted.store,
                    "statement": deleted.statement,
                    "switched_off": default_key(deleted),
                }
            )
        else:
            click.echo(deleted_text(deleted))

    return group


predictions = _group("prediction")
behaviors = _group("behavior")


@behaviors.command("defaults", context_settings=SETTINGS)
@click.option("--off", "off", metavar="KEY", multiple=True, help="Switch this default off.")
@click.option("--on", "on", metavar="KEY", multiple=True, help="Switch it back on.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def defaults(off: tuple[str, ...], on: tuple[str, ...], as_json: bool) -> None:
    """List the default behaviors thatch seeds into global, each on or off; --off KEY
    deletes one and keeps it from coming back, --on KEY lets the next thatch mcp seed it."""
    from thatch.frontend.store.engine_store import BEHAVIORS
    from thatch.frontend.tools.default_behaviors import DEFAULTS
    from thatch.frontend.tools.seed_stamps import SEED_STORE, STAMP_MARKER, default_key

    keys = {default.key for default in DEFAULTS}
    unknown = sorted({*off, *on} - keys)
    if unknown:
        raise click.UsageError(
            f"no default behavior {unknown[0]!r}; the keys are: {', '.join(sorted(keys))}"
        )
    if set(off) & set(on):
        raise click.UsageError("a key cannot be switched on and off at once")
    with store_errors():
        _tools, engines = _open(BEHAVIORS)
        for key in off:
            engines.switch_default(key, on=False)
            for item in engines.stamped(SEED_STORE, f"{STAMP_MARKER}{key} "):
                engines.delete(item.id, switch_off=default_key)
        for key in on:
            engines.switch_default(key, on=True)
        switched_off = engines.defaults_off()
    rows = [
        {"key": d.key, "on": d.key not in switched_off, "situation": d.situation} for d in DEFAULTS
    ]
    if as_json:
        emit_json(rows)
        return
    width = max(len(str(row["key"])) for row in rows)  # the longest key, one column
    for row in rows:
        key = f"{row['key']}".ljust(width)
        click.echo(f"{'on ' if row['on'] else 'off'}  {key}  when {row['situation']}")
    if on:
        click.echo("Switched on: seeded again when the next thatch mcp starts.")
