"""``thatch model``: import, inspect and download embedding models (docs/cli.md
§embedder-and-models)."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from thatch.cli.errors import FixableError, translate_errors
from thatch.cli.groups import SuggestingGroup
from thatch.cli.store_access import emit_json
from thatch.common.shell_words import shell_quote
from thatch.embedder.encoder import ModelSettings

if TYPE_CHECKING:
    from thatch.embedder.models.listing import ListedModel, ModelListing

__all__ = ["model"]


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def model() -> None:
    """Import, choose, inspect and download embedding models.

    MODEL is mock, a short name (bge-small-en-v1.5, all-MiniLM-L6-v2,
    all-MiniLM-L6-v2-code: built here by `thatch model pull`), the id or
    short name of an imported model, a model directory, or a Hugging Face hub id
    org/name[@revision]; `thatch model list` shows those on this machine. The model in
    use is THATCH_MODEL, else the one chosen with `thatch model use` (saved in
    $XDG_CONFIG_HOME/thatch/config.json), else Xenova/bge-small-en-v1.5.

    Offline: thatch model import DIR, then thatch model use ID.
    """


@model.command("import")
@click.argument("src", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Output directory.")
@click.option("--model-id", help="Model id written to rows (default: from the checkpoint).")
@click.option("--quantize/--no-quantize", default=True, show_default=True, help="Also write int8.")
@click.option("--pooling", type=click.Choice(["mean", "cls"]), help="Pooling (default: ST files).")
@click.option("--max-tokens", type=click.IntRange(min=2), help="Maximum tokens per text.")
@click.option("--query-prefix", help="Text prepended to queries.")
@click.option(
    "--adapter",
    metavar="NAME|FILE",
    help="Merge a trained adapter into the weights first (shipped: all-MiniLM-L6-v2-code).",
)
def import_cmd(
    src: Path,
    out: Path | None,
    model_id: str | None,
    quantize: bool,
    pooling: str | None,
    max_tokens: int | None,
    query_prefix: str | None,
    adapter: str | None,
) -> None:
    """Convert a sentence-transformers BERT checkpoint SRC into a servable model.

    Needs config.json, model.safetensors and tokenizer.json or vocab.txt in SRC; no
    PyTorch. Without --model-id the id comes from the checkpoint's sentence-transformers
    metadata (stderr says from where). Prints the output directory, then the command
    that makes it the default model.
    """
    from thatch.embedder.client.model_names import shown_name, stable_name

    try:
        if src.exists() and not src.is_dir():
            raise FixableError(
                f"{shown_name(str(src))} is not a directory", "give the checkpoint's directory"
            )
        with translate_errors():
            from thatch.embedder.convert.importer import import_checkpoint

            directory = import_checkpoint(
                src,
                out,
                model_id=model_id,
                quantize=quantize,
                pooling=pooling,
                max_tokens=max_tokens,
                query_prefix=query_prefix,
                adapter=adapter,
                env=os.environ,
                log=lambda line: click.echo(line, err=True),
            )
    except OSError as error:  # a path past the system's limits, no space left, no permission
        raise _import_failure(error) from None
    click.echo(str(directory))
    click.echo(f"thatch model use {shell_quote(stable_name(os.environ, directory))}")


_IMPORT_FIXES = {
    errno.ENOSPC: "free space where the model is written (the model cache, or --out)",
    errno.EDQUOT: "free space where the model is written (the model cache, or --out)",
    errno.ENAMETOOLONG: "give shorter paths",
    errno.EACCES: "give an --out you can write to, or fix the permissions named",
    errno.EPERM: "give an --out you can write to, or fix the permissions named",
    errno.EROFS: "give an --out on a writable file system",
}


def _import_failure(error: OSError) -> FixableError:
    """An OSError of an import as one Error line (whatever the path holds) and the fix its
    errno calls for; a write with no file named (a full disk) is the model's output."""
    from thatch.embedder.client.cli_errors import debug_traceback
    from thatch.embedder.client.model_names import shown_name

    debug_traceback()
    name = error.filename
    where = "writing the model" if name is None else shown_name(os.fsdecode(name))
    if len(where) > 200:
        where = f"{where[:80]}…{where[-80:]}"
    fix = _IMPORT_FIXES.get(
        error.errno or 0, "give the checkpoint's directory and an --out thatch can write to"
    )
    return FixableError(f"cannot import: {where}: {error.strerror or error}", fix)


