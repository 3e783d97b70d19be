"""The zygote's side of its sandbox's cgroup (sandbox/cgroups.py made it and passed the fds of its
files): a child enters it before the program runs; the zygote sets its limits per child and reads
what the program used."""

from __future__ import annotations

import os


class Cgroup:
    def __init__(self, spec: dict):
        self.version = spec["version"]
        self.procs: list[int] = spec["procs"]
        self.fds = {key: spec[key] for key in ("limit", "usage", "stat", "events", "cpu", "pids", "reclaim")
                    if key in spec}
        self.set_to: dict[str, int] = {}

    def enter(self) -> None:
        """In the forked child, before anything of the program: this process (and all it will start)
        into the cgroup, in every hierarchy."""
        for fd in self.procs:
            os.write(fd, b"0")

    def limit(self, memory: int, nproc: int) -> None:
        """The memory (bytes) and process count the kernel enforces for the next child."""
        for key, value in (("limit", memory), ("pids", nproc)):
            if key in self.fds and self.set_to.get(key) != value:
                try:
                    os.write(self.fds[key], str(value).encode())
                except OSError:  # a v1 limit below what is charged now (EBUSY): emptied, and once more
                    self.empty()
                    try:
                        os.write(self.fds[key], str(value).encode())
                    except OSError:  # (the sampled limit still holds)
                        continue
                self.set_to[key] = value

    def empty(self) -> None:
        """Reclaim what the cgroup is charged with no process of it left: kernel memory an ended program left
        behind (a hunt's find: a million failed path lookups left 384 MB of dentries charged, which a next
        program's lower limit could not go under, and which its sampled memory would have counted)."""
        if "reclaim" in self.fds:
            try:
                os.write(self.fds["reclaim"], b"0" if self.version == 1 else str(1 << 62).encode())
            except OSError:  # (v2: EAGAIN where not all of it could be reclaimed; what is left is checked)
                pass

    def cpu_s(self) -> float:
        """CPU seconds every process of the cgroup used, ever (those the kernel reaped included)."""
        if self.version == 1:
            return int(_read(self.fds["cpu"])) / 1e9
        return _field(self.fds["cpu"], "usage_usec") / 1e6

    def memory(self) -> int:
        """Bytes charged to the program beyond the file cache it reads through (which the kernel
        reclaims at the limit): its pages, its tmpfs files, and the kernel memory of its objects."""
        file, shmem = (("cache", "shmem") if self.version == 1 else ("file", "shmem"))
        stat = _fields(self.fds["stat"])
        return int(_read(self.fds["usage"])) - stat.get(file, 0) + stat.get(shmem, 0)

    def oom_kills(self) -> int:
        return _field(self.fds["events"], "oom_kill")


def _read(fd: int) -> bytes:
    return os.pread(fd, 1 << 16, 0)


def _fields(fd: int) -> dict[str, int]:
    out = {}
    for line in _read(fd).split(b"\n"):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0].decode()] = int(parts[1])
    return out


def _field(fd: int, name: str) -> int:
    return _fields(fd).get(name, 0)
