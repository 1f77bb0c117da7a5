"""Generate the gRPC Python code for proto/ into embedder/v1/.

Run from a source checkout: ``python -m thatch.embedder.protogen``. The generated files
are committed (users need not install grpcio-tools); tests/test_proto.py regenerates them
into a temporary directory and fails on any difference.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["GENERATED", "generate", "repo_root"]

PROTO_REL = "thatch/embedder/v1/embedder.proto"
GENERATED = ("embedder_pb2.py", "embedder_pb2.pyi", "embedder_pb2_grpc.py")


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def generate(out_dir: Path, root: Path | None = None) -> list[Path]:
    """Generate the three files into ``out_dir`` and return their paths."""
    from grpc_tools import protoc  # dev-only dependency (the test extra)

    root = root or repo_root()
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{root / 'proto'}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(root / "proto" / PROTO_REL),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        produced = Path(tmp) / "thatch" / "embedder" / "v1"
        paths = []
        for name in GENERATED:
            target = out_dir / name
            shutil.copyfile(produced / name, target)
            paths.append(target)
    return paths


def main() -> int:
    for path in generate(repo_root() / "embedder" / "v1"):
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
