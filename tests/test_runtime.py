"""Texts to vectors: tokenization, ONNX inference, pooling, normalisation (docs/embedder.md
§computation, §mock-model, §batching)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from thatch.embedder.client.kind import Kind
from thatch.embedder.models.mock import MOCK_DIM, MockEncoder, mock_vector
from thatch.embedder.models.registry import with_onnx
from thatch.embedder.models.resolve import create_encoder, resolve_model
from thatch.embedder.models.runtime import OnnxEncoder, default_threads, pool, session_options

MIXED = [
    "x",
    "how do I build the project",
    "# Long-ish note\n\n" + "The worker reads batches and validates them. " * 12,
    "数据库连接池大小",
    "emoji 🎉 and control \x07 chars",
]


@pytest.fixture(scope="module")
def fp32(minilm_dir: Path) -> Iterator[OnnxEncoder]:
    settings = with_onnx(resolve_model(str(minilm_dir), env={}), "onnx/model.onnx")
    encoder = OnnxEncoder(settings, threads=2)
    yield encoder
    encoder.release()


def reference_arrays(items: list[dict[str, object]]) -> np.ndarray:
    return np.array([item["embedding"] for item in items], dtype=np.float32)


def test_fp32_matches_sentence_transformers(
    fp32: OnnxEncoder, minilm_reference: list[dict[str, object]]
) -> None:
    """fp32 vectors match an independent sentence-transformers run (cosine ≥ 0.9999)."""
    batch = [fp32.tokenize(str(item["text"]), Kind.PASSAGE) for item in minilm_reference]
    assert [t.n_tokens for t in batch] == [item["n_tokens"] for item in minilm_reference]
    vectors = fp32.encode(batch)
    assert vectors.dtype == np.float32 and vectors.shape == (len(batch), 384)
    cosines = np.sum(vectors * reference_arrays(minilm_reference), axis=1)
    assert float(cosines.min()) >= 0.9999


def test_int8_close_to_reference(
    minilm_dir: Path, minilm_reference: list[dict[str, object]]
) -> None:
    """The int8 model stays within cosine 0.99 of the reference."""
    settings = with_onnx(resolve_model(str(minilm_dir), env={}), "onnx/model_quantized.onnx")
    assert settings.quantized
    encoder = OnnxEncoder(settings, threads=2)
    batch = [encoder.tokenize(str(item["text"]), Kind.PASSAGE) for item in minilm_reference]
    cosines = np.sum(encoder.encode(batch) * reference_arrays(minilm_reference), axis=1)
    encoder.release()
    assert float(cosines.min()) >= 0.99


def test_vectors_are_unit_length(fp32: OnnxEncoder) -> None:
    """Every vector has L2 norm 1 (within float32 rounding)."""
    vectors = fp32.encode([fp32.tokenize(text, Kind.PASSAGE) for text in MIXED])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("onnx_file", ["onnx/model.onnx", "onnx/model_quantized.onnx"])
def test_batch_companions_do_not_change_vectors(minilm_dir: Path, onnx_file: str) -> None:
    """A text's vector alone equals its vector in a mixed-length batch within 1e-5.

    For int8 this holds only because per-tensor dynamic quantization runs one text per run.
    """
    encoder = OnnxEncoder(with_onnx(resolve_model(str(minilm_dir), env={}), onnx_file))
    tokens = [encoder.tokenize(text, Kind.PASSAGE) for text in MIXED]
    together = encoder.encode(tokens)
    alone = np.stack([encoder.encode([t])[0] for t in tokens])
    encoder.release()
    assert float(np.abs(together - alone).max()) <= 1e-5


def test_truncation_flag_and_special_tokens(fp32: OnnxEncoder) -> None:
    """Long texts are cut to max_tokens, keep [SEP] at the end and report truncated."""
    long = fp32.tokenize("word " * 1000, Kind.PASSAGE)
    short = fp32.tokenize("word " * 10, Kind.PASSAGE)
    sep = fp32.tokenize("", Kind.PASSAGE).ids[-1]
    assert long.truncated and long.n_tokens == fp32.settings.max_tokens == 256
    assert int(long.ids[-1]) == int(sep)
    assert not short.truncated and short.n_tokens == 12


def test_huge_and_hostile_text_encodes(fp32: OnnxEncoder) -> None:
    """100,000 characters, NULs, lone controls and odd Unicode still give one unit vector."""
    text = ("\x00\u200b\ufeff é 🎉 " * 20000)[:100_000]
    token = fp32.tokenize(text, Kind.PASSAGE)
    vector = fp32.encode([token])
    assert token.truncated and vector.shape == (1, 384)
    assert np.isfinite(vector).all()


def test_query_prefix_only_for_queries(minilm_dir: Path, tmp_path: Path) -> None:
    """QUERY texts get the model's prefix; PASSAGE texts do not."""
    model = tmp_path / "prefixed"
    shutil.copytree(minilm_dir, model, ignore=shutil.ignore_patterns("*.onnx"))
    (model / "onnx" / "model.onnx").symlink_to(minilm_dir / "onnx" / "model.onnx")
    meta = json.loads((model / "thatch_model.json").read_text())
    meta.update(query_prefix="query: ", onnx="onnx/model.onnx", quantized=False)
    (model / "thatch_model.json").write_text(json.dumps(meta))
    encoder = create_encoder(resolve_model(str(model), env={}))
    assert encoder.settings.query_prefix == "query: "
    query = encoder.tokenize("build steps", Kind.QUERY)
    passage = encoder.tokenize("build steps", Kind.PASSAGE)
    by_hand = encoder.tokenize("query: build steps", Kind.PASSAGE)
    assert query.ids.tolist() == by_hand.ids.tolist()
    assert passage.ids.tolist() != query.ids.tolist()
    assert not encoder.loaded  # tokenizing never loads the session


