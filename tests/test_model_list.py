"""`thatch model list`: what this machine can use without a download, and which model is in
use (docs/cli.md §embedder-and-models). Local files only: no model loaded, no hub asked."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest
from click.testing import CliRunner

from tests.support.fake_hub import FakeHub
from thatch.cli.main import cli
from thatch.common.environment import config_file, models_dir
from thatch.embedder.client.model_names import hub_cache_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"
PACKAGED_ID = "sentence-transformers/all-MiniLM-L6-v2"
HEADER = ["", "ID", "SHORT NAME", "SOURCE", "STATUS", "QUANTIZED", "DIM", "PATH"]
# The built-in short names while their models are not on this machine.
# DIM from the registry: known without the files.
BGE = ["Xenova/bge-small-en-v1.5", "bge-small-en-v1.5", "hub", "needs download", "yes", "384", "-"]
MINILM = ["Xenova/all-MiniLM-L6-v2", "all-MiniLM-L6-v2", "hub", "needs download", "yes", "384"]
MINILM += ["-"]
CODE = ["thatch/all-MiniLM-L6-v2-code", "all-MiniLM-L6-v2-code", "built here", "needs download"]
CODE += ["-", "384", "-"]
EMPTY_NOTE = (
    "Nothing is imported or cached yet: `thatch model pull` downloads the model in use, "
    "`thatch model import DIR` converts a checkpoint you have."
)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["model", "list", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def rows(out: str) -> list[list[str]]:
    """The table's lines split on its column gaps (two spaces or more), marker kept."""
    table = []
    for line in out.splitlines():
        if not line.startswith(("* ", "  ")) or line.startswith("* in use: "):
            continue  # the legend under the table
        cells = [cell for cell in line[2:].split("  ") if cell]
        table.append([line[0].strip(), *(cell.strip() for cell in cells)])
    return table


def listed(as_json: bool = True) -> dict[str, dict[str, object]]:
    code, out, err = run("--json")
    assert code == 0, err
    return {str(item["id"]): item for item in json.loads(out)}


def imported(minilm_dir: Path, name: str = "sentence-transformers__all-MiniLM-L6-v2") -> Path:
    """The session's imported MiniLM, where `thatch model import` puts it by default."""
    target = models_dir(os.environ) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(minilm_dir, target, copy_function=os.link)
    return target


