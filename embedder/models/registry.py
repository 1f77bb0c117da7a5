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
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thatch.embedder.client.errors import ModelError, ModelUnavailable
from thatch.embedder.client.model_names import (
    ONNX_CANDIDATES,
    REGISTRY,
    REQUIRED_FILES,
    RegistryEntry,
    choose_onnx,
    directory_model_id,
    read_json,
)
from thatch.embedder.encoder import ModelSettings

if TYPE_CHECKING:
    pass

__all__ = [
    "OPTIONAL_FILES",
    "offline_error",
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
    path: Path,
    *,
    source: str,
    model_id: str | None = None,
    revision: str = "",
    checksum: bool = True,
) -> ModelSettings:
    """Read a model directory: required files, settings in priority order, ONNX sha256
    (left "" without ``checksum``: hashing reads the whole ONNX file, tens of MB)."""
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
        sha256=sha256_file(path / onnx) if checksum else "",
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
