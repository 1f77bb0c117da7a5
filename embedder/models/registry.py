"""Where a model's files are and how to run it (docs/embedder.md §models); what a name means
is ``thatch.embedder.client.model_names`` (frontends resolve names too).

``resolve_model`` turns ``THATCH_MODEL`` / ``--model`` into ``ModelSettings``, downloading
the few files a hub model needs into the Hugging Face cache when they are missing;
``describe_model`` does the same without touching the network; ``create_encoder`` builds
the runtime for resolved settings. Hub access goes through huggingface_hub with endpoint,
cache directory and offline mode taken from the ``env`` mapping we are given (the library
reads its own copies once, at import).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thatch.common.environment import Env
from thatch.embedder.client.errors import ModelError, ModelUnavailable
from thatch.embedder.client.model_names import (
    ONNX_CANDIDATES,
    REGISTRY,
    REQUIRED_FILES,
    HubRef,
    RegistryEntry,
    cached_snapshot,
    choose_onnx,
    directory_model_id,
    hub_offline,
    imported_for,
    parse_name,
    read_json,
    snapshot_onnx,
)
from thatch.embedder.client.settings import configured_model
from thatch.embedder.encoder import ModelSettings
from thatch.embedder.models.mock import mock_settings

if TYPE_CHECKING:
    from thatch.embedder.encoder import Encoder

__all__ = [
    "OPTIONAL_FILES",
    "create_encoder",
    "describe_model",
    "offline_error",
    "pull_model",
    "resolve_model",
    "settings_from_dir",
    "sha256_file",
    "with_onnx",
]


OPTIONAL_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "thatch_model.json",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "thatch_known_answers.json",
)


def offline_error(model_id: str) -> ModelUnavailable:
    return ModelUnavailable(f"model {model_id} is not in the local cache and HF_HUB_OFFLINE=1")


# --- settings from a directory ---------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def settings_from_dir(
    path: Path, *, source: str, model_id: str | None = None, revision: str = ""
) -> ModelSettings:
    """Read a model directory: required files, settings in priority order, ONNX sha256."""
    meta = read_json(path / "thatch_model.json")
    model_id = model_id or directory_model_id(path, meta)
    entry = REGISTRY.get(model_id)
    for name in REQUIRED_FILES:
        if not (path / name).is_file():
            raise ModelError(f"model {model_id} at {path} is missing {name}")
    present = {name for name in ONNX_CANDIDATES if (path / name).is_file()}
    onnx = choose_onnx(meta, entry, present)
    if onnx is None:
        raise ModelError(
            f"model {model_id} at {path} is missing its ONNX file "
            f"(looked for {', '.join(ONNX_CANDIDATES)})"
        )
    if not (path / onnx).is_file():
        raise ModelError(f"model {model_id} at {path} is missing {onnx}")
    config = read_json(path / "config.json")
    dim = config.get("hidden_size", meta.get("dim"))
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise ModelError(f"{path / 'config.json'} has no valid hidden_size")
    pooling, max_tokens, prefix = _run_settings(path, meta, entry, config)
    quantized = meta.get("quantized")
    if not isinstance(quantized, bool):
        if entry is not None and onnx == entry.onnx:
            quantized = entry.quantized
        else:
            quantized = any(mark in onnx.lower() for mark in ("quantized", "int8", "uint8"))
    return ModelSettings(
        model_id=model_id,
        dim=dim,
        max_tokens=max_tokens,
        pooling=pooling,
        query_prefix=prefix,
        quantized=quantized,
        revision=revision,
        sha256=sha256_file(path / onnx),
        path=path,
        onnx_path=path / onnx,
        tokenizer_path=path / "tokenizer.json",
        source=source,
        files=tuple(sorted(_present_files(path, onnx))),
    )


def _present_files(path: Path, onnx: str) -> list[str]:
    names = [*REQUIRED_FILES, onnx, *OPTIONAL_FILES]
    return [name for name in names if (path / name).is_file()]


def _run_settings(
    path: Path, meta: Mapping[str, Any], entry: RegistryEntry | None, config: Mapping[str, Any]
) -> tuple[str, int, str]:
    """Pooling, max tokens, query prefix: thatch_model.json > registry > ST files > defaults."""
    st_pooling, st_max, st_prefix = _sentence_transformers_settings(path)
    limit = config.get("max_position_embeddings")
    limit = limit if isinstance(limit, int) and limit > 0 else None

    pooling = meta.get("pooling") or (entry.pooling if entry else None) or st_pooling or "mean"
    if pooling not in ("mean", "cls"):
        raise ModelError(f"{path / 'thatch_model.json'}: pooling must be mean or cls")

    max_tokens = meta.get("max_tokens") or (entry.max_tokens if entry else None) or st_max
    if max_tokens is None:
        model_max = read_json(path / "tokenizer_config.json").get("model_max_length")
        bounds = [512, model_max, limit]
        max_tokens = min(int(b) for b in bounds if isinstance(b, int | float) and b > 0)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 2:
        raise ModelError(f"{path}: max_tokens must be an integer of at least 2")
    if limit is not None:
        max_tokens = min(max_tokens, limit)  # more positions than the model has would crash it

    prefix = meta.get("query_prefix")
    if prefix is None:
        prefix = entry.query_prefix if entry else (st_prefix or "")
    if not isinstance(prefix, str):
        raise ModelError(f"{path / 'thatch_model.json'}: query_prefix must be a string")
    return pooling, max_tokens, prefix


def _sentence_transformers_settings(path: Path) -> tuple[str | None, int | None, str | None]:
    pooling_dir = "1_Pooling"
    modules = path / "modules.json"
    if modules.is_file():
        try:
            listed = json.loads(modules.read_text(encoding="utf-8"))
            for module in listed if isinstance(listed, list) else []:
                if str(module.get("type", "")).endswith("models.Pooling") and module.get("path"):
                    pooling_dir = str(module["path"])
        except (OSError, ValueError, AttributeError):
            pass  # modules.json is optional; fall back to the conventional 1_Pooling
    pooling_config = read_json(path / pooling_dir / "config.json")
    pooling = None
    if pooling_config.get("pooling_mode_mean_tokens"):
        pooling = "mean"
    elif pooling_config.get("pooling_mode_cls_token"):
        pooling = "cls"
    max_seq = read_json(path / "sentence_bert_config.json").get("max_seq_length")
    prompts = read_json(path / "config_sentence_transformers.json").get("prompts")
    prefix = prompts.get("query") if isinstance(prompts, dict) else None
    return (
        pooling,
        max_seq if isinstance(max_seq, int) and max_seq > 0 else None,
        prefix if isinstance(prefix, str) else None,
    )


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


# --- public API ------------------------------------------------------------------------


def resolve_model(
    name: str | None = None,
    *,
    env: Env | None = None,
    revision: str | None = None,
    download: bool = True,
    progress: bool = True,
    hub_first: bool = False,
) -> ModelSettings:
    """Resolve a model name to runnable settings, downloading hub files when needed.

    ``hub_first`` (``thatch model pull``): a short name means the hub model even when an
    import with that short name exists.
    """
    env = os.environ if env is None else env
    target = parse_name(name if name is not None else configured_model(env), env, revision)
    if target == "mock":
        return mock_settings()
    if isinstance(target, Path):
        return settings_from_dir(target, source="local dir")
    assert isinstance(target, HubRef)
    snapshot = cached_snapshot(target, env)
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
        error.fix = unavailable_fix(target.repo_id, env, hub=False)
        raise error
    if not download:
        raise ModelError(
            f"model {target.repo_id} needs download", fix=unavailable_fix(target.repo_id, env)
        )
    from thatch.embedder.models.hub_download import download_snapshot

    try:
        snapshot = download_snapshot(target, env=env, progress=progress)
    except ModelUnavailable as error:
        error.fix = error.fix or unavailable_fix(target.repo_id, env, hub=False)
        raise
    return _hub_settings(target, snapshot, "downloaded")


def describe_model(
    name: str | None = None, *, env: Env | None = None, revision: str | None = None
) -> ModelSettings:
    """Resolution without network or loading; a hub model not yet cached says so."""
    env = os.environ if env is None else env
    target = parse_name(name if name is not None else configured_model(env), env, revision)
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
    name: str | None = None, *, revision: str | None = None, env: Env | None = None
) -> ModelSettings:
    """Make sure a model's files are on disk (downloading with a progress bar if needed)."""
    return resolve_model(
        name, env=env, revision=revision, download=True, progress=True, hub_first=True
    )


def create_encoder(settings: ModelSettings, *, threads: int | None = None) -> Encoder:
    """The runtime for resolved settings: MockEncoder for mock, else OnnxEncoder."""
    if settings.model_id == "mock" and settings.onnx_path is None:
        from thatch.embedder.models.mock import MockEncoder

        return MockEncoder(settings)
    from thatch.embedder.models.runtime import OnnxEncoder

    return OnnxEncoder(settings, threads=threads)


def with_onnx(settings: ModelSettings, onnx: str) -> ModelSettings:
    """The same model run from another ONNX file of its directory (e.g. the int8 one)."""
    if settings.path is None or not (settings.path / onnx).is_file():
        raise ModelError(f"model {settings.model_id} has no {onnx}")
    path = settings.path / onnx
    return replace(
        settings,
        onnx_path=path,
        sha256=sha256_file(path),
        quantized="quantized" in onnx or "int8" in onnx,
    )
