"""Reading an app's files without trusting what sits at their paths.

A FIFO, a device or a socket named `assistant.yml` (or a hook's `.js`) would block a plain read for
ever, and a huge file would be read whole; both come from whoever can write the app folder, so they
are refused with a clear error instead. The file is opened first and checked through its descriptor,
so what is read is what was checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_HOOK_BYTES = 4 << 20  # of one hook file: far more than any hook needs


class NotRegular(OSError):
    """The path names something other than a regular file (a FIFO, a device, a socket, a folder)."""


class TooLarge(OSError):
    def __init__(self, size: int) -> None:
        super().__init__(f"file is {size} bytes")
        self.size = size


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; `NotRegular`, `TooLarge` or another OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO opens at once
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("not a regular file")
        if st.st_size > max_bytes:
            raise TooLarge(st.st_size)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew since the check
        raise TooLarge(len(data))
    return data
