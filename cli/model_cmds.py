"""``thatch model``: import, inspect and download embedding models (docs/cli.md
§embedder-and-models)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from thatch.cli.errors import translate_errors
from thatch.embedder.encoder import ModelSettings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def model() -> None:
    """Import, inspect and download embedding models.

    MODEL is mock, a short name (bge-small-en-v1.5, all-MiniLM-L6-v2), a model
    directory, or a Hugging Face hub id org/name[@revision]; it defaults to
    THATCH_MODEL, else Xenova/bge-small-en-v1.5.
    """


@model.command("import")
@click.argument("src", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="Output directory.")
@click.option("--model-id", help="Model id written to rows (default: from the checkpoint).")
@click.option("--quantize/--no-quantize", default=True, show_default=True, help="Also write int8.")
@click.option("--pooling", type=click.Choice(["mean", "cls"]), help="Pooling (default: ST files).")
@click.option("--max-tokens", type=click.IntRange(min=2), help="Maximum tokens per text.")
@click.option("--query-prefix", help="Text prepended to queries.")
def import_cmd(
    src: Path,
    out: Path | None,
    model_id: str | None,
    quantize: bool,
    pooling: str | None,
    max_tokens: int | None,
    query_prefix: str | None,
) -> None:
    """Convert a sentence-transformers BERT checkpoint SRC into a servable model.

    Needs config.json, model.safetensors and tokenizer.json or vocab.txt in SRC; no
    PyTorch. Prints the output directory and the THATCH_MODEL line to use it.
    """
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
            env=os.environ,
            log=lambda line: click.echo(line, err=True),
        )
    click.echo(str(directory))
    click.echo(f"export THATCH_MODEL={directory}")


@model.command("info")
@click.argument("name", metavar="[MODEL]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def info_cmd(name: str | None, as_json: bool) -> None:
    """Show how MODEL resolves, without downloading or loading it."""
    with translate_errors():
        from thatch.embedder.models.registry import describe_model

        settings = describe_model(name, env=os.environ)
    fields = info_fields(settings)
    if as_json:
        click.echo(json.dumps(fields, indent=2, ensure_ascii=False))
        return
    width = max(len(key) for key in fields)
    for key, value in fields.items():
        if isinstance(value, list):
            value = ", ".join(value) if value else "-"
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        elif value in ("", 0, None):
            value = "-" if key != "query_prefix" else "(none)"
        label = key.replace("_", " ")
        click.echo(f"{label + ':':<{width + 2}}{value}")


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


@model.command("pull")
@click.argument("name", metavar="[MODEL]", required=False)
@click.option("--revision", help="Branch, tag or commit (default: main).")
def pull_cmd(name: str | None, revision: str | None) -> None:
    """Download the files MODEL needs into the Hugging Face cache.

    Progress goes to stderr. Honours HF_ENDPOINT, HF_HOME / HF_HUB_CACHE and
    HF_HUB_OFFLINE (offline and not cached is an error).
    """
    with translate_errors():
        from thatch.embedder.models.registry import pull_model

        settings = pull_model(name, revision=revision, env=os.environ)
    where = settings.path if settings.path is not None else "(built in)"
    click.echo(f"model {settings.model_id} ready at {where}")
