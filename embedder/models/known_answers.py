"""Known answers for int8 ONNX files: fixed texts and their fp32 vectors.

int8 kernels differ per CPU (onnxruntime's AVX2 u8 x s8 kernel saturates), so an int8 file
that is right on one machine can be wrong on the next. The import stores the fp32 model's
vectors for TEXTS in KNOWN_ANSWERS_FILE; at load the runtime compares the int8 session's
vectors with those (or with the fp32 file beside the int8 one, as in the hub's Xenova
layout) and serves fp32 when they disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = [
    "KNOWN_ANSWERS_FILE",
    "MIN_COSINE",
    "TEXTS",
    "fp32_beside",
    "lowest_cosine",
    "read",
    "write",
]

KNOWN_ANSWERS_FILE = "thatch_known_answers.json"
# Short texts are int8's worst case (fewest rows to average quantization noise over).
TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Run `make -j8 release` from the repo root; the debug build lives under build/debug.",
    "thatch remembers",
    "ok",
    "?",
    "数据库连接池大小",
)
MIN_COSINE = 0.99
FP32_CANDIDATES = ("onnx/model.onnx", "model.onnx")


def fp32_beside(model_dir: Path, served: Path) -> str | None:
    """The fp32 ONNX file of the model directory other than ``served``, if there is one."""
    for name in FP32_CANDIDATES:
        path = model_dir / name
        if path.is_file() and path.resolve() != served.resolve():
            return name
    return None


def write(model_dir: Path, vectors: npt.NDArray[np.float32], fp32_onnx: str) -> None:
    """Store the fp32 vectors of TEXTS beside thatch_model.json."""
    record = {
        "texts": list(TEXTS),
        "kind": "passage",
        "onnx": fp32_onnx,
        "vectors": [[float(f"{value:.7g}") for value in row] for row in vectors],
    }
    (model_dir / KNOWN_ANSWERS_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")


def read(model_dir: Path, dim: int) -> npt.NDArray[np.float32] | None:
    """The stored fp32 vectors of TEXTS, or None when absent or not for these texts/dim."""
    try:
        record = json.loads((model_dir / KNOWN_ANSWERS_FILE).read_text(encoding="utf-8"))
        vectors = np.asarray(record["vectors"], dtype=np.float32)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if record.get("texts") != list(TEXTS) or vectors.shape != (len(TEXTS), dim):
        return None
    if not np.isfinite(vectors).all():
        return None
    return vectors


def lowest_cosine(vectors: npt.NDArray[np.float32], reference: npt.NDArray[np.float32]) -> float:
    """The worst row's cosine (both sides L2-normalised); NaN counts as disagreement."""
    cosines = np.sum(vectors.astype(np.float64) * reference.astype(np.float64), axis=1)
    worst = float(np.min(cosines))
    return worst if np.isfinite(worst) else -1.0
