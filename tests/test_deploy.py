"""The deploy/ files are valid and run the real CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# -- the team hub (deploy/kubernetes/hub.yaml, postgres.yaml, hub-admin.yaml)

KUBERNETES = DEPLOY / "kubernetes"


def _manifests(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((KUBERNETES / name).read_text()) if doc]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def _secret_keys(docs: list[dict[str, Any]], pod: dict[str, Any]) -> set[str]:
    """The environment names a pod's containers take from the Secrets in ``docs``."""
    secrets = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Secret"}
    names: set[str] = set()
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for source in container.get("envFrom", []):
            names |= set(secrets[source["secretRef"]["name"]]["stringData"])
    return names


def test_hub_manifest_runs_replicas_behind_both_services() -> None:
    """Several stateless replicas; a load-balanced Service for machines and a headless one
    (dns:/// round robin) for in-cluster clients, both selecting the hub's pods."""
    docs = _manifests("hub.yaml")
    assert sorted(doc["kind"] for doc in docs) == [
        "Deployment",
        "Job",
        "PodDisruptionBudget",
        "Secret",
        "Secret",
        "Secret",
        "Service",
        "Service",
    ]
    deployment = _one(docs, "Deployment", "thatch-hub")
    assert deployment["spec"]["replicas"] >= 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    balanced = _one(docs, "Service", "thatch-hub")
    headless = _one(docs, "Service", "thatch-hub-pods")
    assert balanced["spec"]["type"] == "LoadBalancer"
    assert headless["spec"]["clusterIP"] == "None"
    for service in (balanced, headless):
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"][0]["targetPort"] == "grpc"
    budget = _one(docs, "PodDisruptionBudget", "thatch-hub")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_hub_pods_hold_the_hub_url_and_tls_never_the_owner() -> None:
    """Serving replicas get the restricted role's URL and the certificate; the owner's URL
    goes only to the migrate Job. The probes trust the mounted CA."""
    docs = _manifests("hub.yaml")
    pod = _pod(_one(docs, "Deployment", "thatch-hub"))
    assert _secret_keys(docs, pod) == {"THATCH_HUB_DATABASE_URL"}
    job = _pod(_one(docs, "Job", "thatch-hub-migrate"))
    assert _secret_keys(docs, job) == {"THATCH_HUB_OWNER_URL"}
    assert job["restartPolicy"] == "OnFailure"
    tls = _one(docs, "Secret", "thatch-hub-tls")
    assert tls["type"] == "kubernetes.io/tls"
    assert set(tls["stringData"]) == {"tls.crt", "tls.key", "ca.crt"}
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "thatch-hub-tls"
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    mounted = {f"{mount['mountPath']}/{key}" for key in tls["stringData"]}
    command = container["command"]
    for flag in ("--tls-cert", "--tls-key"):
        assert command[command.index(flag) + 1] in mounted
    for probe in ("readinessProbe", "livenessProbe"):
        argv = container[probe]["exec"]["command"]
        assert argv[:2] == ["env", f"THATCH_EMBEDDER_CA={mount['mountPath']}/ca.crt"]
        assert argv[argv.index("--addr") + 1] == "localhost:50443"


def test_hub_urls_name_the_roles_and_database_postgres_yaml_makes() -> None:
    """The URLs in hub.yaml connect to postgres.yaml's Service and database, as the two roles
    its init script creates."""
    from urllib.parse import urlsplit

    hub, postgres = _manifests("hub.yaml"), _manifests("postgres.yaml")
    service = _one(postgres, "Service", "thatch-postgres")
    statefulset = _one(postgres, "StatefulSet", "thatch-postgres")
    env = {item["name"]: item["value"] for item in _pod(statefulset)["containers"][0]["env"]}
    script = _one(postgres, "ConfigMap", "thatch-postgres-init")["data"]["10-thatch-roles.sh"]
    urls = {
        **_one(hub, "Secret", "thatch-hub-database")["stringData"],
        **_one(hub, "Secret", "thatch-hub-owner")["stringData"],
    }
    users = {"THATCH_HUB_DATABASE_URL": "thatch_hub", "THATCH_HUB_OWNER_URL": "thatch_owner"}
    for key, user in users.items():
        url = urlsplit(urls[key])
        assert (url.scheme, url.username, url.hostname, url.port, url.path) == (
            "postgresql",
            user,
            service["metadata"]["name"],
            service["spec"]["ports"][0]["port"],
            "/" + env["POSTGRES_DB"],
        )
        assert f"CREATE ROLE {user}" in script
    assert _pod(statefulset)["containers"][0]["image"].startswith("pgvector/pgvector:")


def _run_init_script(server: Any, database: str) -> None:
    from tests.support.postgres import _binaries

    postgres = _manifests("postgres.yaml")
    script = _one(postgres, "ConfigMap", "thatch-postgres-init")["data"]["10-thatch-roles.sh"]
    env = {
        **os.environ,
        "PATH": f"{_binaries()}{os.pathsep}{os.environ['PATH']}",
        "PGHOST": str(server.socket_dir),
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": database,
        "THATCH_OWNER_PASSWORD": "owner secret",
        "THATCH_HUB_PASSWORD": "hub secret",
    }
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_postgres_init_then_migrations_as_its_owner_leave_a_bound_hub_role(
    postgres: Any,
) -> None:
    """postgres.yaml's init script, run as the image runs it (twice: it is idempotent) on a
    real PostgreSQL, makes an owner that migrates without being a superuser and a hub role
    that check_role accepts, owns nothing, and sees no row without a team."""
    import psycopg

    from tests.support.hubdb import START
    from thatch.hub import admin
    from thatch.hub.memories import HubMemories
    from thatch.hub.schema import MIGRATIONS, HubRoleError, check_role, migrate
    from thatch.hub.session import authenticate

    database = postgres.fresh_database()
    _run_init_script(postgres, database)
    _run_init_script(postgres, database)
    with (
        psycopg.connect(postgres.conninfo(database, user="thatch_owner"), autocommit=True) as owner,
        psycopg.connect(postgres.conninfo(database, user="thatch_hub"), autocommit=True) as hub,
    ):
        roles = {
            name: attributes
            for name, *attributes in owner.execute(
                "SELECT rolname, rolsuper, rolbypassrls, rolcanlogin FROM pg_roles "
                "WHERE rolname IN ('thatch_owner', 'thatch_hub')"
            )
        }
        assert roles == {
            "thatch_owner": [False, False, True],
            "thatch_hub": [False, False, True],
        }
        assert migrate(owner, "thatch_hub", START) == [name for name, _ in MIGRATIONS]
        check_role(hub)
        try:
            check_role(owner)
        except HubRoleError as error:
            assert "the owner of" in str(error)
        else:
            raise AssertionError("the owner passed check_role")
        owned = hub.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = 'thatch_hub'::regrole"
        ).fetchone()
        assert owned == (0,)

        admin.add_team(owner, "acme", "Acme", START)
        admin.add_member(owner, "acme", "alice", "token-alice", START)
        member = authenticate(hub, "token-alice")
        memories = HubMemories(hub, member, lambda: START)
        memories.remember(
            "team/notes", "Deploy order", "# Deploy order\n\nmigrate first", None, None
        )
        assert memories.store_counts() == {"team/notes": 1}
        for table in ("teams", "stores", "memories", "recall_events", "applied_writes"):
            assert hub.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        try:
            hub.execute("SELECT count(*) FROM members")
        except psycopg.errors.InsufficientPrivilege:
            pass
        else:
            raise AssertionError("the hub's role reads members")
