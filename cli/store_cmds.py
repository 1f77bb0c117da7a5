"""Store commands: stores, list, show, forget, search, remember (docs/cli.md §store-commands).

Thin adapters over ``thatch.frontend.tools.memory_tools.Tools``: the same operations the MCP tools
run, with the CLI's own output shapes, ``--json`` documents and exit codes.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from thatch.cli.store_access import (
    all_scope,
    check_argument,
    emit_json,
    leniently,
    list_store,
    memory_json,
    not_found,
    open_tools,
    reading_store,
    store_argument,
    store_errors,
)
from thatch.common.shell_words import shell_quote
from thatch.frontend.untrusted import body, inline, quoted, token

if TYPE_CHECKING:
    from thatch.frontend.anchors.check import Drift
    from thatch.frontend.store.memory import Memory

__all__ = ["SETTINGS", "dedup", "forget", "list_cmd", "remember", "search", "show", "stores"]

SETTINGS = {"help_option_names": ["-h", "--help"]}


# -- commands ---------------------------------------------------------------------------


@click.command("stores", context_settings=SETTINGS)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stores(as_json: bool) -> None:
    """List store names, sorted."""
    with store_errors():
        tools = open_tools()
        counts = leniently(tools, tools.ctx.store.store_counts)
    names = sorted(counts)
    if as_json:
        emit_json([{"name": name, "memories": counts[name]} for name in names])
    else:
        for name in names:
            click.echo(token(name))


@click.command("list", context_settings=SETTINGS)
@click.argument("store", required=False)
@click.option("--store", "store_option", help="The same as STORE.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(store: str | None, store_option: str | None, as_json: bool) -> None:
    """List the memories of STORE (default: the project store; all: project + global)."""
    from thatch.frontend.tools import formatting as fmt

    store = store_argument(store, store_option)
    with store_errors():
        tools = open_tools()
        # "all" means the default scope, as for search --store all.
        names = all_scope(tools) if store == "all" else [reading_store(tools, store)]
        listed = {name: list_store(tools, name) for name in names}
    if as_json:
        emit_json([memory_json(memory) for name in names for memory in listed[name]])
    else:
        click.echo("\n".join(fmt.memory_list(name, listed[name]) for name in names))


@click.command("show", context_settings=SETTINGS)
@click.argument("label")
@click.argument("store", required=False)
@click.option("--store", "store_option", help="The same as STORE.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(label: str, store: str | None, store_option: str | None, as_json: bool) -> None:
    """Show one memory by LABEL (in the project store unless STORE is given)."""
    store = store_argument(store, store_option)
    with store_errors():
        label = check_argument("label", "memory_show", label)
        tools = open_tools()
        name = reading_store(tools, store)
        memory = leniently(tools, lambda: tools.ctx.store.show(name, label))
        if memory is None:
            raise not_found(label.strip(), name, tools)
    if as_json:
        # The same text the plain output shows: the stored "# <label>" heading is the
        # label's, already a field of its own.
        emit_json({**memory_json(memory), "content": body_text(memory)})
        return
    lines = [f"[{token(memory.store)}] {inline(memory.label)}"]
    if memory.branch:
        lines.append(f"branch: {token(memory.branch)}")
    else:
        from thatch.frontend.store.branch_lifecycle import BranchRecords

        records = BranchRecords(tools.ctx.store.tx)
        origin = leniently(tools, lambda: records.origin_branch(memory.store, memory.slug))
        if origin:  # project-wide since its branch was merged (docs/database.md)
            lines.append(f"origin branch: {token(origin)} (merged)")
    if memory.confidence:
        lines.append(f"confidence: {memory.confidence}")
    if memory.archived:
        lines.append("archived: true")
    if memory.pending:
        lines.append("embedding: pending")
    lines.append(f"created: {memory.created_at}  updated: {memory.updated_at}")
    click.echo("\n".join(lines) + "\n\n" + body(body_text(memory)))


def body_text(memory: Memory) -> str:
    """The stored text without its ``# <label>`` line and the blank line after it."""
    header = f"# {memory.label}\n"
    text = memory.content
    if text.startswith(header):
        text = text[len(header) :]
        if text.startswith("\n"):
            text = text[1:]
    return text


