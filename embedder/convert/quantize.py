"""int8 quantization of an exported BERT graph: per-token activation scales + smoothing.

onnxruntime's ``quantize_dynamic`` quantizes each MatMul's activations with one scale per
tensor, chosen at run time. That makes a text's vector depend on its batch companions, and
it is too coarse for very short texts: on all-MiniLM-L6-v2, "x" ("[CLS] x [SEP]") lands at
cosine 0.987 with sentence-transformers. Here every MatMul with a constant 2-D weight W
(embedding tables and the attention-score MatMuls stay float32) becomes:

    xs    = x / s                            s: fixed per input channel (smoothing, below)
    amax  = max(|xs|) over the last axis     one scale per token (row): batch invariant
    q     = uint8(xs * 127 / amax + 128.5)   symmetric int8 shifted by 128, rounded
    acc   = MatMulInteger(q, W8, 128, 128)   W8: uint8 of W * s + 128, one scale per column
    y     = float(acc) * w_scale * amax/127

The operands are uint8 x uint8 (format "u8u8") because that is the one pair onnxruntime
multiplies exactly on every CPU class: its AVX2 (and AVX-512 without VNNI) u8 x s8 kernel
sums pairs of products with VPMADDUBSW, which saturates at 32767, so 8-bit activations times
8-bit signed weights come out wrong there (all-MiniLM-L6-v2: worst cosine 0.985 with fp32);
u8 x u8 widens to 16 bits and sums in 32 (VPMADDWD, or UDOT on ARM), which cannot overflow.
Measured on an AVX2-only EPYC (see bench/int8_formats.py): u8s8 with 7-bit weights is exact
too but loses precision (0.991 worst), s8s8 is exact but slower than fp32.

GELU outputs (the feed-forward down projection's input) are never below GELU_MIN, so they
are shifted to be non-negative and use all 255 levels with zero point 0; the shift comes
back out as a per-column constant. That lifts one-word texts from 0.991 to 0.995.

Smoothing (SmoothQuant, alpha 0.5) moves BERT's outlier activation channels into the
weights: s_j = sqrt(max|x_j| / max|W_j|), with max|x_j| measured by running the float32
graph on CALIBRATION_TEXTS. Inputs shared by several MatMuls (query/key/value) are smoothed
and quantized once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

__all__ = ["DEFAULT_FORMAT", "FORMATS", "Int8Format", "calibration_feeds", "quantize_file"]

DEFAULT_FORMAT = "u8u8"
SMOOTHING_ALPHA = 0.5
# Only used to find each channel's typical magnitude, so variety matters more than number:
# prose, code, a path, a short query, a single word, CJK.
CALIBRATION_TEXTS = (
    "The cache is rebuilt nightly by a cron job; clear it by hand after schema changes.",
    "def parse(path: str) -> dict:\n    with open(path) as f:\n        return json.load(f)",
    "Remember: the staging cluster uses a self-signed certificate, so set VERIFY_TLS=0 there.",
    "where is the config loaded",
    "hello",
    "Benchmarks run with `cargo bench --features simd`; results land in target/criterion.",
    "配置文件位于 ~/.config/app/settings.toml",
    "Meeting notes: we agreed to drop Python 3.9 support in the next minor release.",
)
# The erf GELU's minimum, -0.16997 at x = -0.75179, rounded down.
GELU_MIN = -0.17
_FLOOR = 1e-5  # keeps smoothing factors finite for channels that are (nearly) zero
_TINY = 1e-30  # a row of zeros gets this amax instead of 0, so 127/amax stays finite

Feed = dict[str, npt.NDArray[np.int64]]


def _scalar(initializers: dict[str, onnx.TensorProto], name: str) -> float | None:
    if name not in initializers:
        return None
    value = numpy_helper.to_array(initializers[name])
    return float(value) if value.size == 1 else None


def _gelu_outputs(model: onnx.ModelProto) -> set[str]:
    """Outputs of the erf GELU pattern Mul(Mul(x, Add(Erf(x / sqrt 2), 1)), 0.5)."""
    initializers = {init.name: init for init in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}

    def made_by(name: str, op_type: str) -> onnx.NodeProto | None:
        node = producers.get(name)
        return node if node is not None and node.op_type == op_type else None

    found = set()
    for node in model.graph.node:
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        for half, inner in (node.input, node.input[::-1]):
            product = made_by(inner, "Mul")
            if _scalar(initializers, half) != 0.5 or product is None:
                continue
            plus = [made_by(i, "Add") for i in product.input]
            if any(
                add is not None
                and any(made_by(i, "Erf") for i in add.input)
                and any(_scalar(initializers, i) == 1.0 for i in add.input)
                for add in plus
            ):
                found.add(node.output[0])
    return found


def _weight_matmuls(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """MatMuls whose B is a float 2-D initializer: the ones worth quantizing."""
    initializers = {init.name: init for init in model.graph.initializer}
    return [
        node
        for node in model.graph.node
        if node.op_type == "MatMul"
        and node.domain in ("", "ai.onnx")
        and node.input[1] in initializers
        and len(initializers[node.input[1]].dims) == 2
        and initializers[node.input[1]].data_type == TensorProto.FLOAT
    ]


def calibration_feeds(tokenizer: Tokenizer, max_tokens: int) -> list[Feed]:
    """CALIBRATION_TEXTS as single-text model inputs."""
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_tokens)
    feeds = []
    for text in CALIBRATION_TEXTS:
        ids = np.asarray([tokenizer.encode(text).ids], dtype=np.int64)
        feeds.append(
            {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": ids * 0}
        )
    return feeds


def activation_absmax(
    model: onnx.ModelProto, feeds: list[Feed]
) -> dict[str, npt.NDArray[np.float32]]:
    """Per channel, the largest |value| each quantized MatMul's input reaches on ``feeds``."""
    from thatch.embedder.models.ort_loader import load_onnxruntime

    ort = load_onnxruntime()

    names = sorted({node.input[0] for node in _weight_matmuls(model)})
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(
        helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in names
    )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    result: dict[str, npt.NDArray[np.float32]] = {}
    for feed in feeds:
        for name, value in zip(names, session.run(names, feed), strict=True):
            rows = np.abs(np.asarray(value, dtype=np.float32)).reshape(-1, value.shape[-1])
            peak = rows.max(axis=0)
            result[name] = np.maximum(result[name], peak) if name in result else peak
    return result


