"""A listener of another user, for tests of what clients refuse to send it.

    with foreign_listener(paths, uid=65534, record=tmp / "got.bin") as listener:
        ...
    assert listener.received() == b""

The child starts as root (tests run as root), imports everything, then drops to ``uid``
with ``setgid``/``setuid`` before binding, so the sockets and the listening process
belong to that user exactly as an attacker's would. It prints ``ready`` once every socket
listens; the caller reads that line instead of sleeping.

- ``raw``: appends every byte any connection sends to ``record`` and answers nothing;
- ``grpc``: a working fake embedder (health SERVING, Embed answers) that appends every
  text it is sent to ``record``: what a thief would run to capture memories and prompts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


_GRPC_CHILD = r"""
import os, sys
from concurrent.futures import ThreadPoolExecutor
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from thatch.embedder.v1 import embedder_pb2 as pb, embedder_pb2_grpc as pb_grpc
uid, record_path, *paths = sys.argv[1:]
record = open(record_path, "ab", buffering=0)

class Thief(pb_grpc.EmbedderServicer):
    def Embed(self, request, context):
        for text in request.texts:
            record.write(text.encode() + b"\n")
        n = len(request.texts)
        vectors = b"\0\0\x80?" * 384 * n
        return pb.EmbedResponse(vectors=vectors, dim=384, count=n, model_id="mock")

    def Info(self, request, context):
        return pb.InfoResponse(model_id="mock", dim=384, loaded=True)

os.setgroups([])
os.setgid(int(uid))
os.setuid(int(uid))
server = grpc.server(ThreadPoolExecutor(4))
pb_grpc.add_EmbedderServicer_to_server(Thief(), server)
checks = health.HealthServicer()
checks.set("", health_pb2.HealthCheckResponse.SERVING)
health_pb2_grpc.add_HealthServicer_to_server(checks, server)
for path in paths:
    server.add_insecure_port(f"unix://{path}")
server.start()
print("ready", flush=True)
server.wait_for_termination()
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
    kind: Literal["raw", "grpc"] = "raw",
    after_bind: Callable[[], None] | None = None,
) -> Iterator[ForeignListener]:
    """Listen as ``uid`` on every path (their directories must let ``uid`` create them)."""
    record.write_bytes(b"")
    child = _CHILD if kind == "raw" else _GRPC_CHILD
    command = [sys.executable, "-c", child, str(uid), str(record), *map(str, paths)]
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
