"""Build an ONNX graph (opset 17) of EmbeddingGemma-300M for the bench, pooling included.

Bench only, like ``mpnet_onnx.py``: it measures whether a stronger model than thatch's
would reach issue 24's code target (docs/database.md §ranking, the model hunt). The
checkpoint is a sentence-transformers dir: a Gemma-3 text encoder (``model.safetensors``,
``config.json``), mean pooling, two Dense layers without bias or activation
(``2_Dense``, ``3_Dense``), then L2 normalisation (done by the caller).

What Gemma 3 differs in from BERT: token embeddings scaled by sqrt(hidden); RMSNorm with
(1 + weight) before and after both attention and MLP; grouped-query attention (3 query
heads share 1 key/value head, broadcast by MatMul) with RMSNorm on each head's q and k,
rotary positions (base ``rope_local_base_freq`` on sliding-window layers, ``rope_theta``
on global ones) and scores scaled by ``query_pre_attn_scalar`` ** -0.5 (folded into the
q norm); a gated GELU-tanh MLP; a final RMSNorm. Attention is bidirectional; the sliding
window is not applied: transformers turns ``sliding_window`` 512 into a symmetric band of
512 // 2 + 1 = 257 when attention is bidirectional, so the graph is exact for texts of up
to 257 tokens and callers truncate there (its position tables stop at ``max_tokens``).
The two Dense layers are one 768 × 768 matrix (no bias, identity activation).
Inputs ``input_ids``, ``attention_mask``; output ``sentence_embedding`` [batch, hidden],
not yet normalised.
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
from thatch.embedder.convert.onnx_graph import OPSET, _additive_mask, _GraphBuilder
from thatch.embedder.convert.safetensors_io import read_safetensors

F32 = npt.NDArray[np.float32]
OUTPUT = "sentence_embedding"


def rope_tables(base: float, head_dim: int, length: int) -> tuple[F32, F32]:
    """transformers' default rotary cos and sin, [length, head_dim], in float32 as it does."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = np.float32(1.0) / (np.float32(base) ** exponent)
    freqs = np.arange(length, dtype=np.float32)[:, None] * inv_freq[None, :]
    angles = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class _Gemma:
    """Graph pieces of one checkpoint; every node name is unique by its prefix."""

    def __init__(self, g: _GraphBuilder, config: dict[str, object]) -> None:
        self.g = g
        self.eps = float(str(config["rms_norm_eps"]))
        self.head_dim = int(str(config["head_dim"]))
        self.one = g.constant("one_f32", 1.0)
        self.eps_c = g.constant("rms_eps", self.eps)
        self.two = g.constant("two_f32", 2.0)

    def rms(self, x: str, weight: F32, name: str, factor: float = 1.0) -> str:
        """Gemma's RMSNorm, x / sqrt(mean(x²) + eps) × (1 + w): the pattern ORT fuses."""
        g = self.g
        mean = g.op(
            "ReduceMean",
            [g.op("Pow", [x, self.two], f"{name}/pow")],
            f"{name}/mean",
            axes=[-1],
            keepdims=1,
        )
        root = g.op("Sqrt", [g.op("Add", [mean, self.eps_c], f"{name}/add")], f"{name}/sqrt")
        scaled = g.op("Div", [x, root], f"{name}/div")
        w = g.constant(f"{name}.weight", (np.float32(1.0) + weight) * np.float32(factor))
        return g.op("Mul", [scaled, w], f"{name}/mul")

    def matmul(self, x: str, weight: F32, name: str) -> str:
        """x @ weight.T, weight PyTorch-style [out, in] (Gemma's projections have no bias)."""
        w = self.g.constant(f"{name}.weight_t", np.ascontiguousarray(weight.T))
        return self.g.op("MatMul", [x, w], name)

    def rotate(self, x: str, cos: str, sin: str, name: str) -> str:
        """x·cos + rotate_half(x)·sin, rotate_half(x) = [-x2, x1] (halves of head_dim)."""
        g = self.g
        half = self.head_dim // 2
        axis = g.constant(f"{name}/axis", [-1], np.int64)
        x1 = g.op(
            "Slice",
            [
                x,
                g.constant(f"{name}/s0", [0], np.int64),
                g.constant(f"{name}/s1", [half], np.int64),
                axis,
            ],
            f"{name}/x1",
        )
        x2 = g.op(
            "Slice",
            [
                x,
                g.constant(f"{name}/s2", [half], np.int64),
                g.constant(f"{name}/s3", [self.head_dim], np.int64),
                axis,
            ],
            f"{name}/x2",
        )
        rotated = g.op("Concat", [g.op("Neg", [x2], f"{name}/neg"), x1], f"{name}/cat", axis=-1)
        return g.op(
            "Add",
            [g.op("Mul", [x, cos], f"{name}/cos"), g.op("Mul", [rotated, sin], f"{name}/sin")],
            f"{name}/rope",
        )

    def gelu_tanh(self, x: str, name: str) -> str:
        """0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))), PyTorch's approximate='tanh'."""
        g = self.g
        cube = g.op("Mul", [g.op("Mul", [x, x], f"{name}/sq"), x], f"{name}/cube")
        inner = g.op(
            "Add",
            [x, g.op("Mul", [cube, g.constant(f"{name}/c", 0.044715)], f"{name}/cube_c")],
            f"{name}/inner",
        )
        scaled = g.op(
            "Mul", [inner, g.constant(f"{name}/k", math.sqrt(2.0 / math.pi))], f"{name}/scaled"
        )
        plus = g.op("Add", [g.op("Tanh", [scaled], f"{name}/tanh"), self.one], f"{name}/plus")
        half = g.op("Mul", [x, g.constant(f"{name}/half", 0.5)], f"{name}/half_x")
        return g.op("Mul", [half, plus], f"{name}/out")