@model.command("info")
@click.argument("name", metavar="[MODEL]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def info_cmd(name: str | None, as_json: bool) -> None:
    """Show how MODEL resolves, without downloading or loading it."""
    with translate_errors():
        from thatch.embedder.models.resolve import describe_model

        settings = describe_model(name, env=os.environ)
    fields = info_fields(settings)
    if as_json:
        emit_json(fields)
        return
    from thatch.frontend.untrusted import inline

    width = max(len(key) for key in fields)
    for key, value in fields.items():
        if isinstance(value, list):
            value = ", ".join(value) if value else "-"
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        elif value in ("", 0, None):
            value = "-" if key != "query_prefix" else "(none)"
        label = key.replace("_", " ")
        # Paths and names read from disk are data: a directory an agent named cannot
        # forge a line of its own.
        click.echo(f"{label + ':':<{width + 2}}{inline(str(value))}")


def info_fields(settings: ModelSettings) -> dict[str, object]:
    return {
        "id": settings.model_id,
        "source": settings.source,
        "path": str(settings.path) if settings.path else "",
        "revision": settings.revision,
        "files": list(settings.files),
        "dim": settings.dim,
        "max_tokens": settings.max_tokens,
        "pooling": settings.pooling,
        "query_prefix": settings.query_prefix,
        "quantized": settings.quantized,
        "onnx": str(settings.onnx_path) if settings.onnx_path else "",
        "onnx_sha256": settings.sha256,
    }


@model.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_cmd(as_json: bool) -> None:
    """List the models thatch can use without a download, and the one in use (*).

    Imports in thatch's model cache ($XDG_CACHE_HOME/thatch/models), models in the
    Hugging Face hub cache that thatch can serve, and the built-in short names that
    still need a download. A directory that is no usable model says what is wrong.
    Reads local files only: loads no model, never contacts the hub.

    \b
    Example:
      $ thatch model list
        ID                                      SHORT NAME         SOURCE    STATUS          ...
        sentence-transformers/all-MiniLM-L6-v2  all-MiniLM-L6-v2   imported  ready           ...
      * Xenova/bge-small-en-v1.5                bge-small-en-v1.5  hub       needs download  ...
      * in use: Xenova/bge-small-en-v1.5 (from default)
      $ thatch model use all-MiniLM-L6-v2      # the import, for every thatch process
    """
    with translate_errors():
        from thatch.embedder.models.listing import list_models

        listing = list_models(os.environ)
    if as_json:
        emit_json([_listed_fields(m, listing) for m in listing.models])
    else:
        _print_listing(listing)
    for unreadable in listing.unreadable:
        click.echo(f"Warning: {unreadable}", err=True)
    if listing.problem is not None:
        _in_use_warning(listing)


def _listed_fields(model: ListedModel, listing: ModelListing) -> dict[str, object]:
    origin = listing.setting.origin if model.in_use and listing.setting else None
    return {
        "id": model.model_id,
        "short_name": model.short_name or None,
        "source": model.source,
        "status": model.status,
        "quantized": model.quantized,
        "dim": model.dim,
        "path": str(model.path) if model.path is not None else None,
        "in_use": model.in_use,
        "in_use_from": origin,
        "id_leads_here": model.id_leads_here,
    }


def _print_listing(listing: ModelListing) -> None:
    """One aligned line per model; names and paths read from disk are shown as data."""
    from thatch.embedder.models.listing import LEADS_HERE
    from thatch.frontend.untrusted import inline, token

    def shown(value: bool | None) -> str:
        return "-" if value is None else "yes" if value else "no"

    table = [["", "ID", "SHORT NAME", "SOURCE", "STATUS", "QUANTIZED", "DIM", "PATH"]]
    for m in listing.models:
        table.append(
            [
                "*" if m.in_use else "",
                token(m.model_id),
                token(m.short_name) if m.short_name else "-",
                m.source,
                inline(m.status) + (f" ({LEADS_HERE})" if m.id_leads_here else ""),
                shown(m.quantized),
                str(m.dim) if m.dim is not None else "-",
                inline(str(m.path)) if m.path is not None else "-",
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(1, len(table[0]) - 1)]
    for marker, *cells, last in table:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        click.echo(f"{marker or ' '} " + "  ".join([*padded, last]).rstrip())
    if listing.setting is not None and listing.problem is None:
        setting = listing.setting
        click.echo(f"* in use: {inline(str(setting.value))} (from {inline(setting.origin)})")
    if listing.cached == 0 and not listing.unreadable:
        click.echo(
            "Nothing is imported or cached yet: `thatch model pull` downloads the model in "
            "use, `thatch model import DIR` converts a checkpoint you have."
        )


def _in_use_warning(listing: ModelListing) -> None:
    """Why no row is marked: the setting does not resolve, or cannot be read."""
    from thatch.frontend.untrusted import inline

    problem = listing.problem
    assert problem is not None
    if listing.setting is None:
        message = str(problem)
    else:
        chosen = f"{inline(str(listing.setting.value))} (from {inline(listing.setting.origin)})"
        message = f"the model in use, {chosen}, does not resolve: {problem}"
    click.echo(f"Warning: {message}", err=True)
    if problem.fix:
        click.echo(f"Fix: {problem.fix}", err=True)


@model.command("pull")
@click.argument("name", metavar="[MODEL]", required=False)
@click.option("--revision", help="Branch, tag or commit (default: main).")
def pull_cmd(name: str | None, revision: str | None) -> None:
    """Download the files MODEL needs into the Hugging Face cache.

    Progress goes to stderr. Honours HF_ENDPOINT, HF_HOME / HF_HUB_CACHE and
    HF_HUB_OFFLINE (offline and not cached is an error). all-MiniLM-L6-v2-code is
    built here: its checkpoint is downloaded and imported with thatch's adapter.
    """
    with translate_errors():
        from thatch.embedder.models.resolve import pull_model

        settings = pull_model(
            name, revision=revision, env=os.environ, log=lambda line: click.echo(line, err=True)
        )
    from thatch.frontend.untrusted import inline

    where = settings.path if settings.path is not None else "(built in)"
    click.echo(f"model {inline(settings.model_id)} ready at {inline(str(where))}")


@model.command("use")
@click.argument("name", metavar="[MODEL]", required=False)
@click.option("--clear", is_flag=True, help="Forget the saved choice (back to the default).")
def use_cmd(name: str | None, clear: bool) -> None:
    """Make MODEL the default for every thatch process: hosts, hooks, auto-start, doctor.

    Saved in $XDG_CONFIG_HOME/thatch/config.json; THATCH_MODEL, when set, still wins.
    A short name or imported model is saved by its full id, a directory by its absolute
    path. Without MODEL, shows the model in use and where that setting comes from.
    """
    from thatch.common.environment import ConfigError, config_file, write_config
    from thatch.embedder.client.settings import DEFAULT_MODEL, model_setting
    from thatch.frontend.untrusted import inline

    env = os.environ
    if clear and name is not None:
        raise click.UsageError("give MODEL or --clear, not both")
    if name is None and not clear:
        with translate_errors():
            chosen = model_setting(env)
        click.echo(f"{inline(str(chosen.value))} (from {inline(chosen.origin)})")
        return
    fix = f"correct or remove {config_file(env)}"
    if clear:
        try:
            path = write_config(env, "model", None)
        except ConfigError as error:
            raise FixableError(str(error), fix) from None
        click.echo(
            f"Cleared the saved model in {inline(str(path))}; the default is {DEFAULT_MODEL}."
        )
        _env_wins_notice(env)
        return
    assert name is not None
    with translate_errors():
        from thatch.embedder.models.resolve import describe_model

        settings = describe_model(name, env=env)
    saved = saved_name(name, settings, env)
    try:
        path = write_config(env, "model", saved)
    except ConfigError as error:
        raise FixableError(str(error), fix) from None
    where = f" at {inline(str(settings.path))}" if settings.path else ""
    click.echo(f"Default model: {inline(settings.model_id)} ({settings.source}{where})")
    click.echo(f"Saved in {inline(str(path))}")
    if settings.source == "needs download":
        from thatch.embedder.models.fixes import unavailable_fix

        click.echo(
            f"Warning: {settings.model_id} is not on this machine yet. "
            f"Fix: {unavailable_fix(settings.model_id, env)}",
            err=True,
        )
    _env_wins_notice(env)
    _restart_notice(settings.model_id, env)


def saved_name(name: str, settings: ModelSettings, env: Mapping[str, str]) -> str:
    """What the config file records: stable across directories and later hub downloads."""
    from thatch.embedder.client.model_names import ADAPTED, HubRef, parse_name, stable_name

    if settings.model_id == "mock" and settings.path is None:
        return "mock"
    if settings.path is not None and settings.source in ("imported", "local dir"):
        return stable_name(env, settings.path)
    if settings.source == "needs download" and name.strip() in ADAPTED:
        return settings.model_id  # not built yet: the id it will be built as
    target = parse_name(name, env)
    if isinstance(target, HubRef):
        return f"{target.repo_id}@{target.revision}" if target.revision else target.repo_id
    return name.strip()


def _env_wins_notice(env: Mapping[str, str]) -> None:
    from thatch.common.environment import env_get
    from thatch.frontend.untrusted import inline

    value = env_get(env, "THATCH_MODEL")
    if value is not None:
        click.echo(
            f"Note: THATCH_MODEL={inline(value)} is set in this environment and wins over the "
            "saved choice here; unset it to use the saved one.",
            err=True,
        )


def _restart_notice(model_id: str, env: Mapping[str, str]) -> None:
    """A running embedder keeps its model: say how to switch it."""
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.frontend.untrusted import inline

    try:
        with EmbedderClient(env=env, autostart=False) as client:
            served = client.info(timeout=1.0).model_id
    except ThatchEmbedderError:
        return
    if served != model_id:
        click.echo(
            f"The running embedder serves {inline(served)}; switch it with: "
            "thatch embedder stop && thatch embedder start",
            err=True,
        )
