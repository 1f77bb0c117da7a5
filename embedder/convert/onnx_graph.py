"""Build an ONNX graph (opset 17) of a BERT encoder from its numpy weights.

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, [batch, sequence]);
output ``last_hidden_state`` (float32, [batch, sequence, hidden]). The graph is plain ops
that onnxruntime's CPU optimiser already handles well: MatMul with weights transposed
ahead of time (so the int8 quantiser sees constant B operands), the 1/sqrt(head_dim)
attention scale folded into the query projection, ``LayerNormalization`` (opset 17) and the
erf GELU pattern (which onnxruntime fuses into its Gelu kernel).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from thatch.embedder.convert.weights import BertConfig, Weights, layer_weight

__all__ = ["build_bert_onnx"]

OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
# Added to attention scores of padding; exp() of it underflows to exactly 0 in float32.
MASK_VALUE = -1.0e4


class _GraphBuilder:
    """Accumulates nodes and initializers; callers give each one a unique name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def constant(self, name: str, value: npt.ArrayLike, dtype: type = np.float32) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        output = f"{name}_out"
        self.nodes.append(
            helper.make_node(op_type, inputs, [output], name=name, **attrs)  # type: ignore[arg-type]
        )
        return output

    def linear(
        self, x: str, weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32], name: str
    ) -> str:
        """x @ weight.T + bias, with weight given PyTorch-style [out, in]."""
        w = self.constant(f"{name}.weight_t", np.ascontiguousarray(weight.T))
        b = self.constant(f"{name}.bias", bias)
        return self.op("Add", [self.op("MatMul", [x, w], f"{name}/MatMul"), b], f"{name}/Add")

    def layer_norm(
        self,
        x: str,
        weight: npt.NDArray[np.float32],
        bias: npt.NDArray[np.float32],
        eps: float,
        name: str,
    ) -> str:
        w = self.constant(f"{name}.weight", weight)
        b = self.constant(f"{name}.bias", bias)
        return self.op("LayerNormalization", [x, w, b], name, axis=-1, epsilon=eps)


def _embeddings(g: _GraphBuilder, weights: Weights, config: BertConfig) -> str:
    words = g.constant(
        "embeddings.word_embeddings.weight", weights["embeddings.word_embeddings.weight"]
    )
    positions = g.constant(
        "embeddings.position_embeddings.weight", weights["embeddings.position_embeddings.weight"]
    )
    types = g.constant(
        "embeddings.token_type_embeddings.weight",
        weights["embeddings.token_type_embeddings.weight"],
    )
    word_vectors = g.op("Gather", [words, "input_ids"], "embeddings/word")
    type_vectors = g.op("Gather", [types, "token_type_ids"], "embeddings/type")
    # Positions 0..seq-1 are the first seq rows of the table: a Slice, no Range needed.
    shape = g.op("Shape", ["input_ids"], "embeddings/shape")
    one = g.constant("const_one_i64", [1], np.int64)
    two = g.constant("const_two_i64", [2], np.int64)
    zero = g.constant("const_zero_i64", [0], np.int64)
    seq_len = g.op("Slice", [shape, one, two], "embeddings/seq_len")
    position_vectors = g.op("Slice", [positions, zero, seq_len, zero], "embeddings/position")
    total = g.op("Add", [word_vectors, type_vectors], "embeddings/add_type")
    total = g.op("Add", [total, position_vectors], "embeddings/add_position")
    return g.layer_norm(
        total,
        weights["embeddings.LayerNorm.weight"],
        weights["embeddings.LayerNorm.bias"],
        config.layer_norm_eps,
        "embeddings/LayerNorm",
    )


def _additive_mask(g: _GraphBuilder) -> str:
    """[batch, 1, 1, seq]: 0 for real tokens, MASK_VALUE for padding."""
    mask = g.op("Cast", ["attention_mask"], "mask/cast", to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.constant("const_one_f32", 1.0), mask], "mask/invert")
    scaled = g.op("Mul", [inverted, g.constant("const_mask_value", MASK_VALUE)], "mask/scale")
    axes = g.constant("const_axes_1_2", [1, 2], np.int64)
    return g.op("Unsqueeze", [scaled, axes], "mask/unsqueeze")


