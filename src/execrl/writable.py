"""Where results go must take them before any work is done: a directory is made (with its parents)
and a file is written to it and removed, so that an unwritable --out fails in one line before
sampling or grading, not after."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def unwritable(directory: str | Path) -> str | None:
    """Why files cannot be written in `directory`, or None when they can. Folders it makes to find out are removed
    again (the writer makes them when it writes: a command refused after this check left them behind, empty)."""
    d = Path(directory).expanduser()
    made = [p for p in (d, *d.parents) if not p.exists()]  # (deepest first)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d, prefix=".execrl-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{d} is not writable here ({e.strerror or type(e).__name__})"
    finally:
        for p in made:
            try:
                p.rmdir()
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENAMETOOLONG):  # (not made: the mkdir failed at it or above)
                    continue
                break  # (another process wrote into it meanwhile)
    return None


def write_whole(path: str | Path, text: str | Iterable[str], **kwargs) -> None:
    """`text` (or its parts, written one at a time: eval's rows, never joined into one copy) as the file at `path`,
    whole or not at all: written beside it and renamed over it, the partial copy removed where the write fails (a
    full disk: a report's 1.3 MB remnant then failed the run's next write; a kill while metrics.jsonl was rewritten in
    place emptied it)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", **kwargs) as f:
            f.writelines([text] if isinstance(text, str) else text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether paths a and b name one file (a hard link or a symlink too); False where either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
