"""The deploy/ files are valid and run the real CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def _parse_with_real_cli(argv: list[str]) -> click.Context:
    """Parse argv with thatch-embedder's own click group, without running anything."""
    from thatch.embedder.__main__ import main as cli

    assert argv[0] == "thatch-embedder"
    sub = cli.commands.get(argv[1])
    assert sub is not None, f"thatch-embedder has no {argv[1]!r} command"
    return sub.make_context(argv[1], list(argv[2:]))


def _containerfile_json_commands() -> dict[str, list[str]]:
    text = (DEPLOY / "container" / "Containerfile").read_text().replace("\\\n", " ")
    commands: dict[str, list[str]] = {}
    for instruction in ("CMD", "HEALTHCHECK"):
        match = re.search(rf"^{instruction} .*?(\[.*\])\s*$", text, flags=re.M)
        assert match, instruction
        commands[instruction] = json.loads(match.group(1))
    return commands


def test_the_image_installs_the_embedder_extra() -> None:
    """The image serves the model: thatch goes in with the `embedder` extra, which the
    default install leaves out."""
    text = (DEPLOY / "container" / "Containerfile").read_text()
    installs = re.findall(r"^RUN pip install (.+)$", text, flags=re.M)
    assert installs == ["'/src[embedder]'"]


def test_kubernetes_manifest_has_deployment_and_headless_service() -> None:
    """The manifest parses; the Service is headless so dns:/// round_robin sees every pod."""
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "embedder.yaml").read_text()))
    kinds = {doc["kind"]: doc for doc in docs}
    assert set(kinds) == {"Deployment", "Service"}
    service = kinds["Service"]
    assert service["spec"]["clusterIP"] == "None"
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["grpc"]["port"] == 50051
    assert container["readinessProbe"]["grpc"]["service"] == "thatch.embedder.v1.Embedder"
    assert container["livenessProbe"]["grpc"]["port"] == 50051
    labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_kubernetes_command_is_the_real_cli() -> None:
    """The Deployment's command parses with thatch-embedder's own options."""
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "embedder.yaml").read_text()))
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    ctx = _parse_with_real_cli(command)
    assert ctx.params["listen"] == "0.0.0.0:50051"


def test_containerfile_commands_are_the_real_cli() -> None:
    """The container's CMD serves on 0.0.0.0:50051 and its health check is a real command."""
    commands = _containerfile_json_commands()
    serve = _parse_with_real_cli(commands["CMD"])
    assert serve.params["listen"] == "0.0.0.0:50051"
    probe = _parse_with_real_cli(commands["HEALTHCHECK"])
    assert probe.params["addr"] == "127.0.0.1:50051"


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd-analyze accepts the user unit (with thatch-embedder where ExecStart says)."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is required for this check"
    home = tmp_path / "h"
    (home / ".local" / "bin").mkdir(parents=True)
    script = Path(sys.executable).parent / "thatch-embedder"
    assert script.exists(), script
    (home / ".local" / "bin" / "thatch-embedder").symlink_to(script)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    unit = DEPLOY / "systemd" / "thatch-embedder.service"
    result = subprocess.run(
        [analyze, "verify", "--user", str(unit)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    exec_start = re.search(r"^ExecStart=(.*)$", unit.read_text(), flags=re.M)
    assert exec_start
    argv = exec_start.group(1).split()
    argv[0] = "thatch-embedder"
    _parse_with_real_cli(argv)


def test_probe_reports_serving_and_unreachable(short_tmp: Path) -> None:
    """The container's health probe exits 0 for a serving embedder and 1 without one."""
    from tests.support.embedder_proc import embedder_process

    probe = [sys.executable, "-m", "thatch.embedder", "probe", "--addr"]
    with embedder_process("mock", socket_dir=short_tmp) as proc:
        ok = subprocess.run([*probe, proc.address], capture_output=True, text=True)
        assert (ok.returncode, ok.stdout) == (0, "SERVING\n")
    gone = subprocess.run([*probe, proc.address], capture_output=True, text=True)
    assert gone.returncode == 1
    assert gone.stderr == f"Error: embedder at {proc.address} is UNREACHABLE\n"
