"""doctor names the fault that stops the other commands (read-only, immutable, empty,
damaged), on real files and a real read-only mount; it never says "ok database" then."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.hookrun import NO_EMBEDDER, thatch_command
from tests.support.mounts import immutable, in_namespace, read_only
from thatch.frontend.doctor import check_database
from thatch.frontend.store.memory_store import Store


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "thatch.db"
    with Store.open(path) as store:
        for i in range(30):
            vector = np.full(8, i + 1, dtype=np.float32)
            store.remember("global", f"M {i}", f"# M {i}\n\n" + f"{i} " * 900, vector, "m")
    assert not Path(f"{path}-wal").exists()
    return path


def database_lines(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.split()[1:2] == ["database"]]
    return lines[index : index + 2]


def test_healthy_database_is_ok_and_untouched(db: Path) -> None:
    before = sorted(os.listdir(db.parent)), db.stat().st_mtime_ns, db.parent.stat().st_mtime_ns
    check, conn = check_database(db)
    assert conn is not None
    conn.close()
    assert (check.status, check.detail) == ("ok", f"{db} (30 memories in 1 store)")
    after = sorted(os.listdir(db.parent)), db.stat().st_mtime_ns, db.parent.stat().st_mtime_ns
    assert after == before


def test_read_only_mount_is_named(db: Path, tmp_path: Path) -> None:
    env = {**os.environ, "THATCH_DB_PATH": str(db), "THATCH_EMBEDDER_ADDR": NO_EMBEDDER}
    (doctor,) = in_namespace(read_only(db.parent), [thatch_command("doctor")], env)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert database_lines(doctor.stdout) == [
        f"FAIL  database  {db} cannot be written: the file system holding {db.parent} is "
        "mounted read-only",
        "      fix: remount it read-write, or set THATCH_DB_PATH to a writable place",
    ]


def test_immutable_file_is_named(db: Path) -> None:
    with immutable(db):
        check, conn = check_database(db)
    assert conn is not None
    conn.close()
    assert (check.status, check.detail, check.fix) == (
        "FAIL",
        f"{db} cannot be written: {db} does not permit writes (is it immutable? see lsattr {db})",
        f"chattr -i {db}",
    )


def test_unwritable_wal_file_is_named(db: Path) -> None:
    """A -wal file nobody may write (another process left it, here made immutable)."""
    wal = Path(f"{db}-wal")
    wal.write_bytes(b"")
    with immutable(wal):
        check, conn = check_database(db)
    if conn is not None:
        conn.close()
    assert check.status == "FAIL"
    assert check.detail == (
        f"{db} cannot be written: {wal} does not permit writes (is it immutable? see lsattr {wal})"
    )


def test_empty_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "thatch.db"
    path.write_bytes(b"")
    check, conn = check_database(path)
    assert conn is None
    assert (check.status, check.detail) == (
        "FAIL",
        f"{path} is an empty file (0 bytes): it holds no memories and no schema",
    )
    assert check.fix is not None and "backup" in check.fix


def test_damaged_file_is_named(db: Path) -> None:
    pages = db.stat().st_size // 4096
    with db.open("r+b") as handle:
        handle.seek(pages // 2 * 4096)
        handle.write(b"\xa5" * 4096 * 3)
    check, conn = check_database(db)
    assert conn is None
    assert check.status == "FAIL" and check.detail.startswith(f"{db} is damaged: ")
    assert check.fix is not None
    assert check.fix.startswith(f'run sqlite3 {db} "PRAGMA integrity_check"')