@click.command("forget", context_settings=SETTINGS)
@click.argument("label")
@click.argument("store", required=False)
@click.option("--store", "store_option", help="The same as STORE.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def forget(
    label: str, store: str | None, store_option: str | None, yes: bool, as_json: bool
) -> None:
    """Delete the memory LABEL (asks first when stdin is a terminal; --yes skips)."""
    from thatch.frontend.tools import formatting as fmt

    store = store_argument(store, store_option)
    with store_errors():
        label = check_argument("label", "memory_forget", label)
        tools = open_tools()
        name = reading_store(tools, store)
        if not yes and _is_terminal(sys.stdin):
            found = leniently(tools, lambda: tools.ctx.store.show(name, label))
            if found is None:
                raise not_found(label.strip(), name, tools, "forget")
            question = f"Delete {quoted(found.label)} from {quoted(name)}?"
            if not click.confirm(question, default=False):
                raise click.ClickException("not deleted.")
        memory = leniently(tools, lambda: tools.ctx.store.forget(name, label))
        if memory is None:
            raise not_found(label.strip(), name, tools, "forget")
    if as_json:
        emit_json({"store": name, "label": memory.label, "slug": memory.slug, "forgotten": True})
    else:
        click.echo(fmt.forgotten(name, memory.label))


@click.command("search", context_settings=SETTINGS)
@click.argument("query", nargs=-1, required=True)
@click.option("--store", "store", help="Search only this store (all = project + global).")
@click.option("--branch", help="Current branch: its memories plus unscoped ones.")
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--include-archived", is_flag=True, help="Also search archived memories.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def search(
    query: tuple[str, ...],
    store: str | None,
    branch: str | None,
    limit: int,
    include_archived: bool,
    as_json: bool,
) -> None:
    """Search memories by meaning; all QUERY words form one query."""
    from thatch.frontend.tools import formatting as fmt

    text = " ".join(query)
    with store_errors():
        text = check_argument("query", "memory_recall", text)
        branch = check_argument("branch", "memory_recall", branch)
        tools = open_tools()
        last = query[-1]
        if len(query) >= 2 and (last == "all" or tools.ctx.store.store_exists(last)):
            click.echo(
                f"note: {quoted(last)} was read as part of the query; to search that store "
                f"use --store {shell_quote(last)}",
                err=True,
            )
        if store == "all":
            scope: list[str] | None = all_scope(tools)
        else:
            scope = None if store in (None, "") else [reading_store(tools, store)]
        report = leniently(
            tools,
            lambda: tools.recall(
                query=text,
                stores=scope,
                branch=branch,
                limit=limit,
                include_archived=include_archived,
                stamp=False,  # a person looking: recall counts are agents'
            ),
        )
    if as_json:
        emit_json(
            [
                {
                    "store": m.memory.store,
                    "label": m.memory.label,
                    "slug": m.memory.slug,
                    "score": round(m.score, 6),
                    "branch": m.memory.branch,
                    "confidence": m.memory.confidence,
                    "archived": m.memory.archived,
                    "updated_at": m.memory.updated_at,
                    "code_changed": _drift_json(report.drift.get((m.memory.store, m.memory.slug))),
                }
                for m in report.matches
            ]
        )
        return
    if not report.matches:
        searched = ", ".join(map(token, report.stores))
        click.echo(f"No matches for {quoted(text)} in [{searched}].")
    else:
        click.echo(fmt.RECALL_FRAME)
    for match in report.matches:
        memory = match.memory
        meta = [token(memory.store)]
        if memory.branch:
            meta.append(f"branch:{token(memory.branch)}")
        if memory.confidence:
            meta.append(f"c:{memory.confidence}")
        label = fmt.line_label(memory.label)
        drift = report.drift.get((memory.store, memory.slug))
        marker = f" {fmt.drift_marker(drift)}" if drift is not None else ""
        click.echo(f"[score:{fmt.score(match.score)}] [{' '.join(meta)}] {label}{marker}")
    if report.pending:
        click.echo(fmt.not_indexed(report.pending, report.pending_more), err=True)


