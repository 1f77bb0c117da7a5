"""frontend/regular_files.py: files a project can replace are opened without waiting and
read only when regular, within a limit, without reserving the limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from thatch.frontend.regular_files import NotRegularFile, read_regular

# Under a 512 MiB address-space cap: a read that reserved its 1 GiB limit failed here.
_CAPPED_READ = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from thatch.frontend.regular_files import read_regular
print(read_regular(sys.argv[1], 1 << 30).decode())
"""


def test_a_large_limit_reserves_nothing(tmp_path: Path) -> None:
    small = tmp_path / "packed-refs"
    small.write_text("# pack-refs with: peeled\n")
    done = subprocess.run(
        [sys.executable, "-c", _CAPPED_READ, str(small)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "# pack-refs with: peeled\n\n", "")


def test_what_is_not_a_regular_file_or_is_too_large_is_an_oserror(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotRegularFile):
        read_regular(tmp_path / "fifo", 100)
    with pytest.raises(NotRegularFile):
        read_regular("/dev/zero", 100)
    with pytest.raises(NotRegularFile):
        read_regular(tmp_path, 100)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(OSError, match="larger than 100 bytes"):
        read_regular(big, 100)
    (tmp_path / "link").symlink_to(big)
    assert read_regular(tmp_path / "link", 101) == b"x" * 101
