"""From a model name to a running encoder (docs/embedder.md §models).

``resolve_model`` turns ``THATCH_MODEL`` / ``--model`` into ``ModelSettings``, downloading
the few files a hub model needs into the Hugging Face cache when they are missing;
``describe_model`` does the same without touching the network; ``create_encoder`` builds
the runtime for resolved settings. What a name means and where a model's files are is
``registry``; this module sits above it and the modules it drives (``hub_download``,
``fixes``, ``runtime``), none of which imports this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from thatch.common.environment import Env
from thatch.embedder.client.errors import ModelError, ModelNotBuilt, ModelUnavailable
from thatch.embedder.client.imported import find_imported, is_import
from thatch.embedder.client.model_names import (
    ADAPTED,
    REGISTRY,
    AdaptedEntry,
    HubRef,
    cached_snapshot,
    hub_offline,
    imported_for,
    parse_name,
    read_json,
    snapshot_onnx,
    snapshot_place,
)
from thatch.embedder.client.settings import configured_model, model_setting
from thatch.embedder.encoder import ModelSettings
from thatch.embedder.models.mock import mock_settings
from thatch.embedder.models.registry import offline_error, settings_from_dir

if TYPE_CHECKING:
    from thatch.embedder.encoder import Encoder

__all__ = [
    "create_encoder",
    "describe_model",
    "pull_model",
    "resolve_model",
]


def _int8_checkable(snapshot: Path, ref: HubRef) -> bool:
    """False for a cached int8 file with nothing to check it against on this CPU.

    Snapshots cached before the load-time check hold only ``onnx/model_quantized.onnx``;
    resolving such a one downloads the missing fp32 file (the check's reference) instead of
    serving int8 that may be wrong here.
    """
    from thatch.embedder.models import known_answers

    onnx = snapshot_onnx(snapshot, ref)
    if onnx is None or "quantized" not in onnx:
        return True
    served = snapshot / onnx
    return (
        known_answers.fp32_beside(snapshot, served) is not None
        or (snapshot / known_answers.KNOWN_ANSWERS_FILE).is_file()
    )


def _hub_settings(ref: HubRef, snapshot: Path, source: str) -> ModelSettings:
    return settings_from_dir(snapshot, source=source, model_id=ref.repo_id, revision=snapshot.name)


def resolve_model(
    name: str | None = None,
    *,
    env: Env | None = None,
    revision: str | None = None,
    download: bool = True,
    progress: bool = True,
    hub_first: bool = False,
    by_variable: bool = False,
) -> ModelSettings:
    """Resolve a model name to runnable settings, downloading hub files when needed.

    ``hub_first`` (``thatch model pull``): a short name means the hub model even when an
    import with that short name exists. ``by_variable``: THATCH_MODEL chose ``name``
    (so the fixes are about the variable); without ``name`` the setting's origin says.
    """
    env = os.environ if env is None else env
    if name is None:
        by_variable = model_setting(env).origin == "THATCH_MODEL"
    try:
        target = parse_name(name if name is not None else configured_model(env), env, revision)
    except ModelNotBuilt as not_built:
        from thatch.embedder.models.fixes import unavailable_fix

        not_built.fix = unavailable_fix(
            not_built.model_id, env, hub=None if download else False, by_variable=by_variable
        )
        raise
    if target == "mock":
        return mock_settings()
    if isinstance(target, Path):
        return settings_from_dir(
            target, source="imported" if is_import(env, target) else "local dir"
        )
    assert isinstance(target, HubRef)
    refetch = False
    if hub_first and download and not hub_offline(env):
        from thatch.embedder.models.hub_download import REFETCH_MARK, drop_damaged

        # A pull checks what is cached too, before the cache is read: a file broken before
        # pulls checked their files resolved as ready for good, and pulling again fetched
        # nothing. What it drops, or an earlier pull dropped, is fetched again below,
        # optional files too.
        place = snapshot_place(target, env)
        if place is not None and place.is_dir():
            refetch = bool(drop_damaged(place)) or (place / REFETCH_MARK).exists()
    snapshot = None if refetch else cached_snapshot(target, env)
    imported = imported_for(target, env, cached=snapshot is not None, hub_first=hub_first)
    if imported is not None:
        return settings_from_dir(imported, source="imported")
    if snapshot is not None and (
        _int8_checkable(snapshot, target) or hub_offline(env) or not download
    ):
        return _hub_settings(target, snapshot, "hub cache")
    from thatch.embedder.models.fixes import unavailable_fix

    if snapshot is None and hub_offline(env):
        error = offline_error(target.repo_id)
        error.fix = unavailable_fix(target.repo_id, env, hub=False, by_variable=by_variable)
        raise error
    if not download:
        raise ModelError(
            f"model {target.repo_id} needs download",
            fix=unavailable_fix(target.repo_id, env, by_variable=by_variable),
        )
    from thatch.embedder.models.hub_download import download_snapshot

    try:
        snapshot = download_snapshot(target, env=env, progress=progress)
    except ModelUnavailable as error:
        error.fix = error.fix or unavailable_fix(
            target.repo_id, env, hub=False, by_variable=by_variable
        )
        if refetch:
            error.args = (f"{error}; {_waiting_refetch(target, env)}",)
        raise
    return _hub_settings(target, snapshot, "downloaded")


def _waiting_refetch(target: HubRef, env: Env) -> str:
    """Why a pull that found nothing to say on its own needed the hub: a file of the
    cached copy was removed as broken, and whether the embedder can load the rest."""
    waits = "a file of its cached copy was removed as broken and waits for this download"
    if cached_snapshot(target, env) is not None:
        return f"{waits} (the embedder loads the cached copy meanwhile)"
    return f"{waits} (the model cannot load until then)"


def describe_model(
    name: str | None = None, *, env: Env | None = None, revision: str | None = None
) -> ModelSettings:
    """Resolution without network or loading; a hub model not yet cached says so."""
    env = os.environ if env is None else env
    try:
        target = parse_name(name if name is not None else configured_model(env), env, revision)
    except ModelNotBuilt as not_built:
        return ModelSettings(
            model_id=not_built.model_id,
            dim=0,  # unknown until it is built
            max_tokens=0,
            pooling="",
            query_prefix="",
            quantized=False,
            revision="",
            source="needs download",
        )
    if not isinstance(target, HubRef):
        return resolve_model(name, env=env, revision=revision, download=False)
    snapshot = cached_snapshot(target, env)
    imported = imported_for(target, env, cached=snapshot is not None)
    if imported is not None:
        return settings_from_dir(imported, source="imported")
    if snapshot is not None:
        return _hub_settings(target, snapshot, "hub cache")
    entry = REGISTRY.get(target.repo_id)
    return ModelSettings(
        model_id=target.repo_id,
        dim=0,  # unknown until config.json is downloaded
        max_tokens=entry.max_tokens if entry else 0,
        pooling=entry.pooling if entry else "",
        query_prefix=entry.query_prefix if entry else "",
        quantized=entry.quantized if entry else False,
        revision=target.revision or "",
        source="needs download",
    )


def pull_model(
    name: str | None = None,
    *,
    revision: str | None = None,
    env: Env | None = None,
    log: Callable[[str], None] | None = None,
) -> ModelSettings:
    """Make sure a model's files are on disk (downloading with a progress bar if needed);
    a model thatch builds from a checkpoint and an adapter is downloaded and imported."""
    env = os.environ if env is None else env
    adapted = ADAPTED.get((name if name is not None else configured_model(env)).strip())
    if adapted is not None:
        if revision is not None:
            raise ModelError(
                f"model {adapted.model_id} is built from the one revision of {adapted.base} "
                "its adapter was trained on: pull it without --revision"
            )
        return _pull_adapted(adapted, env, log)
    return resolve_model(
        name, env=env, revision=revision, download=True, progress=True, hub_first=True
    )


def _pull_adapted(
    adapted: AdaptedEntry, env: Env, log: Callable[[str], None] | None
) -> ModelSettings:
    done = find_imported(env, adapted.model_id)
    if done is not None:
        built_from = read_json(done / "thatch_model.json").get("adapter_sha256")
        done = done if built_from == adapted.adapter_sha256 else None  # another build: redo
    if done is None:
        from thatch.embedder.models.fixes import adapted_fix

        if hub_offline(env):
            raise ModelUnavailable(
                f"model {adapted.model_id} needs {adapted.base} from the hub and HF_HUB_OFFLINE=1",
                fix=adapted_fix(adapted, env, hub=False),
            )
        from thatch.embedder.convert.importer import import_checkpoint
        from thatch.embedder.models.hub_download import download_checkpoint

        try:
            checkpoint = download_checkpoint(
                HubRef(adapted.base, None), env=env, pull=adapted.short_name
            )
        except ModelUnavailable as error:
            error.fix = error.fix or adapted_fix(adapted, env, hub=False)
            raise
        done = import_checkpoint(
            checkpoint, model_id=adapted.model_id, adapter=adapted.adapter, env=env, log=log
        )
    return settings_from_dir(done, source="imported")


def create_encoder(settings: ModelSettings, *, threads: int | None = None) -> Encoder:
    """The runtime for resolved settings: MockEncoder for mock, else OnnxEncoder."""
    if settings.model_id == "mock" and settings.onnx_path is None:
        from thatch.embedder.models.mock import MockEncoder

        return MockEncoder(settings)
    from thatch.embedder.models.runtime import OnnxEncoder

    return OnnxEncoder(settings, threads=threads)