@dataclass(frozen=True)
class Int8Format:
    """How MatMulInteger's operands are stored: levels each side of zero, and signedness.

    Unsigned operands carry a zero point (activations: levels + 1, weights: 128)."""

    name: str
    act_levels: int
    act_signed: bool
    weight_levels: int
    weight_signed: bool

    @property
    def act_zero(self) -> int:
        return 0 if self.act_signed else self.act_levels + 1

    @property
    def weight_zero(self) -> int:
        return 0 if self.weight_signed else 128


# The default and the alternatives bench/int8_formats.py measures against it.
FORMATS = {
    f.name: f
    for f in (
        Int8Format("u8s8", 127, False, 127, True),
        Int8Format("u8s8-w7", 127, False, 63, True),
        Int8Format("u8s8-a7", 63, False, 127, True),
        Int8Format("u8u8", 127, False, 127, False),
        Int8Format("s8s8", 127, True, 127, True),
    )
}


def _quantize_weight(
    weight: npt.NDArray[np.float32], fmt: Int8Format
) -> tuple[npt.NDArray[np.int8] | npt.NDArray[np.uint8], npt.NDArray[np.float32]]:
    """Symmetric per output column: weight ≈ (q - zero) * scale."""
    levels = float(fmt.weight_levels)
    amax = np.max(np.abs(weight), axis=0)
    scale = np.where(amax > 0, amax / levels, 1.0).astype(np.float32)
    q = np.clip(np.rint(weight / scale), -levels, levels).astype(np.int16) + fmt.weight_zero
    return q.astype(np.int8 if fmt.weight_signed else np.uint8), scale