def build_gemma_onnx(
    weights: dict[str, F32], dense: F32, config: dict[str, object], max_tokens: int
) -> onnx.ModelProto:
    """dense: the two Dense layers as one [hidden, hidden] matrix, applied as pooled @ dense."""
    hidden = int(str(config["hidden_size"]))
    heads = int(str(config["num_attention_heads"]))
    kv_heads = int(str(config["num_key_value_heads"]))
    head_dim = int(str(config["head_dim"]))
    layer_types = [str(t) for t in config["layer_types"]]  # type: ignore[attr-defined]
    g = _GraphBuilder()
    m = _Gemma(g, config)

    table = weights["embed_tokens.weight"] * np.float32(math.sqrt(hidden))
    x = g.op("Gather", [g.constant("embed_tokens", table), "input_ids"], "embed")
    del table
    shape = g.op("Shape", ["input_ids"], "shape")
    zero = g.constant("zero_i64", [0], np.int64)
    seq_len = g.op(
        "Slice",
        [shape, g.constant("one_i64", [1], np.int64), g.constant("two_i64", [2], np.int64)],
        "seq_len",
    )
    ropes: dict[str, tuple[str, str]] = {}
    for kind, base in (
        ("sliding_attention", config["rope_local_base_freq"]),
        ("full_attention", config["rope_theta"]),
    ):
        tables = rope_tables(float(str(base)), head_dim, max_tokens)
        cos_sin = [
            g.op(
                "Slice",
                [
                    g.constant(f"rope/{kind}/{n}", t[None, None]),
                    zero,
                    seq_len,
                    g.constant(f"rope/{kind}/{n}/axis", [2], np.int64),
                ],
                f"rope/{kind}/{n}/slice",
            )
            for n, t in zip(("cos", "sin"), tables, strict=True)
        ]
        ropes[kind] = (cos_sin[0], cos_sin[1])
    mask = _additive_mask(g)  # [b, 1, 1, s]
    merge_shape = g.constant("merge_shape", [0, 0, heads * head_dim], np.int64)
    scale = float(str(config["query_pre_attn_scalar"])) ** -0.5

    for n, kind in enumerate(layer_types):
        p, a = f"layers.{n}.", f"layer{n}/attn"
        rope_cos, rope_sin = ropes[kind]

        def split(
            h: str,
            proj: str,
            count: int,
            norm: str | None,
            factor: float = 1.0,
            p: str = p,
            a: str = a,
            cos: str = rope_cos,
            sin: str = rope_sin,
        ) -> str:
            out = m.matmul(h, weights[f"{p}self_attn.{proj}.weight"], f"{a}/{proj}")
            shaped = g.op(
                "Reshape",
                [out, g.constant(f"{a}/{proj}/shape", [0, 0, count, head_dim], np.int64)],
                f"{a}/{proj}/reshape",
            )
            if norm is not None:
                shaped = m.rms(
                    shaped, weights[f"{p}self_attn.{norm}.weight"], f"{a}/{norm}", factor
                )
            heads_first = g.op("Transpose", [shaped], f"{a}/{proj}/transpose", perm=[0, 2, 1, 3])
            if norm is None:
                return heads_first
            return m.rotate(heads_first, cos, sin, f"{a}/{proj}/rope")

        h = m.rms(x, weights[f"{p}input_layernorm.weight"], f"layer{n}/input_norm")
        q = split(h, "q_proj", heads, "q_norm", scale)  # [b, heads, s, d], pre-scaled
        k = split(h, "k_proj", kv_heads, "k_norm")  # [b, kv, s, d]
        v = split(h, "v_proj", kv_heads, None)
        kt = g.op("Transpose", [k], f"{a}/k/t", perm=[0, 1, 3, 2])
        scores = g.op("Add", [g.op("MatMul", [q, kt], f"{a}/scores"), mask], f"{a}/mask")
        probs = g.op("Softmax", [scores], f"{a}/softmax", axis=-1)
        context = g.op("MatMul", [probs, v], f"{a}/context")
        context = g.op("Transpose", [context], f"{a}/context/t", perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge_shape], f"{a}/context/reshape")
        attended = m.matmul(context, weights[f"{p}self_attn.o_proj.weight"], f"{a}/o_proj")
        attended = m.rms(
            attended, weights[f"{p}post_attention_layernorm.weight"], f"layer{n}/post_attn_norm"
        )
        x = g.op("Add", [x, attended], f"layer{n}/attn_residual")
        h = m.rms(x, weights[f"{p}pre_feedforward_layernorm.weight"], f"layer{n}/pre_ff_norm")
        gate = m.gelu_tanh(
            m.matmul(h, weights[f"{p}mlp.gate_proj.weight"], f"layer{n}/gate"), f"layer{n}/gelu"
        )
        up = m.matmul(h, weights[f"{p}mlp.up_proj.weight"], f"layer{n}/up")
        down = m.matmul(
            g.op("Mul", [gate, up], f"layer{n}/gated"),
            weights[f"{p}mlp.down_proj.weight"],
            f"layer{n}/down",
        )
        down = m.rms(
            down, weights[f"{p}post_feedforward_layernorm.weight"], f"layer{n}/post_ff_norm"
        )
        x = g.op("Add", [x, down], f"layer{n}/ff_residual")
    x = m.rms(x, weights["norm.weight"], "final_norm")

    # Mean over real tokens (the prompt included, as sentence-transformers' config says).
    weights_f = g.op(
        "Unsqueeze",
        [
            g.op("Cast", ["attention_mask"], "pool/cast", to=TensorProto.FLOAT),
            g.constant("pool/axis", [2], np.int64),
        ],
        "pool/mask",
    )
    axis1 = g.constant("pool/axis1", [1], np.int64)
    total = g.op(
        "ReduceSum", [g.op("Mul", [x, weights_f], "pool/mul"), axis1], "pool/sum", keepdims=0
    )
    count = g.op("ReduceSum", [weights_f, axis1], "pool/count", keepdims=0)
    pooled = g.op("Div", [total, count], "pool/mean")
    out = g.op("MatMul", [pooled, g.constant("dense", dense)], "dense")
    g.nodes.append(helper.make_node("Identity", [out], [OUTPUT], name="output"))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])
    graph = helper.make_graph(
        g.nodes, "embeddinggemma", inputs, [output], initializer=g.initializers
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def dense_matrix(src: Path) -> F32:
    """2_Dense then 3_Dense (no bias, identity activation, as their configs say) as one."""
    for part in ("2_Dense", "3_Dense"):
        config = json.loads((src / part / "config.json").read_text())
        if config.get("bias") or not str(config.get("activation_function")).endswith("Identity"):
            raise SystemExit(f"{src / part}: expected a Dense layer without bias or activation")
    first = read_safetensors(src / "2_Dense" / "model.safetensors")["linear.weight"]  # [3072, 768]
    second = read_safetensors(src / "3_Dense" / "model.safetensors")["linear.weight"]  # [768, 3072]
    both = first.T.astype(np.float64) @ second.T.astype(np.float64)
    return np.asarray(both, dtype=np.float32)


def build_file(src: Path, out: Path, max_tokens: int = 512) -> Path:
    """src: the sentence-transformers EmbeddingGemma dir; out: the ONNX file (built once)."""
    if not out.exists():
        config = json.loads((src / "config.json").read_text())
        raw = read_safetensors(src / "model.safetensors")
        weights = {k: np.asarray(v, dtype=np.float32) for k, v in raw.items()}
        model = build_gemma_onnx(weights, dense_matrix(src), config, max_tokens)
        del weights, raw
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        onnx.save(model, str(tmp))
        tmp.rename(out)
    return out
