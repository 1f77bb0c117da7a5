"""`thatch model import --adapter`: a trained adapter merged into a checkpoint's weights
(docs/embedder.md §adapters). Tiny random checkpoints for the contract; the shipped adapter
against the real all-MiniLM-L6-v2 it was trained on."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import numpy.typing as npt
import pytest
from click.testing import CliRunner

from tests.support.fake_hub import FakeHub, linked_repo
from tests.test_model_import import embed, write_tiny_bert
from thatch.cli.main import cli
from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.model_names import ADAPTED
from thatch.embedder.convert.adapter import (
    FORMAT,
    base_fingerprint,
    load_adapter,
    shipped_adapters,
)
from thatch.embedder.convert.importer import import_checkpoint
from thatch.embedder.convert.safetensors_io import read_safetensors, write_safetensors
from thatch.embedder.convert.weights import BertConfig, canonical_weights
from thatch.embedder.models.fixes import packaged_checkpoint
from thatch.embedder.models.hub_download import CHECKPOINT_FILES
from thatch.embedder.models.resolve import resolve_model

SHIPPED = "all-MiniLM-L6-v2-code"
TEXTS = ("the quick fox", "a b c 1 2 3", "foxes")
BENCH = Path(__file__).resolve().parent.parent / "bench"


def _weights(src: Path) -> dict[str, npt.NDArray[np.float32]]:
    config = BertConfig.from_json(json.loads((src / "config.json").read_text()))
    return canonical_weights(read_safetensors(src / "model.safetensors"), config, src)


def _tiny_adapter(
    src: Path,
    path: Path,
    *,
    base: str | None = None,
    extra: dict | None = None,
    model_id: str = "t/tiny-code",
) -> dict[str, npt.NDArray[np.float32]]:
    """An adapter for the tiny checkpoint at ``src``; returns the weights it should give."""
    weights = _weights(src)
    rng = np.random.default_rng(7)
    tensors: dict[str, npt.NDArray[np.float32]] = {}
    merged = dict(weights)
    for name in (
        "encoder.layer.0.attention.self.query.weight",
        "encoder.layer.1.output.dense.weight",
    ):
        out_dim, in_dim = weights[name].shape
        a = (rng.standard_normal((3, in_dim)) * 0.3).astype(np.float32)
        b = (rng.standard_normal((out_dim, 3)) * 0.3).astype(np.float32)
        tensors[name + ".lora_a"], tensors[name + ".lora_b"] = a, b
        merged[name] = (weights[name] + b.astype(np.float64) @ a).astype(np.float32)
    bias = "encoder.layer.1.output.LayerNorm.bias"
    tensors[bias] = merged[bias] = (weights[bias] + 0.5).astype(np.float32)
    tensors.update(extra or {})
    meta = {"format": FORMAT, "base": base or base_fingerprint(weights), "model_id": model_id,
            "base_hint": "the tiny test checkpoint"}  # fmt: skip
    write_safetensors(path, tensors, metadata=meta)
    return merged


def test_adapter_is_merged_before_the_graph_and_names_the_model(tmp_path: Path) -> None:
    """The import with an adapter embeds exactly as a checkpoint holding the merged
    weights; its id is the adapter's, and thatch_model.json says which adapter."""
    src = write_tiny_bert(tmp_path / "tiny")
    merged = _tiny_adapter(src, tmp_path / "a.safetensors")
    lines: list[str] = []
    out = import_checkpoint(
        src, tmp_path / "out", quantize=False, adapter=str(tmp_path / "a.safetensors"),
        log=lines.append,
    )  # fmt: skip
    expected_src = write_tiny_bert(tmp_path / "expected")
    write_safetensors(expected_src / "model.safetensors", merged)
    expected = import_checkpoint(expected_src, tmp_path / "expected-out", quantize=False)
    plain = import_checkpoint(src, tmp_path / "plain-out", quantize=False)

    ours, _ = embed(out, "onnx/model.onnx", list(TEXTS), 32)
    theirs, _ = embed(expected, "onnx/model.onnx", list(TEXTS), 32)
    untouched, _ = embed(plain, "onnx/model.onnx", list(TEXTS), 32)
    assert np.abs(ours - theirs).max() < 1e-5
    assert np.abs(ours - untouched).max() > 0.05
    record = json.loads((out / "thatch_model.json").read_text())
    assert record["model_id"] == "t/tiny-code"
    assert record["adapter"] == str(tmp_path / "a.safetensors")
    assert any("(from adapter a;" in line for line in lines), lines


