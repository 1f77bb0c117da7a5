"""A shared, memory-mapped file of one store's ranking matrix, so new processes skip the load.

Reading 100k BLOBs out of SQLite is what makes a new process's first search slow, and each
process holding its own decoded copy is what makes many sessions heavy. A snapshot holds a
``StoreMatrix`` as the database was at one change-log sequence number: a new process maps it
(private, copy-on-write: the file is never written in place, untouched pages stay shared
with every other process through the page cache) and catches up from the change log
exactly as a cached matrix does.

It is only a cache, and it may only ever cost time. Anything in doubt (missing, truncated,
not a regular file of this user's, in a directory that is not, another database at the
path, the log pruned past it, contents that fail their checksums, an unwritable directory:
``snapshot_dir``) means the caller loads from SQLite as before. A CRC-32 covers the header
and a checksum (``_piece_sum``) each 8 MiB piece of every array a reader uses; a reader
checks all of them when it maps the file, so garbage never ranks.

Writers never change a file that anyone may have mapped: a snapshot is written whole under
a fresh exclusive temp name (``mkstemp``), made read-only (0400) and renamed into place, so
readers see an old file or a new one, never half of one, and a replaced file lives on,
reached by no path, for as long as a process maps it. What a mapping cannot survive is its
file being shortened in place (the pages past the new end fault with SIGBUS, killing the
process): only this user or root can do that, and a non-root user only after a chmod.
So a reader maps a file only under a read lease (``fcntl(F_SETLEASE)``): whoever then
truncates the file, or opens it for writing, waits in the kernel until every mapping of
it in this process is gone, and the lease shows the wait (``MappedFile.intact``), so the
cache drops the matrix before its next use and reloads from SQLite; a use already under
way finishes on the unchanged pages. The kernel gives up waiting after its
lease-break-time (``/proc/sys/fs/lease-break-time``, 45 s by default): a single use longer
than that is the residual risk. The lease's signal is SIGURG, which is ignored unless
handled (SIGIO, the kernel's default, would end the process). Where no lease is granted
(not Linux; NFS or SMB without a delegation; the file open for writing or a writer
waiting) the file is read into private memory instead: it costs this process the memory
(as a load from SQLite does), never a fault.
Location: ``$XDG_CACHE_HOME/thatch/vectors`` (``~/.cache``), one file per (database real
path, store).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import mmap
import os
import signal
import sqlite3
import struct
import tempfile
import threading
import weakref
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from thatch.frontend.store.changelog import logged, logged_since
from thatch.frontend.store.snapshot_dir import (
    SNAPSHOT_SUFFIX,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    mark_used,
    open_own_file,
    tidy,
    usable_directory,
)

__all__ = [
    "ALIGN",
    "PREFIX",
    "DatabaseIdentity",
    "Fingerprint",
    "MappedFile",
    "Snapshot",
    "fingerprint",
    "fingerprint_holds",
    "peek_seq",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

MAGIC = b"THATCHVS"
FORMAT = 2  # 2: checksums (files of format 1 are passed over and replaced)
# magic, format, length of the JSON header that follows, CRC-32 of that header
PREFIX = struct.Struct("<8sIII")
ALIGN = 4096  # each array starts on a page: the matrix maps without a copy
# Log entries hashed into the identity: a database restored or recreated at the same path
# with the same sequence number still differs in the keys it logged.
FINGERPRINT_ENTRIES = 16
# Bytes per checksum: pieces are checked on several cores at once.
CHECKSUM_PIECE = 8 << 20
SUM_BLOCK = 32 << 10  # pieces start on a page: blocks of 64-bit words, aligned
HEADER_MAX = 1 << 24
READ_ONLY = 0o400  # a non-root process of ours cannot open it for writing by mistake
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
    return directory / f"{hashlib.sha256(key).hexdigest()[:32]}{SNAPSHOT_SUFFIX}"


Fingerprint = list[list[object]]


def fingerprint(conn: sqlite3.Connection, seq: int) -> Fingerprint:
    """The last logged keys up to ``seq``, each with a hash of its row as it is now.

    Read in the same transaction as ``seq``. A database recreated or restored at the same
    path that reached the same sequence number by the same keys still differs in the rows.
    """
    entries: Fingerprint = []
    for number, store, slug in logged(conn, seq - FINGERPRINT_ENTRIES, seq):
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
    current = logged(conn, seq - FINGERPRINT_ENTRIES, seq)
    if not current or [list(row) for row in current] != [entry[:3] for entry in recorded]:
        return False
    for _number, store, slug, row_hash in recorded:
        later = logged_since(conn, str(store), str(slug), seq)
        if not later and _row_hash(conn, str(store), str(slug)) != row_hash:
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


@dataclass(frozen=True)
class MappedFile:
    """The mapping a snapshot's arrays view, and the descriptor holding the file's read
    lease (None: the file was read into private memory, which nothing outside can change).

    The descriptor is closed when the mapping is freed, so it is open for as long as this
    object (which holds the mapping) lives.
    """

    mapping: mmap.mmap
    lease: int | None

    def intact(self) -> bool:
        """No one waits to shorten or write the file: touching any page cannot fault.

        (One ``fcntl``: a waiting writer turns the lease to F_UNLCK until it is released.)
        """
        if self.lease is None:
            return True
        try:
            return fcntl.fcntl(self.lease, fcntl.F_GETLEASE) == fcntl.F_RDLCK
        except OSError:
            return False


@dataclass
class Snapshot:
    """A mapped snapshot's header and its groups (arrays are views of the private map)."""

    seq: int
    version: int
    fingerprint: Fingerprint
    branches: list[str | None]
    groups: list[MappedGroup]
    file: MappedFile


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


