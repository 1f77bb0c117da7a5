"""The embedder checks an int8 file against fp32 at load and serves fp32 when it is wrong.

Broken int8 files here: our own import with its int8 weights scrambled (wrong on every CPU),
and onnxruntime's ``quantize_dynamic`` output laid out like a hub snapshot in a fake Hugging
Face cache (wrong on AVX2-only CPUs, where u8 x s8 products saturate). Whatever CPU runs
these tests, the served file is either int8 that agrees with fp32 or fp32 with one warning.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.support.embedder_proc import embedder_process
from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import Encoder
from thatch.embedder.models import known_answers
from thatch.embedder.models.registry import sha256_file, with_onnx
from thatch.embedder.models.resolve import create_encoder, resolve_model
from thatch.embedder.models.runtime import OnnxEncoder

INT8 = "onnx/model_quantized.onnx"
FP32 = "onnx/model.onnx"
HUB_ID = "Xenova/all-MiniLM-L6-v2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
WARNING = "disagrees with fp32 on this CPU"


def vectors(encoder: Encoder, texts: list[str]) -> np.ndarray:
    return encoder.encode([encoder.tokenize(text, Kind.PASSAGE) for text in texts])


def reference_texts(items: list[dict[str, object]]) -> list[str]:
    return [str(item["text"]) for item in items]


def linked_copy(src: Path, dst: Path) -> Path:
    """A model directory of hard links (cheap), safe to change file by file."""
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


def scramble_int8(model_dir: Path) -> None:
    """Permute every int8 weight matrix's rows: a valid graph with wrong answers."""
    path = model_dir / INT8
    model = onnx.load(str(path))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        if init.name.endswith("/w_int8"):
            weight = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(rng.permutation(weight), init.name))
    path.unlink()  # a hard link: never write through to the shared import
    onnx.save_model(model, str(path))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture(scope="module")