def test_model_id_option_wins_over_the_adapters(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    _tiny_adapter(src, tmp_path / "a.safetensors")
    out = import_checkpoint(
        src, tmp_path / "out", quantize=False, adapter=str(tmp_path / "a.safetensors"),
        model_id="acme/mine",
    )  # fmt: skip
    assert json.loads((out / "thatch_model.json").read_text())["model_id"] == "acme/mine"


def test_adapter_of_another_checkpoint_is_refused_and_nothing_written(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    other = write_tiny_bert(tmp_path / "other", seed=1)
    _tiny_adapter(other, tmp_path / "a.safetensors")
    with pytest.raises(ModelError, match=r"trained on another checkpoint .*: import the tiny"):
        import_checkpoint(src, tmp_path / "out", quantize=False,
                          adapter=str(tmp_path / "a.safetensors"))  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, r"no adapter .* \(shipped adapters: all-MiniLM-L6-v2-code; or a file\)"),
        (lambda p: p.write_bytes(b"\xff" * 40), "is not a thatch adapter"),
        (lambda p: p.write_text(""), "is not a thatch adapter"),
        (
            lambda p: p.write_bytes(struct.pack("<Q", 200_000) + b"[" * 200_000),
            "is not a thatch adapter",
        ),
        (lambda p: write_safetensors(p, {"x": np.ones(2, np.float32)}), "is not a thatch adapter"),
    ],
    ids=["missing", "garbage", "empty", "nested", "no-metadata"],
)
def test_what_is_not_an_adapter_gets_one_line(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    make(tmp_path / "a.safetensors")
    with pytest.raises(ModelError, match=message):
        import_checkpoint(src, tmp_path / "out", quantize=False,
                          adapter=str(tmp_path / "a.safetensors"))  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_an_adapter_name_past_the_systems_limits_gets_one_line(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    with pytest.raises(ModelError, match="no adapter 'xxxxx"):
        import_checkpoint(src, tmp_path / "out", quantize=False, adapter="x" * 300)


@pytest.mark.parametrize(
    "extra",
    [
        {"encoder.layer.0.attention.self.key.weight.lora_a": np.ones((2, 32), np.float32)},
        {"encoder.layer.0.attention.self.key.weight.lora_b": np.ones((32, 2), np.float32)},
        {
            "encoder.layer.0.attention.self.key.weight.lora_a": np.ones((2, 31), np.float32),
            "encoder.layer.0.attention.self.key.weight.lora_b": np.ones((32, 2), np.float32),
        },
        {"encoder.layer.9.output.LayerNorm.bias": np.ones(32, np.float32)},
        {"encoder.layer.0.output.LayerNorm.bias": np.ones(31, np.float32)},
    ],
    ids=["factor-a-alone", "factor-b-alone", "factor-shape", "unknown-name", "value-shape"],
)
def test_adapter_that_does_not_fit_is_refused(tmp_path: Path, extra: dict) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    _tiny_adapter(src, tmp_path / "a.safetensors", extra=extra)
    with pytest.raises(ModelError, match=r"do(es)? not fit"):
        import_checkpoint(src, tmp_path / "out", quantize=False,
                          adapter=str(tmp_path / "a.safetensors"))  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_training_script_fingerprints_a_checkpoint_as_the_importer_does(tmp_path: Path) -> None:
    """bench/finetune_encoder.py stamps adapters with the base's fingerprint; the importer
    recomputes it: the two recipes must stay one (pooler weights ignored by both)."""
    src = write_tiny_bert(tmp_path / "tiny")
    code = (
        "import sys; from pathlib import Path\n"
        "from finetune_encoder import _names, fingerprint\n"
        "from thatch.embedder.convert.safetensors_io import read_safetensors\n"
        f"print(fingerprint(read_safetensors(Path({str(src / 'model.safetensors')!r})), _names(2)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=BENCH
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == base_fingerprint(_weights(src))


def test_non_finite_or_doubly_given_values_are_refused(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    name = "encoder.layer.0.attention.self.query.weight"
    cases: dict[str, dict[str, npt.NDArray[np.float32]]] = {
        "not all finite": {
            "encoder.layer.0.output.LayerNorm.bias": np.full(32, np.nan, np.float32)
        },
        "both whole and as factors": {name: np.ones((32, 32), np.float32)},
    }
    for message, extra in cases.items():
        _tiny_adapter(src, tmp_path / "a.safetensors", extra=extra)
        with pytest.raises(ModelError, match=message):
            import_checkpoint(src, tmp_path / "out", quantize=False,
                              adapter=str(tmp_path / "a.safetensors"))  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_shipped_adapter_fits_the_model_it_was_trained_on(minilm_source: Path) -> None:
    """The shipped adapter names all-MiniLM-L6-v2 (the test model's exact weights)."""
    assert list(shipped_adapters()) == [SHIPPED]
    adapter = load_adapter(SHIPPED, os.environ)
    assert adapter.model_id == "thatch/all-MiniLM-L6-v2-code"
    assert adapter.base == base_fingerprint(_weights(minilm_source))
    # A retrained adapter must come as another model (new id): the table pins the file.
    assert adapter.sha256 == ADAPTED[SHIPPED].adapter_sha256


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["model", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_pull_builds_the_adapted_model_from_the_hub_checkpoint(
    minilm_source: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch model pull all-MiniLM-L6-v2-code`: the checkpoint's files (no ONNX) from the
    hub, imported with the shipped adapter into the model cache, then found by short name;
    a second pull downloads nothing."""
    with FakeHub({"sentence-transformers/all-MiniLM-L6-v2": minilm_source}) as hub:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        code, out, err = run("pull", SHIPPED)
        assert code == 0, err
        out_dir = isolated_env / ".cache/thatch/models/thatch__all-MiniLM-L6-v2-code"
        assert out == f"model thatch/all-MiniLM-L6-v2-code ready at {out_dir}\n"
        assert "merging adapter all-MiniLM-L6-v2-code" in err
        # The checkpoint's files, not its card or training data (nor an ONNX file: none is read).
        wanted = ("config.json", "tokenizer.json", *CHECKPOINT_FILES)
        assert hub.downloaded() == {name for name in wanted if (minilm_source / name).is_file()}
        assert "model.safetensors" in hub.downloaded()
        record = json.loads((out_dir / "thatch_model.json").read_text())
        assert record["onnx"] == "onnx/model_quantized.onnx"
        assert record["adapter"].endswith("adapters/all-MiniLM-L6-v2-code.safetensors")

        hub.clear()
        code, out, _ = run("pull", "thatch/all-MiniLM-L6-v2-code")
        assert code == 0 and hub.seen() == []

        # A build from another adapter file (an earlier thatch's) is built again.
        (out_dir / "thatch_model.json").write_text(json.dumps({**record, "adapter_sha256": "0"}))
        code, out, err = run("pull", SHIPPED)
        assert code == 0 and "merging adapter all-MiniLM-L6-v2-code" in err
        rebuilt = json.loads((out_dir / "thatch_model.json").read_text())
        assert rebuilt["adapter_sha256"] == ADAPTED[SHIPPED].adapter_sha256
    code, out, _ = run("info", SHIPPED, "--json")
    info = json.loads(out)
    assert (code, info["id"], info["path"]) == (0, "thatch/all-MiniLM-L6-v2-code", str(out_dir))


def test_pull_of_a_cut_off_checkpoint_names_it_and_fetches_it_again(
    minilm_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model.safetensors cut off by the hub failed the import, and every later pull
    imported the same cached file again without fetching it."""
    weights = (minilm_source / "model.safetensors").read_bytes()
    repo = linked_repo(
        minilm_source, tmp_path / "repo", {"model.safetensors": weights[: len(weights) // 2]}
    )
    with FakeHub({"sentence-transformers/all-MiniLM-L6-v2": repo}) as hub:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        for _ in range(2):
            hub.clear()
            code, out, err = run("pull", SHIPPED)
            assert code == 1 and out == ""
            error, fix = err.splitlines()[-2:]
            assert error.startswith(
                "Error: downloaded model.safetensors of model sentence-transformers/"
                "all-MiniLM-L6-v2 is broken: not a valid safetensors file: "
            )
            assert fix.startswith("Fix: download it again (")
            assert fix.endswith(f": thatch model pull {SHIPPED}")
            assert "model.safetensors" in hub.downloaded()


def test_adapted_model_not_here_names_the_pull(isolated_env: Path) -> None:
    """Before the pull: info says it needs download, `use` saves it with a warning, the
    embedder's resolution fails naming the pull; offline, the pull says how to import it
    from a local copy (here: the packaged checkpoint). No model is written."""
    offline_fix = f"thatch model import {packaged_checkpoint()} --adapter {SHIPPED}"
    for name in (SHIPPED, "thatch/all-MiniLM-L6-v2-code"):
        code, out, _ = run("info", name, "--json")
        info = json.loads(out)
        assert (code, info["id"], info["source"]) == (
            0,
            "thatch/all-MiniLM-L6-v2-code",
            "needs download",
        )
        with pytest.raises(ModelError) as raised:
            resolve_model(name, env=os.environ)
        assert str(raised.value) == (
            "model thatch/all-MiniLM-L6-v2-code is not on this machine yet (thatch builds it "
            "from sentence-transformers/all-MiniLM-L6-v2 and its shipped adapter)"
        )
        assert raised.value.fix == offline_fix
    code, out, err = run("use", SHIPPED)
    assert code == 0
    assert out.startswith("Default model: thatch/all-MiniLM-L6-v2-code (needs download)\n")
    assert "Warning: thatch/all-MiniLM-L6-v2-code is not on this machine yet." in err
    config = json.loads((isolated_env / ".config/thatch/config.json").read_text())
    assert config == {"model": "thatch/all-MiniLM-L6-v2-code"}

    code, _, err = run("pull", SHIPPED)
    assert code == 1
    assert err.splitlines() == [
        "Error: model thatch/all-MiniLM-L6-v2-code needs sentence-transformers/"
        "all-MiniLM-L6-v2 from the hub and HF_HUB_OFFLINE=1",
        f"Fix: {offline_fix}",
    ]
    assert not (isolated_env / ".cache/thatch/models").exists()


def test_pull_that_cannot_reach_the_hub_names_the_offline_build(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    code, out, err = run("pull", SHIPPED)
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith(
        "Error: cannot download model sentence-transformers/all-MiniLM-L6-v2 from "
        "http://127.0.0.1:9"
    )
    assert lines[1:] == [f"Fix: thatch model import {packaged_checkpoint()} --adapter {SHIPPED}"]
    assert not (isolated_env / ".cache/thatch/models").exists()


def test_revisions_are_refused_for_a_built_model(isolated_env: Path) -> None:
    """Its adapter fits one revision of the checkpoint: neither @rev nor --revision."""
    code, _, err = run("info", f"{SHIPPED}@abc")
    assert code == 1
    assert err.splitlines()[0] == (
        "Error: model thatch/all-MiniLM-L6-v2-code is built on this machine and has no "
        "revisions: name it without @abc"
    )
    code, _, err = run("pull", SHIPPED, "--revision", "abc")
    assert code == 1
    assert err.splitlines()[0] == (
        "Error: model thatch/all-MiniLM-L6-v2-code is built from the one revision of "
        "sentence-transformers/all-MiniLM-L6-v2 its adapter was trained on: pull it "
        "without --revision"
    )
    assert not (isolated_env / ".cache/thatch/models").exists()


def test_the_built_models_id_takes_only_its_pinned_adapter(tmp_path: Path) -> None:
    """No other weights are imported under thatch/all-MiniLM-L6-v2-code: not the plain
    checkpoint, not another adapter claiming the id."""
    src = write_tiny_bert(tmp_path / "tiny")
    with pytest.raises(ModelError, match="is thatch's build of"):
        import_checkpoint(src, tmp_path / "out", model_id="thatch/all-MiniLM-L6-v2-code")
    _tiny_adapter(src, tmp_path / "a.safetensors", model_id="thatch/all-MiniLM-L6-v2-code")
    with pytest.raises(ModelError, match="give another --model-id"):
        import_checkpoint(src, tmp_path / "out", adapter=str(tmp_path / "a.safetensors"))
    assert not (tmp_path / "out").exists()


def test_unknown_adapter_is_one_error_line(minilm_source: Path, tmp_path: Path) -> None:
    code, out, err = run("import", str(minilm_source), "--adapter", "nope", "--out",
                         str(tmp_path / "x"))  # fmt: skip
    assert (code, out) == (1, "")
    assert err.splitlines()[-2:] == [
        f"Error: no adapter 'nope' (shipped adapters: {SHIPPED}; or a file)",
        f"Fix: pass a shipped adapter's name ({SHIPPED}) or the path of an adapter file",
    ]
    assert not (tmp_path / "x").exists()
