"""A shared, memory-mapped file of one store's ranking matrix, so new processes skip the load.

Reading 100k BLOBs out of SQLite is what makes a new process's first search slow, and each
process holding its own decoded copy is what makes many sessions heavy. A snapshot holds a
``StoreMatrix`` as the database was at one change-log sequence number: a new process maps it
(private, copy-on-write: the file is never written in place, untouched pages stay shared
with every other process through the page cache) and catches up from the change log
exactly as a cached matrix does.

It is only a cache. Anything in doubt (missing, truncated, foreign, another database at the
path, the log pruned past it, an unwritable directory) means the caller loads from SQLite
as before; a snapshot is written whole under a temp name and renamed into place, so readers
see an old file or a new one, never half of one. Location: ``$XDG_CACHE_HOME/thatch/vectors``
(``~/.cache``), one file per (database real path, store).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import sqlite3
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from thatch.frontend.store.schema import CHANGES_TABLE

MAGIC = b"THATCHVS"
FORMAT = 1
PREFIX = struct.Struct("<8sII")  # magic, format, length of the JSON header that follows
ALIGN = 4096  # each array starts on a page: the matrix maps without a copy
# Log entries hashed into the identity: a database restored or recreated at the same path
# with the same sequence number still differs in the keys it logged.
FINGERPRINT_ENTRIES = 16
TEMP_PREFIX = ".snap-"
ABANDONED_SECONDS = 600
# Slugs are joined by NUL: a store with a NUL in a slug gets no snapshot.


@dataclass(frozen=True)
class DatabaseIdentity:
    """Which file a snapshot belongs to: its real path and inode."""

    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> DatabaseIdentity | None:
        try:
            real = os.path.realpath(path)
            stat = os.stat(real)
        except OSError:
            return None
        return cls(real, stat.st_dev, stat.st_ino)


def snapshot_path(directory: Path, identity: DatabaseIdentity, store: str) -> Path:
    key = identity.path.encode("utf-8", "surrogatepass") + b"\0"
    key += store.encode("utf-8", "surrogatepass")
    return directory / f"{hashlib.sha256(key).hexdigest()[:32]}.vec"


Fingerprint = list[list[object]]


def fingerprint(conn: sqlite3.Connection, seq: int) -> Fingerprint:
    """The last logged keys up to ``seq``, each with a hash of its row as it is now.

    Read in the same transaction as ``seq``. A database recreated or restored at the same
    path that reached the same sequence number by the same keys still differs in the rows.
    """
    entries: Fingerprint = []
    for number, store, slug in conn.execute(
        f"SELECT seq, store, slug FROM {CHANGES_TABLE} WHERE seq > ? AND seq <= ? ORDER BY seq",
        (seq - FINGERPRINT_ENTRIES, seq),
    ).fetchall():
        entries.append([number, store, slug, _row_hash(conn, store, slug)])
    return entries


def _row_hash(conn: sqlite3.Connection, store: str, slug: str) -> str | None:
    row = conn.execute(
        "SELECT archived, branch, embedding FROM entries WHERE slug = ? AND store = ?",
        (slug, store),
    ).fetchone()
    if row is None:
        return None
    digest = hashlib.sha256(repr(row[:2]).encode("utf-8", "surrogatepass"))
    digest.update(row[2] if isinstance(row[2], bytes) else repr(row[2]).encode())
    return digest.hexdigest()


def fingerprint_holds(conn: sqlite3.Connection, seq: int, recorded: Fingerprint) -> bool:
    """Whether this database logged the same keys up to ``seq`` and still holds those rows.

    A row changed after ``seq`` is logged again, so only rows not logged since are compared.
    False when the log no longer reaches ``seq`` (pruned) or never did.
    """
    if seq == 0:
        return recorded == []
    current = conn.execute(
        f"SELECT seq, store, slug FROM {CHANGES_TABLE} WHERE seq > ? AND seq <= ? ORDER BY seq",
        (seq - FINGERPRINT_ENTRIES, seq),
    ).fetchall()
    if not current or [list(row) for row in current] != [entry[:3] for entry in recorded]:
        return False
    for _number, store, slug, row_hash in recorded:
        later = conn.execute(
            f"SELECT 1 FROM {CHANGES_TABLE} WHERE store = ? AND seq > ? AND slug = ? LIMIT 1",
            (store, seq, slug),
        ).fetchone()
        if later is None and _row_hash(conn, str(store), str(slug)) != row_hash:
            return False
    return True


@dataclass
class MappedGroup:
    dim: int
    count: int
    capacity: int
    unit: np.ndarray
    norms: np.ndarray
    archived: np.ndarray
    codes: np.ndarray
    slugs: list[str]


@dataclass
class Snapshot:
    """A mapped snapshot's header and its groups (arrays are views of the private map)."""

    seq: int
    version: int
    fingerprint: Fingerprint
    branches: list[str | None]
    groups: list[MappedGroup]


def _layout(groups: list[tuple[int, int, int, int]]) -> tuple[list[dict[str, int]], int]:
    """Offsets from the data start of each group's arrays: (dim, count, capacity, slug bytes)."""
    placed: list[dict[str, int]] = []
    offset = 0

    def take(size: int) -> int:
        nonlocal offset
        start = offset
        offset = _aligned(offset + size)
        return start

    for dim, count, capacity, slug_bytes in groups:
        placed.append(
            {
                "dim": dim, "count": count, "capacity": capacity, "slug_bytes": slug_bytes,
                "unit": take(capacity * dim * 4), "norms": take(capacity * 8),
                "archived": take(capacity), "codes": take(capacity * 4),
                "slugs": take(slug_bytes),
            }
        )  # fmt: skip
    return placed, offset


