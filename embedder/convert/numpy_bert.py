"""A plain numpy BERT forward pass: the reference the exported ONNX graph is checked against.

Written straight from the published architecture (as in Hugging Face ``BertModel``), in
float64 and without any of the graph's shortcuts (pre-transposed weights, folded scaling),
so an export mistake shows up as a disagreement instead of being copied into both. It runs
one unpadded sequence at a time, which also checks that the graph's attention mask makes
padding invisible.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import numpy.typing as npt

from thatch.embedder.convert.weights import BertConfig, Weights, layer_weight

__all__ = ["forward", "pooled"]

F64 = npt.NDArray[np.float64]

# numpy has no erf; math.erf is exact and the reference inputs are small.
_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x: F64) -> F64:
    """The exact (erf) GELU that BERT's ``hidden_act: gelu`` means."""
    erf = cast("npt.NDArray[np.object_]", _erf(x / math.sqrt(2.0)))  # array in, array out
    return 0.5 * x * (1.0 + erf.astype(np.float64))


def layer_norm(
    x: F64, weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32], eps: float
) -> F64:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def linear(x: F64, weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32]) -> F64:
    """PyTorch ``nn.Linear``: weight is [out, in]."""
    return x @ np.asarray(weight, dtype=np.float64).T + bias


def softmax(x: F64) -> F64:
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _attention(x: F64, weights: Weights, n: int, config: BertConfig) -> F64:
    seq = x.shape[0]

    def heads(name: str) -> F64:
        projected = linear(
            x,
            layer_weight(weights, n, f"attention.self.{name}.weight"),
            layer_weight(weights, n, f"attention.self.{name}.bias"),
        )
        return projected.reshape(seq, config.heads, config.head_dim).transpose(1, 0, 2)

    q, k, v = heads("query"), heads("key"), heads("value")
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(config.head_dim)
    context = (softmax(scores) @ v).transpose(1, 0, 2).reshape(seq, config.hidden)
    return linear(
        context,
        layer_weight(weights, n, "attention.output.dense.weight"),
        layer_weight(weights, n, "attention.output.dense.bias"),
    )


def forward(
    weights: Weights,
    config: BertConfig,
    input_ids: npt.NDArray[np.int64],
    token_type_ids: npt.NDArray[np.int64] | None = None,
) -> F64:
    """``last_hidden_state`` [seq, hidden] of one sequence (no padding)."""
    seq = int(input_ids.shape[0])
    types = np.zeros(seq, dtype=np.int64) if token_type_ids is None else token_type_ids
    x = (
        weights["embeddings.word_embeddings.weight"][input_ids].astype(np.float64)
        + weights["embeddings.position_embeddings.weight"][:seq]
        + weights["embeddings.token_type_embeddings.weight"][types]
    )
    eps = config.layer_norm_eps
    x = layer_norm(
        x, weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"], eps
    )
    for n in range(config.layers):
        attended = _attention(x, weights, n, config)
        x = layer_norm(
            attended + x,
            layer_weight(weights, n, "attention.output.LayerNorm.weight"),
            layer_weight(weights, n, "attention.output.LayerNorm.bias"),
            eps,
        )
        inner = gelu(
            linear(
                x,
                layer_weight(weights, n, "intermediate.dense.weight"),
                layer_weight(weights, n, "intermediate.dense.bias"),
            )
        )
        out = linear(
            inner,
            layer_weight(weights, n, "output.dense.weight"),
            layer_weight(weights, n, "output.dense.bias"),
        )
        x = layer_norm(
            out + x,
            layer_weight(weights, n, "output.LayerNorm.weight"),
            layer_weight(weights, n, "output.LayerNorm.bias"),
            eps,
        )
    return x


def pooled(hidden: F64, pooling: str) -> F64:
    """Mean or CLS pooling of one unpadded sequence, then L2 normalisation."""
    vector = hidden[0] if pooling == "cls" else hidden.mean(axis=0)
    return vector / max(float(np.linalg.norm(vector)), 1e-12)
