"""Model name resolution, settings priority and required files (docs/embedder.md §resolution,
§registry)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.model_names import REGISTRY, hub_cache_dir
from thatch.embedder.models.resolve import create_encoder, describe_model, resolve_model

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def env() -> dict[str, str]:
    return dict(os.environ)


def make_model_dir(path: Path, **files: object) -> Path:
    """A minimal model directory: config.json, tokenizer.json and a stand-in ONNX file."""
    contents: dict[str, object] = {
        "config.json": {"hidden_size": 8, "max_position_embeddings": 400},
        "tokenizer.json": {"stub": True},
        "onnx/model.onnx": b"not really onnx",
    }
    contents.update(files)
    for name, value in contents.items():
        if value is None:
            continue
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, bytes):
            target.write_bytes(value)
        else:
            target.write_text(value if isinstance(value, str) else json.dumps(value))
    return path


def make_snapshot(repo_id: str, **files: object) -> Path:
    """A hub-cache snapshot for repo_id at COMMIT, with refs/main pointing at it."""
    storage = hub_cache_dir(env()) / ("models--" + repo_id.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(COMMIT)
    return make_model_dir(storage / "snapshots" / COMMIT, **files)


def test_mock_resolves_to_builtin_model() -> None:
    """`mock` needs no files: id mock, dim 384, mock encoder."""
    settings = resolve_model("mock", env=env())
    assert (settings.model_id, settings.dim, settings.source) == ("mock", 384, "mock")
    assert type(create_encoder(settings)).__name__ == "MockEncoder"


def test_default_is_bge_and_needs_download_offline() -> None:
    """Without THATCH_MODEL, describe shows the default bge model as needing download."""
    settings = describe_model(None, env=env())
    assert settings.model_id == "Xenova/bge-small-en-v1.5"
    assert settings.source == "needs download"
    assert settings.query_prefix.startswith("Represent this sentence")


def test_short_name_maps_to_registry_hub_id_in_cache() -> None:
    """A short name resolves to its hub id and uses the cached snapshot with registry settings."""
    make_snapshot(
        "Xenova/all-MiniLM-L6-v2",
        **{
            "onnx/model_quantized.onnx": b"int8 bytes",
            "1_Pooling/config.json": {"pooling_mode_cls_token": True},
        },
    )
    settings = resolve_model("all-MiniLM-L6-v2", env=env())
    assert settings.model_id == "Xenova/all-MiniLM-L6-v2"
    assert settings.source == "hub cache"
    assert settings.revision == COMMIT
    assert settings.onnx_path is not None and settings.onnx_path.name == "model_quantized.onnx"
    assert (settings.pooling, settings.max_tokens, settings.quantized) == ("mean", 256, True)


def test_offline_and_not_cached_gives_spec_message() -> None:
    """HF_HUB_OFFLINE=1 with nothing cached fails with the spec's exact message."""
    with pytest.raises(ModelError) as error:
        resolve_model("acme/absent-model", env=env())
    assert str(error.value) == (
        "model acme/absent-model is not in the local cache and HF_HUB_OFFLINE=1"
    )


def test_incomplete_snapshot_counts_as_not_cached() -> None:
    """A cached snapshot missing tokenizer.json is not used."""
    make_snapshot("acme/partial", **{"tokenizer.json": None})
    with pytest.raises(ModelError, match="not in the local cache"):
        resolve_model("acme/partial", env=env())


def test_local_dir_uses_thatch_model_json(minilm_dir: Path) -> None:
    """The imported MiniLM directory resolves with its declared id and settings."""
    settings = resolve_model(str(minilm_dir), env=env())
    assert settings.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert settings.source == "local dir"
    assert (settings.dim, settings.max_tokens, settings.pooling) == (384, 256, "mean")
    declared = json.loads((minilm_dir / "thatch_model.json").read_text())
    assert settings.onnx_path == minilm_dir / declared["onnx"]
    assert settings.quantized == declared["quantized"]
    assert settings.sha256 == hashlib.sha256(settings.onnx_path.read_bytes()).hexdigest()
    assert "tokenizer.json" in settings.files


