"""Generate the gRPC Python code for proto/: the embedder's into embedder/v1/, the hub's
into hub/v1/.

Run from a source checkout: ``python -m thatch.embedder.protogen``. The generated files
are committed (users need not install grpcio-tools); tests/test_proto.py regenerates them
into a temporary directory and fails on any difference.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["GENERATED", "HUB_GENERATED", "generate", "repo_root"]

PROTO_REL = "thatch/embedder/v1/embedder.proto"
GENERATED = ("embedder_pb2.py", "embedder_pb2.pyi", "embedder_pb2_grpc.py")
HUB_PROTO_REL = "thatch/hub/v1/hub.proto"
HUB_GENERATED = ("hub_pb2.py", "hub_pb2.pyi", "hub_pb2_grpc.py")


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def generate(out_dir: Path, root: Path | None = None, *, hub: bool = False) -> list[Path]:
    """Generate the embedder's three files (the hub's with ``hub``) into ``out_dir`` and
    return their paths."""
    from grpc_tools import protoc  # dev-only dependency (the test extra)

    root = root or repo_root()
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{root / 'proto'}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(root / "proto" / (HUB_PROTO_REL if hub else PROTO_REL)),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        produced = Path(tmp) / "thatch" / ("hub" if hub else "embedder") / "v1"
        paths = []
        for name in HUB_GENERATED if hub else GENERATED:
            target = out_dir / name
            shutil.copyfile(produced / name, target)
            paths.append(target)
    return paths


def main() -> int:
    for path in generate(repo_root() / "embedder" / "v1"):
        print(path, file=sys.stderr)
    for path in generate(repo_root() / "hub" / "v1", hub=True):
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
