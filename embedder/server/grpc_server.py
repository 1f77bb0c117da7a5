"""The embedder's gRPC server: servicer, health, socket preparation and lifecycle.

``create_server`` builds and binds a ``grpc.Server`` around a servicer (tests give it a
fake encoder); ``serve`` runs a whole embedder process: prepare the socket, bind, resolve
and load the model, report SERVING, then wait for a signal or idleness and shut down
gracefully (docs/embedder.md §lifecycle, §transport).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from thatch.common.environment import env_get, socket_dir
from thatch.common.stop_signals import (
    no_signals,
    stop_signals,
    wait_for_stop,
    wait_in_slices,
)
from thatch.embedder.client.errors import (
    ALREADY_RUNNING_FIX,
    AddressError,
    ModelError,
    ServerStartError,
)
from thatch.embedder.client.listen import add_port
from thatch.embedder.client.settings import Address, default_address, parse_address
from thatch.embedder.client.socket_trust import probe, tighten_own_directory
from thatch.embedder.encoder import ModelSettings
from thatch.embedder.server.batching import Batcher
from thatch.embedder.server.embed_calls import Limits
from thatch.embedder.server.instance import InstanceLock
from thatch.embedder.server.servicer import (
    SERVICE_NAME,
    EmbedderServicer,
    ServerState,
    add_to_server,
)

__all__ = [
    "MAX_MESSAGE_BYTES",
    "ServeOptions",
    "TlsFiles",
    "create_server",
    "listen_address",
    "prepare_unix_socket",
    "serve",
]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
LOOPBACK_HOSTS = {"localhost", "::1", "[::1]"}


@dataclass(frozen=True)
class TlsFiles:
    """Server certificate and key; with ``client_ca``, clients must present certificates."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        def read(path: Path) -> bytes:
            try:
                return path.read_bytes()
            except OSError as error:
                raise ServerStartError(f"cannot read TLS file {path}: {error.strerror}") from None

        key, cert = read(self.key), read(self.cert)
        client_ca = read(self.client_ca) if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(key, cert)],
            root_certificates=client_ca,
            require_client_auth=self.client_ca is not None,
        )

    def explain(self) -> None:
        """After gRPC failed to bind with these files, which it reports only as a failure to
        bind: ServerStartError naming the file that is no usable PEM, if one is not. Only
        then: the stdlib's OpenSSL may refuse files gRPC's own TLS takes."""
        from thatch.common.pem_files import unusable_ca, unusable_pair

        problem = unusable_pair(self.cert, self.key)
        if problem is not None:
            raise ServerStartError(
                f"--tls-cert {self.cert} and --tls-key {self.key} are not a PEM certificate "
                f"and its unencrypted private key ({problem})",
                "pass the server's PEM certificate (chain) and the key it was issued for",
            )
        problem = None if self.client_ca is None else unusable_ca(self.client_ca)
        if problem is not None:
            raise ServerStartError(
                f"--tls-client-ca {self.client_ca} is not a PEM CA certificate ({problem})",
                "pass the PEM certificate of the CA that signs the clients' certificates",
            )


@dataclass(frozen=True)
class ServeOptions:
    """Everything ``thatch-embedder serve`` can be told (docs/cli.md §embedder-and-models)."""

    model: str
    model_by_variable: bool = False  # THATCH_MODEL chose it (no --model): fixes say so
    listen: str | None = None
    threads: int | None = None
    idle_seconds: float = 600
    exit_after: float = 0
    tls: TlsFiles | None = None
    auto_started: bool = False
    grace_seconds: float = 10.0
    max_workers: int = 64
    limits: Limits = field(default_factory=Limits)


def set_health(servicer: health.HealthServicer, status: int) -> None:
    for name in ("", SERVICE_NAME):
        servicer.set(name, status)


# -- addresses and sockets ----------------------------------------------------------------


def listen_address(value: str | None, env: Mapping[str, str]) -> Address:
    """``--listen`` (or the default) as an Address; ``:port`` means 127.0.0.1:port."""
    if value is None:
        configured = env_get(env, "THATCH_EMBEDDER_ADDR")
        if configured and configured.strip().startswith("unix://"):
            return parse_address(configured)
        return parse_address(default_address(env))
    value = value.strip()
    if value.startswith(":"):
        value = "127.0.0.1" + value
    bad = AddressError(f'invalid --listen "{value}": expected unix:///path, host:port or :port')
    if value.startswith("dns:///"):
        raise bad
    try:
        host, _, port = value.rpartition(":")
        if port == "0" and host:  # an ephemeral port: useful for tests and supervisors
            parse_address(f"{host}:1")
            return Address("tcp", value)
        return parse_address(value)
    except AddressError as error:
        if str(error).startswith("socket path too long"):
            raise  # that message already says what to do
        raise bad from error


