"""The int8 format's products cannot saturate on any CPU class onnxruntime supports.

onnxruntime's x86 kernels for u8 x s8 (AVX2, AVX-512 without VNNI, SSSE3) multiply with
VPMADDUBSW, which adds each pair of u8 x s8 products into an int16 with saturation; its
u8 x u8 kernels widen both operands to int16 and use VPMADDWD, which adds pairs into an
int32. Numpy models of both instructions show the chosen format is exact where the old one
saturated, so this holds on whatever CPU runs the test, with or without VNNI.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_model_import import write_tiny_bert
from thatch.embedder.convert import quantize as bert_quantize
from thatch.embedder.convert.importer import import_checkpoint

INT16 = (-(1 << 15), (1 << 15) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)
CHOSEN = bert_quantize.FORMATS[bert_quantize.DEFAULT_FORMAT]


def vpmaddubsw(a: npt.NDArray[np.uint8], b: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
    """u8 x s8 products, adjacent pairs summed, saturated to int16 (as the instruction)."""
    products = a.astype(np.int64) * b.astype(np.int64)
    return np.clip(products[0::2] + products[1::2], *INT16)


def vpmaddwd(a: npt.NDArray[np.int16], b: npt.NDArray[np.int16]) -> npt.NDArray[np.int64]:
    """int16 x int16 products, adjacent pairs summed into int32 (wraps, never saturates)."""
    products = a.astype(np.int64) * b.astype(np.int64)
    sums = products[0::2] + products[1::2]
    return (sums + (1 << 31)) % (1 << 32) - (1 << 31)


def u8s8_dot(a: npt.NDArray[np.uint8], b: npt.NDArray[np.int8]) -> int:
    """One dot product the way the AVX2 u8 x s8 kernel computes it (int32 accumulator)."""
    ones = np.ones(len(a) // 2, dtype=np.int16)
    return int(vpmaddwd(vpmaddubsw(a, b).astype(np.int16), ones).sum())


def u8u8_dot(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8]) -> int:
    """One dot product the way the AVX2 u8 x u8 kernel computes it (zero-extend, VPMADDWD)."""
    return int(vpmaddwd(a.astype(np.int16), b.astype(np.int16)).sum())


def operand_extremes(fmt: bert_quantize.Int8Format) -> tuple[list[int], list[int]]:
    """Every stored value an activation and a weight of ``fmt`` can take (both ends)."""
    act = [fmt.act_zero - fmt.act_levels, fmt.act_zero + fmt.act_levels, 0, 2 * fmt.act_levels + 1]
    weight = [fmt.weight_zero - fmt.weight_levels, fmt.weight_zero + fmt.weight_levels]
    return act, weight


def test_the_instruction_model_shows_why_u8s8_was_wrong() -> None:
    """8-bit u8 activations x 8-bit s8 weights: a pair of products exceeds int16."""
    old = bert_quantize.FORMATS["u8s8"]
    a = np.full(64, old.act_zero + old.act_levels, dtype=np.uint8)  # 255
    b = np.full(64, old.weight_levels, dtype=np.int8)  # 127
    assert u8s8_dot(a, b) == 32 * INT16[1]  # every pair clipped at 32767
    assert int(a.astype(np.int64) @ b.astype(np.int64)) == 64 * 255 * 127


def test_the_chosen_format_multiplies_unsigned_by_unsigned() -> None:
    """The proof below is for u8 x u8: the format must stay that."""
    assert not CHOSEN.act_signed and not CHOSEN.weight_signed
    assert CHOSEN.act_zero + CHOSEN.act_levels <= 255 and CHOSEN.weight_levels <= 127


@pytest.mark.parametrize("k", [384, 1536, 4096])
def test_chosen_format_pairs_and_sums_cannot_overflow(k: int) -> None:
    """Worst-case operands of the chosen format: every pair and the whole sum are exact."""
    acts, weights = operand_extremes(CHOSEN)
    for a_value in acts:
        for w_value in weights:
            a = np.full(k, a_value, dtype=np.uint8)
            b = np.full(k, w_value, dtype=np.uint8)
            pair = int(vpmaddwd(a[:2].astype(np.int16), b[:2].astype(np.int16))[0])
            assert INT32[0] < pair == 2 * a_value * w_value < INT32[1]
            assert u8u8_dot(a, b) == k * a_value * w_value


def test_seven_bit_weights_would_also_fit_int16_pairs() -> None:
    """The measured alternative (u8 x s8 with 7-bit weights) is exact too, by the same model."""
    fmt = bert_quantize.FORMATS["u8s8-w7"]
    a = np.full(384, fmt.act_zero + fmt.act_levels, dtype=np.uint8)
    for w in (fmt.weight_levels, -fmt.weight_levels):
        b = np.full(384, w, dtype=np.int8)
        assert u8s8_dot(a, b) == 384 * 255 * w


def test_quantized_graph_uses_the_chosen_format(tmp_path: Path) -> None:
    """Every MatMulInteger of an imported model: u8 activations, u8 weights in range."""
    out = import_checkpoint(write_tiny_bert(tmp_path / "tiny"), tmp_path / "out", model_id="t/t")
    model = onnx.load(str(out / "onnx/model_quantized.onnx"))
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    matmuls = [node for node in model.graph.node if node.op_type == "MatMulInteger"]
    assert len(matmuls) == 2 * 6  # q, k, v, attention output, intermediate, output per layer
    for node in matmuls:
        weight, a_zero, w_zero = (initializers[name] for name in node.input[1:4])
        assert weight.dtype == np.uint8 and a_zero.dtype == np.uint8 and w_zero.dtype == np.uint8
        assert int(w_zero) == CHOSEN.weight_zero
        assert int(a_zero) in (CHOSEN.act_zero, 0)  # 0: one-sided GELU inputs
        levels = np.abs(weight.astype(np.int64) - CHOSEN.weight_zero)
        assert int(levels.max()) <= CHOSEN.weight_levels


def _matmul_integer(a: np.ndarray, b: np.ndarray, a_zero: int, b_zero: int) -> np.ndarray:
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "az", "bz"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, list(a.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, None)],
        initializer=[
            numpy_helper.from_array(b, "B"),
            numpy_helper.from_array(np.array(a_zero, np.uint8), "az"),
            numpy_helper.from_array(np.array(b_zero, np.uint8), "bz"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["Y"], {"A": a})[0])


def test_onnxruntime_on_this_cpu_gives_exact_u8u8_products() -> None:
    """This CPU's kernel agrees with numpy on extreme and random operands of the format."""
    rng = np.random.default_rng(0)
    k, n = 1536, 48
    high = CHOSEN.act_zero + CHOSEN.act_levels
    cases = [
        (np.full((4, k), high, np.uint8), np.full((k, n), CHOSEN.weight_zero + 127, np.uint8)),
        (np.full((4, k), 0, np.uint8), np.full((k, n), CHOSEN.weight_zero - 127, np.uint8)),
        (
            rng.integers(0, high + 1, (8, k)).astype(np.uint8),
            rng.integers(1, 256, (k, n)).astype(np.uint8),
        ),
    ]
    for a, b in cases:
        expected = (a.astype(np.int64) - CHOSEN.act_zero) @ (b.astype(np.int64) - 128)
        got = _matmul_integer(a, b, CHOSEN.act_zero, CHOSEN.weight_zero)
        assert np.array_equal(got, expected)
