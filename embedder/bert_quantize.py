"""int8 quantization of an exported BERT graph: per-token activation scales + smoothing.

onnxruntime's ``quantize_dynamic`` quantizes each MatMul's activations with one scale per
tensor, chosen at run time. That makes a text's vector depend on its batch companions, and
it is too coarse for very short texts: on all-MiniLM-L6-v2, "x" ("[CLS] x [SEP]") lands at
cosine 0.987 with sentence-transformers. Here every MatMul with a constant 2-D weight W
(embedding tables and the attention-score MatMuls stay float32) becomes:

    xs    = x / s                            s: fixed per input channel (smoothing, below)
    amax  = max(|xs|) over the last axis     one scale per token (row): batch invariant
    q     = uint8(xs * 127 / amax + 128.5)   symmetric int8 shifted by 128, rounded
    acc   = MatMulInteger(q, W8, 128)        W8: int8 of W * s, one scale per output column
    y     = float(acc) * w_scale * amax/127

Smoothing (SmoothQuant, alpha 0.5) moves BERT's outlier activation channels into the
weights: s_j = sqrt(max|x_j| / max|W_j|), with max|x_j| measured by running the float32
graph on CALIBRATION_TEXTS. Per-token scales alone reach 0.991 on "x", smoothing 0.996.
Inputs shared by several MatMuls (query/key/value) are smoothed and quantized once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

INT8_MAX = 127.0
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
_FLOOR = 1e-5  # keeps smoothing factors finite for channels that are (nearly) zero
_TINY = 1e-30  # a row of zeros gets this amax instead of 0, so 127/amax stays finite

Feed = dict[str, npt.NDArray[np.int64]]


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
    import onnxruntime as ort

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


def _quantize_weight(
    weight: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Symmetric int8 per output column: weight ≈ q * scale."""
    amax = np.max(np.abs(weight), axis=0)
    scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
    q = np.clip(np.rint(weight / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


class _Rewriter:
    """Replacement nodes and new initializers for one model's weight MatMuls."""

    def __init__(self, model: onnx.ModelProto, absmax: dict[str, npt.NDArray[np.float32]]):
        self.weights = {init.name: init for init in model.graph.initializer}
        self.targets = _weight_matmuls(model)
        self.absmax = absmax
        self.initializers = [
            numpy_helper.from_array(np.array(INT8_MAX, dtype=np.float32), "q8/int8_max"),
            numpy_helper.from_array(np.array(_TINY, dtype=np.float32), "q8/tiny"),
            numpy_helper.from_array(np.array(128.5, dtype=np.float32), "q8/offset"),
            numpy_helper.from_array(np.array(128, dtype=np.uint8), "q8/zero_point"),
        ]
        self.quantized: dict[str, tuple[str, str, npt.NDArray[np.float32]]] = {}

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
        xs = op("Mul", [x, inverse_s], "smoothed")
        peak = op("ReduceMax", [op("Abs", [xs], "abs")], "peak", axes=[-1], keepdims=1)
        amax = op("Max", [peak, "q8/tiny"], "amax")
        scaled = op("Mul", [xs, op("Div", ["q8/int8_max", amax], "inv_scale")], "scaled")
        # float -> uint8 truncates; the .5 in the offset makes that round to nearest.
        q = op("Cast", [op("Add", [scaled, "q8/offset"], "shifted")], "q", to=TensorProto.UINT8)
        self.quantized[x] = (q, op("Div", [amax, "q8/int8_max"], "row_scale"), smoothing)

    def replace(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        x, w_name = node.input[0], node.input[1]
        nodes: list[onnx.NodeProto] = []
        if x not in self.quantized:
            self._quantize_input(x, nodes)
        q, row_scale, smoothing = self.quantized[x]
        weight = numpy_helper.to_array(self.weights[w_name]).astype(np.float32)
        w_q, w_scale = _quantize_weight(weight * smoothing[:, None])
        base = f"q8/{node.name or node.output[0]}"
        self.initializers += [
            numpy_helper.from_array(w_q, f"{base}/w_int8"),
            numpy_helper.from_array(w_scale, f"{base}/w_scale"),
        ]
        acc, acc_f, col = f"{base}/acc", f"{base}/acc_f", f"{base}/col_scaled"
        nodes += [
            helper.make_node("MatMulInteger", [q, f"{base}/w_int8", "q8/zero_point"], [acc]),
            helper.make_node("Cast", [acc], [acc_f], to=TensorProto.FLOAT),
            # Column scales first, row scales last: onnxruntime fuses MatMulInteger -> Cast
            # -> Mul(y, Mul(a_scale, b_scale)) into MatMulIntegerToFloat, whose A scale is
            # one number, and would silently apply the first row's scale to every row.
            helper.make_node("Mul", [acc_f, f"{base}/w_scale"], [col]),
            helper.make_node("Mul", [col, row_scale], [node.output[0]]),
        ]
        for new, suffix in zip(nodes[-4:], ("acc", "acc_f", "col_scaled", "dequant"), strict=True):
            new.name = f"{base}/{suffix}"
        return nodes


def quantize_model(
    model: onnx.ModelProto, absmax: dict[str, npt.NDArray[np.float32]]
) -> onnx.ModelProto:
    """A copy of ``model`` with its weight MatMuls in smoothed per-token int8."""
    rewriter = _Rewriter(model, absmax)
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


def quantize_file(fp32: Path, int8: Path, feeds: list[Feed]) -> None:
    """Write the int8 version of the ONNX model at ``fp32``, calibrated on ``feeds``."""
    model = onnx.load(str(fp32))
    quantized = quantize_model(model, activation_absmax(model, feeds))
    onnx.checker.check_model(quantized)
    onnx.save_model(quantized, str(int8))
