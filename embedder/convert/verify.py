"""Check an exported BERT graph before it is installed: fp32 against the numpy reference,
int8 against fp32, both on a padded batch of sample sentences after pooling.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from thatch.embedder.client.errors import ModelError
from thatch.embedder.convert import numpy_bert
from thatch.embedder.convert.weights import BertConfig, Weights
from thatch.embedder.models import known_answers

__all__ = [
    "INT8_MIN_COSINE",
    "SAMPLES",
    "check_fp32",
    "encode_samples",
    "int8_agrees",
    "reference_vectors",
    "run_onnx",
]

SAMPLES = (
    "The quick brown fox jumps over the lazy dog.",
    "Run `make -j8 release` from the repo root; the debug build lives under build/debug.",
    "thatch remembers",
    # One word: the fewest rows to average quantization noise over, int8's worst case.
    "ok",
)
FP32_TOLERANCE = 1e-4
# The bar int8 must meet against fp32 on every text (the same the embedder applies at load,
# known_answers.MIN_COSINE); all-MiniLM-L6-v2 in bert_quantize's u8u8 format stays above
# 0.995 against our own fp32 on these texts and known_answers.TEXTS, on every CPU.
INT8_MIN_COSINE = known_answers.MIN_COSINE


def encode_samples(
    tokenizer: Tokenizer, max_tokens: int, texts: tuple[str, ...] = SAMPLES
) -> list[Encoding]:
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_tokens)
    return [tokenizer.encode(text) for text in texts]


def _batch(encodings: list[Encoding]) -> dict[str, npt.NDArray[np.int64]]:
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def pool(
    hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64], pooling: str
) -> npt.NDArray[np.float32]:
    """docs/embedder.md §computation pooling (mean over the mask, or first token) and L2
    normalisation."""
    if pooling == "cls":
        vectors = hidden[:, 0, :]
    else:
        weights = mask[:, :, None].astype(np.float32)
        vectors = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return (vectors / norms).astype(np.float32)


def run_onnx(path: Path, encodings: list[Encoding], pooling: str) -> npt.NDArray[np.float32]:
    """Pooled, normalised vectors of ``encodings`` run as one padded batch."""
    from thatch.embedder.models.ort_loader import load_onnxruntime

    ort = load_onnxruntime()

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: warnings would clutter the import's stderr
    options.intra_op_num_threads = min(4, os.cpu_count() or 1)
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feed = _batch(encodings)
        (hidden,) = session.run(["last_hidden_state"], feed)
    except Exception as error:  # onnxruntime raises its own unexported exception types
        raise ModelError(
            f"verification failed: onnxruntime cannot run {path.name}: {error}"
        ) from None
    return pool(np.asarray(hidden, dtype=np.float32), feed["attention_mask"], pooling)


def reference_vectors(
    weights: Weights, config: BertConfig, encodings: list[Encoding], pooling: str
) -> npt.NDArray[np.float32]:
    """The numpy reference, one unpadded sequence at a time."""
    # Widen the dense weights once rather than in every call; the embedding tables are
    # only indexed, so they stay float32.
    wide = {
        name: value if name.startswith("embeddings.") else value.astype(np.float64)
        for name, value in weights.items()
    }
    rows = [
        numpy_bert.pooled(
            numpy_bert.forward(wide, config, np.asarray(e.ids, dtype=np.int64)), pooling
        )
        for e in encodings
    ]
    return np.stack(rows).astype(np.float32)


def check_fp32(onnx_vectors: npt.NDArray[np.float32], reference: npt.NDArray[np.float32]) -> float:
    """The largest component difference; ModelError when beyond FP32_TOLERANCE."""
    diff = float(np.max(np.abs(onnx_vectors - reference)))
    if not diff <= FP32_TOLERANCE:  # also catches NaN
        raise ModelError(
            f"verification failed: the ONNX graph and the numpy reference differ by {diff:.2e} "
            f"(max {FP32_TOLERANCE:.0e}) on the sample sentences; nothing was written"
        )
    return diff


def int8_agrees(
    int8_vectors: npt.NDArray[np.float32], fp32_vectors: npt.NDArray[np.float32]
) -> tuple[bool, float]:
    """Whether every int8 vector is within INT8_MIN_COSINE of fp32's, and the lowest cosine."""
    cosine = known_answers.lowest_cosine(int8_vectors, fp32_vectors)
    return cosine >= INT8_MIN_COSINE, cosine
