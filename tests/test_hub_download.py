"""Hub ids download just the needed files into the HF cache, then resolve offline (docs/embedder.md
§resolution)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import pytest

from tests.support.fake_hub import COMMIT, FakeHub, linked_repo
from thatch.embedder.client.errors import ModelError
from thatch.embedder.models.known_answers import KNOWN_ANSWERS_FILE
from thatch.embedder.models.resolve import resolve_model

REPO = "acme/minilm-test"


@pytest.fixture
def hub(minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The fake hub serving minilm_dir as acme/minilm-test, with offline mode off."""
    with FakeHub({REPO: minilm_dir}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        # huggingface_hub copied HF_HUB_OFFLINE=1 from the test environment at import.
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        yield server


def declared_onnx(minilm_dir: Path) -> str:
    import json

    return str(json.loads((minilm_dir / "thatch_model.json").read_text())["onnx"])


def test_first_resolve_downloads_needed_files_with_progress(
    hub: FakeHub, minilm_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Only required + optional files and the ONNX file are fetched (plus the fp32 file beside
    an int8 one: the embedder checks int8 against it at load), with a progress bar."""
    settings = resolve_model(REPO, env=dict(os.environ))
    onnx = declared_onnx(minilm_dir)
    assert settings.source == "downloaded"
    assert settings.model_id == REPO and settings.revision == COMMIT
    assert hub.downloaded() == {
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "thatch_model.json",
        "modules.json",
        "1_Pooling/config.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        onnx,
        *(["onnx/model.onnx"] if "quantized" in onnx else []),
        *([KNOWN_ANSWERS_FILE] if (minilm_dir / KNOWN_ANSWERS_FILE).is_file() else []),
    }
    assert settings.sha256 == hashlib.sha256((minilm_dir / onnx).read_bytes()).hexdigest()
    assert settings.path is not None and "models--acme--minilm-test" in str(settings.path)
    err = capfd.readouterr().err
    assert "100%" in err and Path(onnx).name in err


def test_second_resolve_uses_cache(hub: FakeHub) -> None:
    """Once cached, resolving again makes no request at all, online or offline."""
    resolve_model(REPO, env=dict(os.environ), progress=False)
    hub.clear()
    again = resolve_model(REPO, env=dict(os.environ))
    assert again.source == "hub cache"
    offline = resolve_model(REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert offline.path == again.path
    assert hub.seen() == []


def test_pinned_revision_downloads_that_commit(hub: FakeHub) -> None:
    """org/name@<commit> resolves to that snapshot."""
    settings = resolve_model(f"{REPO}@{COMMIT}", env=dict(os.environ), progress=False)
    assert settings.revision == COMMIT and settings.path is not None
    assert settings.path.name == COMMIT


def test_offline_with_empty_cache_gives_spec_message(hub: FakeHub) -> None:
    """HF_HUB_OFFLINE=1 and nothing cached: exact spec error, no request made."""
    with pytest.raises(ModelError) as error:
        resolve_model(REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert str(error.value) == f"model {REPO} is not in the local cache and HF_HUB_OFFLINE=1"
    assert hub.seen() == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("acme/unknown", "model acme/unknown was not found on http://127.0.0.1:"),
        (f"{REPO}@v9", f"revision v9 of model {REPO} was not found"),
    ],
)
def test_hub_errors_name_the_cause(hub: FakeHub, name: str, message: str) -> None:
    """Unknown repos and revisions fail with a one-line cause."""
    with pytest.raises(ModelError, match=message.replace(".", r"\.")):
        resolve_model(name, env=dict(os.environ), progress=False)


def test_unreachable_hub_names_endpoint(hub: FakeHub) -> None:
    """A hub that refuses connections gives an error naming the endpoint and cause."""
    import socket

    with socket.socket() as probe:  # a port that is certainly closed: bound, never listening
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
        with pytest.raises(ModelError, match=f"cannot download model {REPO} from {dead}"):
            resolve_model(REPO, env={**os.environ, "HF_ENDPOINT": dead}, progress=False)


def test_missing_required_file_on_hub_is_named(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub repo without tokenizer.json fails naming it, before downloading the ONNX file."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(minilm_dir, repo, ignore=shutil.ignore_patterns("*.onnx", "tokenizer.json"))
    with FakeHub({"acme/no-tokenizer": repo}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        env = {**os.environ, "HF_ENDPOINT": server.url}
        with pytest.raises(ModelError, match=r"has no tokenizer\.json"):
            resolve_model("acme/no-tokenizer", env=env, progress=False)
        assert server.downloaded() == set()


def test_a_listed_file_the_hub_cannot_give_is_named(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said only "404 Client Error." (spec: download failures name the cause)."""
    with FakeHub({"acme/broken": minilm_dir}) as server:
        server.gone.add("tokenizer.json")
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        env = {**os.environ, "HF_ENDPOINT": server.url}
        with pytest.raises(
            ModelError, match=r"^downloading model acme/broken .*at tokenizer\.json"
        ):
            resolve_model("acme/broken", env=env, progress=False)


def test_cached_int8_without_its_fp32_file_is_completed_or_refused(
    hub: FakeHub, minilm_dir: Path
) -> None:
    """A snapshot cached before the load-time check (int8 file only) is never served
    unchecked: online the fp32 reference is fetched; offline the load names the fix."""
    from thatch.embedder.models.resolve import create_encoder

    settings = resolve_model(REPO, env=dict(os.environ), progress=False)
    assert settings.path is not None and settings.quantized
    for name in ("onnx/model.onnx", KNOWN_ANSWERS_FILE):
        (settings.path / name).unlink(missing_ok=True)
    offline = resolve_model(REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert offline.source == "hub cache"
    encoder = create_encoder(offline, threads=1)
    with pytest.raises(ModelError, match=r"cannot be checked on this CPU.*thatch model pull"):
        encoder.load()
    online = resolve_model(REPO, env=dict(os.environ), progress=False)
    assert online.source == "downloaded" and online.path == settings.path
    assert (settings.path / "onnx/model.onnx").is_file()
    loaded = create_encoder(online, threads=1)
    loaded.load()  # checked against the fp32 file now beside it
    loaded.release()


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ("tokenizer.json", r"not JSON"),
        ("onnx", r"onnxruntime cannot load it"),
        ("config.json", r"not JSON"),
    ],
)
def test_a_broken_download_is_refused_and_fetched_again(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str, why: str
) -> None:
    """A hub serving a cut-off ONNX file or a tokenizer.json that is not JSON left a snapshot
    that resolved as ready, and that no later pull fetched again. Now the file is named, it
    leaves the cache, the next resolve fetches it again (the good files' blobs are linked
    again, not fetched), and once the hub serves it whole, the model resolves and loads."""
    from thatch.embedder.client.model_names import HubRef, cached_snapshot
    from thatch.embedder.models.resolve import create_encoder

    name = declared_onnx(minilm_dir) if broken == "onnx" else broken
    good = (minilm_dir / name).read_bytes()
    bad = good[: len(good) // 2] if broken == "onnx" else b"<html>Bad Gateway</html>"
    repo = linked_repo(minilm_dir, tmp_path / "repo", {name: bad})
    with FakeHub({"acme/broken": repo}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        env = {**os.environ, "HF_ENDPOINT": server.url}
        message = (
            rf"^downloaded {re.escape(name)} of model acme/broken is broken: {why}.*; "
            "removed it from the cache$"
        )
        for _ in range(2):
            server.clear()
            with pytest.raises(ModelError, match=message) as error:
                resolve_model("acme/broken", env=env, progress=False)
            assert error.value.fix is not None
            assert error.value.fix.startswith("download it again (")
            assert error.value.fix.endswith(": thatch model pull acme/broken")
            assert name in server.downloaded()
            assert cached_snapshot(HubRef("acme/broken", None), env) is None
        fetched_whole = server.downloaded() - {name}

        (repo / name).write_bytes(good)
        server.clear()
        settings = resolve_model("acme/broken", env=env, progress=False)
        assert settings.source == "downloaded"
        assert name in server.downloaded() and not fetched_whole & server.downloaded()
    encoder = create_encoder(settings, threads=1)
    encoder.load()
    encoder.release()


def future_opset_onnx() -> bytes:
    """A whole, valid ONNX file stamped with an opset no onnxruntime here supports."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "future",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    return model.SerializeToString()


def test_a_whole_file_this_onnxruntime_cannot_load_is_kept_and_named(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that parses but needs a newer onnxruntime is no broken download: removing
    it (and blaming the hub) made every pull fetch it again for nothing."""
    name = declared_onnx(minilm_dir)
    repo = linked_repo(minilm_dir, tmp_path / "repo", {name: future_opset_onnx()})
    with FakeHub({"acme/future": repo}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        env = {**os.environ, "HF_ENDPOINT": server.url}
        for round_ in range(2):
            server.clear()
            with pytest.raises(ModelError) as error:
                resolve_model("acme/future", env=env, progress=False)
            assert str(error.value).startswith(
                f"downloaded {name} of model acme/future cannot be used here: "
                "onnxruntime cannot load it ("
            )
            assert error.value.fix is not None and "pip install -U onnxruntime" in error.value.fix
            assert (name in server.downloaded()) == (round_ == 0)  # kept in the cache


def test_a_broken_checkpoint_leaves_the_model_sharing_its_snapshot(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One repo and commit is one snapshot: all-MiniLM-L6-v2-code's checkpoint lies beside
    the ONNX model of the same repo. A cut-off model.safetensors removed the whole snapshot,
    the model in use with it, and an offline restart then failed."""
    from thatch.embedder.client.model_names import HubRef, cached_snapshot
    from thatch.embedder.models.hub_download import REFETCH_MARK, download_checkpoint

    repo = linked_repo(minilm_dir, tmp_path / "repo", {})
    (repo / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    ref = HubRef("acme/shared", None)
    with FakeHub({"acme/shared": repo}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        env = {**os.environ, "HF_ENDPOINT": server.url}
        in_use = resolve_model("acme/shared", env=env, progress=False)
        with pytest.raises(ModelError, match=r"model\.safetensors of model acme/shared is broken"):
            download_checkpoint(ref, env=env, pull="acme/shared-code", progress=False)
    assert in_use.onnx_path is not None and in_use.onnx_path.is_file()
    snapshot = cached_snapshot(ref, env)
    assert snapshot is not None
    # Unmarked: the model's next pull needs no network (only its own download clears a mark).
    assert not (snapshot / REFETCH_MARK).exists()
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert resolve_model("acme/shared", env=offline, progress=False).onnx_path == in_use.onnx_path


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("tokenizer.json", b"<html>Bad Gateway</html>"),
        ("onnx/model_quantized.onnx", b""),  # a crash's empty file: "No graph was found"
        ("1_Pooling/config.json", b"{"),  # optional: the snapshot resolves without it
        ("thatch_model.json", b"{"),  # read while the cache is looked up
    ],
)
def test_a_pull_mends_a_file_broken_in_the_cache(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, damage: bytes
) -> None:
    """A file broken in the cache (pulled before pulls checked their files, or damaged on
    disk) resolved as ready for good, and pulling again fetched nothing: a pull now checks
    the cached files and fetches the broken one again (a file read while the cache is
    looked up too, which failed every pull before), and the model loads."""
    from thatch.embedder.models.resolve import create_encoder, pull_model

    repo = linked_repo(minilm_dir, tmp_path / "repo", {})
    with FakeHub({"acme/mended": repo}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        env = {**os.environ, "HF_ENDPOINT": server.url}
        first = pull_model("acme/mended", env=env)
        assert first.onnx_path is not None
        snapshot = next(p for p in first.onnx_path.parents if p.parent.name == "snapshots")
        (snapshot / name).resolve().write_bytes(damage)
        server.clear()
        mended = pull_model("acme/mended", env=env)
        assert server.downloaded() == {name}
        assert (snapshot / name).read_bytes() == (minilm_dir / name).read_bytes()
    encoder = create_encoder(mended, threads=1)
    encoder.load()
    encoder.release()


@pytest.mark.parametrize(
    ("name", "after"),
    [
        ("1_Pooling/config.json", "the embedder loads the cached copy meanwhile"),
        ("tokenizer.json", "the model cannot load until then"),
    ],
)
def test_a_pull_that_cannot_mend_says_what_waits(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, after: str
) -> None:
    """A pull that removed a broken cached file and then found the hub unreachable said
    only "cannot download", as if nothing were cached: it now says a removed file waits,
    and whether the model still loads from the rest."""
    import socket

    from thatch.embedder.models.resolve import pull_model

    repo = linked_repo(minilm_dir, tmp_path / "repo", {})
    with FakeHub({"acme/waits": repo}) as server:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        first = pull_model("acme/waits", env={**os.environ, "HF_ENDPOINT": server.url})
    assert first.onnx_path is not None
    snapshot = next(p for p in first.onnx_path.parents if p.parent.name == "snapshots")
    (snapshot / name).resolve().write_bytes(b"{")
    with socket.socket() as probe:  # bound, never listening: refused
        probe.bind(("127.0.0.1", 0))
        dead = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{probe.getsockname()[1]}"}
        for _ in range(2):  # the first pull removes the file, the second finds the mark
            with pytest.raises(ModelError) as error:
                pull_model("acme/waits", env=dead)
            assert str(error.value).startswith("cannot download model acme/waits from ")
            assert str(error.value).endswith(
                f"; a file of its cached copy was removed as broken and waits for this "
                f"download ({after})"
            )
            assert not (snapshot / name).exists()


def test_what_is_whole_or_not_the_caches_own_is_kept(minilm_dir: Path, tmp_path: Path) -> None:
    """A tokenizer.json past 16 MiB (a multilingual one) is whole: tokenizers reads it,
    and it was deleted and fetched again at every pull. A snapshot link pointing outside
    the cache's blobs loses only the link, never the file it points to. A file that cannot
    be read is no broken download."""
    from thatch.embedder.client.model_names import HubRef
    from thatch.embedder.models.download_check import unusable_because
    from thatch.embedder.models.hub_download import _refuse_if_broken, drop_damaged

    big = tmp_path / "tokenizer.json"
    big.write_text((minilm_dir / "tokenizer.json").read_text() + " " * (17 << 20))
    assert unusable_because(big) is None

    from onnx import TensorProto, helper

    # An operator of onnxruntime's own domain newer than this onnxruntime: whole, kept.
    node = helper.make_node("BrandNewFusedOp", ["x"], ["y"], domain="com.microsoft")
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in ("x", "y")]
    graph = helper.make_graph([node], "newer", value[:1], value[1:])
    newer = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    (tmp_path / "newer.onnx").write_bytes(newer.SerializeToString())
    unusable = unusable_because(tmp_path / "newer.onnx")
    assert unusable is not None and unusable.kind == "unsupported", unusable

    repo = tmp_path / "models--acme--m"
    snapshot = repo / "snapshots" / "c0ffee"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    outside = tmp_path / "users_own.json"
    outside.write_text("notes, not JSON")
    (snapshot / "config.json").symlink_to(outside)
    assert drop_damaged(snapshot) == ["config.json"]
    assert outside.read_text() == "notes, not JSON" and not (snapshot / "config.json").exists()

    loop = snapshot / "modules.json"
    loop.symlink_to(loop)
    with pytest.raises(ModelError) as error:
        _refuse_if_broken(HubRef("acme/m", None), "modules.json", loop, "acme/m", mark=True)
    assert "cannot read it" in str(error.value) and "is broken" not in str(error.value)
    assert error.value.fix is not None and error.value.fix.startswith(f"check {loop}")
    assert loop.is_symlink()
