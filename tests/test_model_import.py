"""`thatch model import`: BERT safetensors -> verified ONNX model directory (docs/embedder.md
§import).

The real MiniLM import happens once per run (the session fixture ``minilm_dir``); error
and edge cases use tiny random checkpoints written with our own safetensors writer.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from thatch.embedder.client.errors import ModelError
from thatch.embedder.convert import numpy_bert
from thatch.embedder.convert import verify as bert_verify
from thatch.embedder.convert.importer import import_checkpoint
from thatch.embedder.convert.safetensors_io import write_safetensors
from thatch.embedder.convert.wordpiece import build_wordpiece_tokenizer

TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
    *string.digits, *string.punctuation, "the", "quick", "fox", "##s",
]  # fmt: skip


def _tiny_weights(
    layers: int, hidden: int, inter: int, vocab: int, seed: int
) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(vocab, hidden),
        "embeddings.position_embeddings.weight": normal(64, hidden),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": 1 + normal(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": normal(hidden),
    }
    shapes = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "intermediate.dense": (inter, hidden),
        "output.dense": (hidden, inter),
    }
    for n in range(layers):
        for name, shape in shapes.items():
            weights[f"encoder.layer.{n}.{name}.weight"] = normal(*shape)
            weights[f"encoder.layer.{n}.{name}.bias"] = normal(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"encoder.layer.{n}.{norm}.weight"] = 1 + normal(hidden)
            weights[f"encoder.layer.{n}.{norm}.bias"] = normal(hidden)
    return weights


def write_tiny_bert(
    path: Path, *, prefix: str = "", config: dict[str, object] | None = None, seed: int = 0
) -> Path:
    """A 2-layer, hidden-32, 4-head BERT with a vocab.txt tokenizer only."""
    path.mkdir(parents=True, exist_ok=True)
    base: dict[str, object] = {
        "_name_or_path": "/somewhere/local",
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "vocab_size": len(TINY_VOCAB),
        "layer_norm_eps": 1e-12,
    }
    (path / "config.json").write_text(json.dumps({**base, **(config or {})}))
    weights = _tiny_weights(2, 32, 64, len(TINY_VOCAB), seed)
    write_safetensors(path / "model.safetensors", {prefix + k: v for k, v in weights.items()})
    (path / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return path


def embed(
    model_dir: Path, onnx_name: str, texts: list[str], max_tokens: int
) -> tuple[npt.NDArray[np.float32], list[int]]:
    """Independent of the production runtime: tokenize, run one text at a time, mean-pool."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_tokens)
    session = ort.InferenceSession(str(model_dir / onnx_name), providers=["CPUExecutionProvider"])
    vectors, counts = [], []
    for text in texts:
        ids = np.asarray([tokenizer.encode(text).ids], dtype=np.int64)
        feed = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        (hidden,) = session.run(["last_hidden_state"], feed)
        vector = hidden[0].mean(axis=0)
        vectors.append(vector / np.linalg.norm(vector))
        counts.append(int(ids.shape[1]))
    return np.asarray(vectors, dtype=np.float32), counts


def _reference(
    items: list[dict[str, object]],
) -> tuple[list[str], npt.NDArray[np.float32], list[int]]:
    texts = [str(item["text"]) for item in items]
    vectors = np.asarray([item["embedding"] for item in items], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return texts, vectors, [int(item["n_tokens"]) for item in items]  # type: ignore[call-overload]


def test_fp32_reproduces_sentence_transformers(
    minilm_dir: Path, minilm_reference: list[dict[str, object]]
) -> None:
    """fp32 ONNX + tokenizer + mean pooling match torch: cosine ≥ 0.9999, same token counts."""
    texts, reference, n_tokens = _reference(minilm_reference)
    vectors, counts = embed(minilm_dir, "onnx/model.onnx", texts, 256)
    assert counts == n_tokens
    cosines = np.sum(vectors * reference, axis=1)
    assert cosines.min() >= 0.9999, cosines


def test_int8_stays_close_to_the_reference(
    minilm_dir: Path, minilm_reference: list[dict[str, object]]
) -> None:
    """int8 keeps cosine ≥ 0.99 with sentence-transformers on every item, 1-word ones too."""
    texts, reference, _ = _reference(minilm_reference)
    vectors, _ = embed(minilm_dir, "onnx/model_quantized.onnx", texts, 256)
    cosines = np.sum(vectors * reference, axis=1)
    assert cosines.min() >= 0.99, cosines


def test_int8_vectors_do_not_depend_on_batch_companions(minilm_dir: Path) -> None:
    """Per-token int8 scales: a padded batch gives each text the vector it gets alone."""
    texts = ["x", "how do I build the project", "The worker validates each batch. " * 20]
    alone, _ = embed(minilm_dir, "onnx/model_quantized.onnx", texts, 256)
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    encodings = [tokenizer.encode(text) for text in texts]
    together = bert_verify.run_onnx(minilm_dir / "onnx/model_quantized.onnx", encodings, "mean")
    assert np.abs(together - alone).max() < 1e-5


def test_output_directory_layout_and_thatch_model_json(
    minilm_dir: Path, minilm_source: Path
) -> None:
    """The import writes ONNX files, tokenizer/config copies and a complete thatch_model.json."""
    record = json.loads((minilm_dir / "thatch_model.json").read_text())
    assert {k: v for k, v in record.items() if k != "created_at"} == {
        "model_id": "sentence-transformers/all-MiniLM-L6-v2",
        "pooling": "mean",
        "max_tokens": 256,
        "query_prefix": "",
        "onnx": "onnx/model_quantized.onnx",
        "quantized": True,
        "dim": 384,
        "source": str(minilm_source.resolve()),
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["created_at"])
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json", "modules.json", "1_Pooling/config.json",
                 "sentence_bert_config.json", "config_sentence_transformers.json"):  # fmt: skip
        assert (minilm_dir / name).read_bytes() == (minilm_source / name).read_bytes(), name
    assert not [p.name for p in minilm_dir.parent.iterdir() if p.name.startswith(".")]


