"""One run at a time in a run directory: `execrl train` holds an exclusive lock on logger.log_dir
(and checkpointing.checkpoint_dir) while it runs, so a second run into the same place stops at once,
saying who holds it, instead of writing every metric twice and racing the first run's checkpoints.
The lock is the kernel's (flock): it goes with the process, so a killed run leaves nothing to clean
up."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import suppress
from pathlib import Path

NAME = ".execrl.lock"


class RunInUse(RuntimeError):
    """Another process holds the run directory."""


class RunLock:
    def __init__(self, directories: dict[str, str]):
        """directories: {the config key naming it: the directory}; each is made and locked, or
        RunInUse is raised (naming the key, the holder and the way out) with nothing locked."""
        self.files, self.made = [], []
        try:
            for key, where in directories.items():
                self._take(key, Path(where).expanduser())
        except BaseException:
            self.release()
            raise

    def _take(self, key: str, directory: Path) -> None:
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        directory.mkdir(parents=True, exist_ok=True)
        self.made += reversed(missing)  # (its parents first: release() goes through them last)
        f = open(directory / NAME, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise RunInUse(f"{key}={directory} is in use by another run ({holder}): wait for it to end, or set "
                           f"{key} to another directory") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        f.flush()
        self.files.append(f)

    def release(self) -> None:
        """Unlocked; a directory it made that holds nothing else (a refused run's, a run that saved nothing) gone."""
        for f in self.files:
            f.close()  # (closing the file releases its lock)
        self.files = []
        for directory in reversed(self.made):  # (a checkpoint directory inside the log directory first)
            with suppress(OSError):
                if [p.name for p in directory.iterdir()] in ([NAME], []):
                    (directory / NAME).unlink(missing_ok=True)
                    directory.rmdir()
        self.made = []
