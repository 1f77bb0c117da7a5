"""Adapters: what training changed in a BERT checkpoint, small enough to ship with thatch.

An adapter is a safetensors file holding, for dense weights ``W``, two low-rank factors
(``<name>.lora_a`` r×in, ``<name>.lora_b`` out×r: the trained weight is W + B·A) and, for
biases and layer norms, their trained values under their own names. Its metadata names the
checkpoint it was trained on (``base``: sha256 over that checkpoint's encoder weights by
name, as little-endian float32, the same recipe as ``bench/finetune_encoder.py``) and the
model id the result answers to. ``thatch model import SRC --adapter NAME|FILE`` merges one
into SRC's weights before the graph is built, so the result is an ordinary import: same
graph, same size, same speed.

Shipped adapters live beside this module (``adapters/<name>.safetensors``);
docs/embedder.md §adapters says how each was trained and what it measured.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from thatch.common.environment import Env, expand_user
from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.model_names import HUB_ID
from thatch.embedder.convert.safetensors_io import read_metadata, read_safetensors
from thatch.embedder.convert.weights import BertConfig, Weights
from thatch.embedder.models.registry import sha256_file

__all__ = [
    "Adapter",
    "apply_adapter",
    "base_fingerprint",
    "load_adapter",
    "shipped_adapters",
]

SHIPPED_DIR = Path(__file__).with_name("adapters")
FORMAT = "thatch-adapter-1"


@dataclass(frozen=True)
class Adapter:
    name: str
    path: Path
    base: str  # fingerprint of the checkpoint it was trained on
    model_id: str  # what the merged model answers to
    base_hint: str  # where that checkpoint can be had, for the error when SRC is another
    sha256: str  # of the file: an import records it, so a changed adapter is seen


def shipped_adapters() -> dict[str, Path]:
    """The adapters installed with thatch, by name."""
    return {path.stem: path for path in sorted(SHIPPED_DIR.glob("*.safetensors"))}


def _metadata(path: Path) -> dict[str, str]:
    try:
        return read_metadata(path)
    except (ModelError, OSError):
        return {}  # not safetensors at all: load_adapter says it is no adapter


def load_adapter(name_or_file: str, env: Env) -> Adapter:
    """A shipped adapter by name, or an adapter file; ModelError naming the choices else."""
    shipped = shipped_adapters()
    path = shipped.get(name_or_file) or expand_user(name_or_file, env).absolute()
    try:
        found = path.is_file()
    except OSError:  # a name past the system's limits
        found = False
    if not found:
        names = ", ".join(shipped) or "none"
        raise ModelError(
            f"no adapter {name_or_file!r} (shipped adapters: {names}; or a file)",
            f"pass a shipped adapter's name ({names}) or the path of an adapter file",
        )
    meta = _metadata(path)
    if meta.get("format") != FORMAT or not meta.get("base") or not meta.get("model_id"):
        raise ModelError(
            f"{path} is not a thatch adapter (its safetensors metadata lacks format "
            f"{FORMAT}, base or model_id)",
            "pass a shipped adapter's name, or a file bench/finetune_encoder.py wrote",
        )
    if not HUB_ID.fullmatch(meta["model_id"]):
        raise ModelError(f"{path}: model_id {meta['model_id']!r} is not of the form org/name")
    try:
        digest = sha256_file(path)
    except OSError as error:
        raise ModelError(f"cannot read adapter {path}: {error.strerror or error}") from None
    return Adapter(
        path.stem, path, meta["base"], meta["model_id"], meta.get("base_hint", ""), digest
    )


def base_fingerprint(weights: Weights) -> str:
    """The recipe of bench/finetune_encoder.py's ``fingerprint`` (tests hold them equal)."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name], dtype="<f4").tobytes())
    return digest.hexdigest()


def apply_adapter(weights: Weights, adapter: Adapter, bert: BertConfig, src: Path) -> Weights:
    """``weights`` with the adapter merged in; ModelError when it was trained on another
    checkpoint or does not fit this one."""
    if base_fingerprint(weights) != adapter.base:
        hint = f": import {adapter.base_hint}" if adapter.base_hint else ""
        raise ModelError(
            f"adapter {adapter.name} was trained on another checkpoint than {src}{hint}"
        )
    shapes = bert.expected_shapes()
    tensors = read_safetensors(adapter.path)
    for name, value in tensors.items():
        if not np.issubdtype(value.dtype, np.floating) or not np.isfinite(value).all():
            raise ModelError(f"{adapter.path}: {name} is not all finite floating-point numbers")
        stem, _, part = name.rpartition(".")
        if part in ("lora_a", "lora_b") and stem in tensors:
            raise ModelError(f"{adapter.path}: {stem} is given both whole and as factors")
    merged = dict(weights)
    for name, value in tensors.items():
        stem, _, part = name.rpartition(".")
        if part in ("lora_a", "lora_b"):
            if part == "lora_b":
                if stem + ".lora_a" not in tensors:
                    raise ModelError(f"{adapter.path}: factors of {stem} do not fit {src}")
                continue
            a, b = value, tensors.get(stem + ".lora_b")
            shape = shapes.get(stem)
            if (b is None or shape is None or len(shape) != 2 or a.ndim != 2 or b.ndim != 2
                    or (b.shape[0], a.shape[1]) != shape or b.shape[1] != a.shape[0]):  # fmt: skip
                raise ModelError(f"{adapter.path}: factors of {stem} do not fit {src}")
            update = b.astype(np.float64) @ a.astype(np.float64)
            merged[stem] = (weights[stem].astype(np.float64) + update).astype(np.float32)
        elif shapes.get(name) == value.shape:
            merged[name] = np.asarray(value, dtype=np.float32)
        else:
            raise ModelError(f"{adapter.path}: {name} does not fit {src}")
    return merged
