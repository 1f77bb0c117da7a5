"""Transport and security: socket directory and files, addresses, TCP, TLS, message size."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health

from tests.support.embedder_proc import embedder_process, tcp_embedder
from tests.support.fake_encoder import FakeEncoder
from tests.support.tls_certs import make_certs
from thatch.embedder.__main__ import main
from thatch.embedder.client.errors import AddressError, ServerStartError
from thatch.embedder.client.settings import Address
from thatch.embedder.server.batching import Batcher
from thatch.embedder.server.grpc_server import (
    MAX_MESSAGE_BYTES,
    TlsFiles,
    create_server,
    listen_address,
    prepare_unix_socket,
)
from thatch.embedder.server.servicer import EmbedderServicer, ServerState
from thatch.embedder.v1 import embedder_pb2 as pb
from thatch.embedder.v1 import embedder_pb2_grpc as pb_grpc

# -- unix socket preparation --------------------------------------------------------------


def test_socket_directory_is_created_private(short_tmp: Path) -> None:
    """A missing socket directory is created with mode 0700."""
    path = short_tmp / "a" / "thatch" / "e.sock"
    prepare_unix_socket(path)
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_directory_of_another_user_is_refused(short_tmp: Path) -> None:
    """A socket directory owned by someone else is refused (chown'd for real)."""
    directory = short_tmp / "theirs"
    directory.mkdir()
    stranger = os.geteuid() + 4242
    if os.geteuid() == 0:
        os.chown(directory, stranger, -1)
        uid = None  # check against our real uid
    else:  # we cannot give it away: pretend to be someone else instead
        uid = stranger
    with pytest.raises(ServerStartError) as raised:
        prepare_unix_socket(directory / "e.sock", uid=uid)
    owner = directory.stat().st_uid
    assert str(raised.value) == (
        f"socket directory {directory} belongs to another user (uid {owner}); "
        "choose a directory of your own with --listen unix:///path"
    )


def test_a_path_that_is_not_a_socket_is_left_alone(short_tmp: Path) -> None:
    """A regular file where the socket should be is refused, not deleted."""
    path = short_tmp / "e.sock"
    path.write_text("precious")
    with pytest.raises(ServerStartError, match="exists and is not a socket"):
        prepare_unix_socket(path)
    assert path.read_text() == "precious"


def stale_socket(path: Path) -> None:
    """Leave a socket file nobody listens on, as a crashed server would."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    assert path.exists()


def test_a_stale_socket_is_replaced(short_tmp: Path) -> None:
    """A socket file that refuses connections is replaced by the new server."""
    stale_socket(short_tmp / "e.sock")
    with embedder_process("mock", socket_dir=short_tmp) as proc:
        assert proc.info().model_id == "mock"
        assert proc.socket_path.stat().st_mode & 0o777 == 0o600


def test_default_address_is_the_runtime_dir_socket(short_tmp: Path) -> None:
    """Without --listen the server binds $XDG_RUNTIME_DIR/thatch/embedder.sock (dir 0700)."""
    runtime = short_tmp / "run"
    runtime.mkdir()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    logs = short_tmp / "logs"
    logs.mkdir()
    with embedder_process(
        "mock",
        socket_dir=runtime / "thatch",
        socket_name="embedder.sock",
        env=env,
        listen=False,
        log_dir=logs,
    ) as proc:
        assert proc.info().model_id == "mock"
        assert (runtime / "thatch").stat().st_mode & 0o777 == 0o700
        assert proc.pid_path == runtime / "thatch" / "embedder.sock.pid"
        assert proc.pid_path.read_text().strip() == str(proc.pid)


# -- addresses ----------------------------------------------------------------------------


def test_listen_addresses() -> None:
    """:port binds loopback; the default prefers a unix THATCH_EMBEDDER_ADDR."""
    assert listen_address(":50051", {}) == Address("tcp", "127.0.0.1:50051")
    assert listen_address("0.0.0.0:50051", {}).target == "0.0.0.0:50051"
    assert listen_address("[::]:0", {}).target == "[::]:0"
    unix = {"THATCH_EMBEDDER_ADDR": "unix:///tmp/x/e.sock", "HOME": "/h"}
    assert listen_address(None, unix).target == "unix:///tmp/x/e.sock"
    tcp = {"THATCH_EMBEDDER_ADDR": "remote:50051", "XDG_CACHE_HOME": "/c"}
    assert listen_address(None, tcp).target == "unix:///c/thatch/embedder.sock"
    with pytest.raises(AddressError, match=r'^invalid --listen "dns:///h:1": expected'):
        listen_address("dns:///h:1", {})


def test_too_long_socket_path_is_refused() -> None:
    """A unix path over 107 bytes gets the spec's message."""
    with pytest.raises(AddressError) as raised:
        listen_address("unix:///" + "p" * 110, {})
    assert str(raised.value) == (
        "socket path too long (111 bytes; max 107): "
        "set THATCH_EMBEDDER_ADDR to a shorter unix:/// path"
    )


def test_tcp_beyond_loopback_without_tls_warns(short_tmp: Path) -> None:
    """0.0.0.0 without TLS serves but logs a warning; `serving at` names the real port."""
    with tcp_embedder(short_tmp, host="0.0.0.0") as (proc, port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.EmbedderStub(channel)
            response = stub.Embed(pb.EmbedRequest(texts=["tcp"], kind=pb.QUERY), timeout=10)
        assert response.model_id == "mock"
        assert "WARNING listening on 0.0.0.0:0 without TLS" in proc.log_text()
        assert proc.stop() == 0


def test_an_address_that_cannot_be_bound_gets_no_tls_warning() -> None:
    """The warning about listening without TLS came before the bind failed: the server
    never listened. Only the error is printed."""
    result = CliRunner().invoke(main, ["serve", "--model", "mock", "--listen", "999.1.1.1:80"])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0].startswith("Error: cannot listen on 999.1.1.1:80: ")
    assert "without TLS" not in result.stderr


# -- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate."""
    return make_certs(tmp_path_factory.mktemp("tls"))


@contextmanager
def fake_server(address: Address, tls: TlsFiles | None = None) -> Iterator[int]:
    encoder = FakeEncoder()
    state = ServerState()
    batcher = Batcher(encoder)
    batcher.start()
    server, port = create_server(EmbedderServicer(state), health.HealthServicer(), address, tls=tls)
    server.start()
    state.ready(encoder.settings, encoder, batcher)
    try:
        yield port
    finally:
        server.stop(None).wait()
        batcher.stop(10)


def embed_over(channel: grpc.Channel) -> pb.EmbedResponse:
    stub = pb_grpc.EmbedderStub(channel)
    return stub.Embed(pb.EmbedRequest(texts=["secret"], kind=pb.PASSAGE), timeout=10)


def test_tls_serves_secure_clients_only(certs: Path) -> None:
    """With --tls-cert/--tls-key, TLS clients trusting the CA get vectors; plaintext fails."""
    tls = TlsFiles(certs / "server.pem", certs / "server.key")
    with fake_server(Address("tcp", "127.0.0.1:0"), tls) as port:
        trust = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.pem").read_bytes())
        with grpc.secure_channel(f"localhost:{port}", trust) as channel:
            assert embed_over(channel).count == 1
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError):
            embed_over(channel)


