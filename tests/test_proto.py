"""The committed gRPC code is exactly what the committed proto generates."""

from __future__ import annotations

from pathlib import Path

from thatch.embedder.protogen import GENERATED, generate, repo_root


def test_generated_code_matches_proto(tmp_path: Path) -> None:
    """Regenerating from proto/ gives byte-identical files to the committed ones."""
    generate(tmp_path)
    committed = repo_root() / "embedder" / "v1"
    for name in GENERATED:
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name


def test_stubs_import_without_model_runtime() -> None:
    """The stubs load without pulling onnxruntime into the process."""
    import subprocess
    import sys

    code = (
        "import sys; import thatch.embedder.v1.embedder_pb2_grpc; "
        "assert 'onnxruntime' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
