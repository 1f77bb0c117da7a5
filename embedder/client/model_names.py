"""What a model name means, from local files only: the registry of known models, hub
references, the hub cache's layout, imported models, and the id a name resolves to.

Frontends name the model whose vectors they hold (``model_id_for``) exactly as the embedder
resolves it, without the model runtime: standard library only, no network.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from thatch.common.control_chars import escape_controls
from thatch.common.environment import Env, cache_home, env_get, expand_user
from thatch.embedder.client.errors import ModelError, ModelNotBuilt
from thatch.embedder.client.imported import (
    ImportedModel,
    declared_id,
    find_by_short_name,
    find_imported,
    is_import,
)
from thatch.embedder.client.settings import configured_model

__all__ = [
    "ADAPTED",
    "DEFAULT_ENDPOINT",
    "HUB_ID",
    "MODEL_ID_MAX",
    "ONNX_CANDIDATES",
    "REGISTRY",
    "REQUIRED_FILES",
    "SHORT_NAMES",
    "AdaptedEntry",
    "HubRef",
    "RegistryEntry",
    "cached_snapshot",
    "check_model_id",
    "choose_onnx",
    "directory_model_id",
    "hub_cache_dir",
    "hub_endpoint",
    "hub_offline",
    "imported_for",
    "model_id_for",
    "not_built_error",
    "parse_name",
    "read_json",
    "shown_name",
    "snapshot_onnx",
    "stable_name",
]


@dataclass(frozen=True)
class RegistryEntry:
    """A model thatch knows by id: where its ONNX file is and how to pool (docs/embedder.md
    §registry)."""

    model_id: str
    short_name: str
    onnx: str
    pooling: str
    max_tokens: int
    query_prefix: str
    quantized: bool
    dim: int  # its config.json's hidden_size: shown before the files are here


_ENTRIES = (
    RegistryEntry(
        "Xenova/bge-small-en-v1.5",
        "bge-small-en-v1.5",
        "onnx/model_quantized.onnx",
        "mean",
        512,
        "Represent this sentence for searching relevant passages: ",
        True,
        384,
    ),
    RegistryEntry(
        "Xenova/all-MiniLM-L6-v2",
        "all-MiniLM-L6-v2",
        "onnx/model_quantized.onnx",
        "mean",
        256,
        "",
        True,
        384,
    ),
    RegistryEntry(
        "sentence-transformers/all-MiniLM-L6-v2",
        "",
        "onnx/model.onnx",
        "mean",
        256,
        "",
        False,
        384,
    ),
)


REGISTRY: Mapping[str, RegistryEntry] = MappingProxyType({e.model_id: e for e in _ENTRIES})


SHORT_NAMES: Mapping[str, str] = MappingProxyType(
    {e.short_name: e.model_id for e in _ENTRIES if e.short_name}
)


@dataclass(frozen=True)
class AdaptedEntry:
    """A model thatch builds on this machine: a hub checkpoint with one of thatch's shipped
    adapters merged in (``thatch model pull`` downloads and imports it; docs/embedder.md
    §adapters)."""

    model_id: str
    short_name: str
    base: str  # the hub checkpoint the adapter was trained on
    adapter: str  # the shipped adapter's name
    # The adapter file's sha256: a retrained adapter is another model (new id, new entry),
    # never new vectors under an id stores already hold (tests hold file and table equal).
    adapter_sha256: str


_ADAPTED = (
    AdaptedEntry(
        "thatch/all-MiniLM-L6-v2-code",
        "all-MiniLM-L6-v2-code",
        "sentence-transformers/all-MiniLM-L6-v2",
        "all-MiniLM-L6-v2-code",
        "866402a5a3e4adf44fa4927201f8a537ca85ffe2838987f3df51a9fc39b38070",
    ),
)


ADAPTED: Mapping[str, AdaptedEntry] = MappingProxyType(
    {name: e for e in _ADAPTED for name in (e.model_id, e.short_name)}
)


def not_built_error(adapted: AdaptedEntry) -> ModelNotBuilt:
    return ModelNotBuilt(
        f"model {adapted.model_id} is not on this machine yet (thatch builds it from "
        f"{adapted.base} and its shipped adapter)",
        adapted.model_id,
        adapted.short_name,
    )


REQUIRED_FILES = ("config.json", "tokenizer.json")


ONNX_CANDIDATES = ("onnx/model_quantized.onnx", "onnx/model.onnx", "model.onnx")


DEFAULT_ENDPOINT = "https://huggingface.co"


# A hub id (org/name) in the characters the hub allows at each end: the names resolution
# takes for an id (step 6) and `thatch model use` saves.
HUB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*/[A-Za-z0-9_][A-Za-z0-9._-]*")
# What an import may call itself: a hub id or a bare name (found as a short name). Both
# become a directory name (org__name) and the id rows carry, so nothing else is let in.
_BARE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
MODEL_ID_MAX = 200


def _usable_id(model_id: str) -> bool:
    return len(model_id) <= MODEL_ID_MAX and bool(
        HUB_ID.fullmatch(model_id) or _BARE_NAME.fullmatch(model_id)
    )


def check_model_id(model_id: str) -> None:
    """ModelError unless ``model_id`` is one thatch can resolve again and store as a name."""
    if "/" not in model_id and (model_id in ("mock", *SHORT_NAMES) or model_id in ADAPTED):
        # resolution reaches these before any import (steps 1, 2 and 5)
        raise ModelError(
            f"model id {model_id} is a name thatch already gives a model",
            fix="pass --model-id org/name",
        )
    if not _usable_id(model_id):
        shown = model_id if len(model_id) <= 60 else model_id[:60] + "…"
        raise ModelError(
            f"model id {shown!r} is not usable: give org/name or a name, of letters, "
            "digits, '.', '_' and '-', each part starting with a letter, digit or '_', "
            f"at most {MODEL_ID_MAX} characters",
            fix="pass --model-id org/name",
        )


_COMMIT = re.compile(r"[0-9a-f]{40}")


_TRUE = {"1", "ON", "YES", "TRUE"}


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None  # None = the default branch
    short_name: str | None = None  # the registry short name it was given as, if any


def hub_cache_dir(env: Env) -> Path:
    """The hub cache as huggingface_hub computes it: HF_HUB_CACHE, else HF_HOME/hub."""
    explicit = env_get(env, "HF_HUB_CACHE") or env_get(env, "HUGGINGFACE_HUB_CACHE")
    if explicit:
        return expand_user(os.path.expandvars(explicit), env)
    hf_home = env_get(env, "HF_HOME")
    if hf_home:
        return expand_user(os.path.expandvars(hf_home), env) / "hub"
    return cache_home(env) / "huggingface" / "hub"


def hub_endpoint(env: Env) -> str:
    return (env_get(env, "HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_offline(env: Env) -> bool:
    value = env_get(env, "HF_HUB_OFFLINE") or env_get(env, "TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


MODEL_NAME_MAX = 4096  # a path longer than PATH_MAX names no model


def _probe(check: Callable[[], bool], path: Path) -> bool:
    """A path check that a part past the file system's limit answers False (such a path
    holds no model); other errors (permissions) are reported as they are."""
    try:
        return check()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return False
        raise ModelError(f"cannot read {shown_name(str(path))}: {error.strerror}") from None


def shown_name(text: str) -> str:
    """A name as an error quotes it: one line, whatever it holds (its control characters
    escaped, nothing else: a path with a non-ASCII space is shown as it is)."""
    return escape_controls(text)


def _check_revision(revision: str | None) -> None:
    """A hub revision is a branch, tag or commit: it names a file under the cache's
    ``refs/``, so ``..`` parts, a leading ``/`` or control characters would lead outside."""
    if not revision:
        return
    parts = revision.split("/")
    if (
        len(revision) > 255
        or any(part in ("", ".", "..") for part in parts)
        or any(ord(c) < 0x20 or c in "\\\x7f" for c in revision)
    ):
        raise ModelError(
            f'revision "{shown_name(revision)}" is not a branch, tag or commit of the hub '
            "(no empty, . or .. parts, no leading /, no control characters)"
        )


def parse_name(
    name: str,
    env: Env,
    revision: str | None = None,
    imports: Sequence[ImportedModel] | None = None,
) -> str | Path | HubRef:
    """Classify a model name (docs/embedder.md §resolution order): "mock", a local directory, or a
    hub ref. ``imports``: imported_models(env), from a caller classifying many names."""
    name = name.strip()
    if not name:
        raise ModelError("model name is empty")
    if len(name) > MODEL_NAME_MAX:
        raise ModelError(f"model name is {len(name)} characters long: at most {MODEL_NAME_MAX}")
    if name == "mock":
        return "mock"
    base, _, at_revision = name.partition("@")
    _check_revision(revision or at_revision)
    if base in SHORT_NAMES:
        return HubRef(SHORT_NAMES[base], revision or at_revision or None, base)
    path = expand_user(name, env)
    if _probe(path.is_dir, path):
        return path.absolute()
    if "/" not in name and "@" not in name and not name.startswith(("~", ".")):
        imported = find_by_short_name(env, name, imports)
        if imported is not None:
            return imported.path
    adapted = ADAPTED.get(base)
    if adapted is not None:
        if at_revision:
            raise ModelError(
                f"model {adapted.model_id} is built on this machine and has no revisions: "
                f"name it without @{at_revision}"
            )
        if find_imported(env, adapted.model_id, imports) is None:
            raise not_built_error(adapted)
    if HUB_ID.fullmatch(base) and not name.startswith(("/", "~", ".")):
        if "@" in name and not at_revision:
            raise ModelError(f'model "{shown_name(name)}" has an empty revision after @')
        return HubRef(base, revision or at_revision or None)
    if _probe(path.exists, path):
        raise ModelError(f"model path {shown_name(str(path))} is not a directory")
    if name.startswith(("/", "~", ".")) or name.count("/") > 1:
        raise ModelError(f"model directory {shown_name(str(path))} does not exist")
    raise ModelError(
        f'unknown model "{shown_name(name)}": expected mock, a short name '
        f"({', '.join(sorted([*SHORT_NAMES, *(e.short_name for e in _ADAPTED)]))}), "
        "an imported model's id or short name, "
        "a model directory or a hub id org/name[@revision]"
    )


def stable_name(env: Env, directory: Path) -> str:
    """How a config file or a printed command names the model at ``directory``: its id when
    resolution by that id finds this very directory from any working directory (an import
    in thatch's model cache under an org/name id), else the directory itself."""
    declared = declared_id(directory)
    if declared is not None and HUB_ID.fullmatch(declared) and is_import(env, directory):
        return declared
    return str(directory.absolute())


def directory_model_id(path: Path, meta: Mapping[str, Any]) -> str:
    """thatch_model.json's model_id, else org/name for a hub-cache snapshot, else local:<name>."""
    declared = meta.get("model_id")
    if isinstance(declared, str) and _usable_id(declared.strip().removeprefix("local:")):
        # Others are not used: an id is printed on status lines and stored on every row,
        # and one with a line break forged a "health: SERVING" line of its own.
        return declared.strip()
    parts = path.parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--") :].replace("--", "/", 1)
    return f"local:{path.name}"


def model_id_for(name: str | None = None, *, env: Env | None = None) -> str:
    """The model id ``name`` (default THATCH_MODEL) resolves to, cheaply: no network, no
    loading, no hashing. Used where a frontend must name the active model without asking
    the embedder (hygiene at session start, reembed --dry-run)."""
    env = os.environ if env is None else env
    try:
        target = parse_name(name if name is not None else configured_model(env), env)
    except ModelNotBuilt as error:
        return error.model_id
    if isinstance(target, HubRef):
        local = imported_for(target, env, cached=cached_snapshot(target, env) is not None)
        if local is None:
            return target.repo_id
        return directory_model_id(local, read_json(local / "thatch_model.json"))
    if isinstance(target, Path):
        return directory_model_id(target, read_json(target / "thatch_model.json"))
    return target


JSON_MAX_BYTES = 16 * 1024 * 1024


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from an optional file: {} when absent, ModelError when malformed."""
    if not path.is_file():
        return {}
    try:
        # A model's JSON files are kilobytes: a 300 MB config.json from a hub repo was read
        # whole, 650 MB of memory for `thatch model info`.
        size = path.stat().st_size
        if size > JSON_MAX_BYTES:
            raise ModelError(f"cannot read {path}: {size:,} bytes (a model's JSON file is small)")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a JSON object")
    return data


def choose_onnx(
    meta: Mapping[str, Any], entry: RegistryEntry | None, present: set[str]
) -> str | None:
    """The ONNX file: thatch_model.json's, else the registry's, else the first candidate present."""
    declared = meta.get("onnx")
    if isinstance(declared, str) and declared:
        return declared
    if entry is not None:
        return entry.onnx
    return next((name for name in ONNX_CANDIDATES if name in present), None)


def snapshot_place(ref: HubRef, env: Env) -> Path | None:
    """Where ref's snapshot lies in the hub cache (its revision's commit), whatever it holds;
    None when the cache has no commit for that revision."""
    storage = hub_cache_dir(env) / ("models--" + ref.repo_id.replace("/", "--"))
    revision = ref.revision or "main"
    if _COMMIT.fullmatch(revision):
        return storage / "snapshots" / revision
    try:
        commit = (storage / "refs" / revision).read_text(encoding="utf-8").strip()
    except (OSError, ValueError):  # unreadable, or not text: names no commit
        return None
    if not _COMMIT.fullmatch(commit):  # a path ("../x") would lead outside the snapshots
        return None
    return storage / "snapshots" / commit


def cached_snapshot(ref: HubRef, env: Env) -> Path | None:
    """The cached snapshot directory for ref when it holds every required file, else None."""
    snapshot = snapshot_place(ref, env)
    if snapshot is None:
        return None
    if not all((snapshot / name).is_file() for name in REQUIRED_FILES):
        return None
    onnx = snapshot_onnx(snapshot, ref)
    if onnx is None or not (snapshot / onnx).is_file():
        return None
    return snapshot


def snapshot_onnx(snapshot: Path, ref: HubRef) -> str | None:
    """The ONNX file a cached snapshot serves (its metadata, the registry, what is there)."""
    meta = read_json(snapshot / "thatch_model.json")
    present = {name for name in ONNX_CANDIDATES if (snapshot / name).is_file()}
    return choose_onnx(meta, REGISTRY.get(ref.repo_id), present)


def imported_for(
    ref: HubRef,
    env: Env,
    *,
    cached: bool,
    hub_first: bool = False,
    imports: Sequence[ImportedModel] | None = None,
) -> Path | None:
    """An import standing for ``ref``: by its id (an explicit import wins over the hub
    cache), else, for a registry short name whose hub model is not cached, the one import
    with that short name. None for a pinned revision: imports have none."""
    if ref.revision is not None:
        return None
    by_id = find_imported(env, ref.repo_id, imports)
    if by_id is not None:
        return by_id
    if ref.short_name is None or cached or hub_first:
        return None
    by_short = find_by_short_name(env, ref.short_name, imports)
    return by_short.path if by_short is not None else None
