"""Models imported with ``thatch model import`` into thatch's model cache, found by id.

An import writes ``$XDG_CACHE_HOME/thatch/models/<org>__<name>/thatch_model.json``; the
``model_id`` recorded there is the name the model answers to (and, when unambiguous, the
part after the slash: its short name). Imports written elsewhere with ``--out`` are used
by their directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from thatch.common.environment import Env, models_dir
from thatch.common.shell_words import shell_quote
from thatch.embedder.client.errors import ModelError

__all__ = [
    "ImportedModel",
    "declared_id",
    "find_by_short_name",
    "find_imported",
    "imported_models",
    "is_import",
]

META_FILE = "thatch_model.json"


@dataclass(frozen=True)
class ImportedModel:
    model_id: str
    path: Path

    @property
    def short_name(self) -> str:
        return self.model_id.rsplit("/", 1)[-1]


def declared_id(directory: Path) -> str | None:
    try:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not an import, or a damaged one: resolution by id skips it
    declared = meta.get("model_id") if isinstance(meta, dict) else None
    return declared.strip() if isinstance(declared, str) and declared.strip() else None


def imported_models(env: Env) -> list[ImportedModel]:
    """Every import in thatch's model cache, sorted by id; hidden build directories skipped."""
    root = models_dir(env)
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    found = []
    for child in children:
        if child.name.startswith(".") or not child.is_dir():
            continue
        declared = declared_id(child)
        if declared is not None:
            found.append(ImportedModel(declared, child.absolute()))
    return sorted(found, key=lambda model: model.model_id)


def find_imported(
    env: Env, model_id: str, imports: Sequence[ImportedModel] | None = None
) -> Path | None:
    """The imported model with this id: its conventional directory first, then any.
    ``imports``: imported_models(env), from a caller asking about many (read once)."""
    conventional = models_dir(env) / model_id.replace("/", "__")
    if declared_id(conventional) == model_id:
        return conventional.absolute()
    for model in imported_models(env) if imports is None else imports:
        if model.model_id == model_id:
            return model.path
    return None


def is_import(env: Env, path: Path, imports: Sequence[ImportedModel] | None = None) -> bool:
    """Whether ``path`` is the import its recorded id resolves to (however it was named: by
    id, short name or directory), not a copy, a variant written with ``--out`` or a
    directory of the user's own."""
    declared = declared_id(path)
    return declared is not None and find_imported(env, declared, imports) == path.absolute()


def find_by_short_name(
    env: Env, short_name: str, imports: Sequence[ImportedModel] | None = None
) -> ImportedModel | None:
    """The one imported model whose id ends in ``/short_name`` (or is it); ModelError when
    several do."""
    models = imported_models(env) if imports is None else imports
    matches = [m for m in models if short_name in (m.short_name, m.model_id)]
    if len(matches) > 1:
        names = ", ".join(m.model_id for m in matches)
        raise ModelError(
            f'"{short_name}" matches several imported models ({names}): use the full id',
            # One clause a match: which model is meant is the user's to say, not ours.
            fix="use it by its full id: "
            + "; or ".join(f"thatch model use {shell_quote(m.model_id)}" for m in matches),
        )
    return matches[0] if matches else None
