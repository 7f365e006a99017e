"""Whether a file to write is a file being read: the same regular file by any name (a link,
a hard link, a relative path). Shared by the CLI's ``--out`` guard and the LDB importer, which
refuse to write over their input.

Only a regular file is compared. A terminal, a pipe or another device is not "a file" that a
write would replace: ``fit-stop /dev/stdin --out /dev/stdout`` on one terminal names one
device twice (read from it, written to it, as two streams), and was refused as writing over
its input (stop 51).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["same_regular_file"]


def same_regular_file(path: str | Path, other: str | Path) -> bool:
    """Whether ``path`` and ``other`` name one regular file. False when either is not there or
    cannot be read (what reads or writes it says why), or is no regular file."""
    try:
        mine = os.stat(path)
        theirs = os.stat(other)
    except (OSError, ValueError):  # (ValueError: a NUL byte in a name)
        return False
    return stat.S_ISREG(mine.st_mode) and os.path.samestat(mine, theirs)
