"""The deploy/ files are valid and run the real CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
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


# -- the team hub (deploy/kubernetes/hub*.yaml, postgres.yaml, container/hub.Containerfile)

KUBERNETES = DEPLOY / "kubernetes"
TLS_MOUNT = "/etc/thatch/tls"


def _manifests(*names: str) -> list[dict[str, Any]]:
    return [
        doc for name in names for doc in yaml.safe_load_all((KUBERNETES / name).read_text()) if doc
    ]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _secret_keys(docs: list[dict[str, Any]], pod: dict[str, Any]) -> set[str]:
    """The environment names a pod's containers take from the Secrets in ``docs``."""
    secrets = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Secret"}
    return {
        key
        for container in _containers(pod)
        for source in container.get("envFrom", [])
        for key in secrets[source["secretRef"]["name"]]["stringData"]
    }


def _init_script() -> str:
    config = _one(_manifests("postgres.yaml"), "ConfigMap", "thatch-postgres-init")
    script: str = config["data"]["10-thatch-roles.sh"]
    return script


def _hub_container() -> dict[str, Any]:
    (container,) = _pod(_one(_manifests("hub.yaml"), "Deployment", "thatch-hub"))["containers"]
    return container


def _admin_commands() -> list[list[str]]:
    """Every command the migrate and admin Jobs run, in order."""
    jobs = [doc for doc in _manifests("hub-migrate.yaml", "hub-admin.yaml") if doc["kind"] == "Job"]
    return [container["command"] for job in jobs for container in _containers(_pod(job))]


def _parse_thatch(argv: list[str]) -> click.Context:
    """Parse argv with thatch's own click group down to its command, running nothing."""
    from thatch.cli.main import cli

    assert argv[0] == "thatch"
    command: click.Command = cli
    parent: click.Context | None = None
    name, args = "thatch", list(argv[1:])
    while isinstance(command, click.Group):
        ctx = click.Context(command, info_name=name, parent=parent)
        sub = command.get_command(ctx, args[0])
        assert sub is not None, f"{name} has no {args[0]!r} command"
        parent, name, command, args = ctx, args[0], sub, args[1:]
    return command.make_context(name, args, parent=parent)


