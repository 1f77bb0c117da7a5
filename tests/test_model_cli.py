"""`thatch model import|info|pull` (docs/cli.md §embedder-and-models)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub.constants
import pytest
from click.testing import CliRunner

from tests.support.fake_hub import FakeHub, linked_repo
from thatch.cli.main import cli
from thatch.embedder.models.fixes import unavailable_fix


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["model", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("sub", [[], ["import"], ["info"], ["pull"], ["use"]])
def test_help(sub: list[str]) -> None:
    """Every model command has --help."""
    code, out, _ = run(*sub, "--help")
    assert code == 0 and "Usage:" in out


def test_info_mock() -> None:
    """`model info mock` shows the built-in model."""
    code, out, _ = run("info", "mock")
    assert code == 0
    assert "id:" in out and "mock" in out and "384" in out


def test_info_local_dir_json(minilm_dir: Path) -> None:
    """`model info DIR --json` reports id, source, files, dim and sha256 without loading."""
    code, out, _ = run("info", str(minilm_dir), "--json")
    data = json.loads(out)
    assert code == 0
    assert data["id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert data["source"] == "local dir"
    assert data["dim"] == 384 and data["max_tokens"] == 256 and data["pooling"] == "mean"
    assert "config.json" in data["files"] and len(data["onnx_sha256"]) == 64


def test_info_defaults_to_thatch_model(minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without MODEL, info describes THATCH_MODEL."""
    monkeypatch.setenv("THATCH_MODEL", str(minilm_dir))
    code, out, _ = run("info")
    assert code == 0 and "sentence-transformers/all-MiniLM-L6-v2" in out and "local dir" in out


def test_info_uncached_hub_model_needs_download() -> None:
    """An uncached hub model is described as needing download (exit 0, offline)."""
    code, out, _ = run("info", "bge-small-en-v1.5")
    assert code == 0 and "Xenova/bge-small-en-v1.5" in out and "needs download" in out


def test_info_unresolvable_exits_1() -> None:
    """A name that resolves to nothing is `Error: ...`, exit 1, no traceback."""
    code, out, err = run("info", "/no/such/model")
    assert code == 1 and out == ""
    assert err.startswith("Error: model directory /no/such/model does not exist")
    assert "Traceback" not in err


def test_pull_offline_missing_exits_1() -> None:
    """`model pull` offline with an empty cache fails with the spec message and the fix
    that works offline."""
    code, _, err = run("pull", "acme/absent")
    assert code == 1
    assert err.splitlines() == [
        "Error: model acme/absent is not in the local cache and HF_HUB_OFFLINE=1",
        f"Fix: {unavailable_fix('acme/absent', os.environ, hub=False)}",
    ]