def test_tilde_directory_is_expanded(isolated_env: Path) -> None:
    """`~/models/x` is a local directory after ~ expansion."""
    make_model_dir(isolated_env / "models" / "x")
    settings = resolve_model("~/models/x", env=env())
    assert settings.path == isolated_env / "models" / "x"
    assert settings.model_id == "local:x"


def test_snapshot_directory_gets_hub_id() -> None:
    """A hub-cache snapshot passed as a directory is tagged org/name."""
    snapshot = make_snapshot("acme/snap-model")
    settings = resolve_model(str(snapshot), env=env())
    assert settings.model_id == "acme/snap-model"
    assert settings.source == "local dir"


def test_plain_directory_gets_local_basename(tmp_path: Path) -> None:
    """A directory without thatch_model.json outside the hub cache is local:<basename>."""
    settings = resolve_model(str(make_model_dir(tmp_path / "my-model")), env=env())
    assert settings.model_id == "local:my-model"
    assert settings.dim == 8


def test_defaults_when_no_settings_files(tmp_path: Path) -> None:
    """No settings files: mean, min(512, model_max_length, max_position_embeddings), no prefix."""
    path = make_model_dir(
        tmp_path / "m",
        **{"tokenizer_config.json": {"model_max_length": 300}},
    )
    settings = resolve_model(str(path), env=env())
    assert (settings.pooling, settings.max_tokens, settings.query_prefix) == ("mean", 300, "")
    assert settings.quantized is False


def test_sentence_transformers_files_apply(tmp_path: Path) -> None:
    """ST pooling flags, max_seq_length and prompts.query are used when nothing outranks them."""
    path = make_model_dir(
        tmp_path / "st",
        **{
            "1_Pooling/config.json": {"pooling_mode_cls_token": True},
            "sentence_bert_config.json": {"max_seq_length": 128},
            "config_sentence_transformers.json": {"prompts": {"query": "q: "}},
        },
    )
    settings = resolve_model(str(path), env=env())
    assert (settings.pooling, settings.max_tokens, settings.query_prefix) == ("cls", 128, "q: ")


def test_thatch_model_json_outranks_everything(tmp_path: Path) -> None:
    """thatch_model.json beats the registry and the ST files."""
    path = make_model_dir(
        tmp_path / "t",
        **{
            "thatch_model.json": {
                "model_id": "Xenova/bge-small-en-v1.5",
                "pooling": "cls",
                "max_tokens": 64,
                "query_prefix": "search: ",
                "onnx": "onnx/model.onnx",
            },
            "1_Pooling/config.json": {"pooling_mode_mean_tokens": True},
        },
    )
    settings = resolve_model(str(path), env=env())
    assert settings.model_id == "Xenova/bge-small-en-v1.5"
    assert (settings.pooling, settings.max_tokens, settings.query_prefix) == (
        "cls",
        64,
        "search: ",
    )


def test_registry_outranks_sentence_transformers_files() -> None:
    """bge keeps mean pooling and its prefix even when its ST files say CLS."""
    make_snapshot(
        "Xenova/bge-small-en-v1.5",
        **{
            "onnx/model_quantized.onnx": b"int8",
            "1_Pooling/config.json": {"pooling_mode_cls_token": True},
            "config_sentence_transformers.json": {"prompts": {"query": "other: "}},
        },
    )
    settings = resolve_model("bge-small-en-v1.5", env=env())
    assert settings.pooling == "mean"
    assert settings.query_prefix == REGISTRY["Xenova/bge-small-en-v1.5"].query_prefix
    assert settings.max_tokens == 400  # the registry's 512, capped by max_position_embeddings


@pytest.mark.parametrize("missing", ["config.json", "tokenizer.json"])
def test_missing_required_file_is_named(tmp_path: Path, missing: str) -> None:
    """A directory without a required file fails naming that file."""
    path = make_model_dir(tmp_path / "m", **{missing: None})
    (path / missing).unlink(missing_ok=True)
    with pytest.raises(ModelError, match=f"missing {missing}"):
        resolve_model(str(path), env=env())


def test_missing_onnx_lists_candidates(tmp_path: Path) -> None:
    """No ONNX file: the error lists the files looked for."""
    path = make_model_dir(tmp_path / "m")
    (path / "onnx" / "model.onnx").unlink()
    with pytest.raises(
        ModelError, match=r"onnx/model_quantized\.onnx, onnx/model\.onnx, model\.onnx"
    ):
        resolve_model(str(path), env=env())