def test_release_then_encode_reloads(fp32: OnnxEncoder) -> None:
    """After release the session is gone; the next encode loads it again, same vectors."""
    tokens = [fp32.tokenize("alembic migration pitfalls", Kind.QUERY)]
    before = fp32.encode(tokens)
    assert fp32.loaded
    fp32.release()
    assert not fp32.loaded
    after = fp32.encode(tokens)
    assert fp32.loaded
    assert np.array_equal(before, after)


def test_empty_batch_gives_empty_matrix(fp32: OnnxEncoder) -> None:
    """Encoding nothing returns a 0×dim matrix without running the model."""
    assert fp32.encode([]).shape == (0, 384)


def test_session_options_follow_spec() -> None:
    """Threads, sequential execution, all optimizations and no spinning are configured."""
    options = session_options(3)
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 1
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert options.enable_cpu_mem_arena


def test_default_threads_are_usable_cpus_capped() -> None:
    """Default intra-op threads = CPUs in the affinity mask, at most 8."""
    assert default_threads() == min(8, len(os.sched_getaffinity(0)))


def test_pooling_math() -> None:
    """Mean ignores masked positions; cls takes the first token; both are normalised."""
    hidden = np.array([[[3.0, 4.0], [1.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]], dtype=np.int64)
    assert np.allclose(pool(hidden, mask, "mean"), [[2 / 2.828427, 2 / 2.828427]], atol=1e-6)
    assert np.allclose(pool(hidden, mask, "cls"), [[0.6, 0.8]])
    assert np.allclose(pool(np.zeros((1, 2, 2)), np.zeros((1, 2), np.int64), "mean"), 0.0)


def test_mock_identical_texts_have_cosine_one() -> None:
    """The mock model gives identical vectors (cosine 1.0) for identical texts."""
    encoder = MockEncoder()
    a, b = encoder.encode([encoder.tokenize(t, Kind.QUERY) for t in ["Tabs in Go", "tabs in go"]])
    assert a.shape == (MOCK_DIM,) and a.dtype == np.float32
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)


def test_mock_shared_words_give_positive_cosine() -> None:
    """Texts sharing words have positive cosine under the mock model."""
    a = mock_vector("the user prefers tabs in go files")
    b = mock_vector("tabs or spaces for go")
    assert float(a @ b) > 0


def test_mock_text_without_words_is_first_axis() -> None:
    """A text with no \\w+ word embeds to v[0] = 1; its token count is 0."""
    encoder = MockEncoder()
    token = encoder.tokenize("?! ...", Kind.PASSAGE)
    vector = encoder.encode([token])[0]
    assert token.n_tokens == 0 and vector[0] == 1.0 and float(np.abs(vector).sum()) == 1.0


def test_mock_matches_spec_hash_rule() -> None:
    """One word lands at sha256-derived index with sha256-derived sign."""
    import hashlib

    digest = hashlib.sha256(b"hello").digest()
    index = int.from_bytes(digest[:4], "big") % MOCK_DIM
    sign = 1.0 if digest[4] % 2 == 0 else -1.0
    vector = mock_vector("HELLO")
    assert vector[index] == sign and float(np.abs(vector).sum()) == 1.0


def test_mock_module_does_not_import_onnxruntime() -> None:
    """mock.py stays free of onnxruntime (it is the no-dependency model)."""
    mock = __import__("thatch.embedder.models.mock", fromlist=["x"])
    source = Path(str(mock.__file__)).read_text()
    assert "onnxruntime" not in source.replace("no onnxruntime", "")
