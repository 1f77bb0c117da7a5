"""The hub process: the Hub and Health services in front of one PostgreSQL (docs/team.md).

``create_server`` builds and binds the gRPC server around a pool (not yet open) and an
embedder client; ``serve`` runs one hub replica: bind with health NOT_SERVING, check the
role (a role that could bypass row-level security stops the hub), wait until the database
answers and every migration is found applied, open the pool, report SERVING, then wait for
SIGTERM (or SIGINT) and stop gracefully: health NOT_SERVING, new calls refused, calls in
flight given ``grace_seconds``. A replica keeps nothing between calls, so a load balancer
may send any request to any replica.

TLS from a certificate and key; plaintext only on a unix socket or a loopback address
(said on stderr), since every call carries a member's token.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
import psycopg
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from psycopg_pool import ConnectionPool, PoolTimeout

from thatch.common.error_text import first_line
from thatch.common.stop_signals import (
    no_signals,
    stop_signals,
    wait_for_stop,
    wait_in_slices,
)
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.listen import add_port
from thatch.embedder.client.settings import Address
from thatch.frontend.timefmt import Clock
from thatch.hub.client import MAX_MESSAGE_BYTES, is_loopback, parse_hub_address
from thatch.hub.memories import EXACT_SCAN_MAX, EXACT_SCANS_ONLY
from thatch.hub.pool import new_pool
from thatch.hub.schema import (
    VECTOR_FIX,
    HubRoleError,
    check_role,
    missing_migrations,
    vector_problem,
)
from thatch.hub.servicer import HubServicer
from thatch.hub.v1 import hub_pb2_grpc as pb_grpc

__all__ = [
    "SERVICE_NAME",
    "HubOptions",
    "HubStartError",
    "HubTls",
    "create_server",
    "serve",
]

SERVICE_NAME = "thatch.hub.v1.Hub"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Waiting for a database that is starting or not yet migrated: the first retry, the longest.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 15.0
POOL_CONNECT_SECONDS = 30.0  # how long a ready database's pool may take to connect


class HubStartError(Exception):
    """The hub cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class HubTls:
    cert: Path
    key: Path

    def credentials(self) -> grpc.ServerCredentials:
        def read(path: Path) -> bytes:
            try:
                return path.read_bytes()
            except OSError as error:
                raise HubStartError(f"cannot read TLS file {path}: {error.strerror}") from None

        return grpc.ssl_server_credentials([(read(self.key), read(self.cert))])

    def problem(self) -> str | None:
        """Why the files are no PEM certificate and its unencrypted key, if so: gRPC says
        only that it failed to bind."""
        from thatch.common.pem_files import unusable_pair

        reason = unusable_pair(self.cert, self.key)
        if reason is None:
            return None
        return (
            f"--tls-cert {self.cert} and --tls-key {self.key} are not a PEM certificate and "
            f"its unencrypted private key ({reason}): pass the hub's certificate (chain) "
            "and the key it was issued for"
        )


@dataclass(frozen=True)
class HubOptions:
    """Everything ``thatch hub serve`` can be told (docs/cli.md §team-hub)."""

    listen: str
    database_url: str
    tls: HubTls | None = None
    grace_seconds: float = 10.0
    max_workers: int = 32
    pool_size: int = 8
    prepare: bool = True  # False: no prepared statements (PgBouncer < 1.21, transaction mode)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def set_health(servicer: health.HealthServicer, status: int) -> None:
    for name in ("", SERVICE_NAME):
        servicer.set(name, status)


def create_server(
    pool: ConnectionPool,
    embedder: EmbedderClient,
    address: Address,
    tls: HubTls | None,
    *,
    logger: logging.Logger,
    clock: Clock = _utc_now,
    max_workers: int = 32,
) -> tuple[grpc.Server, int, health.HealthServicer, HubServicer]:
    """A bound, not yet started server with the Hub and Health services (NOT_SERVING);
    its port and both servicers. Calls before ``pool`` opens answer UNAVAILABLE."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="hub"),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a second hub on the same port must fail
        ],
    )
    hub_servicer = HubServicer(pool, embedder, clock, logger=logger)
    pb_grpc.add_HubServicer_to_server(hub_servicer, server)
    health_servicer = health.HealthServicer()
    set_health(health_servicer, NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    credentials = tls.credentials() if tls is not None else None
    try:
        port = add_port(server, address, credentials)
    except RuntimeError as error:
        problem = None if tls is None else tls.problem()
        raise HubStartError(problem or f"cannot listen on {address}: {error}") from None
    return server, port, health_servicer, hub_servicer


def _listen(value: str, tls: HubTls | None, logger: logging.Logger) -> Address:
    try:
        address = parse_hub_address(value, what="--listen", zero_ok=True)
    except ValueError as error:
        raise HubStartError(str(error)) from None
    if address.kind == "dns":
        raise HubStartError(f"--listen {value}: give host:port or unix:///path")
    if tls is None:
        if not is_loopback(address):
            raise HubStartError(
                f"refusing to serve team tokens in plaintext on {address}: give --tls-cert and "
                "--tls-key (plaintext only on a loopback address or a unix socket)"
            )
        logger.warning("serving without TLS on %s: reachable from this machine only", address)
    return address


def _check_conninfo(conninfo: str) -> None:
    """``HubStartError`` for a connection string psycopg cannot parse: retrying cannot help
    (it ended the hub with a traceback from the readiness loop)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "malformed"
        raise HubStartError(
            f"THATCH_HUB_DATABASE_URL is not a PostgreSQL connection string ({reason}): "
            "set it to postgresql://<the hub's role>@<host>/<database>"
        ) from None