def _used_bytes(group: dict[str, int]) -> list[tuple[str, int]]:
    """(array, bytes a reader uses) of one group, in file order: spare rows are not read
    before they are written, so they are not checksummed (and never leave their holes)."""
    count = group["count"]
    return [
        ("unit", count * group["dim"] * 4), ("norms", count * 8), ("archived", count),
        ("codes", count * 4), ("slugs", group["slug_bytes"]),
    ]  # fmt: skip


def _pieces(data: memoryview) -> list[memoryview]:
    return [data[start : start + CHECKSUM_PIECE] for start in range(0, len(data), CHECKSUM_PIECE)]


def _piece_sum(piece: memoryview) -> int:
    """A piece's checksum: the 64-bit wrapping sums of its 32 KiB blocks, then a CRC-32 of
    those sums and of the tail after the last whole block.

    Any change to a block (garbage, zeroed or NaN-filled pages, a flipped bit) moves its
    sum but with odds of 2⁻⁶⁴. It is not meant against forgery: a process of this user
    could write any file here anyway. Summing is memory-bound (150 MB: ~10 ms, CRC-32 over
    the same bytes ~40 ms on an idle core and 110-220 ms on a busy 2-core machine).
    """
    whole = len(piece) // SUM_BLOCK * SUM_BLOCK
    words = np.frombuffer(piece, np.uint64, whole // 8).reshape(-1, SUM_BLOCK // 8)
    sums = words.sum(axis=1, dtype=np.uint64)
    return zlib.crc32(piece[whole:], zlib.crc32(sums.tobytes()))


def _checksums(pieces: list[memoryview]) -> list[int]:
    """Each piece's ``_piece_sum``; from 2 full pieces on, split across up to 4 threads
    (numpy lets go of the GIL), so on a busy machine the worst case is the one-core time."""
    sums = [0] * len(pieces)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    workers = max(1, min(cpus, 4, sum(len(piece) for piece in pieces) // CHECKSUM_PIECE))

    def run(worker: int) -> None:
        for index in range(worker, len(pieces), workers):
            sums[index] = _piece_sum(pieces[index])

    threads = [threading.Thread(target=run, args=(worker,)) for worker in range(1, workers)]
    for thread in threads:
        thread.start()
    run(0)
    for thread in threads:
        thread.join()
    return sums


def read_snapshot(path: Path, identity: DatabaseIdentity, store: str) -> Snapshot | None:
    """The snapshot at ``path`` mapped copy-on-write, or None when it is not one for this
    store, not this user's (``snapshot_dir``) or fails a checksum."""
    if not usable_directory(path.parent, create=False):
        return None
    opened = open_own_file(path)
    if opened is None:
        return None
    fd, info = opened
    try:
        size = info.st_size
        if size < ALIGN:
            return None
        file = _map(fd, size)
        if file is None:
            return None
        try:
            found = _parse(file, size, identity, store)
        except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError):
            found = None
        if found is None or not file.intact():
            return None
        mark_used(fd, info)
        return found
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _map(fd: int, size: int) -> MappedFile | None:
    """The file mapped under a read lease, else read into private memory; None when it was
    shortened meanwhile.

    Private and writable either way: the cache edits rows in place; those pages become
    this process's own, the file and every other process's view stay as they were.
    """
    writable = mmap.PROT_READ | mmap.PROT_WRITE
    if _take_lease(fd):
        # A descriptor of the same open file, closed once the mapping is gone: what
        # ``MappedFile.intact`` asks about the lease (which lasts as long as either).
        held = os.dup(fd)
        try:
            # (mmap checks ``size`` against the file: one shortened before the lease fails.)
            mapped = mmap.mmap(held, size, flags=mmap.MAP_PRIVATE, prot=writable)
        except BaseException:
            os.close(held)
            raise
        weakref.finalize(mapped, os.close, held).atexit = False
        return MappedFile(mapped, held)
    # No lease: not on this platform or file system (NFS and SMB grant none without a
    # delegation: EAGAIN), or the file is open for writing. A read cannot fault, and the
    # checksums catch a copy taken mid-change.
    copy = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE, prot=writable)
    done = 0
    while done < size:
        # pread, not preadv: macOS before 11 has no preadv.
        chunk = os.pread(fd, min(CHECKSUM_PIECE, size - done), done)
        if not chunk:
            return None
        copy[done : done + len(chunk)] = chunk
        done += len(chunk)
    return MappedFile(copy, None)


def _take_lease(fd: int) -> bool:
    setsig = getattr(fcntl, "F_SETSIG", None)
    setlease = getattr(fcntl, "F_SETLEASE", None)
    if setsig is None or setlease is None:
        return False  # not Linux
    try:
        # SIGURG before the lease: the kernel's default signal (SIGIO) ends the process.
        fcntl.fcntl(fd, setsig, signal.SIGURG)
        fcntl.fcntl(fd, setlease, fcntl.F_RDLCK)
    except OSError:
        return False
    return True


def _header(data: bytes | mmap.mmap, size: int) -> tuple[dict[str, object], int] | None:
    """The checked JSON header and the offset of the data after it, else None."""
    magic, version, header_len, header_sum = PREFIX.unpack_from(data, 0)
    if magic != MAGIC or version != FORMAT or header_len > min(HEADER_MAX, size - PREFIX.size):
        return None
    raw = bytes(data[PREFIX.size : PREFIX.size + header_len])
    if zlib.crc32(raw) != header_sum:
        return None
    header = json.loads(raw)
    if not isinstance(header, dict):
        return None
    return header, _aligned(PREFIX.size + header_len)


def _parse(file: MappedFile, size: int, identity: DatabaseIdentity, store: str) -> Snapshot | None:
    mapped = file.mapping
    read = _header(mapped, size)
    if read is None:
        return None
    header, base = read
    if (
        header["store"] != store
        or header["db"] != [identity.path, identity.device, identity.inode]
        or header["size"] != size
    ):
        return None
    described = header["groups"]
    if not isinstance(described, list):
        return None
    shapes = [(g["dim"], g["count"], g["capacity"], g["slug_bytes"]) for g in described]
    layout, end = _layout(shapes)
    if layout != described or base + end != size:
        return None
    if not all(g["dim"] > 0 and 0 <= g["count"] <= g["capacity"] for g in layout):
        return None
    view = memoryview(mapped)
    pieces = [
        piece
        for g in layout
        for name, length in _used_bytes(g)
        for piece in _pieces(view[base + g[name] : base + g[name] + length])
    ]
    if _checksums(pieces) != header["sums"]:
        return None
    groups = []
    for g in layout:
        dim, count, capacity = g["dim"], g["count"], g["capacity"]
        slug_blob = bytes(mapped[base + g["slugs"] : base + g["slugs"] + g["slug_bytes"]])
        slugs = slug_blob.decode("utf-8", "surrogatepass").split("\0") if count else []
        if len(slugs) != count:
            return None
        unit = np.frombuffer(mapped, np.float32, capacity * dim, base + g["unit"])
        norms = np.frombuffer(mapped, np.float64, capacity, base + g["norms"])
        # Unit rows are finite by construction (``DimGroup._write``); their norms are cheap
        # to check again, which catches a writer that broke that rule.
        if not (np.isfinite(norms[:count]).all() and (norms[:count] >= 0.0).all()):
            return None
        groups.append(
            MappedGroup(
                dim, count, capacity, unit.reshape(capacity, dim), norms,
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
    seq, version = header["seq"], header["version"]
    if not isinstance(seq, int) or not isinstance(version, int):
        return None
    return Snapshot(seq, version, recorded, branches, groups, file)


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
        arrays = {
            "unit": unit, "norms": norms, "archived": archived, "codes": codes,
        }  # fmt: skip
        data = {
            name: np.ascontiguousarray(array[:count]).reshape(-1).view(np.uint8).data
            for name, array in arrays.items()
        }
        data["slugs"] = memoryview(blob)
        encoded.append((dim, count, capacity, data))
    layout, end = _layout(
        [(dim, count, cap, len(data["slugs"])) for dim, count, cap, data in encoded]
    )
    pieces = [
        piece
        for (*_, data), g in zip(encoded, layout, strict=True)
        for name, length in _used_bytes(g)
        for piece in _pieces(data[name][:length])
    ]
    header: dict[str, object] = {
        "store": store,
        "db": [identity.path, identity.device, identity.inode],
        "seq": seq,
        "version": version,
        "fingerprint": log_fingerprint,
        "branches": branches,
        "groups": layout,
        "sums": _checksums(pieces),
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
    if not usable_directory(path.parent, create=True):
        return False
    tidy(path.parent, keep=path, incoming=size)
    try:
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(PREFIX.pack(MAGIC, FORMAT, len(raw), zlib.crc32(raw)))
            out.write(raw)
            for (*_, data), g in zip(encoded, layout, strict=True):
                for name, _length in _used_bytes(g):
                    out.seek(base + g[name])
                    out.write(data[name])
            out.truncate(size)  # unwritten spare rows stay holes: no disk, read as zeros
            os.fchmod(out.fileno(), READ_ONLY)
        os.replace(temp, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return False
    return True


def peek_seq(path: Path, identity: DatabaseIdentity, store: str) -> int | None:
    """The sequence number of the snapshot at ``path`` if it is this store's, else None.

    Only the header is read and checked: a file that fails its data checksums shows up
    when it is mapped (``MatrixCache`` then replaces it whatever this says).
    """
    opened = open_own_file(path)
    if opened is None:
        return None
    fd, info = opened
    try:
        prefix = os.pread(fd, PREFIX.size, 0)
        header_len = PREFIX.unpack(prefix)[2]
        data = prefix + os.pread(fd, min(header_len, HEADER_MAX), PREFIX.size)
        read = _header(data, info.st_size)
    except (OSError, ValueError, struct.error):
        return None
    finally:
        os.close(fd)
    if read is None:
        return None
    header = read[0]
    if header.get("size") != info.st_size or header.get("store") != store or header.get("db") != [
        identity.path, identity.device, identity.inode
    ]:  # fmt: skip
        return None
    seq = header.get("seq")
    return seq if isinstance(seq, int) else None
