"""The committed gRPC code is exactly what the committed proto generates."""

from __future__ import annotations

from pathlib import Path

from thatch.embedder.protogen import GENERATED, HUB_GENERATED, generate, repo_root


def test_generated_code_matches_proto(tmp_path: Path) -> None:
    """Regenerating from proto/ gives byte-identical files to the committed ones."""
    generate(tmp_path)
    committed = repo_root() / "embedder" / "v1"
    for name in GENERATED:
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name


def test_hub_generated_code_matches_proto(tmp_path: Path) -> None:
    """The hub's stubs too: regenerated, byte-identical to the committed ones."""
    generate(tmp_path, hub=True)
    committed = repo_root() / "hub" / "v1"
    for name in HUB_GENERATED:
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


def test_hub_stubs_import_without_postgres_driver() -> None:
    """A machine's sync process talks to the hub through these stubs: they load without
    psycopg (the hub's own dependency) or the model runtime."""
    import subprocess
    import sys

    code = (
        "import sys; import thatch.hub.v1.hub_pb2_grpc; "
        "assert 'psycopg' not in sys.modules and 'onnxruntime' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
