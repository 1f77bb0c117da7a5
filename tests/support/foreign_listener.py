"""A listener of another user, for tests of what clients refuse to send it.

    with foreign_listener(paths, uid=65534, record=tmp / "got.bin") as listener:
        ...
    assert listener.received() == b""

The child starts as root (tests run as root), imports everything, then drops to ``uid``
with ``setgid``/``setuid`` before binding, so the sockets and the listening process
belong to that user exactly as an attacker's would. It appends every byte any connection
sends to ``record`` (opened before the switch) and answers nothing. It prints ``ready``
once every socket listens; the caller reads that line instead of sleeping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534

_CHILD = r"""
import os, selectors, socket, sys
uid, record_path, *paths = sys.argv[1:]
record = open(record_path, "ab", buffering=0)
os.setgroups([])
os.setgid(int(uid))
os.setuid(int(uid))
selector = selectors.DefaultSelector()
for path in paths:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector.register(listener, selectors.EVENT_READ, "listener")
print("ready", flush=True)
while True:
    for key, _ in selector.select():
        if key.data == "listener":
            conn, _ = key.fileobj.accept()
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_READ, "conn")
            continue
        try:
            data = key.fileobj.recv(65536)
        except OSError:
            data = b""
        if data:
            record.write(data)
        else:
            selector.unregister(key.fileobj)
            key.fileobj.close()
"""


@dataclass
class ForeignListener:
    process: subprocess.Popen[bytes]
    record: Path

    def received(self) -> bytes:
        return self.record.read_bytes()


@contextmanager
def foreign_listener(
    paths: Sequence[Path],
    *,
    record: Path,
    uid: int = NOBODY,
    after_bind: Callable[[], None] | None = None,
) -> Iterator[ForeignListener]:
    """Listen as ``uid`` on every path (their directories must let ``uid`` create them)."""
    record.write_bytes(b"")
    command = [sys.executable, "-c", _CHILD, str(uid), str(record), *map(str, paths)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line == b"ready\n", f"listener failed to start (exit {process.poll()})"
        for path in paths:
            assert os.stat(path).st_uid == uid
        if after_bind is not None:
            after_bind()
        yield ForeignListener(process, record)
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