def _drift_json(drift: Drift | None) -> dict[str, object] | None:
    """A search result's code-anchor marker as JSON: None when its code is as saved."""
    if drift is None:
        return None
    return {"paths": list(drift.paths), "via": drift.via}


@click.command("remember", context_settings=SETTINGS)
@click.argument("label", required=False)
@click.argument("content", required=False)
@click.option(
    "--derive-label",
    is_flag=True,
    help="No LABEL: the only argument is CONTENT; the label is its first line.",
)
@click.option("--store", help="Store to write (default: the project store).")
@click.option("--branch", help="Scope the memory to a git branch.")
@click.option("--confidence", type=click.IntRange(1, 10), help="1..10.")
@click.option("--overwrite", is_flag=True, help="Replace a memory with the same label.")
@click.option("--archived/--no-archived", default=None, help="Archive or unarchive.")
@click.option(
    "--anchor",
    "anchors",
    multiple=True,
    metavar="PATH[:SYMBOL|:N-M]",
    help="Code the memory is about (repeatable); recall marks it when that code changes.",
)
@click.option(
    "--related",
    multiple=True,
    metavar="LABEL",
    help="A memory of the same store this one depends on (repeatable): its code-changed "
    "marker is this one's too.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def remember(
    label: str | None,
    content: str | None,
    derive_label: bool,
    store: str | None,
    branch: str | None,
    confidence: int | None,
    overwrite: bool,
    archived: bool | None,
    anchors: tuple[str, ...],
    related: tuple[str, ...],
    as_json: bool,
) -> None:
    """Save a memory; CONTENT comes from stdin when omitted or "-".

    An empty LABEL is an error; with --derive-label the label is derived from the
    content's first line (as memory_remember does when no label is given).
    """
    from thatch.frontend.tools import formatting as fmt

    if derive_label:
        if content is not None:
            raise click.UsageError("with --derive-label, pass only CONTENT (or pipe it).")
        label, content = None, label
    elif label is None:
        raise click.UsageError("missing LABEL (or pass --derive-label to derive it).")
    elif not label.strip():
        # The tool's own words ("omit it") would make CONTENT the label here.
        raise click.UsageError("LABEL is empty: pass a label, or --derive-label to derive it.")

    if content is None or content == "-":
        stdin = sys.stdin
        if content is None and _is_terminal(stdin):
            raise click.UsageError("missing content: pass it as an argument or pipe it on stdin.")
        content = stdin.read()
    with store_errors():
        values = {
            "label": None if label is None else check_argument("label", "memory_remember", label),
            "content": check_argument("content", "memory_remember", content),
            "store": check_argument("store", "memory_remember", store),
            "branch": check_argument("branch", "memory_remember", branch),
            "related": check_argument("related", "memory_remember", list(related)),
        }
        tools = open_tools()
        report = leniently(
            tools,
            lambda: tools.remember(
                **values,
                confidence=confidence,
                overwrite=overwrite,
                archived=archived,
                anchors=anchors,
            ),
        )
    if as_json:
        emit_json(
            {
                "store": report.store,
                "label": report.label,
                "slug": report.slug,
                "similar": [
                    {"label": m.memory.label, "score": round(m.score, 6)} for m in report.similar
                ],
                "embedding": "pending" if report.pending_cause is not None else "ok",
                "created_store": report.created_store,
            }
        )
    else:
        text = fmt.saved(report.store, report.label)
        if report.created_store:
            text += " " + fmt.new_store(report.store)
        if report.similar:
            text += "\n\n" + fmt.similar_warning(report.similar, cli=True)
        click.echo(text)
    if report.pending_cause is not None:
        click.echo(fmt.pending_notice(report.pending_cause, report.pending_fix), err=True)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@click.command("dedup", context_settings=SETTINGS)
