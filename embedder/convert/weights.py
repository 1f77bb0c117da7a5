"""A BERT checkpoint's shape (from config.json) and its weights under canonical names.

Hugging Face saves ``BertModel`` weights as ``embeddings.…`` / ``encoder.layer.N.…`` and
task models (``BertForMaskedLM`` …) as ``bert.embeddings.…``; both are accepted. The pooler
and task heads are not part of the encoder output that sentence-transformers pools, so
they are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.errors import ModelError

__all__ = ["BertConfig", "Weights", "canonical_weights", "layer_weight"]

# float32 as read; the numpy reference widens the dense ones to float64.
Weights = dict[str, npt.NDArray[np.floating[Any]]]

_LAYER_NAMES = (
    "attention.self.query.weight",
    "attention.self.query.bias",
    "attention.self.key.weight",
    "attention.self.key.bias",
    "attention.self.value.weight",
    "attention.self.value.bias",
    "attention.output.dense.weight",
    "attention.output.dense.bias",
    "attention.output.LayerNorm.weight",
    "attention.output.LayerNorm.bias",
    "intermediate.dense.weight",
    "intermediate.dense.bias",
    "output.dense.weight",
    "output.dense.bias",
    "output.LayerNorm.weight",
    "output.LayerNorm.bias",
)


@dataclass(frozen=True)
class BertConfig:
    """The numbers that fix a BERT encoder's shape."""

    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_json(cls, config: Mapping[str, Any]) -> BertConfig:
        """Validate a config.json already known to be BERT with GELU."""
        try:
            parsed = cls(
                layers=_size(config, "num_hidden_layers"),
                hidden=_size(config, "hidden_size"),
                heads=_size(config, "num_attention_heads"),
                intermediate=_size(config, "intermediate_size"),
                vocab_size=_size(config, "vocab_size"),
                max_positions=_size(config, "max_position_embeddings", 512),
                type_vocab_size=_size(config, "type_vocab_size", 2),
                layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            )
        except KeyError as error:
            raise ModelError(f"config.json lacks {error.args[0]}") from None
        except (TypeError, ValueError) as error:
            raise ModelError(f"config.json has a malformed number: {error}") from None
        if parsed.hidden % parsed.heads:
            raise ModelError(
                f"config.json describes an impossible BERT (hidden_size {parsed.hidden}, "
                f"num_attention_heads {parsed.heads}, layers {parsed.layers})"
            )
        return parsed

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        h, i = self.hidden, self.intermediate
        shapes: dict[str, tuple[int, ...]] = {
            "embeddings.word_embeddings.weight": (self.vocab_size, h),
            "embeddings.position_embeddings.weight": (self.max_positions, h),
            "embeddings.token_type_embeddings.weight": (self.type_vocab_size, h),
            "embeddings.LayerNorm.weight": (h,),
            "embeddings.LayerNorm.bias": (h,),
        }
        per_layer = {
            "attention.self.query.weight": (h, h),
            "attention.self.key.weight": (h, h),
            "attention.self.value.weight": (h, h),
            "attention.output.dense.weight": (h, h),
            "intermediate.dense.weight": (i, h),
            "intermediate.dense.bias": (i,),
            "output.dense.weight": (h, i),
        }
        for n in range(self.layers):
            for suffix in _LAYER_NAMES:
                shapes[f"encoder.layer.{n}.{suffix}"] = per_layer.get(suffix, (h,))
        return shapes


# Far past any BERT's (BERT-large: 24 layers, 1024 wide, 30k words). A config's numbers
# size the table of expected tensors before any weight is read: a million layers took
# 17 s and 2.8 GB to tell the user the file lacked them.
_LARGEST = {
    "num_hidden_layers": 256,
    "hidden_size": 65_536,
    "num_attention_heads": 1_024,
    "intermediate_size": 262_144,
    "vocab_size": 10_000_000,
    "max_position_embeddings": 1_000_000,
    "type_vocab_size": 1_024,
}


def _size(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """A positive whole number of config.json, at most ``_LARGEST[key]``."""
    value = config[key] if default is None else config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if not (isinstance(value, float) and value.is_integer()):
            raise ModelError(f"config.json's {key} is not a whole number: {value!r:.40}")
        value = int(value)
    if not 0 < value <= _LARGEST[key]:
        raise ModelError(
            f"config.json describes an impossible BERT ({key} {value}; from 1 to {_LARGEST[key]:,})"
        )
    return value


def layer_weight(weights: Weights, layer: int, suffix: str) -> npt.NDArray[np.float32]:
    return weights[f"encoder.layer.{layer}.{suffix}"]


def canonical_weights(
    tensors: Mapping[str, npt.NDArray[np.generic]], config: BertConfig, source: Path
) -> Weights:
    """The encoder's weights without ``bert.`` prefix, checked against ``config``."""
    wanted = config.expected_shapes()
    found: Weights = {}
    for name, array in tensors.items():
        canonical = name[len("bert.") :] if name.startswith("bert.") else name
        if canonical in wanted:
            found[canonical] = np.asarray(array, dtype=np.float32)
        elif canonical.startswith("encoder.layer."):
            # A layer past config.json's count would be left out of the model in silence.
            raise ModelError(
                f"{source} has more encoder layers than config.json's num_hidden_layers "
                f"({config.layers}): {canonical}"
            )
    missing = [name for name in wanted if name not in found]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ModelError(f"{source} lacks the BERT weight {missing[0]}{more}")
    for name, shape in wanted.items():
        if found[name].shape != shape:
            raise ModelError(
                f"{source}: weight {name} has shape {list(found[name].shape)}, "
                f"config.json implies {list(shape)}"
            )
    return found