def _attention(
    g: _GraphBuilder, x: str, mask: str, weights: Weights, n: int, config: BertConfig
) -> str:
    prefix = f"layer{n}/attention"
    split_shape = g.constant(
        f"{prefix}/split_shape", [0, 0, config.heads, config.head_dim], np.int64
    )
    scale = 1.0 / math.sqrt(config.head_dim)

    def heads(name: str, perm: list[int], factor: float) -> str:
        projected = g.linear(
            x,
            layer_weight(weights, n, f"attention.self.{name}.weight") * np.float32(factor),
            layer_weight(weights, n, f"attention.self.{name}.bias") * np.float32(factor),
            f"{prefix}/{name}",
        )
        split = g.op("Reshape", [projected, split_shape], f"{prefix}/{name}/reshape")
        return g.op("Transpose", [split], f"{prefix}/{name}/transpose", perm=perm)

    q = heads("query", [0, 2, 1, 3], scale)  # [b, heads, s, d], pre-scaled
    k = heads("key", [0, 2, 3, 1], 1.0)  # [b, heads, d, s]
    v = heads("value", [0, 2, 1, 3], 1.0)  # [b, heads, s, d]
    scores = g.op("MatMul", [q, k], f"{prefix}/scores")
    probs = g.op(
        "Softmax", [g.op("Add", [scores, mask], f"{prefix}/mask")], f"{prefix}/softmax", axis=-1
    )
    context = g.op("MatMul", [probs, v], f"{prefix}/context")
    merged = g.op("Transpose", [context], f"{prefix}/context/transpose", perm=[0, 2, 1, 3])
    merge_shape = g.constant(f"{prefix}/merge_shape", [0, 0, config.hidden], np.int64)
    merged = g.op("Reshape", [merged, merge_shape], f"{prefix}/context/reshape")
    return g.linear(
        merged,
        layer_weight(weights, n, "attention.output.dense.weight"),
        layer_weight(weights, n, "attention.output.dense.bias"),
        f"{prefix}/output",
    )


def _gelu(g: _GraphBuilder, x: str, name: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt 2)), the pattern onnxruntime fuses into Gelu."""
    sqrt2 = g.constant(f"{name}/sqrt2", math.sqrt(2.0))
    erf = g.op("Erf", [g.op("Div", [x, sqrt2], f"{name}/div")], f"{name}/erf")
    plus = g.op("Add", [erf, g.constant(f"{name}/one", 1.0)], f"{name}/add")
    return g.op(
        "Mul",
        [g.op("Mul", [x, plus], f"{name}/mul"), g.constant(f"{name}/half", 0.5)],
        f"{name}/half_mul",
    )


def _layer(
    g: _GraphBuilder, x: str, mask: str, weights: Weights, n: int, config: BertConfig
) -> str:
    eps = config.layer_norm_eps
    attended = _attention(g, x, mask, weights, n, config)
    x = g.layer_norm(
        g.op("Add", [attended, x], f"layer{n}/attention/residual"),
        layer_weight(weights, n, "attention.output.LayerNorm.weight"),
        layer_weight(weights, n, "attention.output.LayerNorm.bias"),
        eps,
        f"layer{n}/attention/LayerNorm",
    )
    inner = g.linear(
        x,
        layer_weight(weights, n, "intermediate.dense.weight"),
        layer_weight(weights, n, "intermediate.dense.bias"),
        f"layer{n}/intermediate",
    )
    out = g.linear(
        _gelu(g, inner, f"layer{n}/gelu"),
        layer_weight(weights, n, "output.dense.weight"),
        layer_weight(weights, n, "output.dense.bias"),
        f"layer{n}/output",
    )
    return g.layer_norm(
        g.op("Add", [out, x], f"layer{n}/output/residual"),
        layer_weight(weights, n, "output.LayerNorm.weight"),
        layer_weight(weights, n, "output.LayerNorm.bias"),
        eps,
        f"layer{n}/output/LayerNorm",
    )


def build_bert_onnx(weights: Weights, config: BertConfig, *, name: str = "bert") -> onnx.ModelProto:
    """The whole encoder as an opset-17 ModelProto with float32 initializers."""
    g = _GraphBuilder()
    x = _embeddings(g, weights, config)
    mask = _additive_mask(g)
    for n in range(config.layers):
        x = _layer(g, x, mask, weights, n, config)
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT_NAME], name="output"))
    inputs = [
        helper.make_tensor_value_info(input_name, TensorProto.INT64, ["batch", "sequence"])
        for input_name in INPUT_NAMES
    ]
    output = helper.make_tensor_value_info(
        OUTPUT_NAME, TensorProto.FLOAT, ["batch", "sequence", config.hidden]
    )
    graph = helper.make_graph(g.nodes, name, inputs, [output], initializer=g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="thatch",
    )
    # onnxruntime 1.x accepts IR version 8 for opset 17; newer onnx would default higher.
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