def hub_snapshot(source: Path, repo_id: str, *, drop: tuple[str, ...] = ()) -> Path:
    """A hub-cache copy of ``source`` laid out as huggingface_hub lays it out: files in
    ``blobs/<sha256>``, ``refs/main`` holding the commit, the snapshot's files symlinks."""
    storage = hub_cache_dir(os.environ) / ("models--" + repo_id.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(COMMIT)
    (storage / "blobs").mkdir()
    snapshot = storage / "snapshots" / COMMIT
    for path in sorted(source.rglob("*")):
        name = path.relative_to(source).as_posix()
        if not path.is_file() or name in drop or name == "thatch_model.json":
            continue
        blob = storage / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        if not blob.exists():
            os.link(path, blob)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def unreadable(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """Every look inside ``directory`` denied, as a mode-000 directory denies it to a user
    without CAP_DAC_OVERRIDE (the tests run as root, which the mode does not stop)."""

    def denying(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self != directory and self.is_relative_to(directory):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            return method(self, *args, **kwargs)

        return call

    for name in ("stat", "open", "iterdir"):
        monkeypatch.setattr(Path, name, denying(getattr(Path, name)))


def test_help_has_an_example_and_typos_are_pointed_at_list() -> None:
    """`thatch model list --help` shows an example; `thatch model lst` suggests `list`."""
    code, out, _ = run("--help")
    assert code == 0 and "Usage:" in out and "$ thatch model list" in out
    result = CliRunner().invoke(cli, ["model", "lst"])
    assert result.exit_code == 2
    assert "No such command 'lst'. Did you mean 'list'?" in result.stderr


def test_empty_caches_list_the_built_in_names_and_say_what_to_run() -> None:
    """Nothing imported or cached: the built-in short names, marked `needs download`, the
    default marked in use, and the commands that get a model."""
    code, out, err = run()
    assert (code, err) == (0, "")
    assert rows(out) == [
        HEADER,
        ["*", *BGE],
        ["", *MINILM],
        ["", *CODE],
    ]
    assert out.splitlines()[-2:] == [
        "* in use: Xenova/bge-small-en-v1.5 (from default)",
        EMPTY_NOTE,
    ]


def test_an_import_and_a_hub_snapshot_are_listed_ready_with_their_settings(
    minilm_dir: Path,
) -> None:
    """An import in thatch's model cache and a servable hub-cache snapshot (blobs, refs,
    symlinked snapshot) are listed with source, quantized, dim and path, read from their
    files; a built-in name on the machine is no longer `needs download`."""
    directory = imported(minilm_dir)
    snapshot = hub_snapshot(minilm_dir, "Xenova/all-MiniLM-L6-v2")
    code, out, err = run()
    assert (code, err) == (0, "")
    assert rows(out) == [
        HEADER,
        ["", PACKAGED_ID, "-", "imported", "ready", "yes", "384", str(directory)],
        [
            "",
            "Xenova/all-MiniLM-L6-v2",
            "all-MiniLM-L6-v2",
            "hub cache",
            "ready",
            "yes",
            "384",
            str(snapshot),
        ],
        ["*", *BGE],
        ["", *CODE],
    ]
    assert EMPTY_NOTE not in out


def test_of_rows_sharing_an_id_the_one_it_resolves_to_says_so(minilm_dir: Path) -> None:
    """An import and a hub-cache snapshot with one id are both ready: the import, which
    the id resolves to (an explicit import wins over the hub cache), says so."""
    directory = imported(minilm_dir)
    snapshot = hub_snapshot(minilm_dir, PACKAGED_ID)
    code, out, err = run()
    assert (code, err) == (0, "")
    assert [(row[3], row[4], row[-1]) for row in rows(out) if row[1] == PACKAGED_ID] == [
        ("imported", "ready (the id leads here)", str(directory)),
        ("hub cache", "ready", str(snapshot)),
    ]
    code, out, _ = run("--json")
    # JSON keeps `status` one of its documented values: scripts test `== "ready"`.
    listed = [m for m in json.loads(out) if m["id"] == PACKAGED_ID]
    assert [(m["source"], m["status"], m["id_leads_here"]) for m in listed] == [
        ("imported", "ready", True),
        ("hub cache", "ready", False),
    ]


def test_an_import_standing_for_a_short_name_shows_it(minilm_dir: Path) -> None:
    """The hub's all-MiniLM-L6-v2 not cached: its short name leads to the import of the
    packaged checkpoint, and the list says so on the import's row."""
    imported(minilm_dir)
    models = listed()
    assert models[PACKAGED_ID]["short_name"] == "all-MiniLM-L6-v2"
    assert models["Xenova/all-MiniLM-L6-v2"]["status"] == "needs download"


def test_a_hub_repo_thatch_cannot_serve_is_not_listed(minilm_source: Path) -> None:
    """A checkpoint in the hub cache with no ONNX file (another tool's, or the one an
    adapted model is built from) is nothing thatch serves: not listed."""
    hub_snapshot(minilm_source, "acme/checkpoint-only")
    assert "acme/checkpoint-only" not in listed()


@pytest.mark.parametrize(
    ("damage", "status"),
    [
        ("tokenizer.json", "incomplete: no tokenizer.json"),
        ("onnx/model_quantized.onnx", "incomplete: no onnx/model_quantized.onnx"),
        ("config.json", "incomplete: no config.json"),
    ],
)
def test_a_partial_import_is_listed_with_what_it_lacks(
    minilm_dir: Path, damage: str, status: str
) -> None:
    directory = imported(minilm_dir, "half")
    (directory / damage).unlink()
    code, out, err = run()
    assert (code, err) == (0, "")
    # the short name leads here (the hub's all-MiniLM-L6-v2 is not cached), and fails here
    row = ["", PACKAGED_ID, "all-MiniLM-L6-v2", "imported", status, "-", "-", str(directory)]
    assert row in rows(out)


def test_a_broken_directory_is_listed_with_why_and_the_rest_still_are(minilm_dir: Path) -> None:
    """A thatch_model.json that is not JSON, a directory with nothing in it: each a row
    saying what is wrong, no traceback, and the good import listed as ready."""
    good = imported(minilm_dir)
    damaged = imported(minilm_dir, "damaged")
    (damaged / "thatch_model.json").unlink()
    (damaged / "thatch_model.json").write_text("{not json")
    (models_dir(os.environ) / "empty").mkdir()
    models = listed()
    assert models[PACKAGED_ID]["status"] == "ready" and models[PACKAGED_ID]["path"] == str(good)
    broken = models["local:damaged"]
    assert str(broken["status"]).startswith(f"broken: cannot read {damaged / 'thatch_model.json'}")
    assert models["local:empty"]["status"] == "incomplete: no config.json"
    assert models["local:empty"]["source"] == "local dir"


def test_a_partial_hub_snapshot_is_listed_with_what_it_lacks(minilm_dir: Path) -> None:
    """A snapshot whose tokenizer.json never arrived: `thatch model pull` completes it."""
    snapshot = hub_snapshot(minilm_dir, "Xenova/all-MiniLM-L6-v2", drop=("tokenizer.json",))
    model = listed()["Xenova/all-MiniLM-L6-v2"]
    assert (model["source"], model["status"], model["path"]) == (
        "hub cache",
        "incomplete: no tokenizer.json",
        str(snapshot),
    )


def test_json_is_a_list_of_objects_with_stable_keys(minilm_dir: Path) -> None:
    """--json: one object per model, every object with the same keys."""
    directory = imported(minilm_dir)
    code, out, _ = run("--json")
    assert code == 0
    data = json.loads(out)
    assert isinstance(data, list) and len(out.splitlines()) == 1
    keys = ["id", "short_name", "source", "status", "quantized", "dim", "path"]
    keys += ["in_use", "in_use_from", "id_leads_here"]
    assert all(list(item) == keys for item in data)
    assert data[0] == {
        "id": PACKAGED_ID,
        "short_name": "all-MiniLM-L6-v2",
        "source": "imported",
        "status": "ready",
        "quantized": True,
        "dim": 384,
        "path": str(directory),
        "in_use": False,
        "in_use_from": None,
        "id_leads_here": False,
    }
    default = next(item for item in data if item["id"] == "Xenova/bge-small-en-v1.5")
    assert default["in_use"] is True and default["in_use_from"] == "default"
    assert (default["dim"], default["path"], default["quantized"]) == (384, None, True)


def test_the_model_in_use_is_marked_from_the_config_file(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch model use` by short name: the import is marked, the config file named."""
    directory = imported(minilm_dir)
    assert CliRunner().invoke(cli, ["model", "use", "all-MiniLM-L6-v2"]).exit_code == 0
    code, out, _ = run()
    assert code == 0
    marked = [row for row in rows(out) if row[0] == "*"]
    assert marked == [
        ["*", PACKAGED_ID, "all-MiniLM-L6-v2", "imported", "ready", "yes", "384", str(directory)]
    ]
    assert out.splitlines()[-1] == (
        f"* in use: {PACKAGED_ID} (from config file {config_file(os.environ)})"
    )


def test_the_model_in_use_is_marked_from_thatch_model_even_outside_the_caches(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_MODEL naming a directory of one's own (and winning over the config file):
    that directory gets a row of its own, marked."""
    config = config_file(os.environ)
    config.parent.mkdir(parents=True)
    config.write_text('{"model": "bge-small-en-v1.5"}')
    monkeypatch.setenv("THATCH_MODEL", str(minilm_dir))
    models = listed()
    mine = models[PACKAGED_ID]
    assert (mine["source"], mine["path"], mine["in_use"], mine["in_use_from"]) == (
        "local dir",
        str(minilm_dir),
        True,
        "THATCH_MODEL",
    )
    assert [m["id"] for m in models.values() if m["in_use"]] == [PACKAGED_ID]


def test_a_pinned_revision_in_use_is_its_own_hub_cache_row(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_MODEL pins a cached commit other than main's: that snapshot is marked, as
    what it is (the hub cache), beside the main snapshot's row, which the id alone leads
    to."""
    main = hub_snapshot(minilm_dir, "Xenova/all-MiniLM-L6-v2")
    other = main.parent / ("1" * 40)
    shutil.copytree(main, other, symlinks=True)
    monkeypatch.setenv("THATCH_MODEL", f"Xenova/all-MiniLM-L6-v2@{'1' * 40}")
    code, out, _ = run("--json")
    assert code == 0
    hub = [m for m in json.loads(out) if m["source"] == "hub cache"]
    assert [(m["path"], m["in_use"], m["status"], m["id_leads_here"]) for m in hub] == [
        (str(main), False, "ready", True),
        (str(other), True, "ready", False),
    ]


def test_mock_is_listed_only_when_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """mock is a test model: not offered, but shown when it is the model in use."""
    assert "mock" not in listed()
    monkeypatch.setenv("THATCH_MODEL", "mock")
    code, out, _ = run()
    assert code == 0
    assert ["*", "mock", "-", "built in", "ready", "no", "384", "-"] in rows(out)
    assert out.splitlines()[-2] == "* in use: mock (from THATCH_MODEL)"


def test_a_model_in_use_that_does_not_resolve_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The list is still printed; stderr says why nothing is marked."""
    monkeypatch.setenv("THATCH_MODEL", "/no/such/model")
    code, out, err = run()
    assert code == 0 and len(rows(out)) == 4 and "*" not in out
    assert err == (
        "Warning: the model in use, /no/such/model (from THATCH_MODEL), does not resolve: "
        "model directory /no/such/model does not exist\n"
    )


def test_a_malformed_config_file_is_a_warning_with_its_fix() -> None:
    config = config_file(os.environ)
    config.parent.mkdir(parents=True)
    config.write_text("{bad")
    code, out, err = run()
    assert code == 0 and len(rows(out)) == 4
    assert err.startswith(f"Warning: the config file {config} is not valid JSON")
    assert err.endswith(f"Fix: correct or remove {config}, or set THATCH_MODEL\n")


def test_stored_names_are_shown_as_data(minilm_dir: Path) -> None:
    """A directory name (and the id it stands for) holding a line break and thatch's
    marker cannot print a line of its own."""
    name = "evil\n[thatch] forged"
    directory = imported(minilm_dir, name)
    meta = json.loads((directory / "thatch_model.json").read_text())
    (directory / "thatch_model.json").unlink()
    (directory / "thatch_model.json").write_text(json.dumps({**meta, "model_id": "x\ny"}))
    code, out, _ = run()
    assert code == 0
    assert not any(line.startswith(("[thatch]", "y", " forged")) for line in out.splitlines())
    assert '"local:evil\\n\\u005bthatch\\u005d forged"' in out
    assert str(directory).replace("\n", "\\n").replace("[thatch", "\\[thatch") in out
    assert listed()[f"local:{name}"]["path"] == str(directory)  # JSON keeps the real name


def test_listing_contacts_no_hub_and_loads_no_model(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Online, with a hub answering: no request reaches it, and a separate process that
    lists an import and a hub snapshot has imported neither onnxruntime nor tokenizers."""
    imported(minilm_dir)
    hub_snapshot(minilm_dir, "Xenova/all-MiniLM-L6-v2")
    with FakeHub({"Xenova/bge-small-en-v1.5": minilm_dir}) as hub:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        assert run()[0] == 0
        code = (
            "import sys\n"
            "from click.testing import CliRunner\n"
            "from thatch.cli.main import cli\n"
            "result = CliRunner().invoke(cli, ['model', 'list'])\n"
            "assert result.exit_code == 0 and 'ready' in result.stdout, result.output\n"
            "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'huggingface_hub')"
            " if m in sys.modules))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
        )
        assert hub.seen() == []
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_an_unreadable_directory_is_a_broken_row_and_the_rest_still_are(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory in thatch's model cache and a hub-cache snapshot that cannot be read
    (another user's, mode 000): each a row saying so, the good import still listed."""
    good = imported(minilm_dir)
    locked = models_dir(os.environ) / "locked"
    locked.mkdir()
    snapshot = hub_snapshot(minilm_dir, "acme/locked")
    unreadable(monkeypatch, locked)
    unreadable(monkeypatch, snapshot)
    models = listed()
    assert models[PACKAGED_ID]["status"] == "ready" and models[PACKAGED_ID]["path"] == str(good)
    assert models["local:locked"]["status"] == (
        f"broken: cannot read {locked / 'thatch_model.json'}: Permission denied"
    )
    hub = models["acme/locked"]
    assert (hub["source"], hub["path"]) == ("hub cache", str(snapshot))
    assert str(hub["status"]).startswith(f"broken: cannot read {snapshot}/")


@pytest.mark.parametrize("root", ["model cache", "hub cache"])
def test_an_unreadable_cache_is_a_warning_and_the_rest_is_listed(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    """thatch's model cache or the hub cache cannot be read (another user's, mode 000):
    what the other holds is listed, and one warning names the cache; no error, exit 0."""
    directory = imported(minilm_dir)
    snapshot = hub_snapshot(minilm_dir, "Xenova/all-MiniLM-L6-v2")
    locked = models_dir(os.environ) if root == "model cache" else hub_cache_dir(os.environ)
    unreadable(monkeypatch, locked.parent)
    code, out, err = run()
    assert code == 0
    assert err == f"Warning: cannot read the {root} {locked}: Permission denied\n"
    paths = [row[-1] for row in rows(out)]
    assert (str(directory) in paths, str(snapshot) in paths) == (
        (False, True) if root == "model cache" else (True, False)
    )
    code, out, err = run("--json")
    assert code == 0 and json.loads(out) and err.startswith("Warning: cannot read the ")
    # The readable cache empty: the unreadable one may hold models, no "nothing cached yet".
    shutil.rmtree(snapshot.parent.parent if root == "model cache" else directory)
    code, out, err = run()
    assert code == 0 and err.startswith("Warning: cannot read the ") and EMPTY_NOTE not in out


def test_an_unreadable_snapshot_of_the_model_in_use_is_a_warning(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default's snapshot cannot be read: the list, and why nothing is marked."""
    snapshot = hub_snapshot(minilm_dir, "Xenova/bge-small-en-v1.5")
    unreadable(monkeypatch, snapshot)
    code, out, err = run()
    assert code == 0 and "*" not in out
    assert err.startswith(
        "Warning: the model in use, Xenova/bge-small-en-v1.5 (from default), does not resolve: "
        f"cannot read {snapshot}/"
    )


def test_a_hub_repo_whose_main_ref_is_not_text_is_skipped(minilm_dir: Path) -> None:
    """refs/main holding bytes that are not UTF-8 names no snapshot: the repo is left out
    (the hub cache is shared with other tools), the rest is listed."""
    hub_snapshot(minilm_dir, "Xenova/all-MiniLM-L6-v2")
    broken = hub_snapshot(minilm_dir, "acme/badref")
    (broken.parent.parent / "refs" / "main").write_bytes(b"abc\xff")
    models = listed()
    assert models["Xenova/all-MiniLM-L6-v2"]["status"] == "ready"
    assert "acme/badref" not in models


@pytest.mark.parametrize("ref", ["main-copy", "../../models--acme--other/snapshots/x", COMMIT[:7]])
def test_a_hub_repo_whose_main_ref_is_no_commit_is_skipped(minilm_dir: Path, ref: str) -> None:
    """refs/main names a commit, 40 hex digits: one naming a directory beside the snapshots
    (or outside the repo's storage, or an abbreviated commit) names no snapshot, and the
    repo is left out as the one holding bytes that are not text is."""
    storage = hub_snapshot(minilm_dir, "acme/oddref").parent.parent
    shutil.copytree(minilm_dir, (storage / "snapshots" / ref).resolve(), copy_function=os.link)
    (storage / "refs" / "main").write_text(ref)
    assert "acme/oddref" not in listed()


def test_each_import_is_read_a_bounded_number_of_times(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing n imports reads each one's thatch_model.json and resolves each path a few
    times, however many imports there are: it was n times each (400 imports took 14 s)."""
    count = 12
    for i in range(count):
        directory = imported(minilm_dir, f"acme__m{i}")
        meta = json.loads((directory / "thatch_model.json").read_text())
        (directory / "thatch_model.json").unlink()
        (directory / "thatch_model.json").write_text(json.dumps({**meta, "model_id": f"acme/m{i}"}))
    reads: Counter[Path] = Counter()
    resolved: Counter[Path] = Counter()
    read_text, resolve = Path.read_text, Path.resolve

    def counted_read(self: Path, *args: Any, **kwargs: Any) -> str:
        reads[self] += 1
        return read_text(self, *args, **kwargs)

    def counted_resolve(self: Path, *args: Any, **kwargs: Any) -> Path:
        resolved[self] += 1
        return resolve(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted_read)
    monkeypatch.setattr(Path, "resolve", counted_resolve)
    models = listed()
    assert [models[f"acme/m{i}"]["short_name"] for i in range(count)] == [
        f"m{i}" for i in range(count)
    ]
    metas = [p for p in reads if p.name == "thatch_model.json" and p.parent.name[:6] == "acme__"]
    # the import list, is_import (the directory, and its id's conventional one), the row's
    # metadata and its settings
    assert len(metas) == count and max(reads[path] for path in metas) <= 5, reads
    # as a row, and as where its short name leads
    assert max(resolved.values()) <= 2, resolved


def test_a_partial_snapshot_of_the_model_in_use_is_its_one_row(minilm_dir: Path) -> None:
    """The default's snapshot lacks config.json: one row for its id, the snapshot's,
    marked in use, with its short name and a status saying a pull completes it."""
    snapshot = hub_snapshot(minilm_dir, "Xenova/bge-small-en-v1.5", drop=("config.json",))
    code, out, err = run()
    assert (code, err) == (0, "")
    bge = [row for row in rows(out) if row[1] == "Xenova/bge-small-en-v1.5"]
    assert bge == [
        [
            "*",
            "Xenova/bge-small-en-v1.5",
            "bge-small-en-v1.5",
            "hub cache",
            "incomplete: no config.json (`thatch model pull` completes it)",
            "-",
            "-",
            str(snapshot),
        ]
    ]


def test_the_row_of_the_model_in_use_shows_the_short_name_leading_to_it(
    minilm_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory in the working directory named as the adapted model wins over it in
    resolution: in use, outside the caches, its own row shows that name."""
    work = tmp_path / "work"
    shutil.copytree(minilm_dir, work / "all-MiniLM-L6-v2-code", copy_function=os.link)
    monkeypatch.chdir(work)
    monkeypatch.setenv("THATCH_MODEL", str(work / "all-MiniLM-L6-v2-code"))
    mine = listed()[PACKAGED_ID]
    assert (mine["path"], mine["in_use"], mine["short_name"]) == (
        str(work / "all-MiniLM-L6-v2-code"),
        True,
        "all-MiniLM-L6-v2-code",
    )


def test_the_registry_dim_is_what_the_packaged_checkpoint_says(minilm_dir: Path) -> None:
    """The DIM shown before a download is the registry's: here checked against the files
    of the one registry model the tests have."""
    from thatch.embedder.client.model_names import REGISTRY

    config = json.loads((minilm_dir / "config.json").read_text())
    assert REGISTRY[PACKAGED_ID].dim == config["hidden_size"]
