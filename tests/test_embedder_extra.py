"""Frontends run without the `embedder` extra: their imports never reach the model runtime.

A machine whose agents use a shared embedder (THATCH_EMBEDDER_ADDR) installs thatch
without onnxruntime, onnx, tokenizers and huggingface_hub. Each check runs in a fresh
interpreter where importing any of them fails, as it does where they are not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from tests.test_layers import EMBEDDER_CLI, ROOT, modules

EXTRA = ("onnxruntime", "onnx", "tokenizers", "huggingface_hub")

# Installed in the child before anything else: these packages behave as if absent.
BLOCK = textwrap.dedent(
    f"""
    import sys

    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {EXTRA!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    """
)


def run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def frontend_modules() -> list[str]:
    """Every module of the frontend, the CLI and the embedder's surface."""
    prefixes = ("thatch.frontend", "thatch.cli", "thatch.embedder.client", "thatch.common")
    return [
        name
        for name, _path in modules()
        if name.startswith(prefixes) and name not in ("thatch.cli.__main__",)
    ]


def test_frontend_modules_import_without_the_extra() -> None:
    """Every frontend and CLI module (the embedder's CLI too: it imports the runtime lazily)
    imports, and none of the extra's packages is loaded afterwards."""
    names = frontend_modules()
    assert len(names) > 60
    assert set(EMBEDDER_CLI) <= set(names)
    done = run_blocked(
        f"""
        import importlib
        for name in {names!r}:
            importlib.import_module(name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {EXTRA!r})
        print("loaded:", loaded)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout


def test_the_cli_answers_without_the_extra() -> None:
    """`thatch --help` and `thatch doctor --help` load every command group."""
    done = run_blocked(
        """
        from click.testing import CliRunner
        from thatch.cli.main import cli
        for args in (["--help"], ["doctor", "--help"], ["embedder", "--help"]):
            result = CliRunner().invoke(cli, args)
            assert result.exit_code == 0, (args, result.output, result.exception)
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_demo_names_the_missing_extra() -> None:
    """Without the extra, `thatch demo` fails at once with the install line, not a traceback
    from a child embedder."""
    done = run_blocked(
        """
        from click.testing import CliRunner
        from thatch.cli.main import cli
        result = CliRunner().invoke(cli, ["demo"])
        print(result.exit_code)
        print(result.output)
        """
    )
    assert done.returncode == 0, done.stderr
    code, _, output = done.stdout.partition("\n")
    assert code == "1"
    assert "embedder extra" in output
    assert "[embedder]" in output
    assert "thatch demo --model mock" in output


def test_doctor_names_the_missing_extra(tmp_path: Path) -> None:
    """Without the extra and with no embedder reachable, the doctor's model check fails
    with the install line (not `thatch model import`, which needs the extra itself)."""
    done = run_blocked(
        f"""
        import json, os
        os.environ.pop("THATCH_EMBEDDER_ADDR", None)
        os.environ.update(HOME={str(tmp_path)!r}, XDG_CACHE_HOME={str(tmp_path / "c")!r},
                          XDG_RUNTIME_DIR={str(tmp_path / "r")!r})
        from click.testing import CliRunner
        from thatch.cli.main import cli
        result = CliRunner().invoke(cli, ["doctor", "--json"])
        print(json.dumps([c for c in json.loads(result.output) if c["check"] == "model"]))
        """
    )
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert model["status"] == "FAIL", model
    assert "embedder extra" in model["detail"] and "[embedder]" in model["fix"], model


def test_the_mock_demo_runs_end_to_end_without_the_extra(tmp_path: Path) -> None:
    """`thatch demo --model mock`: every process of it (the CLI, the embedder it starts)
    runs with the extra absent, and the memories are saved and recalled."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK)
    home = tmp_path / "home"
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("thatch")), "demo", "--model", "mock"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5. Stopping the embedder" in done.stdout
    assert "# Running the test suite" in done.stdout
    assert "No module named" not in done.stdout + done.stderr


def test_serving_names_the_missing_extra() -> None:
    """`thatch-embedder serve` (what auto-start runs) says what to install, in one line."""
    done = run_blocked(
        """
        from click.testing import CliRunner
        from thatch.embedder.server.serve_cmd import serve
        result = CliRunner().invoke(serve, ["--model", "Xenova/bge-small-en-v1.5"])
        print(result.exit_code)
        print(result.output)
        """
    )
    assert done.returncode == 0, done.stderr
    code, _, output = done.stdout.partition("\n")
    assert code == "1"
    assert "the embedder extra is not installed (onnxruntime" in output
    assert "[embedder]" in output
    assert "Traceback" not in output


def test_the_extra_carries_the_runtime_and_the_test_extra_pulls_it() -> None:
    """The default install leaves the runtime out; `test` and `demo` pull the extra in."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    default = " ".join(project["dependencies"])
    extras = project["optional-dependencies"]
    for package in EXTRA:
        assert package not in default
        assert any(spec.startswith(package) for spec in extras["embedder"])
    assert "thatch[embedder]" in extras["test"]
    assert "thatch[embedder]" in extras["demo"]