def test_graph_interface_matches_the_spec(minilm_dir: Path) -> None:
    """Opset 17, three int64 [batch, sequence] inputs, float32 last_hidden_state output."""
    model = onnx.load(str(minilm_dir / "onnx/model.onnx"), load_external_data=False)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    inputs = {i.name: i.type.tensor_type for i in model.graph.input}
    assert list(inputs) == ["input_ids", "attention_mask", "token_type_ids"]
    for tensor_type in inputs.values():
        assert tensor_type.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in tensor_type.shape.dim] == ["batch", "sequence"]
    (output,) = model.graph.output
    assert output.name == "last_hidden_state"
    assert output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    dims = output.type.tensor_type.shape.dim
    assert [dims[0].dim_param, dims[1].dim_param, dims[2].dim_value] == ["batch", "sequence", 384]
    assert all(
        i.data_type == onnx.TensorProto.FLOAT
        for i in model.graph.initializer
        if i.dims and len(i.dims) >= 2
    )


def test_vocab_only_tokenizer_matches_the_original(
    minilm_source: Path, minilm_reference: list[dict[str, object]]
) -> None:
    """A tokenizer.json built from vocab.txt gives the same ids as MiniLM's own tokenizer.json."""
    config = json.loads((minilm_source / "tokenizer_config.json").read_text())
    built = build_wordpiece_tokenizer(minilm_source / "vocab.txt", config)
    original = Tokenizer.from_file(str(minilm_source / "tokenizer.json"))
    original.no_truncation()
    original.no_padding()
    texts = [str(i["text"]) for i in minilm_reference] + ["Héllo [SEP] [mask] 中文 naïve\tx\x00y"]
    for text in texts:
        assert built.encode(text).ids == original.encode(text).ids, text


def test_bert_prefix_and_pooler_weights_import_and_verify(tmp_path: Path) -> None:
    """A checkpoint saved as bert.* with pooler weights imports; ONNX agrees with numpy."""
    src = write_tiny_bert(tmp_path / "tiny", prefix="bert.")
    out = import_checkpoint(src, tmp_path / "out", model_id="t/tiny", quantize=False)
    assert json.loads((out / "thatch_model.json").read_text())["onnx"] == "onnx/model.onnx"
    assert not (out / "onnx/model_quantized.onnx").exists()
    built = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert built.encode("The quick fox").tokens == ["[CLS]", "the", "quick", "fox", "[SEP]"]