def _aligned(value: int) -> int:
    return -(-value // ALIGN) * ALIGN


def read_snapshot(path: Path, identity: DatabaseIdentity, store: str) -> Snapshot | None:
    """The snapshot at ``path`` mapped copy-on-write, or None when it is not one for this store."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < ALIGN:
            return None
        # Private and writable: the cache edits rows in place; those pages become this
        # process's own, the file and every other process's view stay as they were.
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    try:
        return _parse(mapped, size, identity, store)
    except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError):
        return None


def _parse(mapped: mmap.mmap, size: int, identity: DatabaseIdentity, store: str) -> Snapshot | None:
    magic, version, header_len = PREFIX.unpack_from(mapped, 0)
    if magic != MAGIC or version != FORMAT or header_len > size - PREFIX.size:
        return None
    header = json.loads(bytes(mapped[PREFIX.size : PREFIX.size + header_len]))
    if (
        header["store"] != store
        or header["db"] != [identity.path, identity.device, identity.inode]
        or header["size"] != size
    ):
        return None
    base = _aligned(PREFIX.size + header_len)
    layout, end = _layout(
        [(g["dim"], g["count"], g["capacity"], g["slug_bytes"]) for g in header["groups"]]
    )
    if layout != header["groups"] or base + end != size:
        return None
    groups = []
    for g in layout:
        dim, count, capacity = g["dim"], g["count"], g["capacity"]
        if dim <= 0 or not 0 <= count <= capacity:
            return None
        slug_blob = bytes(mapped[base + g["slugs"] : base + g["slugs"] + g["slug_bytes"]])
        slugs = slug_blob.decode("utf-8", "surrogatepass").split("\0") if count else []
        if len(slugs) != count:
            return None
        unit = np.frombuffer(mapped, np.float32, capacity * dim, base + g["unit"])
        groups.append(
            MappedGroup(
                dim, count, capacity, unit.reshape(capacity, dim),
                np.frombuffer(mapped, np.float64, capacity, base + g["norms"]),
                np.frombuffer(mapped, np.bool_, capacity, base + g["archived"]),
                np.frombuffer(mapped, np.int32, capacity, base + g["codes"]),
                slugs,
            )
        )  # fmt: skip
    branches, recorded = header["branches"], header["fingerprint"]
    if not isinstance(branches, list) or not branches or branches[0] is not None:
        return None
    if not all(isinstance(name, str) for name in branches[1:]):
        return None
    if not isinstance(recorded, list) or not all(
        isinstance(entry, list) and len(entry) == 4 for entry in recorded
    ):
        return None
    return Snapshot(int(header["seq"]), int(header["version"]), recorded, branches, groups)


def write_snapshot(
    path: Path,
    identity: DatabaseIdentity,
    store: str,
    seq: int,
    version: int,
    log_fingerprint: Fingerprint,
    branches: list[str | None],
    groups: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]],
) -> bool:
    """Write a snapshot atomically; groups are (dim, count, unit, norms, archived, codes, slugs).

    False (and nothing left behind) when it cannot be written: a cache never fails a call.
    """
    encoded = []
    for dim, count, unit, norms, archived, codes, slugs in groups:
        if any("\0" in slug for slug in slugs):
            return False
        blob = "\0".join(slugs).encode("utf-8", "surrogatepass")
        capacity = count + count // 16 + 16  # room for appends without leaving the map
        encoded.append((dim, count, capacity, blob, unit, norms, archived, codes))
    layout, end = _layout([(dim, count, cap, len(blob)) for dim, count, cap, blob, *_ in encoded])
    header: dict[str, object] = {
        "store": store,
        "db": [identity.path, identity.device, identity.inode],
        "seq": seq,
        "version": version,
        "fingerprint": log_fingerprint,
        "branches": branches,
        "groups": layout,
    }
    # The header holds its own file size; its length depends on that number's digits.
    size = 0
    for _ in range(3):
        header["size"] = size
        raw = json.dumps(header, ensure_ascii=True).encode("ascii")
        base = _aligned(PREFIX.size + len(raw))
        if base + end == size:
            break
        size = base + end
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _remove_abandoned(path.parent)
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(PREFIX.pack(MAGIC, FORMAT, len(raw)))
            out.write(raw)
            for (_, count, _, blob, unit, norms, archived, codes), g in zip(
                encoded, layout, strict=True
            ):
                for name, array in (
                    ("unit", unit), ("norms", norms), ("archived", archived), ("codes", codes)
                ):  # fmt: skip
                    out.seek(base + g[name])
                    out.write(np.ascontiguousarray(array[:count]).data)
                out.seek(base + g["slugs"])
                out.write(blob)
            out.truncate(size)  # unwritten spare rows stay holes: no disk, read as zeros
        os.replace(temp, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return False
    return True


def _remove_abandoned(directory: Path) -> None:
    """Temp files of writers that died mid-write (older than any write takes)."""
    now = time.time()
    for entry in os.scandir(directory):
        if entry.name.startswith(TEMP_PREFIX) and entry.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if now - entry.stat().st_mtime > ABANDONED_SECONDS:
                    os.unlink(entry.path)


def peek_seq(path: Path, identity: DatabaseIdentity, store: str) -> int | None:
    """The sequence number of the snapshot at ``path`` if it is this store's, else None."""
    try:
        with open(path, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            prefix = source.read(PREFIX.size)
            magic, version, header_len = PREFIX.unpack(prefix)
            if magic != MAGIC or version != FORMAT or header_len > 1 << 24:
                return None
            header = json.loads(source.read(header_len))
    except (OSError, ValueError, struct.error):
        return None
    if header.get("size") != size or header.get("store") != store or header.get("db") != [
        identity.path, identity.device, identity.inode
    ]:  # fmt: skip
        return None
    seq = header.get("seq")
    return seq if isinstance(seq, int) else None
