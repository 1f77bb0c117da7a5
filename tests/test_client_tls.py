"""Client certificates (THATCH_EMBEDDER_CERT/KEY) and TLS failures that name their cause.

Real embedder processes (mock model) on loopback TCP port 0: one with mTLS
(``--tls-client-ca``), one with TLS only, one plaintext; certificates are made for the
test with the openssl CLI.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import tcp_embedder
from tests.support.tls_certs import make_certs
from thatch.cli.main import cli
from thatch.embedder.__main__ import main as embedder_main
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.embedder.client.kind import Kind

CERT_FIX = (
    "set THATCH_EMBEDDER_CERT and THATCH_EMBEDDER_KEY to a certificate its --tls-client-ca signed"
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def servers(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Ports of an mTLS, a TLS-only and a plaintext embedder."""
    tls = ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key")]
    named = ["--tls-cert", str(certs / "named.pem"), "--tls-key", str(certs / "named.key")]
    mtls = [*tls, "--tls-client-ca", str(certs / "ca.pem")]
    dirs = [tmp_path_factory.mktemp(name) for name in ("mtls", "tls", "named", "plain")]
    with (
        tcp_embedder(dirs[0], *mtls) as (_, mtls_port),
        tcp_embedder(dirs[1], *tls) as (_, tls_port),
        tcp_embedder(dirs[2], *named) as (_, named_port),
        tcp_embedder(dirs[3]) as (_, plain_port),
    ):
        yield {"mtls": mtls_port, "tls": tls_port, "named": named_port, "plain": plain_port}


def client_env(certs: Path, *, ca: str | None = "ca", cert: str | None = None) -> dict[str, str]:
    env: dict[str, str] = {}
    if ca is not None:
        env["THATCH_EMBEDDER_CA"] = str(certs / f"{ca}.pem")
    if cert is not None:
        env["THATCH_EMBEDDER_CERT"] = str(certs / f"{cert}.pem")
        env["THATCH_EMBEDDER_KEY"] = str(certs / f"{cert}.key")
    return env


def failure(address: str, env: Mapping[str, str]) -> EmbedderUnavailable:
    with EmbedderClient(address, env=env) as client, pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["secret"], Kind.PASSAGE, timeout=10)
    return caught.value


def test_client_certificate_is_presented(certs: Path, servers: dict[str, int]) -> None:
    """With THATCH_EMBEDDER_CERT/KEY the mTLS embedder serves; dns:/// works the same."""
    env = client_env(certs, cert="client")
    for address in (f"localhost:{servers['mtls']}", f"dns:///localhost:{servers['mtls']}"):
        with EmbedderClient(address, env=env) as client:
            assert client.embed(["secret"], Kind.PASSAGE, timeout=10).model_id == "mock"


def test_missing_client_certificate_is_named(certs: Path, servers: dict[str, int]) -> None:
    """The mTLS embedder without a client certificate: said so, with the settings to set."""
    address = f"localhost:{servers['mtls']}"
    error = failure(address, client_env(certs))
    assert (error.cause, error.fix) == (
        f"the embedder at {address} requires a client certificate",
        CERT_FIX,
    )


def test_refused_client_certificate_is_named(certs: Path, servers: dict[str, int]) -> None:
    """A client certificate of another CA: the embedder refused that very certificate."""
    address = f"localhost:{servers['mtls']}"
    error = failure(address, client_env(certs, cert="rogue"))
    assert error.cause.startswith(
        f"the embedder at {address} refused the client certificate "
        f"THATCH_EMBEDDER_CERT {certs / 'rogue.pem'} ("
    ), error.cause
    assert (
        error.fix
        == "use a certificate signed by the CA the embedder was given with --tls-client-ca"
    )


def test_untrusted_server_certificate_is_named(certs: Path, servers: dict[str, int]) -> None:
    """THATCH_EMBEDDER_CA of another CA: the server's certificate is not trusted by it."""
    address = f"localhost:{servers['tls']}"
    error = failure(address, client_env(certs, ca="other"))
    assert error.cause == (
        f"the certificate of the embedder at {address} is not trusted by THATCH_EMBEDDER_CA "
        f"{certs / 'other.pem'} (unable to get local issuer certificate)"
    )
    assert (
        error.fix
        == "point THATCH_EMBEDDER_CA at the CA that signed the certificate of the embedder"
    )


