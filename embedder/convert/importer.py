"""``thatch model import``: a sentence-transformers BERT checkpoint -> a servable model dir.

No PyTorch and no ``safetensors`` package: weights are read with numpy, the graph is built
with the ``onnx`` helper API, checked against a numpy forward pass, optionally quantized to
int8 with onnxruntime, and only then moved into place (docs/embedder.md §import). Everything
is built in a temporary sibling of the output directory and renamed at the end, so a
failed import never leaves a half-written model behind (and the next import removes what
a killed one left: build_dirs.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from tokenizers import Encoding, Tokenizer

from thatch.common.environment import expand_user, models_dir
from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.model_names import ADAPTED, HUB_ID, check_model_id
from thatch.embedder.convert import build_dirs
from thatch.embedder.convert import quantize as bert_quantize
from thatch.embedder.convert import verify as bert_verify
from thatch.embedder.convert.adapter import Adapter, apply_adapter, load_adapter
from thatch.embedder.convert.onnx_graph import build_bert_onnx
from thatch.embedder.convert.safetensors_io import read_safetensors
from thatch.embedder.convert.weights import BertConfig, canonical_weights
from thatch.embedder.convert.wordpiece import build_wordpiece_tokenizer
from thatch.embedder.models import known_answers

__all__ = ["ImportSettings", "default_model_id", "import_checkpoint"]

FP32_ONNX = "onnx/model.onnx"
INT8_ONNX = "onnx/model_quantized.onnx"
OPTIONAL_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
)
POOLINGS = ("mean", "cls")


@dataclass(frozen=True)
class ImportSettings:
    model_id: str
    pooling: str
    max_tokens: int
    query_prefix: str
    model_id_origin: str = "--model-id"


def load_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, {} when absent; ModelError when malformed."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a JSON object")
    return data


def _noop(_message: str) -> None:
    pass


def read_bert_config(src: Path) -> tuple[dict[str, Any], BertConfig]:
    path = src / "config.json"
    if not path.is_file():
        raise ModelError(
            f"no config.json in {src}: it is not a sentence-transformers checkpoint",
            "pass the checkpoint's own directory (it holds config.json and "
            "model.safetensors); thatch doctor names the packaged one when installed",
        )
    config = load_json_object(path)
    model_type = config.get("model_type")
    if model_type != "bert":
        raise ModelError(f"only BERT checkpoints with GELU are supported (model_type={model_type})")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ModelError(
            "only BERT checkpoints with GELU are supported "
            f"(model_type=bert, hidden_act={config.get('hidden_act')})"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError(
            "only BERT checkpoints with absolute position embeddings are supported "
            f"(position_embedding_type={config.get('position_embedding_type')})"
        )
    return config, BertConfig.from_json(config)


def load_tokenizer(src: Path) -> tuple[Tokenizer, bool]:
    """The checkpoint's tokenizer and whether it had to be built from vocab.txt."""
    tokenizer_json = src / "tokenizer.json"
    if tokenizer_json.is_file():
        try:
            return Tokenizer.from_file(str(tokenizer_json)), False
        except Exception as error:  # tokenizers raises a bare Exception on malformed files
            raise ModelError(f"{tokenizer_json} cannot be loaded: {error}") from None
    if (src / "vocab.txt").is_file():
        tokenizer_config = {
            **load_json_object(src / "special_tokens_map.json"),
            **load_json_object(src / "tokenizer_config.json"),
        }
        return build_wordpiece_tokenizer(src / "vocab.txt", tokenizer_config), True
    raise ModelError(f"no tokenizer.json or vocab.txt in {src}")


# sentence-transformers writes its usage line into the model card it saves:
# SentenceTransformer('org/name') (or "org/name").
_CARD_USAGE = re.compile(r"""SentenceTransformer\(\s*['"](""" + HUB_ID.pattern + r""")['"]""")


