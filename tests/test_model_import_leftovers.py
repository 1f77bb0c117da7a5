"""What a killed `thatch model import` leaves beside its output, and who removes it
(embedder/convert/build_dirs.py): the next import, once the killed one's lock is gone,
never while an import still runs there."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_model_import import write_tiny_bert
from thatch.embedder.convert import build_dirs
from thatch.embedder.convert.importer import import_checkpoint

# Imports like `thatch model import`, but stops once its build directory holds the ONNX
# graph's directory, says so, and waits there until killed.
_STALLED_IMPORT = """
import sys
from pathlib import Path
from thatch.embedder.convert import importer

real = importer.build_bert_onnx

def stall(*args, **kwargs):
    print("building", flush=True)
    sys.stdin.read()
    return real(*args, **kwargs)

importer.build_bert_onnx = stall
importer.import_checkpoint(Path(sys.argv[1]), Path(sys.argv[2]), quantize=False)
"""


def _scratch(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".thatch-"))


def _age(directory: Path, seconds: float) -> None:
    """Everything in ``directory`` last written ``seconds`` ago."""
    when = time.time() - seconds
    for root, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            os.utime(os.path.join(root, name), (when, when), follow_symlinks=False)
        os.utime(root, (when, when))


def test_a_killed_import_is_swept_by_the_next_one_and_a_running_one_is_not(
    tmp_path: Path,
) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    models = tmp_path / "models"
    with subprocess.Popen(
        [sys.executable, "-c", _STALLED_IMPORT, str(src), str(models / "stalled")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "building\n"
            (running,) = _scratch(models)
            assert running.startswith(build_dirs.BUILD_PREFIX)

            said: list[str] = []
            import_checkpoint(src, models / "first", quantize=False, log=said.append)
            assert _scratch(models) == [running]  # an import under way keeps its directory
            assert (models / running / "onnx").is_dir()
            assert not [line for line in said if "did not finish" in line]
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert _scratch(models) == [running]  # SIGKILL runs no cleanup

    # Unlocked but written to within the hour: perhaps an import the lock cannot show (NFS
    # keeps directory locks per client; an earlier release took none). Kept.
    import_checkpoint(src, models / "again", quantize=False)
    assert _scratch(models) == [running]
    _age(models / running, build_dirs.STALE_SECONDS + 60)
    said = []
    import_checkpoint(src, models / "second", quantize=False, log=said.append)
    assert _scratch(models) == []
    assert sorted(p.name for p in models.iterdir()) == ["again", "first", "second"]
    assert f"removed {models / running}, left by an import that did not finish" in said


def test_leftovers_of_a_replacement_go_and_what_is_not_ours_stays(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    models = tmp_path / "models"
    out = import_checkpoint(src, models / "out", quantize=False)
    half_removed = models / f"{build_dirs.REPLACED_PREFIX}0badf00d"
    (half_removed / "onnx").mkdir(parents=True)  # killed during the earlier import's rmtree
    _age(half_removed, build_dirs.STALE_SECONDS + 60)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    link = models / f"{build_dirs.BUILD_PREFIX}link"
    link.symlink_to(precious, target_is_directory=True)
    plain_file = models / f"{build_dirs.BUILD_PREFIX}file"
    plain_file.write_text("not a directory")

    import_checkpoint(src, out, quantize=False, pooling="cls")

    assert sorted(p.name for p in models.iterdir()) == sorted(["out", link.name, plain_file.name])
    assert (precious / "notes.txt").read_text() == "keep me"
    assert json.loads((out / "thatch_model.json").read_text())["pooling"] == "cls"


def test_an_out_that_is_a_link_is_replaced_and_what_it_pointed_to_stays(
    tmp_path: Path,
) -> None:
    src = write_tiny_bert(tmp_path / "tiny")
    elsewhere = import_checkpoint(src, tmp_path / "elsewhere", quantize=False)
    models = tmp_path / "models"
    models.mkdir()
    (models / "out").symlink_to(elsewhere, target_is_directory=True)

    out = import_checkpoint(src, models / "out", quantize=False, pooling="cls")

    assert sorted(p.name for p in models.iterdir()) == ["out"]
    assert not out.is_symlink()
    assert json.loads((out / "thatch_model.json").read_text())["pooling"] == "cls"
    assert json.loads((elsewhere / "thatch_model.json").read_text())["pooling"] == "mean"


class _SweptWhileLocking:
    """``fcntl`` for build_dirs whose first ``flock`` finds its directory removed, as when
    a sweeping import held the lock, removed it and let go while this one waited."""

    LOCK_EX, LOCK_NB = fcntl.LOCK_EX, fcntl.LOCK_NB

    def __init__(self) -> None:
        self.swept: list[Path] = []

    def flock(self, fd: int, operation: int) -> None:
        if not self.swept:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            self.swept.append(path)
            path.rmdir()
        fcntl.flock(fd, operation)


@pytest.mark.parametrize("when", ["before the open", "while locking"])
def test_a_build_directory_swept_before_it_was_locked_is_claimed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Between mkdir and flock a sweeping import can find the new directory unlocked and
    remove it: the claim then makes another rather than build in a deleted directory."""
    parent = tmp_path / "models"
    parent.mkdir()
    monkeypatch.setattr(build_dirs, "STALE_SECONDS", -60.0)  # a sweep takes any unlocked one
    swept: list[Path] = []
    if when == "before the open":
        real_hold = build_dirs.hold

        def swept_first(path: Path) -> int:
            if not swept:
                swept.append(path)
                build_dirs.sweep_abandoned(path.parent, lambda line: None)
            return real_hold(path)

        monkeypatch.setattr(build_dirs, "hold", swept_first)
    else:
        sweeper = _SweptWhileLocking()
        swept = sweeper.swept
        monkeypatch.setattr(build_dirs, "fcntl", sweeper)
    build, fd = build_dirs.claim_build_dir(parent)
    try:
        assert swept and build != swept[0] and not swept[0].exists()
        assert list(parent.iterdir()) == [build]
        assert os.path.samestat(os.fstat(fd), os.stat(build))
    finally:
        os.close(fd)