@click.argument("labels", nargs=-1)
@click.option("--store", help="Store to review (default: the project store).")
@click.option(
    "--verdict", type=click.Choice(["duplicate", "supplement", "contradiction", "unrelated"])
)
@click.option(
    "--threshold", type=click.FloatRange(0, 1), help="Minimum similarity (default: the model's)."
)
@click.option(
    "--offset",
    type=click.IntRange(0),
    default=0,
    help="Clusters to skip: the offset the previous page named (default 0).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def dedup(
    labels: tuple[str, ...],
    store: str | None,
    verdict: str | None,
    threshold: float | None,
    offset: int,
    as_json: bool,
) -> None:
    """List near-duplicate clusters a page at a time, or record a verdict on one pair.

    \b
    thatch dedup                      first page of clusters of the project store
    thatch dedup --offset N           the page from cluster N on (find_duplicates)
    thatch dedup A B --verdict V      record V for the pair A, B (dedup_mark_checked)
    """
    from thatch.frontend.store.duplicates import PAIRS_GROUPED
    from thatch.frontend.tools import formatting as fmt

    if labels and (len(labels) != 2 or verdict is None):
        raise click.UsageError("record a verdict with: thatch dedup LABEL_A LABEL_B --verdict V")
    if verdict is not None and not labels:
        raise click.UsageError("--verdict needs the pair: thatch dedup LABEL_A LABEL_B --verdict V")
    with store_errors():
        tools = open_tools()
        name = reading_store(tools, store)
        if labels:
            assert verdict is not None
            a = check_argument("label_a", "dedup_mark_checked", labels[0])
            b = check_argument("label_b", "dedup_mark_checked", labels[1])
            text = leniently(tools, lambda: tools.mark_checked(name, a, b, verdict))
            if as_json:
                emit_json({"store": name, "label_a": a, "label_b": b, "verdict": verdict})
            else:
                click.echo(text)
            return
        cut = threshold if threshold is not None else tools.configured_thresholds().duplicate
        # A person asked: compare everything no write compared yet, however long it takes.
        from thatch.cli.hygiene_cmd import check_unchecked_duplicates

        check_unchecked_duplicates(tools.ctx.store, name)
        page = leniently(tools, lambda: tools.duplicate_page(name, cut, offset))
    # The next page's command repeats what chose this page's clusters.
    again = "thatch dedup"
    if store is not None:
        again += f" --store {shell_quote(store)}"
    if threshold is not None:
        again += f" --threshold {threshold!r}"  # every digit: the same cut again
    if as_json:
        # The page's clusters in the shape of before paging; where the next page starts
        # (and an incomplete check) goes to stderr, which JSON readers ignore.
        emit_json(
            [
                [
                    {"label_a": p.label_a, "label_b": p.label_b, "score": round(p.score, 6)}
                    for p in cluster.pairs
                ]
                for cluster in page.clusters
            ]
        )
        if page.next_offset is not None:
            click.echo(f"next page: {again} --json --offset {page.next_offset}", err=True)
        if page.partial:
            click.echo(
                f"clusters of the best {PAIRS_GROUPED} candidate pairs only: "
                "review them, then run again for the rest",
                err=True,
            )
        if not page.complete:
            click.echo(f"duplicates: counting ({fmt.check_progress(page.progress)})", err=True)
    else:
        click.echo(fmt.duplicate_page(name, page, cut, next_page=f"{again} --offset", cli=True))