class _Rewriter:
    """Replacement nodes and new initializers for one model's weight MatMuls."""

    def __init__(
        self,
        model: onnx.ModelProto,
        absmax: dict[str, npt.NDArray[np.float32]],
        fmt: Int8Format,
    ):
        self.weights = {init.name: init for init in model.graph.initializer}
        self.targets = _weight_matmuls(model)
        self.absmax = absmax
        self.fmt = fmt
        act_type = np.int8 if fmt.act_signed else np.uint8
        weight_type = np.int8 if fmt.weight_signed else np.uint8
        self.initializers = [
            numpy_helper.from_array(np.array(fmt.act_levels, dtype=np.float32), "q8/levels"),
            numpy_helper.from_array(np.array(_TINY, dtype=np.float32), "q8/tiny"),
            numpy_helper.from_array(np.array(fmt.act_zero, dtype=act_type), "q8/zero_point"),
            numpy_helper.from_array(np.array(fmt.weight_zero, dtype=weight_type), "q8/w_zero"),
        ]
        if not fmt.act_signed:
            offset = np.array(fmt.act_zero + 0.5, dtype=np.float32)
            self.initializers.append(numpy_helper.from_array(offset, "q8/offset"))
        self.quantized: dict[str, tuple[str, str, npt.NDArray[np.float32]]] = {}
        # GELU outputs are never below GELU_MIN: shifted by -GELU_MIN they are one-sided and
        # get every level of an unsigned activation instead of half of them.
        self.one_sided = _gelu_outputs(model) if not fmt.act_signed else set()
        if self.one_sided:
            self.initializers += [
                numpy_helper.from_array(np.array(-GELU_MIN, dtype=np.float32), "q8/gelu_shift"),
                numpy_helper.from_array(np.array(2 * fmt.act_levels + 1, np.float32), "q8/levels1"),
                numpy_helper.from_array(np.array(0.5, dtype=np.float32), "q8/half"),
                numpy_helper.from_array(np.array(0, dtype=np.uint8), "q8/zero_point1"),
            ]

    def _smoothing(self, x: str) -> npt.NDArray[np.float32]:
        """s per input channel of ``x``, shared by every MatMul that reads ``x``."""
        w_max = np.max(
            [
                np.abs(numpy_helper.to_array(self.weights[t.input[1]])).max(axis=1)
                for t in self.targets
                if t.input[0] == x
            ],
            axis=0,
        )
        a_max = self.absmax.get(x, np.ones_like(w_max))
        s = np.maximum(a_max, _FLOOR) ** SMOOTHING_ALPHA / np.maximum(w_max, _FLOOR) ** (
            1 - SMOOTHING_ALPHA
        )
        return s.astype(np.float32)

    def _quantize_input(self, x: str, nodes: list[onnx.NodeProto]) -> None:
        prefix = f"q8/{x}"

        def op(op_type: str, inputs: list[str], suffix: str, **attrs: object) -> str:
            out = f"{prefix}/{suffix}"
            nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))  # type: ignore[arg-type]
            return out

        smoothing = self._smoothing(x)
        inverse_s = f"{prefix}/inv_smoothing"
        self.initializers.append(numpy_helper.from_array(1 / smoothing, inverse_s))
        if x in self.one_sided:
            xs = op("Mul", [op("Add", [x, "q8/gelu_shift"], "unshifted"), inverse_s], "smoothed")
            peak = op("ReduceMax", [xs], "peak", axes=[-1], keepdims=1)
            amax = op("Max", [peak, "q8/tiny"], "amax")
            scaled = op("Mul", [xs, op("Div", ["q8/levels1", amax], "inv_scale")], "scaled")
            q = op("Cast", [op("Add", [scaled, "q8/half"], "shifted")], "q", to=TensorProto.UINT8)
            self.quantized[x] = (q, op("Div", [amax, "q8/levels1"], "row_scale"), smoothing)
            return
        xs = op("Mul", [x, inverse_s], "smoothed")
        peak = op("ReduceMax", [op("Abs", [xs], "abs")], "peak", axes=[-1], keepdims=1)
        amax = op("Max", [peak, "q8/tiny"], "amax")
        scaled = op("Mul", [xs, op("Div", ["q8/levels", amax], "inv_scale")], "scaled")
        if self.fmt.act_signed:
            q = op("Cast", [op("Round", [scaled], "rounded")], "q", to=TensorProto.INT8)
        else:
            # float -> uint8 truncates; the .5 in the offset makes that round to nearest.
            shifted = op("Add", [scaled, "q8/offset"], "shifted")
            q = op("Cast", [shifted], "q", to=TensorProto.UINT8)
        self.quantized[x] = (q, op("Div", [amax, "q8/levels"], "row_scale"), smoothing)

    def replace(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        x, w_name = node.input[0], node.input[1]
        nodes: list[onnx.NodeProto] = []
        if x not in self.quantized:
            self._quantize_input(x, nodes)
        q, row_scale, smoothing = self.quantized[x]
        weight = numpy_helper.to_array(self.weights[w_name]).astype(np.float32)
        w_q, w_scale = _quantize_weight(weight * smoothing[:, None], self.fmt)
        base = f"q8/{node.name or node.output[0]}"
        self.initializers += [
            numpy_helper.from_array(w_q, f"{base}/w_int8"),
            numpy_helper.from_array(w_scale, f"{base}/w_scale"),
        ]
        acc, acc_f, col = f"{base}/acc", f"{base}/acc_f", f"{base}/col_scaled"
        one_sided = x in self.one_sided
        zero_point = "q8/zero_point1" if one_sided else "q8/zero_point"
        dequant = f"{base}/dequant" if one_sided else node.output[0]
        nodes += [
            helper.make_node(
                "MatMulInteger", [q, f"{base}/w_int8", zero_point, "q8/w_zero"], [acc]
            ),
            helper.make_node("Cast", [acc], [acc_f], to=TensorProto.FLOAT),
            # Column scales first, row scales last: onnxruntime fuses MatMulInteger -> Cast
            # -> Mul(y, Mul(a_scale, b_scale)) into MatMulIntegerToFloat, whose A scale is
            # one number, and would silently apply the first row's scale to every row.
            helper.make_node("Mul", [acc_f, f"{base}/w_scale"], [col]),
            helper.make_node("Mul", [col, row_scale], [dequant]),
        ]
        suffixes = ["acc", "acc_f", "col_scaled", "dequant"]
        if one_sided:
            # (x - GELU_MIN) @ W = x @ W - GELU_MIN * column sums of W (as quantized).
            w_used = (w_q.astype(np.float32) - self.fmt.weight_zero) * w_scale
            correction = (GELU_MIN * (w_used / smoothing[:, None]).sum(axis=0)).astype(np.float32)
            self.initializers.append(numpy_helper.from_array(correction, f"{base}/unshift"))
            nodes.append(helper.make_node("Add", [dequant, f"{base}/unshift"], [node.output[0]]))
            suffixes.append("unshift")
        for new, suffix in zip(nodes[-len(suffixes) :], suffixes, strict=True):
            new.name = f"{base}/{suffix}"
        return nodes


def quantize_model(
    model: onnx.ModelProto,
    absmax: dict[str, npt.NDArray[np.float32]],
    fmt: Int8Format | None = None,
) -> onnx.ModelProto:
    """A copy of ``model`` with its weight MatMuls in smoothed per-token int8."""
    rewriter = _Rewriter(model, absmax, fmt or FORMATS[DEFAULT_FORMAT])
    targets = {id(node) for node in rewriter.targets}
    replaced = {t.input[1] for t in rewriter.targets}
    still_read = {
        name for node in model.graph.node if id(node) not in targets for name in node.input
    }
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for node in model.graph.node:
        result.graph.node.extend(rewriter.replace(node) if id(node) in targets else [node])
    kept = [
        init
        for init in model.graph.initializer
        if init.name not in replaced or init.name in still_read
    ]
    del result.graph.initializer[:]
    result.graph.initializer.extend(kept + rewriter.initializers)
    return result


def quantize_file(fp32: Path, int8: Path, feeds: list[Feed], fmt: Int8Format | None = None) -> None:
    """Write the int8 version of the ONNX model at ``fp32``, calibrated on ``feeds``."""
    model = onnx.load(str(fp32))
    quantized = quantize_model(model, activation_absmax(model, feeds), fmt)
    onnx.checker.check_model(quantized)
    onnx.save_model(quantized, str(int8))
