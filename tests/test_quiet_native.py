"""Frontends print no gRPC C-core lines; the embedder leaves no onnxruntime telemetry.

Real processes: ``thatch search`` against an embedder that keeps sending GOAWAY (as one
that restarts does) and against a stopped one; a real MiniLM embedder embedding once
under a fresh HOME.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

from tests.support.embedder_proc import embedder_process
from tests.support.goaway_server import going_away
from tests.support.hookrun import thatch_command
from thatch.embedder.client.errors import FIX_REMOTE

# absl's format, which gRPC's core uses: "I1201 22:35:21.218192   15791 file.cc:1403] ..."
CORE_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]", re.MULTILINE)


def search(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        thatch_command("search", "where is the deploy key"),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_searches_print_no_grpc_core_lines(tmp_path: Path, short_tmp: Path) -> None:
    """Ten searches against restarting, stopped and failing embedders: no core lines."""
    env = dict(os.environ, THATCH_DB_PATH=str(tmp_path / "thatch.db"))
    env.pop("GRPC_VERBOSITY", None)
    stale = short_tmp / "e.sock"  # a socket a dead embedder left behind
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(stale))
    # A port nobody listens on (a stopped remote embedder), kept bound for the whole test:
    # freed, it could be taken by a later going_away() server or any other process.
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    stopped = f"127.0.0.1:{holder.getsockname()[1]}"
    try:
        _searches(env, stale, stopped)
    finally:
        holder.close()


def _searches(env: dict[str, str], stale: Path, stopped: str) -> None:
    for kind in ["restarting", "stopped"] * 4 + ["restarting", "failing"]:
        if kind == "restarting":
            # A GOAWAY that mostly crosses the first request: with gRPC's retries off the
            # search fails at once either way, and a crossing one is what makes the core
            # log (``Got goaway``) unless thatch quiets it.
            with going_away("--settings-first") as port:
                env.update(THATCH_EMBEDDER_ADDR=f"127.0.0.1:{port}")
                result = search(env)
            address = f"127.0.0.1:{port}"
        elif kind == "stopped":
            env.update(THATCH_EMBEDDER_ADDR=stopped)
            result = search(env)
            address = stopped
        else:  # auto-start replaces the stale socket with a server that exits at once
            env.update(THATCH_EMBEDDER_ADDR=f"unix://{stale}", THATCH_MODEL="org/absent")
            result = search(env)
            address = None
        assert result.returncode == 1
        assert not CORE_LINE.search(result.stderr), result.stderr
        if address is not None:
            assert result.stderr == (
                "Error: embedding service unavailable: no embedder answering at "
                f"{address}.\nFix: {FIX_REMOTE}\n"
            )
        else:
            assert result.stderr.splitlines()[-2].startswith(
                "Error: embedding service unavailable: model org/absent is not in the local cache"
            ), result.stderr


def test_a_users_own_grpc_verbosity_wins(tmp_path: Path) -> None:
    """GRPC_VERBOSITY set by the user is left alone: here the core does log the GOAWAY."""
    env = dict(os.environ, THATCH_DB_PATH=str(tmp_path / "thatch.db"), GRPC_VERBOSITY="INFO")
    with going_away() as port:
        env.update(THATCH_EMBEDDER_ADDR=f"127.0.0.1:{port}")
        result = search(env)
    assert result.returncode == 1
    assert re.search(r"\] .*Got goaway", result.stderr), result.stderr


def test_embedder_leaves_no_onnxruntime_telemetry(minilm_dir: Path, short_tmp: Path) -> None:
    """Serve the real model and embed once under a fresh HOME: no Microsoft directory."""
    home = short_tmp / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    env.pop("ORT_DISABLE_TELEMETRY", None)
    with embedder_process(str(minilm_dir), socket_dir=short_tmp, env=env) as proc:
        from thatch.embedder.v1 import embedder_pb2 as pb

        response = proc.stub().Embed(pb.EmbedRequest(texts=["hello"], kind=pb.PASSAGE), timeout=60)
        assert response.count == 1 and proc.info().model_id
    assert not (home / ".cache" / "Microsoft").exists()
    assert [p for p in home.rglob("*") if "Microsoft" in p.name] == []