def hub_cache(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache holding a Xenova-style snapshot: fp32 and quantize_dynamic int8."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    cache = tmp_path_factory.mktemp("hf") / "hub"
    storage = cache / ("models--" + HUB_ID.replace("/", "--"))
    snapshot = storage / "snapshots" / COMMIT
    (snapshot / "onnx").mkdir(parents=True)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", FP32):
        os.link(minilm_dir / name, snapshot / name)
    root = logging.getLogger()
    level = root.level
    quantize_dynamic(str(minilm_dir / FP32), str(snapshot / INT8), weight_type=QuantType.QInt8)
    root.setLevel(level)  # onnxruntime.quantization lowers the root logger's level
    return cache


@pytest.fixture
def hub_env(hub_cache: Path) -> dict[str, str]:
    return {"HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def fp32(minilm_dir: Path) -> Iterator[OnnxEncoder]:
    encoder = OnnxEncoder(with_onnx(resolve_model(str(minilm_dir), env={}), FP32), threads=2)
    yield encoder
    encoder.release()


def test_import_stores_fp32_known_answers(minilm_dir: Path, fp32: OnnxEncoder) -> None:
    """The import keeps fp32's vectors of the fixed texts beside thatch_model.json."""
    stored = known_answers.read(minilm_dir, 384)
    assert stored is not None
    again = vectors(fp32, list(known_answers.TEXTS))
    assert float(np.abs(stored - again).max()) <= 1e-5


def test_imported_model_serves_int8_that_agrees_or_fp32(
    minilm_dir: Path,
    fp32: OnnxEncoder,
    minilm_reference: list[dict[str, object]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On this CPU the imported model serves int8 within 0.99 of fp32, or fp32 (warned)."""
    encoder = create_encoder(resolve_model(str(minilm_dir), env={}), threads=2)
    encoder.load()
    served = encoder.settings
    assert served.onnx_path is not None
    assert served.sha256 == sha256_file(served.onnx_path)
    texts = reference_texts(minilm_reference)
    cosines = np.sum(vectors(encoder, texts) * vectors(fp32, texts), axis=1)
    encoder.release()
    if served.quantized:
        assert served.onnx_path == minilm_dir / INT8
        assert float(cosines.min()) >= 0.99 and warnings(caplog) == []
    else:
        assert served.onnx_path == minilm_dir / FP32
        assert len([w for w in warnings(caplog) if WARNING in w]) == 1
        assert float(cosines.min()) >= 0.9999


def test_scrambled_int8_is_replaced_by_fp32_with_one_warning(
    minilm_dir: Path, fp32: OnnxEncoder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Wrong int8 answers: fp32 is served, settings say so, one warning names the cause."""
    model = linked_copy(minilm_dir, tmp_path / "model")
    scramble_int8(model)
    settings = resolve_model(str(model), env={})
    assert settings.quantized and settings.onnx_path == model / INT8
    encoder = create_encoder(settings, threads=2)
    encoder.load()
    assert encoder.settings.onnx_path == model / FP32
    assert not encoder.settings.quantized
    assert encoder.settings.sha256 == sha256_file(model / FP32)
    (line,) = warnings(caplog)
    assert f"int8 model {INT8} {WARNING}" in line and f"serving {FP32} instead" in line
    texts = list(known_answers.TEXTS)
    assert np.array_equal(vectors(encoder, texts), vectors(fp32, texts))
    encoder.release()  # idle release and reload keep serving fp32, without a new check
    encoder.load()
    assert encoder.settings.onnx_path == model / FP32 and len(warnings(caplog)) == 1


def test_wrong_int8_without_an_fp32_file_fails_to_load(minilm_dir: Path, tmp_path: Path) -> None:
    """Stored known answers catch wrong int8 even with no fp32 file; nothing wrong is served."""
    model = linked_copy(minilm_dir, tmp_path / "model")
    scramble_int8(model)
    (model / FP32).unlink()
    encoder = create_encoder(resolve_model(str(model), env={}), threads=2)
    with pytest.raises(ModelError, match="no fp32 file to serve instead"):
        encoder.load()
    assert not encoder.loaded


def test_unverifiable_int8_is_served_with_a_warning(
    minilm_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No stored vectors and no fp32 file: served as it is, and the log says it is unchecked."""
    model = linked_copy(minilm_dir, tmp_path / "model")
    (model / FP32).unlink()
    (model / known_answers.KNOWN_ANSWERS_FILE).unlink()
    encoder = create_encoder(resolve_model(str(model), env={}), threads=2)
    encoder.load()
    assert encoder.settings.onnx_path == model / INT8 and encoder.settings.quantized
    (line,) = warnings(caplog)
    assert "cannot be checked" in line and "serving it unchecked" in line
    encoder.release()


def test_int8_graph_is_checked_whatever_its_metadata_says(
    minilm_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """quantized follows the graph's integer ops: a mislabelled int8 file is still checked."""
    model = linked_copy(minilm_dir, tmp_path / "model")
    scramble_int8(model)
    meta = json.loads((model / "thatch_model.json").read_text())
    meta["quantized"] = False
    (model / "thatch_model.json").unlink()
    (model / "thatch_model.json").write_text(json.dumps(meta))
    encoder = create_encoder(resolve_model(str(model), env={}), threads=2)
    encoder.load()
    assert encoder.settings.onnx_path == model / FP32 and not encoder.settings.quantized
    assert len(warnings(caplog)) == 1
    encoder.release()


def test_hub_quantize_dynamic_file_agrees_or_fp32_is_served(
    hub_env: dict[str, str],
    fp32: OnnxEncoder,
    minilm_reference: list[dict[str, object]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hub snapshot's int8 file is checked against the fp32 file beside it."""
    settings = resolve_model(HUB_ID, env=hub_env)
    assert settings.source == "hub cache" and settings.onnx_path is not None
    assert settings.onnx_path.name == "model_quantized.onnx" and settings.quantized
    encoder = create_encoder(settings, threads=2)
    encoder.load()
    texts = reference_texts(minilm_reference)
    cosines = np.sum(vectors(encoder, texts) * vectors(fp32, texts), axis=1)
    served = encoder.settings
    encoder.release()
    assert served.onnx_path is not None
    assert served.sha256 == sha256_file(served.onnx_path)
    if served.quantized:
        assert served.onnx_path == settings.onnx_path and warnings(caplog) == []
        assert float(cosines.min()) >= 0.99
    else:
        assert served.onnx_path == settings.onnx_path.parent / "model.onnx"
        (line,) = warnings(caplog)
        assert WARNING in line and "serving onnx/model.onnx instead" in line
        assert float(cosines.min()) >= 0.9999


def test_info_describes_the_file_really_served(
    minilm_dir: Path, tmp_path: Path, short_tmp: Path
) -> None:
    """A real embedder with a broken int8 file: Info says fp32 and its sha256; one log line."""
    model = linked_copy(minilm_dir, tmp_path / "model")
    scramble_int8(model)
    with embedder_process(str(model), socket_dir=short_tmp) as proc:
        info = proc.info()
        log = proc.log_text()
    assert info.quantized is False
    assert info.model_sha256 == sha256_file(model / FP32)
    assert info.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert log.count(WARNING) == 1 and "WARNING" in log


def test_demo_with_a_broken_int8_model_runs_on_fp32_and_says_why(
    minilm_dir: Path, tmp_path: Path
) -> None:
    """`thatch demo` never fails because of quantization: one line, then the demo goes on."""
    from tests.test_demo import demo_env, run_demo

    model = linked_copy(minilm_dir, tmp_path / "model")
    scramble_int8(model)
    run = run_demo(demo_env(tmp_path / "home", tmp_path / "cache"), "--model", str(model))
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if WARNING in line]
    assert len(lines) == 1 and lines[0].endswith(f"serving {FP32} instead"), run.stdout
    assert run.leftover == []
