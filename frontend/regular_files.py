"""Opening files that agents name or can replace: regular files only, never a wait to open.

An anchor's path is whatever an agent wrote, and the file there (or a ref in ``.git``) may
be replaced at any time by a FIFO, a socket or a device. ``open()`` of a FIFO without a
writer waits forever, and reading a device need never end: one such file would hold a tool
call, a recall or a hook for good. So a file is opened with ``O_NONBLOCK`` (the open
returns at once, whatever it is) and used only when ``fstat`` says it is a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["NotRegularFile", "open_regular", "read_regular"]

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
# What opening a socket or a device without a driver fails with (Linux, macOS).
_NOT_REGULAR = frozenset({errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP})
# What O_NOFOLLOW fails with on a symlink (Linux, macOS; FreeBSD says EMLINK).
_A_LINK = frozenset({errno.ELOOP, errno.EMLINK})


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or directory."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.EINVAL, "not a regular file", str(path))


def open_regular(path: str | Path, *, follow_links: bool = True) -> BinaryIO:
    """``path`` open for reading in binary, if it is a regular file (symlinks followed);
    NotRegularFile otherwise, any other OSError as ``open`` raises it.

    ``follow_links=False`` (thatch's own files, a session's queue): a symlink is refused too,
    so that no session reads another's through a link (NotRegularFile, as for a socket,
    whose open fails before ``fstat``)."""
    try:
        fd = os.open(path, _FLAGS | (0 if follow_links else os.O_NOFOLLOW))
    except OSError as error:
        if error.errno in _NOT_REGULAR or (not follow_links and error.errno in _A_LINK):
            raise NotRegularFile(path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path)
        # A file system that honours O_NONBLOCK on regular files (some FUSE ones) would
        # let a read return None; only the open had to be kept from waiting.
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file at ``path``; OSError when it is not one, or is larger
    than ``limit`` (EFBIG: a symlink to a huge file, say, is never read whole). ``follow_links``
    as in ``open_regular``."""
    with open_regular(path, follow_links=follow_links) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
        # Sized by the file, not the limit: a buffered read reserves what it is asked for.
        data = handle.read(size + 1)
    if len(data) > limit:  # it grew meanwhile
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data