def is_loopback(address: Address) -> bool:
    if address.is_unix:
        return True
    host = address.target.rpartition(":")[0]
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def prepare_socket_dir(directory: Path, *, uid: int | None = None, own: bool = False) -> None:
    """Create ``directory`` 0700, or refuse one of another user or writable by others.

    Whoever can write the directory can replace our socket with a listener of their own
    and read every memory and prompt sent to it. ``own``: it is thatch's default socket
    directory, which is made private when it is ours but group/other-writable.
    """
    uid = os.geteuid() if uid is None else uid
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        directory.chmod(0o700)
    if own:
        tighten_own_directory(directory, uid)
    info = directory.stat()
    if info.st_uid != uid:
        raise ServerStartError(
            f"socket directory {directory} belongs to another user (uid {info.st_uid}); "
            "choose a directory of your own with --listen unix:///path"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ServerStartError(
            f"socket directory {directory} is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); run chmod 700 {directory} "
            "or choose a directory of your own with --listen unix:///path"
        )


def prepare_unix_socket(path: Path, *, uid: int | None = None) -> None:
    """A private directory for ``path`` (see ``prepare_socket_dir``); a stale socket removed."""
    prepare_socket_dir(path.parent, uid=uid)
    if not (path.exists() or path.is_symlink()):
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise ServerStartError(
            f"{path} exists and is not a socket",
            f"remove it (rm {path}) if nothing else uses it, or serve at another address",
        )
    peer = probe(path, timeout=1.0)
    if peer.state in ("listening", "busy"):  # e.g. a server of a release without the lock
        raise ServerStartError(
            f"an embedder is already running at unix://{path} (pid {peer.pid or 'unknown'})",
            ALREADY_RUNNING_FIX,
        )
    if peer.state == "refused":
        path.unlink()  # a stale socket left by a crash


# -- the server ---------------------------------------------------------------------------


def create_server(
    servicer: EmbedderServicer,
    health_servicer: health.HealthServicer,
    address: Address,
    *,
    tls: TlsFiles | None = None,
    max_workers: int = 64,
) -> tuple[grpc.Server, int]:
    """A bound, not yet started server with the Embedder and Health services; its port."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a second server on the same port must fail
        ],
    )
    add_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    credentials = tls.credentials() if tls else None
    try:
        port = add_port(server, address, credentials)
    except RuntimeError as error:
        if tls is not None:
            tls.explain()
        raise ServerStartError(f"cannot listen on {address}: {error}") from None
    return server, port


@dataclass
class _Process:
    """The files a running server owns (socket, pid file, instance lock), removed at the end."""

    address: Address
    instance: InstanceLock | None = None
    socket_inode: int | None = None

    def claim_address(self, env: Mapping[str, str]) -> None:
        """Hold the address for this process's lifetime (unix: the instance lock), then
        clear a stale socket; raises ``ServerStartError`` when another server holds it."""
        path = self.address.path
        if path is None:
            return
        try:
            prepare_socket_dir(path.parent, own=path.parent == socket_dir(env))
            self.instance = InstanceLock.acquire(path, str(self.address))
            prepare_unix_socket(path)
            self.instance.write_pid()
        except OSError as error:
            self.remove_files()
            raise ServerStartError(f"cannot prepare {path}: {error.strerror}") from None
        except BaseException:
            self.remove_files()
            raise

    def claim_socket(self) -> None:
        if self.address.path is not None:
            self.socket_inode = self.address.path.stat().st_ino

    def remove_files(self) -> None:
        path = self.address.path
        try:
            if path is not None and self.socket_inode == path.stat().st_ino:
                path.unlink()
        except OSError:
            pass
        if self.instance is not None:
            self.instance.release()
            self.instance = None


def serve(
    options: ServeOptions,
    *,
    env: Mapping[str, str],
    logger: logging.Logger,
    clock: Callable[[], float] = time.monotonic,
    install_signals: bool = True,
    stop: threading.Event | None = None,
) -> int:
    """Run an embedder until a signal (or ``stop``) or idleness; return the exit status.

    Startup problems raise ``ThatchEmbedderError`` subclasses after cleaning up.
    """
    from thatch.embedder.models.resolve import create_encoder, resolve_model

    address = listen_address(options.listen, env)
    process = _Process(address)
    process.claim_address(env)
    stop = stop or threading.Event()
    state = ServerState(
        clock=clock,
        limits=options.limits,
        idle_release_seconds=options.idle_seconds,
        exit_after_seconds=options.exit_after,
        auto_started=options.auto_started,
    )
    health_servicer = health.HealthServicer()
    set_health(health_servicer, NOT_SERVING)
    try:
        server, port = create_server(
            EmbedderServicer(state, logger=logger),
            health_servicer,
            address,
            tls=options.tls,
            max_workers=options.max_workers,
        )
        process.claim_socket()
    except BaseException:
        process.remove_files()
        raise
    if address.path is None and options.tls is None and not is_loopback(address):
        logger.warning("listening on %s without TLS: anyone who can reach it can use it", address)
    shown = address if address.path is not None or port == 0 else _with_port(address, port)
    server.start()

    def exit_now() -> None:
        process.remove_files()
        os._exit(1)

    def on_signal(name: str) -> None:
        logger.info("received %s: shutting down", name)
        stop.set()

    def on_load(ok: bool, cause: str) -> None:
        if state.serving:
            set_health(health_servicer, SERVING if ok else NOT_SERVING)

    batcher: Batcher | None = None
    with stop_signals(on_signal, exit_now) if install_signals else no_signals():
        try:
            logger.info("starting: model %s, listening at %s", options.model, shown)
            # No progress bar: drawn by a thread still downloading at exit, it could abort
            # the interpreter over the stderr lock.
            settings = _resolve_unless_stopped(
                lambda: resolve_model(
                    options.model,
                    env=env,
                    progress=False,
                    by_variable=options.model_by_variable,
                ),
                stop,
                lambda: logger.info(
                    "model %s is not ready yet: a first start downloads it (to see the "
                    "download's progress: thatch model pull %s)",
                    options.model,
                    options.model,
                ),
            )
            if settings is not None:
                if settings.onnx_path is not None:
                    _quiet_onnxruntime()
                encoder = create_encoder(settings, threads=options.threads)
                batcher = Batcher(
                    encoder,
                    limits=options.limits,
                    idle_release_seconds=options.idle_seconds,
                    clock=clock,
                    on_load=on_load,
                    logger=logger,
                )
                batcher.start()
                _wait_loaded(batcher, stop, settings.model_id)
            if settings is not None and batcher is not None and not stop.is_set():
                # The encoder's settings: the file it serves after its load-time int8 check.
                state.ready(encoder.settings, encoder, batcher)
                set_health(health_servicer, SERVING)
                logger.info("serving at %s model %s", shown, settings.model_id)
                _wait_for_exit(state, stop, options.exit_after, clock, logger)
        except BaseException:
            server.stop(None)
            if batcher is not None:
                batcher.stop(0)
            process.remove_files()
            raise
        _shutdown(state, health_servicer, server, batcher, options.grace_seconds, logger)
        process.remove_files()
        logger.info("embedder stopped")
    return 0


def _quiet_onnxruntime() -> None:
    from thatch.embedder.models.ort_loader import load_onnxruntime

    load_onnxruntime()


def _with_port(address: Address, port: int) -> Address:
    host = address.target.rpartition(":")[0]
    return Address("tcp", f"{host}:{port}")


def _resolve_unless_stopped(
    resolve: Callable[[], ModelSettings],
    stop: threading.Event,
    slow: Callable[[], None],
    slow_after: float = 3.0,
) -> ModelSettings | None:
    """``resolve()`` (a first start downloads the model: minutes), or None once ``stop`` is
    set: a SIGTERM or `thatch embedder stop` used to wait for the whole download. The
    download's thread dies with the process; the hub cache keeps only finished files.
    ``slow`` is called once if it takes over ``slow_after`` seconds: a model on this
    machine resolves at once, and a foreground serve was silent for the whole download."""
    outcome: list[ModelSettings | BaseException] = []

    def run() -> None:
        try:
            outcome.append(resolve())
        except BaseException as error:  # handed to the serving thread
            outcome.append(error)

    worker = threading.Thread(target=run, name="resolve", daemon=True)
    worker.start()
    told_at = time.monotonic() + slow_after
    while worker.is_alive() and not stop.is_set():
        worker.join(0.2)
        if worker.is_alive() and time.monotonic() >= told_at:
            told_at = float("inf")
            slow()
    if not outcome:
        return None
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _wait_loaded(batcher: Batcher, stop: threading.Event, model_id: str) -> None:
    future = batcher.load()
    while not stop.is_set():
        try:
            future.result(timeout=0.2)
            return
        except FutureTimeout:
            continue
        except Exception as error:
            raise ModelError(f"model {model_id} could not be loaded: {error}") from None


def _wait_for_exit(
    state: ServerState,
    stop: threading.Event,
    exit_after: float,
    clock: Callable[[], float],
    logger: logging.Logger,
) -> None:
    while not stop.is_set():
        timeout = 1.0
        if exit_after > 0:
            quiet = clock() - state.last_call
            if quiet >= exit_after:
                logger.info("no Embed or Info call for %g s: shutting down", exit_after)
                return
            timeout = min(timeout, exit_after - quiet)
        wait_for_stop(stop, timeout)


def _shutdown(
    state: ServerState,
    health_servicer: health.HealthServicer,
    server: grpc.Server,
    batcher: Batcher | None,
    grace: float,
    logger: logging.Logger,
) -> None:
    """NOT_SERVING, refuse new calls, let queued and in-flight work finish, then stop."""
    deadline = time.monotonic() + grace
    health_servicer.enter_graceful_shutdown()
    state.begin_shutdown()
    # In slices: a second signal (exit at once) taken by another thread runs its handler.
    if not wait_in_slices(state.wait_inflight_done, grace):
        logger.warning("in-flight calls did not finish within %g s", grace)
    if batcher is not None:
        wait_in_slices(batcher.stop, max(deadline - time.monotonic(), 0))
    wait_in_slices(server.stop(max(deadline - time.monotonic(), 0)).wait)