def test_tiny_import_with_quantization_keeps_stdout_and_logging_clean(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Quantizing prints nothing and leaves the process's logging configuration alone."""
    src = write_tiny_bert(tmp_path / "tiny")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    messages: list[str] = []
    out = import_checkpoint(src, tmp_path / "out", model_id="t/tiny", log=messages.append)
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err == ""
    assert (root.handlers, root.level) == (handlers, level)
    assert (out / "onnx/model_quantized.onnx").is_file()
    assert any("int8" in m for m in messages) and any(str(out) in m for m in messages)


def test_default_out_dir_model_id_and_sentence_transformers_settings(
    tmp_path: Path, isolated_env: Path
) -> None:
    """Without options: model id from _name_or_path, out under models dir, ST files' settings."""
    src = write_tiny_bert(tmp_path / "tiny", config={"_name_or_path": "acme/tiny-bert"})
    (src / "1_Pooling").mkdir()
    (src / "1_Pooling/config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (src / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    (src / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "q: "}})
    )
    out = import_checkpoint(src, quantize=False)
    assert out == isolated_env / ".cache/thatch/models/acme__tiny-bert"
    record = json.loads((out / "thatch_model.json").read_text())
    settings = [record[k] for k in ("model_id", "pooling", "max_tokens", "query_prefix")]
    assert settings == ["acme/tiny-bert", "cls", 40, "q: "]
    assert record["dim"] == 32 and record["quantized"] is False


def test_options_override_files_and_local_name_falls_back_to_basename(
    tmp_path: Path, isolated_env: Path
) -> None:
    """Explicit options win; a path-like _name_or_path gives the SRC basename as id."""
    src = write_tiny_bert(tmp_path / "my-model")
    (src / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    out = import_checkpoint(src, quantize=False, pooling="cls", max_tokens=16, query_prefix="x")
    assert out == isolated_env / ".cache/thatch/models/my-model"
    record = json.loads((out / "thatch_model.json").read_text())
    settings = [record[k] for k in ("model_id", "pooling", "max_tokens", "query_prefix")]
    assert settings == ["my-model", "cls", 16, "x"]


def test_reimport_replaces_an_earlier_import(tmp_path: Path) -> None:
    """Importing into an existing model directory replaces it without leftovers."""
    src = write_tiny_bert(tmp_path / "tiny")
    out = import_checkpoint(src, tmp_path / "models/out", quantize=False, pooling="mean")
    import_checkpoint(src, out, quantize=False, pooling="cls")
    assert json.loads((out / "thatch_model.json").read_text())["pooling"] == "cls"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["out"]


def test_existing_foreign_directory_is_refused_untouched(tmp_path: Path) -> None:
    """A non-empty --out that is not a thatch model is never overwritten."""
    src = write_tiny_bert(tmp_path / "tiny")
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ModelError, match="is not a thatch model directory"):
        import_checkpoint(src, out, quantize=False)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_failed_verification_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When numpy and ONNX disagree the import fails and leaves no directory or temp files."""
    src = write_tiny_bert(tmp_path / "tiny")
    real = numpy_bert.forward
    monkeypatch.setattr(numpy_bert, "forward", lambda *a, **k: real(*a, **k) + 0.5 * np.arange(32))
    parent = tmp_path / "models"
    with pytest.raises(ModelError, match=r"^verification failed: the ONNX graph and the numpy"):
        import_checkpoint(src, parent / "out", quantize=False)
    assert not parent.exists() or list(parent.iterdir()) == []


def test_failed_int8_check_falls_back_to_fp32_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An int8 model below the cosine bar is dropped: the import serves fp32 and says why."""
    src = write_tiny_bert(tmp_path / "tiny")
    monkeypatch.setattr(bert_verify, "INT8_MIN_COSINE", 1.5)
    messages: list[str] = []
    out = import_checkpoint(src, tmp_path / "models/out", log=messages.append)
    record = json.loads((out / "thatch_model.json").read_text())
    assert record["onnx"] == "onnx/model.onnx" and record["quantized"] is False
    assert not (out / "onnx/model_quantized.onnx").exists()
    assert not (out / "thatch_known_answers.json").exists()
    (line,) = [m for m in messages if "int8" in m and "fp32" in m]
    assert "disagrees with fp32 on this CPU" in line and line.endswith("using the fp32 model")
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["out"]  # no build leftovers


def test_non_bert_config_is_refused(tmp_path: Path) -> None:
    """A model_type other than bert gets the spec's message naming it."""
    src = write_tiny_bert(tmp_path / "tiny", config={"model_type": "roberta"})
    with pytest.raises(ModelError) as caught:
        import_checkpoint(src, tmp_path / "out")
    assert str(caught.value) == "only BERT checkpoints with GELU are supported (model_type=roberta)"
    assert not (tmp_path / "out").exists()


def test_non_gelu_activation_is_refused(tmp_path: Path) -> None:
    """BERT with another activation is refused with the same message family."""
    src = write_tiny_bert(tmp_path / "tiny", config={"hidden_act": "relu"})
    with pytest.raises(
        ModelError, match=r"^only BERT checkpoints with GELU are supported \(model_type=bert"
    ):
        import_checkpoint(src, tmp_path / "out")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (10**6, "impossible BERT (num_hidden_layers 1000000; from 1 to 256)"),
        (True, "config.json's num_hidden_layers is not a whole number: True"),
        ("2", "config.json's num_hidden_layers is not a whole number: '2'"),
        (1, "has more encoder layers than config.json's num_hidden_layers (1)"),
    ],
)
def test_a_config_that_does_not_fit_the_weights_is_refused_before_reading_them(
    tmp_path: Path, value: object, message: str
) -> None:
    """A million layers built a table of 16 million expected tensors first (17 s, 2.8 GB;
    a MemoryError traceback under a memory limit); fewer layers than the file holds
    imported a shallower model in silence."""
    src = write_tiny_bert(tmp_path / "tiny", config={"num_hidden_layers": value})
    with pytest.raises(ModelError) as caught:
        import_checkpoint(src, tmp_path / "out")
    assert message in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_pytorch_bin_without_safetensors_is_refused(tmp_path: Path) -> None:
    """A checkpoint with only pytorch_model.bin gets the convert-to-safetensors message."""
    src = write_tiny_bert(tmp_path / "tiny")
    (src / "model.safetensors").rename(src / "pytorch_model.bin")
    with pytest.raises(ModelError) as caught:
        import_checkpoint(src, tmp_path / "out")
    assert str(caught.value) == (
        f"no model.safetensors in {src} (PyTorch .bin weights are not supported; "
        "convert them to safetensors first)"
    )