def test_tls_client_ca_requires_client_certificates(certs: Path) -> None:
    """With --tls-client-ca, a client without a certificate is refused, one with it served."""
    tls = TlsFiles(certs / "server.pem", certs / "server.key", certs / "ca.pem")
    ca = (certs / "ca.pem").read_bytes()
    with fake_server(Address("tcp", "127.0.0.1:0"), tls) as port:
        anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
        with grpc.secure_channel(f"localhost:{port}", anonymous) as channel:
            with pytest.raises(grpc.RpcError) as raised:
                embed_over(channel)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        identified = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(certs / "client.key").read_bytes(),
            certificate_chain=(certs / "client.pem").read_bytes(),
        )
        with grpc.secure_channel(f"localhost:{port}", identified) as channel:
            assert embed_over(channel).count == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "CERT"], "Error: --tls-cert and --tls-key must be given together"),
        (["--tls-key", "CERT"], "Error: --tls-cert and --tls-key must be given together"),
        (["--tls-client-ca", "CERT"], "Error: --tls-client-ca needs --tls-cert and --tls-key"),
    ],
    ids=["cert-only", "key-only", "ca-only"],
)
def test_incomplete_tls_options_are_usage_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A certificate without its key (or a client CA alone) exits 2 with a usage error."""
    cert = tmp_path / "cert.pem"
    cert.write_text("not read")
    args = [str(cert) if arg == "CERT" else arg for arg in args]
    result = CliRunner().invoke(main, ["serve", "--model", "mock", *args])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == message


# -- message size -------------------------------------------------------------------------


def test_messages_up_to_16_mib_are_accepted(short_tmp: Path) -> None:
    """A request just under 16 MiB is served; one over it is RESOURCE_EXHAUSTED."""
    address = Address("unix", f"unix://{short_tmp}/s.sock", short_tmp / "s.sock")
    options = [("grpc.max_send_message_length", 2 * MAX_MESSAGE_BYTES)]
    with fake_server(address), grpc.insecure_channel(address.target, options=options) as channel:
        stub = pb_grpc.EmbedderStub(channel)
        big = ["y" * 80_000] * 200  # 16,000,000 characters
        assert stub.Embed(pb.EmbedRequest(texts=big, kind=pb.PASSAGE), timeout=30).count == 200
        too_big = ["z" * 100_000] * 170  # 17,000,000 characters
        with pytest.raises(grpc.RpcError) as raised:
            stub.Embed(pb.EmbedRequest(texts=too_big, kind=pb.PASSAGE), timeout=30)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
