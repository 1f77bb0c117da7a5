"""What ``thatch model list`` shows (docs/cli.md §embedder-and-models): the models this
machine can use without a download, the built-in short names that still need one, and the
one in use.

Local files only, like ``describe_model``: no network, no ONNX file loaded or hashed (a
hub-cache snapshot is read where ``huggingface_hub`` lays it out, without importing it).
A directory that is no usable model is listed with what is wrong, never raised.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from thatch.common.environment import Env, Setting, models_dir
from thatch.embedder.client.errors import ModelError, ModelNotBuilt
from thatch.embedder.client.imported import ImportedModel, imported_models, is_import
from thatch.embedder.client.model_names import (
    ADAPTED,
    HUB_ID,
    ONNX_CANDIDATES,
    REGISTRY,
    REQUIRED_FILES,
    AdaptedEntry,
    HubRef,
    cached_snapshot,
    choose_onnx,
    directory_model_id,
    hub_cache_dir,
    imported_for,
    parse_name,
    read_json,
    shown_name,
    snapshot_place,
)
from thatch.embedder.client.settings import model_setting
from thatch.embedder.models.mock import MOCK_DIM
from thatch.embedder.models.registry import settings_from_dir

__all__ = ["ListedModel", "ModelListing", "list_models"]

READY = "ready"
NEEDS_DOWNLOAD = "needs download"
LEADS_HERE = "the id leads here"


@dataclass(frozen=True)
class ListedModel:
    model_id: str
    short_name: str  # "" when no short name leads here
    source: str  # "imported" | "local dir" | "hub cache" | "hub" | "built here" | "built in"
    status: str  # "ready" | "needs download" | "incomplete: no <file>" | "broken: <why>"
    quantized: bool | None  # None: not known without the files
    dim: int | None
    path: Path | None
    in_use: bool = False
    id_leads_here: bool = False  # of rows sharing its id, the one the id resolves to


@dataclass(frozen=True)
class ModelListing:
    models: tuple[ListedModel, ...]
    setting: Setting | None  # the model in use and where it was chosen; None: unreadable
    problem: ModelError | None  # why no row is the model in use
    cached: int  # rows found in thatch's model cache and the hub cache
    unreadable: tuple[str, ...] = ()  # why a cache could not be looked into


def list_models(env: Env) -> ModelListing:
    """Imports, then servable hub-cache snapshots, then built-in names not on this machine;
    the model in use is marked, and given a row of its own when it is none of these."""
    imports = imported_models(env)  # read once: each read is of every import's files
    imported, unreadable_models = _model_cache_rows(env, imports)
    cached, unreadable_hub = _hub_cache_rows(env)
    on_disk = [*imported, *cached]
    rows = [*on_disk, *_not_here_rows(on_disk)]
    keyed = [(row, _row_keys(row, env)) for row in rows]
    setting, place, problem = _in_use(env, imports)
    if place is not None:
        keyed = _marked(keyed, place, env)
    keyed = _resolved_ids(keyed, env, imports)
    names = _short_names(env, imports)  # after the row in use: it may be one they lead to
    named = [replace(row, short_name=_short_name(row, keys, names)) for row, keys in keyed]
    unreadable = tuple(filter(None, [unreadable_models, unreadable_hub]))
    return ModelListing(tuple(named), setting, problem, len(on_disk), unreadable)


def _in_use(
    env: Env, imports: list[ImportedModel]
) -> tuple[Setting | None, Path | HubRef | str | None, ModelError | None]:
    """The model in use and where resolution finds it, or why that cannot be told."""
    try:
        setting = model_setting(env)
    except ModelError as error:
        return None, None, error
    assert setting.value is not None
    try:
        return setting, _place(setting.value, env, imports), None
    except ModelError as error:
        return setting, None, error


def _marked(
    keyed: list[tuple[ListedModel, list[Path | HubRef]]], place: Path | HubRef | str, env: Env
) -> list[tuple[ListedModel, list[Path | HubRef]]]:
    """The rows with the model in use marked, given a row of its own when it has none."""
    key = _place_key(place)
    marked = [(_as_in_use(row, place), keys) if key in keys else (row, keys) for row, keys in keyed]
    if not any(row.in_use for row, _ in marked):
        row = replace(_row_for(place, env), in_use=True)
        marked.append((row, _row_keys(row, env)))
    return marked


def _resolved_ids(
    keyed: list[tuple[ListedModel, list[Path | HubRef]]], env: Env, imports: list[ImportedModel]
) -> list[tuple[ListedModel, list[Path | HubRef]]]:
    """Of rows sharing an id (an import and a hub snapshot of one model), the one the id
    resolves to says so: both may be ready, and only one is what `thatch model use ID`
    picks."""
    counts = Counter(row.model_id for row, _ in keyed)
    return [
        (replace(row, id_leads_here=True), keys)
        if counts[row.model_id] > 1 and _leads_to(row.model_id, keys, env, imports)
        else (row, keys)
        for row, keys in keyed
    ]


def _leads_to(
    model_id: str, keys: list[Path | HubRef], env: Env, imports: list[ImportedModel]
) -> bool:
    try:
        return _place_key(_place(model_id, env, imports)) in keys
    except ModelError:  # an id resolution refuses leads to no row
        return False


def _as_in_use(row: ListedModel, place: Path | HubRef | str) -> ListedModel:
    if isinstance(place, HubRef) and row.path is not None and row.status.startswith("incomplete"):
        # the hub model in use, partly downloaded into this snapshot: one row, saying how
        # to get the rest, rather than a second `needs download` row for the same id
        status = f"{row.status} (`thatch model pull` completes it)"
        return replace(row, in_use=True, status=status)
    return replace(row, in_use=True)


def _model_cache_rows(
    env: Env, imports: list[ImportedModel]
) -> tuple[list[ListedModel], str | None]:
    """Every directory in thatch's model cache (hidden ones are imports being built), and
    why the cache cannot be read, when it cannot."""
    children, unreadable = _children(models_dir(env), "model cache")
    found = [child for child in children if not child.name.startswith(".") and child.is_dir()]
    rows = [
        _dir_row(child, "imported" if is_import(env, child, imports) else "local dir")
        for child in found
    ]
    return sorted(rows, key=lambda row: (row.model_id, str(row.path))), unreadable


def _hub_cache_rows(env: Env) -> tuple[list[ListedModel], str | None]:
    """The hub-cache repos whose main snapshot holds an ONNX file: those thatch can serve
    (or could, once complete), and why the cache cannot be read, when it cannot. A
    checkpoint without one (another tool's, or the one an adapted model is built from) is
    not a model thatch serves, and is left out."""
    rows = []
    children, unreadable = _children(hub_cache_dir(env), "hub cache")
    for storage in children:
        if not storage.name.startswith("models--"):
            continue  # datasets, spaces, the hub's lock files
        repo_id = storage.name.removeprefix("models--").replace("--", "/", 1)
        if not HUB_ID.fullmatch(repo_id):
            continue  # a name resolution would not take as a hub id
        snapshot = snapshot_place(HubRef(repo_id, None), env)
        if snapshot is None or not _may_serve(snapshot):
            continue
        rows.append(_dir_row(snapshot, "hub cache", repo_id))
    return sorted(rows, key=lambda row: row.model_id), unreadable


def _may_serve(snapshot: Path) -> bool:
    """Whether the snapshot holds an ONNX file; one that cannot be read may, and its row
    says why it is no use."""
    try:
        return any((snapshot / name).is_file() for name in ONNX_CANDIDATES)
    except OSError:
        return True


def _not_here_rows(on_disk: list[ListedModel]) -> list[ListedModel]:
    """The built-in short names whose model no directory above stands for."""
    here = {row.model_id for row in on_disk}
    rows = [
        ListedModel(e.model_id, e.short_name, "hub", NEEDS_DOWNLOAD, e.quantized, e.dim, None)
        for e in REGISTRY.values()
        if e.short_name and e.model_id not in here
    ]
    built = {entry.model_id: entry for entry in ADAPTED.values()}.values()
    rows += [
        ListedModel(e.model_id, e.short_name, "built here", NEEDS_DOWNLOAD, None, _dim(e), None)
        for e in built
        if e.model_id not in here
    ]
    return rows


def _dim(adapted: AdaptedEntry) -> int | None:
    """An adapter changes weights, not shapes: the dimension of the checkpoint it is for."""
    base = REGISTRY.get(adapted.base)
    return base.dim if base is not None else None


def _children(directory: Path, what: str) -> tuple[list[Path], str | None]:
    """The entries of a cache ``directory`` (none when it does not exist), and why it
    cannot be read: one unreadable cache (another user's) hides none of the other's."""
    try:
        return sorted(directory.iterdir()), None
    except (FileNotFoundError, NotADirectoryError):
        return [], None
    except OSError as error:
        return [], f"cannot read the {what} {shown_name(str(directory))}: {error.strerror}"


def _dir_row(path: Path, source: str, model_id: str | None = None) -> ListedModel:
    """A model directory as resolution would find it, hashing nothing."""
    path = path.absolute()
    try:
        meta = read_json(path / "thatch_model.json")
        model_id = model_id or directory_model_id(path, meta)
        missing = _missing_file(path, meta, model_id)
        if missing is not None:
            return ListedModel(model_id, "", source, f"incomplete: no {missing}", None, None, path)
        settings = settings_from_dir(path, source=source, model_id=model_id, checksum=False)
    except (ModelError, OSError) as error:
        # OSError: a directory another user's (or none's) to read, as a permission error
        why = _unreadable(error) if isinstance(error, OSError) else str(error)
        model_id = model_id or directory_model_id(path, {})
        return ListedModel(model_id, "", source, f"broken: {why}", None, None, path)
    return ListedModel(model_id, "", source, READY, settings.quantized, settings.dim, path)


def _unreadable(error: OSError) -> str:
    where = shown_name(str(error.filename)) if error.filename is not None else "a model file"
    return f"cannot read {where}: {error.strerror}"


def _missing_file(path: Path, meta: dict[str, object], model_id: str) -> str | None:
    """The first file settings_from_dir would find missing, by name."""
    for name in REQUIRED_FILES:
        if not (path / name).is_file():
            return name
    present = {name for name in ONNX_CANDIDATES if (path / name).is_file()}
    onnx = choose_onnx(meta, REGISTRY.get(model_id), present)
    if onnx is None:
        return "ONNX file"
    return None if (path / onnx).is_file() else onnx


def _place(name: str, env: Env, imports: list[ImportedModel]) -> Path | HubRef | str:
    """Where resolution finds ``name``, as ``describe_model`` does: a directory, a hub
    model that needs a download, or "mock". ModelError when it finds nothing, or cannot
    read what it finds."""
    try:
        return _found_place(name, env, imports)
    except OSError as error:
        raise ModelError(_unreadable(error)) from None


def _found_place(name: str, env: Env, imports: list[ImportedModel]) -> Path | HubRef | str:
    try:
        target = parse_name(name, env, imports=imports)
    except ModelNotBuilt as not_built:
        return HubRef(not_built.model_id, None)
    if not isinstance(target, HubRef):
        return target
    snapshot = cached_snapshot(target, env)
    found = imported_for(target, env, cached=snapshot is not None, imports=imports) or snapshot
    return found if found is not None else target


def _place_key(place: Path | HubRef | str) -> Path | HubRef | None:
    """What a row that ``place`` leads to has among its _row_keys; None: no row of the
    caches (a pinned revision not cached, or mock, which has no row unless in use)."""
    if isinstance(place, Path):
        return place.resolve()
    if isinstance(place, HubRef) and place.revision is None:
        return HubRef(place.repo_id, None)
    return None


def _row_keys(row: ListedModel, env: Env) -> list[Path | HubRef]:
    """What leads to a row: its directory as the file system finds it, or the hub model it
    would download. A hub id whose main snapshot is incomplete leads to that snapshot's
    row too: a pull of that id completes it."""
    if row.path is None:
        return [HubRef(row.model_id, None)]
    keys: list[Path | HubRef] = [row.path.resolve()]
    if row.source == "hub cache":
        main = snapshot_place(HubRef(row.model_id, None), env)
        if main is not None and main.absolute() == row.path:
            keys.append(HubRef(row.model_id, None))
    return keys


def _row_for(place: Path | HubRef | str, env: Env) -> ListedModel:
    """The row of a model in use that the caches do not hold."""
    if isinstance(place, Path):
        if place.is_relative_to(hub_cache_dir(env)):
            return _dir_row(place, "hub cache")  # a pinned revision's snapshot
        return _dir_row(place, "imported" if is_import(env, place) else "local dir")
    if isinstance(place, HubRef):
        shown = f"{place.repo_id}@{place.revision}" if place.revision else place.repo_id
        entry = REGISTRY.get(place.repo_id)
        if entry is None:
            return ListedModel(shown, "", "hub", NEEDS_DOWNLOAD, None, None, None)
        return ListedModel(shown, "", "hub", NEEDS_DOWNLOAD, entry.quantized, entry.dim, None)
    return ListedModel(place, "", "built in", READY, False, MOCK_DIM, None)


def _short_names(env: Env, imports: list[ImportedModel]) -> dict[Path | HubRef, list[str]]:
    """The short names by the key (_place_key) of the row each leads to from here, found the way
    resolution finds it (a directory of that name in the working directory would win); one
    that leads nowhere, or to several imports, is left out."""
    names = {e.short_name for e in REGISTRY.values() if e.short_name}
    names |= {e.short_name for e in ADAPTED.values()}
    names |= {m.short_name for m in imports if m.short_name != m.model_id}
    found: dict[Path | HubRef, list[str]] = {}
    for name in sorted(names):
        try:
            key = _place_key(_place(name, env, imports))
        except ModelError:
            continue
        if key is not None:
            found.setdefault(key, []).append(name)
    return found


def _short_name(
    row: ListedModel, keys: list[Path | HubRef], names: dict[Path | HubRef, list[str]]
) -> str:
    if row.short_name:
        return row.short_name  # a built-in name not on this machine: what `pull` takes
    return ", ".join(sorted({name for key in keys for name in names.get(key, [])}))