def test_pull_downloads_and_reports(minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`model pull` fetches from the hub with progress on stderr and prints where it is."""
    with FakeHub({"acme/cli-model": minilm_dir}) as hub:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        code, out, err = run("pull", "acme/cli-model", "--revision", "main")
    assert code == 0
    assert out.startswith("model acme/cli-model ready at ")
    path = Path(out.strip().split(" ready at ", 1)[1])
    assert (path / "config.json").is_file() and "models--acme--cli-model" in str(path)
    assert "100%" in err


def test_pull_mock_needs_nothing() -> None:
    """Pulling the mock model succeeds at once."""
    code, out, _ = run("pull", "mock")
    assert code == 0 and out.strip() == "model mock ready at (built in)"


def test_import_writes_model_and_prints_use(minilm_source: Path, tmp_path: Path) -> None:
    """`model import` converts the checkpoint and prints the directory and the command
    that makes it the default (by directory: --out is outside thatch's model cache).

    Its name is 250 bytes, near the file system's limit of 255: the build directory beside
    it once added 20 to that and failed with a name the user never gave."""
    out_dir = tmp_path / ("imported-" + "m" * 241)
    code, out, _ = run(
        "import", str(minilm_source), "--out", str(out_dir), "--no-quantize", "--max-tokens", "128"
    )
    assert code == 0
    assert out.splitlines() == [str(out_dir), f"thatch model use {out_dir}"]
    meta = json.loads((out_dir / "thatch_model.json").read_text())
    assert meta["max_tokens"] == 128 and not (out_dir / "onnx" / "model_quantized.onnx").exists()


def test_import_missing_source_exits_1(tmp_path: Path) -> None:
    """Importing from a directory without a checkpoint is a one-line error, exit 1."""
    code, out, err = run("import", str(tmp_path / "nothing"), "--out", str(tmp_path / "o"))
    assert code == 1 and out == "" and err.startswith("Error: ")
    assert not (tmp_path / "o").exists()


def test_import_bad_pooling_is_usage_error(tmp_path: Path) -> None:
    """An invalid --pooling value is a usage error (exit 2)."""
    code, _, err = run("import", str(tmp_path), "--pooling", "max")
    assert code == 2 and "--pooling" in err


def test_pull_of_a_broken_file_names_it_and_fetches_it_again(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tokenizer.json that is not JSON was pulled as `ready`, and pulling again fetched
    nothing. Now: one Error line naming the file, the Fix, and the next pull fetches it."""
    repo = linked_repo(minilm_dir, tmp_path / "repo", {"tokenizer.json": b"<html>oops</html>"})
    with FakeHub({"acme/bad-tokenizer": repo}) as hub:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        for _ in range(2):
            hub.clear()
            code, out, err = run("pull", "acme/bad-tokenizer")
            assert code == 1 and out == ""
            assert err.splitlines()[-2:] == [
                "Error: downloaded tokenizer.json of model acme/bad-tokenizer is broken: "
                "not JSON (Expecting value: line 1 column 1 (char 0)); "
                "removed it from the cache",
                "Fix: download it again (if it fails the same way, the hub's own copy is "
                "broken): thatch model pull acme/bad-tokenizer",
            ]
            assert "tokenizer.json" in hub.downloaded()


def test_pull_from_a_failing_hub_prints_only_thatchs_error(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """huggingface_hub wrote a warning per retry of the failing request ("HTTP Error 500
    thrown while requesting HEAD ...", "Retrying in 1s [Retry 1/5].") to stderr ahead of
    thatch's Error line."""
    import huggingface_hub.utils._http as hub_http

    waits: list[float] = []
    monkeypatch.setattr(hub_http, "time", SimpleNamespace(sleep=waits.append))  # no real waits
    with FakeHub({"acme/failing": minilm_dir}) as hub:
        hub.failing["tokenizer.json"] = 500
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        code, out, err = run("pull", "acme/failing")
    assert code == 1 and out == "" and waits  # it did retry
    output = (capfd.readouterr().err + err).splitlines()
    lines = [line for line in output if line.strip() and "%|" not in line]  # no progress bars
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"Error: cannot download model acme/failing from {hub.url}: ")
    assert "500" in lines[0] and lines[1].startswith("Fix: ")


def test_info_shows_a_directory_name_as_data(minilm_dir: Path, tmp_path: Path) -> None:
    """A model directory named by an agent (a newline, an ANSI escape, a bidi override in
    it) is one escaped `path:` and `onnx:` value, never a line of its own."""
    named = tmp_path / "m\nquantized:   no\x1b[2J\u202e"
    shutil.copytree(minilm_dir, named, copy_function=os.link)
    code, out, _ = run("info", str(named))
    assert code == 0
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "id", "source", "path", "revision", "files", "dim", "max tokens", "pooling",
        "query prefix", "quantized", "onnx", "onnx sha256",
    ]  # fmt: skip
    shown = f"{tmp_path}/m\\nquantized:   no\\u001b[2J\\u202e"
    assert lines[2] == f"{'path:':<14}{shown}"
    assert lines[10].startswith(f"{'onnx:':<14}{shown}/")


def test_use_shows_a_directory_name_as_data(minilm_dir: Path, tmp_path: Path) -> None:
    """`model use DIR` and `model use` name a directory an agent named as one escaped value:
    its newline, ANSI escape and bidi override never start a line of their own."""
    named = tmp_path / "m\nSaved in /elsewhere\x1b[2J\u202e"
    shutil.copytree(minilm_dir, named, copy_function=os.link)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "con\nfig"), "THATCH_MODEL": ""}
    shown = f"{tmp_path}/m\\nSaved in /elsewhere\\u001b[2J\\u202e"
    code, out, _ = run("use", str(named), env=env)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("Default model: ")
    assert lines[0].endswith(f" at {shown})") and lines[1].startswith("Saved in ")
    code, out, _ = run("use", env=env)
    assert code == 0
    config = f"{tmp_path}/con\\nfig/thatch/config.json"
    assert out.splitlines() == [f"{shown} (from config file {config})"]
    code, out, _ = run("list", env=env)
    assert code == 0 and f"* in use: {shown} (from config file {config})" in out.splitlines()