def test_missing_tokenizer_and_config_are_named(tmp_path: Path) -> None:
    """No tokenizer.json/vocab.txt, or no config.json, gives a message naming what is missing."""
    src = write_tiny_bert(tmp_path / "tiny")
    (src / "vocab.txt").unlink()
    with pytest.raises(ModelError) as caught:
        import_checkpoint(src, tmp_path / "out")
    assert str(caught.value) == f"no tokenizer.json or vocab.txt in {src}"
    (src / "config.json").unlink()
    with pytest.raises(ModelError, match=r"^no config.json in "):
        import_checkpoint(src, tmp_path / "out")


def _bad_weights(src: Path) -> None:
    (src / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{")


def _bad_config_json(src: Path) -> None:
    (src / "config.json").write_text("{not json")


def _config_without_layers(src: Path) -> None:
    (src / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_act": "gelu"}))


def _bad_tokenizer_json(src: Path) -> None:
    (src / "tokenizer.json").write_text("{}")


def _vocab_without_specials(src: Path) -> None:
    (src / "vocab.txt").write_text("a\nb\n")


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (_bad_weights, "not a valid safetensors"),
        (_bad_config_json, "is not valid JSON"),
        (_config_without_layers, "lacks num_hidden_layers"),
        (_bad_tokenizer_json, "cannot be loaded"),
        (_vocab_without_specials, "lacks the unk_token"),
    ],
)
def test_malformed_checkpoints_give_one_line_errors(
    tmp_path: Path, mutate: Callable[[Path], None], fragment: str
) -> None:
    """Corrupt weights, config or tokenizer files fail with a one-line ModelError."""
    src = write_tiny_bert(tmp_path / "tiny")
    mutate(src)
    with pytest.raises(ModelError, match=fragment) as caught:
        import_checkpoint(src, tmp_path / "out")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_weights_that_do_not_match_config_are_refused(tmp_path: Path) -> None:
    """A config claiming another shape than the weights is caught before building anything."""
    src = write_tiny_bert(tmp_path / "tiny", config={"intermediate_size": 48})
    with pytest.raises(ModelError, match=r"intermediate\.dense\.weight has shape"):
        import_checkpoint(src, tmp_path / "out")
    shutil.rmtree(src)
    src = write_tiny_bert(tmp_path / "tiny", config={"num_hidden_layers": 3})
    with pytest.raises(ModelError, match=r"lacks the BERT weight encoder\.layer\.2"):
        import_checkpoint(src, tmp_path / "out")


def test_bad_options_are_refused(tmp_path: Path) -> None:
    """Unknown pooling or max tokens beyond the position table are refused."""
    src = write_tiny_bert(tmp_path / "tiny")
    with pytest.raises(ModelError, match="pooling must be mean or cls"):
        import_checkpoint(src, tmp_path / "out", pooling="max")
    with pytest.raises(ModelError, match=r"max_position_embeddings \(64\), not 65"):
        import_checkpoint(src, tmp_path / "out", max_tokens=65)


def test_bench_random_checkpoint_script_output_imports(tmp_path: Path) -> None:
    """bench/make_random_bert.py writes a checkpoint that imports with its declared settings."""
    script = Path(__file__).parent.parent / "bench" / "make_random_bert.py"
    args = ["--layers", "1", "--hidden", "16", "--heads", "2", "--intermediate", "32"]
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "rand"), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    out = import_checkpoint(tmp_path / "rand", tmp_path / "out", quantize=False)
    record = json.loads((out / "thatch_model.json").read_text())
    assert [record[k] for k in ("model_id", "pooling", "max_tokens", "dim")] == [
        "random/bert-L1-H16", "mean", 512, 16]  # fmt: skip