def test_hub_manifest_runs_replicas_behind_both_services() -> None:
    """Several stateless replicas; a load-balanced Service for machines and a headless one
    (dns:/// round robin) for in-cluster clients, both selecting the hub's pods."""
    docs = _manifests("hub.yaml")
    assert sorted(doc["kind"] for doc in docs) == [
        "Deployment",
        "PodDisruptionBudget",
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


def test_only_the_jobs_hold_the_owner_and_the_replicas_mount_tls() -> None:
    """Serving replicas get the restricted role's URL and the certificate; the owner's URL
    goes only to the migrate and admin Jobs. The probes trust the mounted CA."""
    docs = _manifests("hub.yaml", "hub-migrate.yaml", "hub-admin.yaml")
    pod = _pod(_one(docs, "Deployment", "thatch-hub"))
    assert _secret_keys(docs, pod) == {"THATCH_HUB_DATABASE_URL", "PGPASSWORD"}
    for job in (doc for doc in docs if doc["kind"] == "Job"):
        assert _secret_keys(docs, _pod(job)) == {"THATCH_HUB_OWNER_URL", "PGPASSWORD"}
    tls = _one(docs, "Secret", "thatch-hub-tls")
    assert tls["type"] == "kubernetes.io/tls"
    assert set(tls["stringData"]) == {"tls.crt", "tls.key", "ca.crt"}
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "thatch-hub-tls"
    container = _hub_container()
    (mount,) = container["volumeMounts"]
    assert (mount["name"], mount["mountPath"]) == (volume["name"], TLS_MOUNT)
    command = container["command"]
    assert command[command.index("--tls-cert") + 1] == f"{TLS_MOUNT}/tls.crt"
    assert command[command.index("--tls-key") + 1] == f"{TLS_MOUNT}/tls.key"
    argv = container["readinessProbe"]["exec"]["command"]
    assert argv[argv.index("--ca") + 1] == f"{TLS_MOUNT}/ca.crt"
    assert container["livenessProbe"]["tcpSocket"]["port"] == "grpc"
    assert container["ports"][0]["name"] == "grpc"


def test_hub_urls_name_the_roles_and_database_postgres_yaml_makes() -> None:
    """The URLs connect to postgres.yaml's Service and database, without a password, as
    the two roles its init script creates; migrate grants the role the hub connects as."""
    from urllib.parse import urlsplit

    docs = _manifests("hub.yaml", "hub-migrate.yaml", "postgres.yaml")
    service = _one(docs, "Service", "thatch-postgres")
    statefulset = _one(docs, "StatefulSet", "thatch-postgres")
    (postgres,) = _pod(statefulset)["containers"]
    assert postgres["image"].startswith("pgvector/pgvector:")
    env = {item["name"]: item["value"] for item in postgres["env"]}
    urls = {
        **_one(docs, "Secret", "thatch-hub-database")["stringData"],
        **_one(docs, "Secret", "thatch-hub-owner")["stringData"],
    }
    users = {"THATCH_HUB_DATABASE_URL": "thatch_hub", "THATCH_HUB_OWNER_URL": "thatch_owner"}
    for key, user in users.items():
        url = urlsplit(urls[key])
        assert (url.scheme, url.username, url.password, url.hostname, url.port, url.path) == (
            "postgresql",
            user,
            None,
            service["metadata"]["name"],
            service["spec"]["ports"][0]["port"],
            "/" + env["POSTGRES_DB"],
        )
        assert f"CREATE ROLE {user}" in _init_script()
    migrate = _parse_thatch(_admin_commands()[0])
    assert (migrate.info_name, migrate.params["hub_role"]) == ("migrate", "thatch_hub")


def test_every_hub_command_is_the_real_cli(tmp_path: Path, monkeypatch: Any) -> None:
    """The replicas' serve and readiness probe, the Jobs' migrate/team/member commands
    and the image's CMD parse with thatch's own click commands."""
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("PEM")  # serve's options need files that exist

    def here(argv: list[str]) -> list[str]:
        return [arg.replace(TLS_MOUNT, str(tmp_path)) for arg in argv]

    text = (DEPLOY / "container" / "hub.Containerfile").read_text()
    installs = re.findall(r"^RUN pip install (.+)$", text, flags=re.M)
    assert installs == ["'/src[team]'"]
    cmd = re.search(r"^CMD (\[.*\])\s*$", text, flags=re.M)
    assert cmd
    container = _hub_container()
    assert json.loads(cmd.group(1)) == container["command"]
    serve = _parse_thatch(here(container["command"]))
    assert serve.info_name == "serve"
    assert serve.params["listen"] == "0.0.0.0:50443"
    assert serve.params["tls_cert"] == tmp_path / "tls.crt"
    assert serve.params["tls_key"] == tmp_path / "tls.key"
    assert serve.params["embedder"] == "dns:///thatch-embedder:50051"
    assert container["ports"][0]["containerPort"] == 50443
    probe = _parse_thatch(here(container["readinessProbe"]["exec"]["command"]))
    assert probe.info_name == "probe"
    assert (probe.params["addr"], probe.params["ca_file"]) == (
        "localhost:50443",
        tmp_path / "ca.crt",
    )
    parsed = [_parse_thatch(argv) for argv in _admin_commands()]
    assert [(ctx.info_name, ctx.params) for ctx in parsed] == [
        ("migrate", {"hub_role": "thatch_hub"}),
        ("add", {"team_id": "acme", "name": "Acme platform team"}),
        ("add", {"team_id": "acme", "member_id": "alice"}),
    ]
    assert [ctx.parent.info_name for ctx in parsed if ctx.parent] == ["hub", "team", "member"]
    revoke = re.search(r"\[\"thatch\", \"hub\", \"member\", \"revoke\".*\]",
                       (KUBERNETES / "hub-admin.yaml").read_text())  # fmt: skip
    assert revoke
    assert _parse_thatch(json.loads(revoke.group(0))).params == {
        "team_id": "acme",
        "member_id": "alice",
    }


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A manifest's command with this environment's scripts for thatch and thatch-embedder."""
    scripts = Path(sys.executable).parent
    argv = [str(scripts / arg) if arg in ("thatch", "thatch-embedder") else arg for arg in argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def test_manifests_run_against_a_real_postgres_and_the_hub_serves(
    postgres: Any, tmp_path: Path
) -> None:
    """On a real PostgreSQL: postgres.yaml's init script (twice: it is idempotent), a
    replica's serve as the hub's role with TLS (its readiness probe says NOT_SERVING: no
    migrations yet), the Jobs' commands as the owner the script made (migrate, team add,
    member add), then the probe turns SERVING and the member's token reaches the hub. The
    owner is no superuser; the hub's role owns nothing, passes check_role and sees no row
    without a team; on SIGTERM the replica stops and the probe fails."""
    import psycopg

    from tests.support.polling import poll
    from tests.support.postgres import _binaries
    from tests.support.tls_certs import make_certs
    from thatch.hub.client import HubClient
    from thatch.hub.schema import HubRoleError, check_role

    database = postgres.fresh_database()
    base = {**os.environ, "PGHOST": str(postgres.socket_dir)}
    init = {
        **base,
        "PATH": f"{_binaries()}{os.pathsep}{os.environ['PATH']}",
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": database,
        "THATCH_OWNER_PASSWORD": "owner secret",
        "THATCH_HUB_PASSWORD": "hub secret",
    }
    for _ in range(2):
        done = subprocess.run(
            ["sh", "-c", _init_script()], env=init, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr

    certs = make_certs(tmp_path)  # "named": signed by "ca" for localhost only
    tls = tmp_path / "tls"
    tls.mkdir()
    for source, name in (("named.pem", "tls.crt"), ("named.key", "tls.key"), ("ca.pem", "ca.crt")):
        (tls / name).write_bytes((certs / source).read_bytes())
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]

    def here(argv: list[str]) -> list[str]:
        return [
            arg.replace(TLS_MOUNT, str(tls))
            .replace("0.0.0.0:50443", f"127.0.0.1:{port}")
            .replace("localhost:50443", f"localhost:{port}")
            for arg in argv
        ]

    container = _hub_container()
    serve_argv = here(container["command"])
    serve_argv[0] = str(Path(sys.executable).parent / "thatch")
    hub_env = {**base, "THATCH_HUB_DATABASE_URL": postgres.conninfo(database, user="thatch_hub")}
    readiness = here(container["readinessProbe"]["exec"]["command"])
    log = tmp_path / "replica.log"
    with log.open("w") as replica_log:
        replica = subprocess.Popen(
            serve_argv, env=hub_env, stdout=subprocess.DEVNULL, stderr=replica_log
        )
    try:
        waiting = poll(
            lambda: replica.poll() is not None or "is NOT_SERVING" in _run(readiness, base).stderr,
            timeout=180,
        )
        assert waiting and replica.poll() is None, log.read_text()

        owner_env = {
            **base,
            "THATCH_HUB_OWNER_URL": postgres.conninfo(database, user="thatch_owner"),
        }
        outputs = []
        for argv in _admin_commands():
            done = _run(argv, owner_env)
            assert done.returncode == 0, (argv, done.stderr)
            outputs.append(done.stdout)
        assert outputs[0].startswith("Applied: m001_tables")
        token = outputs[2].splitlines()[0]

        ready = poll(
            lambda: replica.poll() is not None or _run(readiness, base).returncode == 0,
            timeout=180,
        )
        assert ready and replica.poll() is None, log.read_text()
        with HubClient(f"localhost:{port}", token, ca_file=tls / "ca.crt") as client:
            stores = client.stores()
        assert (stores.team, stores.member) == ("acme", "alice")
    finally:
        replica.terminate()
        replica.wait(timeout=120)
    assert replica.returncode == 0, log.read_text()
    assert _run(readiness, base).returncode == 1

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
        check_role(hub)
        try:
            check_role(owner)
        except HubRoleError as error:
            assert "the owner of" in str(error)
        else:
            raise AssertionError("the owner passed check_role")
        owned = hub.execute("SELECT count(*) FROM pg_class WHERE relowner = current_user::regrole")
        assert owned.fetchone() == (0,)
        assert owner.execute("SELECT count(*) FROM teams").fetchone() == (1,)
        for table in ("teams", "stores", "memories", "recall_events", "applied_writes"):
            assert hub.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        try:
            hub.execute("SELECT count(*) FROM members")
        except psycopg.errors.InsufficientPrivilege:
            pass
        else:
            raise AssertionError("the hub's role reads members")