def test_certificate_for_another_name_is_named(certs: Path, servers: dict[str, int]) -> None:
    """A certificate for localhost reached as 127.0.0.1: not valid for that host."""
    error = failure(f"127.0.0.1:{servers['named']}", client_env(certs))
    assert error.cause.startswith("the embedder's certificate is not valid for 127.0.0.1 ("), error
    assert error.fix.startswith("connect by a name the certificate lists")


def test_tls_client_against_plaintext_server(certs: Path, servers: dict[str, int]) -> None:
    address = f"127.0.0.1:{servers['plain']}"
    error = failure(address, client_env(certs))
    assert error.cause == f"the embedder at {address} does not use TLS"
    assert error.fix == (
        "unset THATCH_EMBEDDER_CA, THATCH_EMBEDDER_CERT and THATCH_EMBEDDER_KEY, "
        "or serve with --tls-cert and --tls-key"
    )


def test_plaintext_client_against_tls_server(servers: dict[str, int]) -> None:
    address = f"127.0.0.1:{servers['tls']}"
    error = failure(address, {})
    assert error.cause == f"the embedder at {address} requires TLS"
    assert error.fix == "set THATCH_EMBEDDER_CA to the CA that signed its certificate"


def test_status_and_probe_name_the_cause(
    certs: Path, servers: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch embedder status` and `thatch-embedder probe` say why, not just 'unreachable'."""
    address = f"localhost:{servers['mtls']}"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", address)
    monkeypatch.setenv("THATCH_EMBEDDER_CA", str(certs / "ca.pem"))
    status = CliRunner().invoke(cli, ["embedder", "status"])
    assert status.exit_code == 1
    assert status.stderr == (
        f"Error: the embedder at {address} requires a client certificate.\nFix: {CERT_FIX}\n"
    )
    probe = CliRunner().invoke(embedder_main, ["probe"])
    assert probe.exit_code == 1
    assert probe.stderr.startswith(
        f"Error: embedder at {address} is UNREACHABLE: the embedder at {address} requires a "
        "client certificate. Fix: "
    ), probe.stderr
    monkeypatch.setenv("THATCH_EMBEDDER_CERT", str(certs / "client.pem"))
    monkeypatch.setenv("THATCH_EMBEDDER_KEY", str(certs / "client.key"))
    served = CliRunner().invoke(cli, ["embedder", "status", "--json"])
    assert served.exit_code == 0 and '"health": "SERVING"' in served.stdout


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ("THATCH_EMBEDDER_CERT", "THATCH_EMBEDDER_KEY"),
        ("THATCH_EMBEDDER_KEY", "THATCH_EMBEDDER_CERT"),
    ],
)
def test_certificate_without_key_is_a_clear_error(certs: Path, given: str, missing: str) -> None:
    env = {given: str(certs / "client.pem")}
    with pytest.raises(EmbedderUnavailable) as caught:
        EmbedderClient("127.0.0.1:1", env=env)
    assert caught.value.cause == f"{given} is set but {missing} is not"
    assert caught.value.fix == (
        "set both THATCH_EMBEDDER_CERT and THATCH_EMBEDDER_KEY (the client certificate and "
        "its private key, PEM), or neither"
    )


def test_unreadable_or_mismatched_files(certs: Path, tmp_path: Path) -> None:
    missing = {"THATCH_EMBEDDER_CERT": str(certs / "client.pem")}
    missing["THATCH_EMBEDDER_KEY"] = str(tmp_path / "absent.key")
    with pytest.raises(EmbedderUnavailable) as unreadable:
        EmbedderClient("127.0.0.1:1", env=missing)
    assert unreadable.value.cause == (
        f"cannot read THATCH_EMBEDDER_KEY {tmp_path / 'absent.key'}: No such file or directory"
    )
    mismatched = {
        "THATCH_EMBEDDER_CERT": str(certs / "client.pem"),
        "THATCH_EMBEDDER_KEY": str(certs / "rogue.key"),
    }
    with pytest.raises(EmbedderUnavailable) as pair:
        EmbedderClient("127.0.0.1:1", env=mismatched)
    assert pair.value.cause == (
        f"THATCH_EMBEDDER_CERT {certs / 'client.pem'} and THATCH_EMBEDDER_KEY "
        f"{certs / 'rogue.key'} are not a PEM certificate and its key (KEY_VALUES_MISMATCH)"
    )


def test_unix_sockets_ignore_tls_settings(certs: Path, tmp_path: Path) -> None:
    """A half-set pair does not break the local socket, which never uses TLS."""
    env = {"THATCH_EMBEDDER_CERT": str(certs / "client.pem")}
    with EmbedderClient(f"unix://{tmp_path}/e.sock", env=env, autostart=False) as client:
        assert client.health() == "UNREACHABLE"


def test_cli_reports_incomplete_settings_in_one_line(
    certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "127.0.0.1:1")
    monkeypatch.setenv("THATCH_EMBEDDER_CERT", str(certs / "client.pem"))
    result = CliRunner().invoke(cli, ["search", "anything"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "Error: embedding service unavailable: THATCH_EMBEDDER_CERT is set but "
        "THATCH_EMBEDDER_KEY is not."
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--tls-cert", "/etc/passwd", "--tls-key", "/etc/passwd"],
            "--tls-cert /etc/passwd and --tls-key /etc/passwd are not a PEM certificate and "
            "its unencrypted private key",
        ),
        (
            ["--tls-cert", "{certs}/server.pem", "--tls-key", "{certs}/client.key"],
            "--tls-cert {certs}/server.pem and --tls-key {certs}/client.key are not a PEM "
            "certificate and its unencrypted private key",
        ),
        (
            [
                *("--tls-cert", "{certs}/server.pem", "--tls-key", "{certs}/server.key"),
                *("--tls-client-ca", "/etc/passwd"),
            ],
            "--tls-client-ca /etc/passwd is not a PEM CA certificate",
        ),
    ],
)
def test_unusable_tls_files_are_named_not_a_bind_failure(
    certs: Path, flags: list[str], said: str
) -> None:
    """gRPC reports bad PEM files only as 'cannot listen on …: Failed to bind': the
    address was fine, the files were not, and the error now says which."""
    args = [flag.format(certs=certs) for flag in flags]
    result = CliRunner().invoke(cli, ["embedder", "serve", "--listen", "127.0.0.1:0", *args])
    assert result.exit_code == 1, result.output
    error, fix = result.stderr.splitlines()
    assert error.startswith(f"Error: {said.format(certs=certs)} (")
    assert "cannot listen" not in result.stderr and fix.startswith("Fix: pass the ")


def test_a_certificate_grpc_takes_is_served_whatever_openssls_policy(
    tmp_path: Path,
) -> None:
    """The PEM check runs only after gRPC refused to bind: an RSA-1024 pair, which the
    system OpenSSL's security level refuses and gRPC's TLS takes, still serves."""
    from tests.support.tls_certs import openssl

    openssl("req", "-x509", "-newkey", "rsa:1024", "-nodes", "-keyout", "k.pem", "-out",
            "c.pem", "-days", "2", "-subj", "/CN=localhost", cwd=tmp_path)  # fmt: skip
    flags = ["--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem")]
    with tcp_embedder(tmp_path / "serve", *flags) as (_, port):
        assert port > 0


def test_a_remote_embedder_a_slow_link_away_answers_the_first_call(tmp_path: Path) -> None:
    """gRPC's core gave a connection attempt only min_reconnect_backoff_ms (100 ms): an
    embedder 150 ms away each way failed every fresh client's first call as "no embedder
    answering" (its saves went pending, its searches failed)."""
    from tests.support.slow_link import slow_link

    with tcp_embedder(tmp_path) as (_, port), slow_link(port, 0.15) as slow_port:
        for _ in range(2):  # each a fresh client: a process's first call
            with EmbedderClient(
                env={"THATCH_EMBEDDER_ADDR": f"127.0.0.1:{slow_port}"}, autostart=False
            ) as client:
                assert client.embed(["hello"], Kind.QUERY, timeout=30).vectors.shape[0] == 1


def test_an_embedder_that_never_completes_a_connection_costs_one_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Packets dropped (a VPN down): the connection attempt times out, and the TLS
    diagnosis that followed made its own connection and waited as long again."""
    import socket

    diagnosed: list[bool] = []

    def diagnose(self: EmbedderClient) -> None:
        diagnosed.append(True)

    monkeypatch.setattr(EmbedderClient, "connection_problem", diagnose)
    with socket.create_server(("127.0.0.1", 0), backlog=0) as full:
        port = full.getsockname()[1]
        fillers = []
        for _ in range(3):  # the accept queue full: the kernel drops further SYNs
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        try:
            with (
                EmbedderClient(
                    env={"THATCH_EMBEDDER_ADDR": f"127.0.0.1:{port}"}, autostart=False
                ) as client,
                pytest.raises(EmbedderUnavailable) as down,
            ):
                client.embed(["hello"], Kind.QUERY, timeout=30)
        finally:
            for filler in fillers:
                filler.close()
    assert str(down.value).startswith(f"no embedder answering at 127.0.0.1:{port}")
    assert diagnosed == []