def default_model_id(src: Path, config: Mapping[str, Any]) -> tuple[str, str]:
    """The id a checkpoint names itself by, and where that came from.

    A sentence-transformers checkpoint's config.json ``_name_or_path`` is the model it was
    fine-tuned from (nreimers/MiniLM-L6-H384-uncased for all-MiniLM-L6-v2), so for one
    (modules.json present) the id comes from its own metadata: the hub-cache path it sits
    in, else the model card's usage line. ``_name_or_path`` serves only plain BERT
    checkpoints; the directory's name is the last resort.
    """
    parts = src.parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--") :].replace("--", "/", 1), "the hub cache path"
    is_sentence_transformers = (src / "modules.json").is_file()
    if is_sentence_transformers:
        try:
            card = (src / "README.md").read_text(encoding="utf-8", errors="replace")
        except OSError:
            card = ""
        usage = _CARD_USAGE.search(card)
        if usage is not None:
            return usage.group(1), "README.md, the sentence-transformers model card"
    else:
        name = config.get("_name_or_path")
        if isinstance(name, str) and HUB_ID.fullmatch(name):
            return name, "config.json's _name_or_path"
    return src.name, "the directory name"


def resolve_settings(
    src: Path,
    config: Mapping[str, Any],
    bert: BertConfig,
    *,
    model_id: str | None,
    pooling: str | None,
    max_tokens: int | None,
    query_prefix: str | None,
) -> ImportSettings:
    """Options first, then the checkpoint's sentence-transformers files, then defaults."""
    if pooling is None:
        pooling_config = load_json_object(src / "1_Pooling" / "config.json")
        if pooling_config.get("pooling_mode_mean_tokens"):
            pooling = "mean"
        elif pooling_config.get("pooling_mode_cls_token"):
            pooling = "cls"
        elif pooling_config:
            raise ModelError(
                f"{src / '1_Pooling' / 'config.json'} uses a pooling mode thatch does not "
                "support; choose mean or cls pooling explicitly"
            )
        else:
            pooling = "mean"
    if pooling not in POOLINGS:
        raise ModelError(f"pooling must be mean or cls, not {pooling!r}")
    if max_tokens is None:
        st_length = load_json_object(src / "sentence_bert_config.json").get("max_seq_length")
        if isinstance(st_length, int) and st_length > 0:
            max_tokens = min(st_length, bert.max_positions)
        else:
            tokenizer_limit = load_json_object(src / "tokenizer_config.json").get(
                "model_max_length"
            )
            limits = [512, bert.max_positions]
            if isinstance(tokenizer_limit, int | float) and tokenizer_limit > 0:
                limits.append(int(min(tokenizer_limit, 1 << 30)))
            max_tokens = min(limits)
    if not 2 <= max_tokens <= bert.max_positions:
        raise ModelError(
            f"max tokens must be between 2 and the model's max_position_embeddings "
            f"({bert.max_positions}), not {max_tokens}"
        )
    if query_prefix is None:
        prompts = load_json_object(src / "config_sentence_transformers.json").get("prompts")
        prefix = prompts.get("query") if isinstance(prompts, dict) else None
        query_prefix = prefix if isinstance(prefix, str) else ""
    origin = "--model-id"
    if not model_id:
        model_id, origin = default_model_id(src, config)
    return ImportSettings(
        model_id=model_id,
        pooling=pooling,
        max_tokens=max_tokens,
        query_prefix=query_prefix,
        model_id_origin=origin,
    )


def _check_adapted_id(model_id: str, adapter: Adapter | None) -> None:
    """An id thatch builds (``ADAPTED``) is only ever the checkpoint with its pinned adapter:
    anything else under it would put other vectors beside the ones stores hold for it."""
    entry = ADAPTED.get(model_id)
    pinned = entry is not None and entry.model_id == model_id  # the id, not the short name
    if entry is not None and pinned and (adapter is None or adapter.sha256 != entry.adapter_sha256):
        raise ModelError(
            f"model id {model_id} is thatch's build of {entry.base} with its shipped "
            f"adapter {entry.adapter}; give another --model-id",
            fix=f"to build it from a copy of {entry.base} (DIR): "
            f"thatch model import DIR --adapter {entry.adapter}",
        )


def _check_replaceable(out: Path) -> None:
    """Only an empty directory or an earlier import may be replaced: never user files. Checked
    before the weights are read, so a wrong --out fails at once."""
    if not out.exists():
        for parent in out.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise ModelError(
                        f"cannot write {out}: {parent} is not a directory",
                        "give an --out inside a directory",
                    )
                return
        return
    if out.is_dir() and (not any(out.iterdir()) or (out / "thatch_model.json").is_file()):
        return
    raise ModelError(
        f"{out} already exists and is not a thatch model directory; choose another --out"
    )