def _not_ready(conninfo: str) -> tuple[str | None, str | None]:
    """Why the database cannot be served yet (None: it can), and why its pgvector cannot
    walk the HNSW index as the screen needs (None: it can). ``HubStartError`` when waiting
    cannot help: the role could bypass row-level security."""
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as probe:
            check_role(probe)
            missing = missing_migrations(probe)
            if missing:
                return (
                    f"the hub's database lacks migrations {', '.join(missing)}: run thatch hub "
                    "migrate as the database's owner (THATCH_HUB_OWNER_URL)",
                    None,
                )
            try:
                return None, vector_problem(probe)
            except psycopg.OperationalError:
                raise
            except psycopg.DatabaseError as error:
                return (
                    f"the hub's role cannot use the vector extension ({first_line(error)}): "
                    "install it in the hub's database, in a schema on the role's search_path",
                    None,
                )
    except HubRoleError as error:
        raise HubStartError(str(error)) from None
    except psycopg.OperationalError as error:
        return (
            f"cannot connect to the hub's database ({first_line(error)}): check "
            "THATCH_HUB_DATABASE_URL",
            None,
        )


def _choose_scans(servicer: HubServicer, no_walks: str | None, logger: logging.Logger) -> None:
    """Exact scans only when the server's pgvector cannot walk the HNSW index as the screen
    needs (0.7 and older): recall stays right and gets slower past ``EXACT_SCAN_MAX``
    memories a store, where it used to fail. Said in the log with the fix; chosen before
    the pool opens, so no call walks meanwhile."""
    servicer.exact_scan_max = EXACT_SCAN_MAX if no_walks is None else None
    if no_walks is not None:
        logger.warning("%s; %s: %s", no_walks, EXACT_SCANS_ONLY, VECTOR_FIX)


def _pool_connects(pool: ConnectionPool, timeout: float) -> bool:
    try:
        with pool.connection(timeout=timeout):
            return True
    except PoolTimeout:
        return False


def _wait_ready(
    pool: ConnectionPool,
    conninfo: str,
    stop: threading.Event,
    logger: logging.Logger,
    servicer: HubServicer,
    pool_seconds: float = POOL_CONNECT_SECONDS,
) -> bool:
    """Wait (NOT_SERVING) until the database can be served and the pool lends a
    connection, or ``stop``; whether it is ready. A database still starting or not yet
    migrated is waited for, so replicas may start before it (a readiness probe keeps them
    out of the load balancer meanwhile)."""
    delay = RETRY_FIRST_SECONDS
    while not stop.is_set():
        problem, no_walks = _not_ready(conninfo)
        if problem is None:
            _choose_scans(servicer, no_walks, logger)
            # Not pool.wait(): its timeout closes the pool for good, and the next try
            # would fail to reopen it. Opening an open pool does nothing.
            pool.open(wait=False)
            if wait_in_slices(lambda t: stop.is_set() or _pool_connects(pool, t), pool_seconds):
                return not stop.is_set()
            problem = f"the connection pool could not connect within {pool_seconds:g} s"
        logger.warning("not serving yet: %s; trying again in %g s", problem, delay)
        wait_for_stop(stop, delay)
        delay = min(delay * 2, RETRY_MAX_SECONDS)
    return False


def serve(
    options: HubOptions,
    *,
    logger: logging.Logger,
    embedder: EmbedderClient,
    stop: threading.Event | None = None,
    install_signals: bool = True,
) -> int:
    """Run one hub replica until SIGTERM/SIGINT (or ``stop``); the exit status.
    ``HubStartError`` when it cannot start (after releasing what it took)."""
    _check_conninfo(options.database_url)
    address = _listen(options.listen, options.tls, logger)
    stop = stop or threading.Event()
    pool = new_pool(
        options.database_url, min_size=1, max_size=options.pool_size, prepare=options.prepare
    )
    server, port, health_servicer, hub_servicer = create_server(
        pool, embedder, address, options.tls, logger=logger, max_workers=options.max_workers
    )
    shown = address if address.is_unix else f"{address.target.rpartition(':')[0]}:{port}"

    def on_signal(name: str) -> None:
        logger.info("received %s: shutting down", name)
        stop.set()

    server.start()
    try:
        with stop_signals(on_signal) if install_signals else no_signals():
            logger.info("starting: listening at %s, connecting to the database", shown)
            if _wait_ready(pool, options.database_url, stop, logger, hub_servicer):
                set_health(health_servicer, SERVING)
                logger.info("serving at %s", shown)
                wait_for_stop(stop)
            health_servicer.enter_graceful_shutdown()
            server.stop(options.grace_seconds).wait()
    finally:
        server.stop(None)
        pool.close()
    logger.info("hub stopped")
    return 0
