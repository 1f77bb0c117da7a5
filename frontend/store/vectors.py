"""Vectors as the store keeps them: BLOB = the float32 values, little-endian, nothing else.

``encode`` writes exactly ``4 × dim`` bytes even for a view into a larger buffer (the
earlier release once stored whole backing buffers; that must never happen again).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from thatch.frontend.errors import InvalidInputError

__all__ = [
    "FLOAT32_LE",
    "Vector",
    "as_vector",
    "cosine",
    "decode",
    "encode",
]

FLOAT32_LE = np.dtype("<f4")
Vector = npt.NDArray[np.float32]


def as_vector(value: Any) -> Vector:
    """A validated 1-D float32 copy-free view of ``value``; InvalidInputError otherwise."""
    try:
        array = np.asarray(value, dtype=FLOAT32_LE)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"vector must be numeric: {error}") from None
    if array.ndim != 1:
        raise InvalidInputError(f"vector must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise InvalidInputError("vector must not be empty")
    if not np.all(np.isfinite(array)):
        raise InvalidInputError("vector must hold finite numbers only (found NaN or infinity)")
    return array


def encode(value: Any) -> bytes:
    """The BLOB of a vector: exactly its float32 values, little-endian."""
    return as_vector(value).tobytes()


def decode(blob: object) -> Vector | None:
    """The vector of a BLOB, or None when it is missing or unusable (length not 4·k, k>0)."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        return None
    if len(blob) == 0 or len(blob) % 4 != 0:
        return None
    return np.frombuffer(blob, dtype=FLOAT32_LE)


def cosine(a: Any, b: Any) -> float:
    """dot(a,b)/(|a|·|b|) in float64; 0 when either norm is 0. Dimensions must match."""
    left = np.asarray(a, dtype=np.float64)
    right = np.asarray(b, dtype=np.float64)
    if left.shape != right.shape:
        raise InvalidInputError(f"cannot compare vectors of shapes {left.shape} and {right.shape}")
    norms = float(np.linalg.norm(left)) * float(np.linalg.norm(right))
    if norms == 0.0 or not np.isfinite(norms):
        return 0.0
    return float(np.dot(left, right) / norms)