def quantize_int8(fp32: Path, int8: Path, tokenizer: Tokenizer, max_tokens: int) -> None:
    """Write the int8 model: smoothed, per-token activation scales (see bert_quantize)."""
    # Not onnxruntime's quantize_dynamic: its one activation scale per tensor leaves "x" at
    # cosine 0.987 with sentence-transformers on all-MiniLM-L6-v2 (this: 0.996) and makes a
    # vector depend on its batch companions; speed is about the same.
    try:
        bert_quantize.quantize_file(
            fp32, int8, bert_quantize.calibration_feeds(tokenizer, max_tokens)
        )
    except Exception as error:  # onnx/onnxruntime raise assorted internal errors
        raise ModelError(f"int8 quantization failed: {error}") from None


def _copy_support_files(src: Path, build: Path, tokenizer: Tokenizer, built: bool) -> None:
    shutil.copyfile(src / "config.json", build / "config.json")
    if built:
        tokenizer.save(str(build / "tokenizer.json"))
    else:
        shutil.copyfile(src / "tokenizer.json", build / "tokenizer.json")
    for name in OPTIONAL_FILES:
        if (src / name).is_file():
            (build / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, build / name)


def _install(build: Path, out: Path) -> None:
    """Move the finished build to ``out``, replacing an earlier import in one rename."""
    _check_replaceable(out)
    if not out.exists():
        build.rename(out)
        return
    old = out.parent / f"{build_dirs.REPLACED_PREFIX}{secrets.token_hex(4)}"
    # Held through the renames, so a sweeping import never takes the earlier import for a
    # dead one's leftover while it is still the one to put back.
    held = build_dirs.hold_existing(out)
    try:
        out.rename(old)
        try:
            build.rename(out)
        except OSError:
            old.rename(out)  # put the earlier import back rather than leave nothing
            raise
        if held is None:
            old.unlink()  # the link moved aside, never what it points to
        else:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if held is not None:
            os.close(held)


