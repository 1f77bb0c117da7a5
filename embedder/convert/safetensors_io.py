"""A minimal reader and writer of the ``.safetensors`` format, with numpy only.

Layout: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name
to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of the
header; an optional ``"__metadata__"`` maps strings to strings), then the raw little-endian
tensor bytes. We implement it ourselves because thatch must not depend on the
``safetensors`` package (nor PyTorch).

Floating tensors (F32, F16, BF16, F64) are returned as float32; integer tensors keep
their width. Anything malformed raises ``ModelError`` naming the file.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.errors import ModelError

__all__ = ["read_header", "read_metadata", "read_safetensors", "write_safetensors"]

# A header beyond this is hostile or corrupt; real ones are a few hundred KB at most.
MAX_HEADER_BYTES = 100 * 1024 * 1024

_NUMPY_DTYPES: dict[str, np.dtype[np.generic]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # converted to float32 by shifting into the high half
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}

WRITE_DTYPES = ("F32", "F16", "BF16")


def _bad(path: Path, why: str) -> ModelError:
    return ModelError(f"{path} is not a valid safetensors file: {why}")


def _raw_header(path: Path) -> tuple[int, int, dict[str, Any]]:
    """The file size, the data start offset and the header object as written."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise _bad(path, "file shorter than its 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise _bad(path, f"header length {length} exceeds the file or the limit")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _bad(path, f"header is not JSON ({error})") from None
    except RecursionError:
        raise _bad(path, "header nests too deeply to be JSON thatch reads") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    return size, 8 + length, header


def read_header(path: Path) -> tuple[int, dict[str, dict[str, object]]]:
    """The data start offset and the tensor entries (``__metadata__`` removed)."""
    size, start, header = _raw_header(path)
    header.pop("__metadata__", None)
    for name, entry in header.items():
        _check_entry(path, name, entry, size - start)
    return start, header


def read_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` strings of the file (others dropped); ModelError when the
    header is malformed."""
    meta = _raw_header(path)[2].get("__metadata__")
    if not isinstance(meta, dict):
        return {}
    return {key: value for key, value in meta.items() if isinstance(value, str)}


def _check_entry(path: Path, name: str, entry: object, data_size: int) -> None:
    if not isinstance(entry, dict):
        raise _bad(path, f"entry {name!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in _NUMPY_DTYPES:
        raise _bad(path, f"tensor {name!r} has unsupported dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise _bad(path, f"tensor {name!r} has an invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise _bad(path, f"tensor {name!r} has data offsets {offsets!r} outside the file")
    expected = int(np.prod(shape, dtype=np.int64)) * _NUMPY_DTYPES[dtype].itemsize
    if offsets[1] - offsets[0] != expected:
        raise _bad(path, f"tensor {name!r} has {offsets[1] - offsets[0]} bytes, needs {expected}")


def _to_output(raw: npt.NDArray[np.generic], dtype: str) -> npt.NDArray[np.generic]:
    if dtype == "BF16":
        widened = raw.astype(np.uint32) << np.uint32(16)
        return widened.view(np.float32)
    if dtype in _FLOAT_DTYPES:
        return raw.astype(np.float32)
    return raw.copy()


def read_safetensors(path: Path) -> dict[str, npt.NDArray[np.generic]]:
    """Every tensor of the file: floats as float32, integers as stored. Copies the data."""
    path = Path(path)
    start, header = read_header(path)
    tensors: dict[str, npt.NDArray[np.generic]] = {}
    if not header:
        return tensors
    with path.open("rb") as handle:
        if path.stat().st_size == 0:
            raise _bad(path, "empty file")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for name, entry in header.items():
                dtype = str(entry["dtype"])
                # read_header checked both: two ints, a list of ints.
                begin, end = cast("list[int]", entry["data_offsets"])
                shape = tuple(cast("list[int]", entry["shape"]))
                raw = np.frombuffer(
                    mapped,
                    dtype=_NUMPY_DTYPES[dtype],
                    count=(end - begin) // _NUMPY_DTYPES[dtype].itemsize,
                    offset=start + begin,
                ).reshape(shape)
                tensors[name] = _to_output(raw, dtype)
                del raw  # release the buffer export before the mmap closes
    return tensors


def _encode(array: npt.NDArray[np.generic], float_dtype: str) -> tuple[str, bytes]:
    if np.issubdtype(array.dtype, np.floating):
        as32 = np.ascontiguousarray(array, dtype=np.float32)
        if float_dtype == "F32":
            return "F32", as32.astype("<f4").tobytes()
        if float_dtype == "F16":
            return "F16", as32.astype("<f2").tobytes()
        # Round to nearest even into the top 16 bits.
        bits = as32.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return "BF16", rounded.astype("<u2").tobytes()
    for name, dtype in _NUMPY_DTYPES.items():
        if name not in _FLOAT_DTYPES and dtype == array.dtype.newbyteorder("<"):
            return name, np.ascontiguousarray(array, dtype=dtype).tobytes()
    raise ValueError(f"cannot write arrays of dtype {array.dtype}")


def write_safetensors(
    path: Path,
    tensors: Mapping[str, npt.NDArray[np.generic]],
    *,
    float_dtype: str = "F32",
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` (floats stored as ``float_dtype``: F32, F16 or BF16)."""
    if float_dtype not in WRITE_DTYPES:
        raise ValueError(f"float_dtype must be one of {WRITE_DTYPES}")
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    chunks: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        dtype, data = _encode(np.asarray(array), float_dtype)
        header[name] = {
            "dtype": dtype,
            "shape": list(np.shape(array)),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the reference implementation aligns data to 8
    with Path(path).open("wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for data in chunks:
            handle.write(data)
