"""The numpy safetensors reader/writer: round trips, dtypes, and hostile files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from thatch.embedder.client.errors import ModelError
from thatch.embedder.convert.safetensors_io import read_header, read_safetensors, write_safetensors


def _raw_file(path: Path, header: object, data: bytes = b"") -> Path:
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    return path


def test_f32_round_trip_keeps_values_shapes_and_ints(tmp_path: Path) -> None:
    """F32 and I64 tensors come back bit-identical with their shapes."""
    rng = np.random.default_rng(1)
    tensors: dict[str, np.ndarray] = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b.bias": rng.standard_normal(7).astype(np.float32),
        "ids": np.arange(6, dtype=np.int64).reshape(1, 6),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = tmp_path / "m.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    back = read_safetensors(path)
    assert set(back) == set(tensors)
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype
        np.testing.assert_array_equal(back[name], array)


def test_header_is_aligned_and_metadata_is_not_a_tensor(tmp_path: Path) -> None:
    """The data starts at a multiple of 8 and __metadata__ is skipped on read."""
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"x": np.ones(3, dtype=np.float32)}, metadata={"format": "pt"})
    start, header = read_header(path)
    assert start % 8 == 0
    assert list(header) == ["x"]


@pytest.mark.parametrize(("dtype", "tolerance"), [("F16", 1e-3), ("BF16", 1e-2)])
def test_half_precision_reads_back_as_float32(tmp_path: Path, dtype: str, tolerance: float) -> None:
    """F16 and BF16 files are read as float32 within the format's precision."""
    values = np.array([[0.0, 1.0, -2.5, 3.14159], [1e-3, -1e3, 0.333, 65.5]], dtype=np.float32)
    path = tmp_path / "h.safetensors"
    write_safetensors(path, {"w": values}, float_dtype=dtype)
    assert read_header(path)[1]["w"]["dtype"] == dtype
    back = read_safetensors(path)["w"]
    assert back.dtype == np.float32
    np.testing.assert_allclose(
        np.asarray(back, dtype=np.float32), values, rtol=tolerance, atol=1e-6
    )


def test_bf16_exact_values_decode_exactly(tmp_path: Path) -> None:
    """A BF16 bit pattern decodes to the float32 with those top 16 bits."""
    bits = np.array([0x3F80, 0xC020, 0x0000], dtype="<u2")  # 1.0, -2.5, 0.0
    header = {"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}
    path = _raw_file(tmp_path / "b.safetensors", header, bits.tobytes())
    np.testing.assert_array_equal(read_safetensors(path)["w"], [1.0, -2.5, 0.0])


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "shorter than"),
        (b"\x01\x02", "shorter than"),
        (struct.pack("<Q", 1 << 40) + b"{}", "header length"),
        (struct.pack("<Q", 4) + b"nope", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (struct.pack("<Q", 2) + b"\xff\xfe", "not JSON"),
        (struct.pack("<Q", 200_000) + b"[" * 200_000, "nests too deeply"),
    ],
)
def test_malformed_files_raise_a_clear_model_error(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    """Truncated, oversized or non-JSON headers give one readable error naming the file."""
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=fragment) as caught:
        read_safetensors(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ({"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}, "outside the file"),
        ({"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}, "needs 12"),
        ({"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}, "unsupported dtype"),
        ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, "invalid shape"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}, "outside the file"),
        ("x", "not an object"),
    ],
)
def test_hostile_entries_are_refused(tmp_path: Path, entry: object, fragment: str) -> None:
    """Offsets past the end, size mismatches and odd dtypes are refused before reading."""
    path = _raw_file(tmp_path / "h.safetensors", {"w": entry}, b"\0" * 16)
    with pytest.raises(ModelError, match=fragment):
        read_safetensors(path)