def import_checkpoint(
    src: Path,
    out: Path | None = None,
    *,
    model_id: str | None = None,
    quantize: bool = True,
    pooling: str | None = None,
    max_tokens: int | None = None,
    query_prefix: str | None = None,
    adapter: str | None = None,
    env: Mapping[str, str] | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Convert the BERT checkpoint in ``src`` into a servable model directory; return it.
    ``adapter`` (a shipped adapter's name or a file) is merged into the weights first."""
    env = os.environ if env is None else env
    log = log or _noop
    src = expand_user(str(src), env).resolve()
    if not src.is_dir():
        raise ModelError(
            f"{src} is not a directory",
            "give the checkpoint's directory (config.json, model.safetensors, and "
            "tokenizer.json or vocab.txt)",
        )
    config, bert = read_bert_config(src)
    weights_path = src / "model.safetensors"
    if not weights_path.is_file():
        raise ModelError(
            f"no model.safetensors in {src} (PyTorch .bin weights are not supported; "
            "convert them to safetensors first)"
        )
    tokenizer, built_tokenizer = load_tokenizer(src)
    if tokenizer.get_vocab_size(with_added_tokens=True) > bert.vocab_size:
        raise ModelError(
            f"the tokenizer in {src} has {tokenizer.get_vocab_size(with_added_tokens=True)} "
            f"tokens but config.json's vocab_size is {bert.vocab_size}"
        )
    merging: Adapter | None = load_adapter(adapter, env) if adapter is not None else None
    chosen = resolve_settings(
        src,
        config,
        bert,
        model_id=model_id or (merging.model_id if merging else None),
        pooling=pooling,
        max_tokens=max_tokens,
        query_prefix=query_prefix,
    )
    check_model_id(chosen.model_id)
    _check_adapted_id(chosen.model_id, merging)
    if merging is not None and not model_id:
        chosen = replace(chosen, model_id_origin=f"adapter {merging.name}")
    if chosen.model_id_origin != "--model-id":
        log(f"model id {chosen.model_id} (from {chosen.model_id_origin}; --model-id sets another)")
    out = (
        expand_user(str(out), env)
        if out is not None
        else models_dir(env) / chosen.model_id.replace("/", "__")
    ).absolute()
    _check_replaceable(out)

    log(f"reading {weights_path}")
    weights = canonical_weights(read_safetensors(weights_path), bert, weights_path)
    if merging is not None:
        log(f"merging adapter {merging.name} ({merging.path})")
        weights = apply_adapter(weights, merging, bert, src)
    out.parent.mkdir(parents=True, exist_ok=True)
    build_dirs.sweep_abandoned(out.parent, log)
    # Not named after ``out``: a name near the file system's limit would then fail on a
    # directory the user never gave.
    build, held = build_dirs.claim_build_dir(out.parent)
    try:
        (build / "onnx").mkdir(parents=True)
        log(f"building the ONNX graph ({bert.layers} layers, hidden size {bert.hidden})")
        onnx.save_model(build_bert_onnx(weights, bert, name=chosen.model_id), build / FP32_ONNX)
        samples = bert_verify.encode_samples(tokenizer, chosen.max_tokens)
        fp32_vectors = bert_verify.run_onnx(build / FP32_ONNX, samples, chosen.pooling)
        reference = bert_verify.reference_vectors(weights, bert, samples, chosen.pooling)
        del weights
        diff = bert_verify.check_fp32(fp32_vectors, reference)
        log(f"fp32 graph matches the numpy reference (max difference {diff:.1e})")
        if quantize:
            quantize = _add_int8(build, tokenizer, chosen, samples, fp32_vectors, log)
        _copy_support_files(src, build, tokenizer, built_tokenizer)
        _write_model_json(build, chosen, bert, src, quantize, merging)
        _install(build, out)
    finally:
        shutil.rmtree(build, ignore_errors=True)
        os.close(held)
    log(f"imported {chosen.model_id} into {out}")
    return out


def _add_int8(
    build: Path,
    tokenizer: Tokenizer,
    chosen: ImportSettings,
    samples: list[Encoding],
    fp32_samples: npt.NDArray[np.float32],
    log: Callable[[str], None],
) -> bool:
    """Write the int8 model and its known answers; False (and no int8 file) when it is wrong
    on this CPU."""
    log("quantizing weights to int8")
    quantize_int8(build / FP32_ONNX, build / INT8_ONNX, tokenizer, chosen.max_tokens)
    known = bert_verify.encode_samples(tokenizer, chosen.max_tokens, known_answers.TEXTS)
    fp32_known = bert_verify.run_onnx(build / FP32_ONNX, known, chosen.pooling)
    int8_vectors = bert_verify.run_onnx(build / INT8_ONNX, samples + known, chosen.pooling)
    agrees, cosine = bert_verify.int8_agrees(int8_vectors, np.vstack([fp32_samples, fp32_known]))
    if not agrees:
        # int8 kernels differ per CPU: wrong vectors must never reach a shared database,
        # and a working fp32 model beats a failed import.
        log(
            f"int8 disagrees with fp32 on this CPU (lowest cosine {cosine:.4f}, "
            f"min {bert_verify.INT8_MIN_COSINE}): using the fp32 model"
        )
        (build / INT8_ONNX).unlink()
        return False
    known_answers.write(build, fp32_known, FP32_ONNX)
    log(f"int8 model agrees with fp32 (lowest cosine {cosine:.4f})")
    return True


def _write_model_json(
    build: Path,
    chosen: ImportSettings,
    bert: BertConfig,
    src: Path,
    quantized: bool,
    adapter: Adapter | None,
) -> None:
    now = datetime.now(UTC)
    record = {
        "model_id": chosen.model_id,
        "pooling": chosen.pooling,
        "max_tokens": chosen.max_tokens,
        "query_prefix": chosen.query_prefix,
        "onnx": INT8_ONNX if quantized else FP32_ONNX,
        "quantized": quantized,
        "dim": bert.hidden,
        "source": str(src),
        **({"adapter": str(adapter.path), "adapter_sha256": adapter.sha256} if adapter else {}),
        "created_at": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
    }
    (build / "thatch_model.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