def test_declared_onnx_missing_is_named(tmp_path: Path) -> None:
    """thatch_model.json naming an absent ONNX file fails naming it."""
    path = make_model_dir(tmp_path / "m", **{"thatch_model.json": {"onnx": "onnx/gone.onnx"}})
    with pytest.raises(ModelError, match=r"missing onnx/gone\.onnx"):
        resolve_model(str(path), env=env())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read"),
        ("[1, 2]", "not a JSON object"),
        ('{"pooling": "max"}', "pooling must be mean or cls"),
        ('{"max_tokens": "lots"}', "max_tokens must be an integer"),
    ],
)
def test_malformed_thatch_model_json(tmp_path: Path, content: str, message: str) -> None:
    """A broken thatch_model.json gives a one-line error, not a traceback."""
    path = make_model_dir(tmp_path / "m", **{"thatch_model.json": content})
    with pytest.raises(ModelError, match=message):
        resolve_model(str(path), env=env())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "model name is empty"),
        ("/no/such/dir", "does not exist"),
        ("not a model!", "unknown model"),
        ("acme/x@", "empty revision"),
        ("a" * 5000, "model name is 5000 characters long: at most 4096"),
        ("a" * 300, "unknown model"),  # one part past the file system's limit
        ("/tmp/" + "a" * 300, "does not exist"),
        ("x\ny", r'unknown model "x\\ny"'),
    ],
)
def test_bad_names(name: str, message: str) -> None:
    """Unusable names fail with a clear one-line message, never a traceback."""
    with pytest.raises(ModelError, match=message) as raised:
        resolve_model(name, env=env())
    assert "\n" not in str(raised.value)


def test_no_download_when_disallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """download=False on an uncached hub model says it needs download."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ModelError, match="needs download"):
        resolve_model("acme/absent", env=env(), download=False)


def test_registry_is_immutable() -> None:
    """The registry cannot be modified at runtime."""
    with pytest.raises(TypeError):
        REGISTRY["x/y"] = REGISTRY["Xenova/bge-small-en-v1.5"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "revision"),
    [
        ("org/name", "../../../../tmp/escaped"),
        ("org/name@../..", None),
        ("org/name@main/../../x", None),
        ("org/name", "/etc"),
        ("org/name", "main\nhealth: SERVING"),
        ("bge-small", "refs//pr"),
    ],
)
def test_revisions_cannot_lead_out_of_the_hub_cache(
    tmp_path: Path, name: str, revision: str | None
) -> None:
    """`model pull --revision ../../x` wrote the commit into a ref file outside the cache."""
    from thatch.embedder.client.model_names import parse_name

    env = {"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}
    with pytest.raises(ModelError, match="is not a branch, tag or commit of the hub"):
        parse_name(name, env, revision)
    assert parse_name("org/name@refs/pr/1", env).revision == "refs/pr/1"  # type: ignore[union-attr]


def test_a_model_id_a_directory_declares_is_used_only_if_usable(tmp_path: Path) -> None:
    """A declared id with a line break forged a `health: SERVING` line in `embedder status`
    and in the log; such an id is ignored and the directory is named as any other."""
    from thatch.embedder.client.model_names import directory_model_id

    model = tmp_path / "odd-model"
    for declared, expected in [
        ("evil/x\nhealth:        SERVING\n\x1b[31mred", "local:odd-model"),
        ("x" * 300, "local:odd-model"),
        ("org/name", "org/name"),
        (" org/name ", "org/name"),
        ("local:fake", "local:fake"),
    ]:
        assert directory_model_id(model, {"model_id": declared}) == expected


def test_a_huge_json_file_of_a_model_is_refused_unread(tmp_path: Path) -> None:
    """A 300 MB config.json was read whole (650 MB of memory for `thatch model info`)."""
    from thatch.embedder.client.model_names import JSON_MAX_BYTES, read_json

    config = tmp_path / "config.json"
    with config.open("wb") as handle:
        handle.truncate(JSON_MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ModelError, match=r"16,777,217 bytes \(a model's JSON file is small\)"):
        read_json(config)
