"""A seccomp filter the zygote installs on itself at start, so that every child it forks, the
program's processes and what they exec inherit it (a filter cannot be removed). It refuses the
kernel objects that outlive a process or escape its limits:

  SysV IPC (shm, semaphores, message queues), POSIX message queues   would carry state from one program to the next
                                                                     and hold host memory after the program ended
  kernel keyrings (add_key, request_key, keyctl)                     the same, across sandboxes and worker restarts
  new user namespaces (unshare or clone with CLONE_NEWUSER)          a tmpfs mounted there escapes the disk quota
  clone3 (ENOSYS: libc falls back to clone, whose flags can be read)
  io_uring, perf_event_open, bpf, userfaultfd                        kernel attack surface no program needs
  ptrace                                                             a process tracing its parent holds the
                                                                     parent's exit from the sandbox (and no
                                                                     graded program needs a debugger)
  mbind                                                              a memory policy set on a shared mapping of
                                                                     the streams the zygote reuses stays on their
                                                                     inode: read back by the next program, and kernel
                                                                     memory no limit charges
  prlimit64 naming the zygote (by its pid; a program's own           in bwrap-user mode the program is the zygote's
  processes may set one another's)                                   uid: it would set the limits the zygote and
                                                                     every later program inherit
  system calls of another ABI (i386 int 0x80, x32)                   would bypass the numbers above
  memfd_create, memfd_secret (ENOSYS: libraries fall back to         a memfd sent into a unix socket and closed
  files; the zygote makes its children's streams before it           holds memory in no process and on no
  installs this filter)                                              filesystem the sandbox measures
  inotify, fanotify (ENOSYS: libraries fall back to polling)         a watch follows the inode across bind mounts:
                                                                     one program sees which of the shared read-only
                                                                     files another one opens (two answers of a
                                                                     group, graded at once, passed one's output to
                                                                     the other by the names of the files it opened)
  Linux AIO (io_setup, io_submit, ...; ENOSYS: libaio falls back   its contexts come from one pool for the whole
  to synchronous I/O)                                                machine (fs.aio-max-nr): a program holding all
                                                                     of it left every other process on the host
                                                                     without (EAGAIN) while it ran
  fcntl's F_NOTIFY and F_SETLEASE (EPERM)                            the same watch by older calls: dnotify signals a
                                                                     directory's watcher at every read of a file in
                                                                     it; a lease holder learns of another's open and
                                                                     blocks it (lease-break-time: 45 s) on the files
                                                                     its uid owns (the venv, in bwrap-user mode)
  sockets of a family but unix, inet, inet6 and netlink              AF_VSOCK is no network namespace's: it
  (EAFNOSUPPORT; socketpair: but unix)                               reaches the hypervisor's host, and its ports
                                                                     are shared by every sandbox on the machine;
                                                                     the others (AF_ALG, AF_TIPC...) are kernel
                                                                     attack surface no program needs
  cachestat (ENOSYS); preadv2 and pwritev2 with RWF_NOWAIT         whether a shared read-only file's page is in the
  (EOPNOTSUPP, as a file that cannot do it says)                     page cache, which outlives every program: one
                                                                     program set bits by reading pages, a later one
                                                                     read them back (a hunt's find)
  inet and inet6 sockets but TCP and UDP streams and datagrams       UDP-Lite's and MPTCP's queues are in no file
  (EPROTONOSUPPORT: raw, SCTP, UDP-Lite, MPTCP, ICMP)                the sandbox measures (a hunt's find: 1.6 GB of
                                                                     UDP-Lite queues held under a 64 MB limit)
  posix_fadvise, readahead, madvise's MADV_COLD and MADV_PAGEOUT    the page cache of the host's files: a program
  (no-ops: they return 0); process_madvise (ENOSYS: the advice     evicted every library it could see (the host's
  on the caller's own memory, which the filter cannot read)          next imports from the disk, 2.2x slower), or
                                                                     set the page-cache channel's bits both ways
  O_DIRECT in open, openat and fcntl(F_SETFL) (EINVAL, as a file     reads past the page cache: 32 threads of 1 MB
  system without it says); openat2 (ENOSYS: libc uses openat)       reads at random offsets of a shared library
                                                                     held the host's disk (its reads 3.2x slower)
                                                                     for 0.7 s of the program's CPU
  sync, syncfs, sync_file_range, fsync, fdatasync (no-ops: they      writeback of the host's disks (syncfs on a
  return 0)                                                          read-only file of /usr: the host's root file
                                                                     system; fsync there: a flush of its disk's
                                                                     cache), waited for where no signal reaches
                                                                     the program, not even the runner's kill; its
                                                                     own files are on tmpfs, with nothing to write

multiprocessing, threads, subprocesses and shared memory through /dev/shm (POSIX shm_open, named
semaphores) are unaffected. Where the machine is neither x86_64 nor aarch64, no filter is installed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000
SOCKET_FAMILIES = (1, 16)  # AF_UNIX, AF_NETLINK (getaddrinfo, if_nameindex)
INET_FAMILIES = (2, 10)  # AF_INET, AF_INET6: of these, only
INET_TYPES = (1, 2)  # SOCK_STREAM, SOCK_DGRAM (the type's low bits: SOCK_NONBLOCK and SOCK_CLOEXEC aside)
INET_PROTOCOLS = (0, 6, 17)  # the type's own, IPPROTO_TCP, IPPROTO_UDP
F_SETLEASE, F_NOTIFY = 1024, 1026
RWF_NOWAIT = 0x8
F_SETFL, MADV_COLD, MADV_PAGEOUT = 4, 20, 21
# per architecture: AUDIT_ARCH value, refused calls, unshare, clone, clone3, calls refused with
# ENOSYS, socket, prlimit64, fcntl, socketpair, preadv2 and pwritev2, calls made no-ops, madvise, open (None where
# there is none), openat, O_DIRECT
_TABLES = {
    "x86_64": (0xC000003E, (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220,  # SysV shm, sem, msg
                            240, 241, 242, 243, 244, 245,  # mq_*
                            248, 249, 250,  # add_key, request_key, keyctl
                            237,  # mbind
                            298, 321, 323, 425, 426, 427,  # perf_event_open, bpf, userfaultfd, io_uring_*
                            101),  # ptrace
               272, 56, 435, (319, 447, 451,  # memfd_create, memfd_secret, cachestat (ENOSYS)
                              253, 254, 255, 294, 300, 301,  # inotify_*, fanotify_* (ENOSYS)
                              206, 207, 208, 209, 210, 333,  # io_setup ... io_pgetevents
                              437, 440), 41, 302, 72, 53,  # openat2, process_madvise
               (327, 328),  # preadv2, pwritev2
               (162, 306, 277, 74, 75,  # sync, syncfs, sync_file_range, fsync, fdatasync
                221, 187),  # fadvise64, readahead
               28, 2, 257, 0x4000),  # madvise, open, openat, O_DIRECT
    "aarch64": (0xC00000B7, (180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197,
                             217, 218, 219, 235, 241, 280, 282, 425, 426, 427, 117),
                272, 220, 435, (279, 447, 451, 26, 27, 28, 262, 263, 0, 1, 2, 3, 4, 292, 437, 440), 198, 261, 25, 199,
                (286, 287), (81, 267, 84, 82, 83, 223, 213), 233, None, 56, 0x10000),
}
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_LD_ABS, _JEQ, _JGE, _JSET, _RET, _AND = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def build(zygote: int) -> bytes | None:
    """The BPF program for this machine's architecture, or None where there is no table for it; prlimit64 naming
    `zygote` (a pid) is refused."""
    table = _TABLES.get(platform.machine())
    if table is None:
        return None
    arch, refused, nr_unshare, nr_clone, nr_clone3, nosys_calls, nr_socket, nr_prlimit, nr_fcntl, nr_pair, rw2, \
        noops, nr_madvise, nr_open, nr_openat, o_direct = table
    deny, nosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    prog = [_ins(_LD_ABS, 0, 0, 4)]  # seccomp_data.arch
    prog.append(_ins(_JEQ, 1, 0, arch))
    prog.append(_ins(_RET, 0, 0, nosys))  # another ABI
    prog.append(_ins(_LD_ABS, 0, 0, 0))  # seccomp_data.nr
    if arch == 0xC000003E:
        prog += [_ins(_JGE, 0, 1, 0x40000000), _ins(_RET, 0, 0, nosys)]  # x32
    for nr in refused:
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, deny)]
    for nr in (nr_clone3, *nosys_calls):
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, nosys)]
    for nr in noops:  # (an errno of 0: the call returns 0, not run)
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, _ERRNO)]
    for nr in (nr_unshare, nr_clone):  # flags are the first argument of both (low 32 bits at offset 16)
        prog += [_ins(_JEQ, 0, 3, nr), _ins(_LD_ABS, 0, 0, 16), _ins(_JSET, 0, 1, CLONE_NEWUSER),
                 _ins(_RET, 0, 0, deny)]
        prog.append(_ins(_LD_ABS, 0, 0, 0))  # reload nr for the next check
    prog += [_ins(_JEQ, 0, 3, nr_prlimit), _ins(_LD_ABS, 0, 0, 16), _ins(_JEQ, 0, 1, zygote),  # prlimit64's pid
             _ins(_RET, 0, 0, deny), _ins(_LD_ABS, 0, 0, 0)]
    prog += [_ins(_JEQ, 0, 4, nr_fcntl), _ins(_LD_ABS, 0, 0, 24), _ins(_JEQ, 1, 0, F_NOTIFY),  # fcntl's command
             _ins(_JEQ, 0, 1, F_SETLEASE), _ins(_RET, 0, 0, deny), _ins(_LD_ABS, 0, 0, 0)]
    prog += [_ins(_JEQ, 0, 4, nr_pair), _ins(_LD_ABS, 0, 0, 16), _ins(_JEQ, 1, 0, 1),  # socketpair's family: unix
             _ins(_RET, 0, 0, _ERRNO | errno.EAFNOSUPPORT), _ins(_LD_ABS, 0, 0, 0)]
    for nr in rw2:  # their flags (the sixth argument): RWF_NOWAIT answers whether a file's pages are in the page cache
        prog += [_ins(_JEQ, 0, 3, nr), _ins(_LD_ABS, 0, 0, 56), _ins(_JSET, 0, 1, RWF_NOWAIT),
                 _ins(_RET, 0, 0, _ERRNO | errno.EOPNOTSUPP), _ins(_LD_ABS, 0, 0, 0)]
    no_direct = _ins(_RET, 0, 0, _ERRNO | errno.EINVAL)
    for nr, flags in ((nr_open, 24), (nr_openat, 32)):  # (their flags: the second and the third argument)
        if nr is not None:
            prog += [_ins(_JEQ, 0, 3, nr), _ins(_LD_ABS, 0, 0, flags), _ins(_JSET, 0, 1, o_direct), no_direct,
                     _ins(_LD_ABS, 0, 0, 0)]
    prog += [_ins(_JEQ, 0, 5, nr_fcntl), _ins(_LD_ABS, 0, 0, 24), _ins(_JEQ, 0, 3, F_SETFL),  # fcntl(fd, F_SETFL, x)
             _ins(_LD_ABS, 0, 0, 32), _ins(_JSET, 0, 1, o_direct), no_direct, _ins(_LD_ABS, 0, 0, 0)]
    prog += [_ins(_JEQ, 0, 4, nr_madvise), _ins(_LD_ABS, 0, 0, 32), _ins(_JEQ, 1, 0, MADV_COLD),  # its advice
             _ins(_JEQ, 0, 1, MADV_PAGEOUT), _ins(_RET, 0, 0, _ERRNO), _ins(_LD_ABS, 0, 0, 0)]
    return b"".join(prog + _socket(nr_socket))


def _socket(nr_socket: int) -> list[bytes]:
    """The last part, with the call's number loaded: socket(2) of a family SOCKET_FAMILIES names, or of one of
    INET_FAMILIES with a type and protocol named; any other call allowed."""
    allow, no_family, no_protocol = _ins(_RET, 0, 0, _ALLOW), _ins(_RET, 0, 0, _ERRNO | errno.EAFNOSUPPORT), \
        _ins(_RET, 0, 0, _ERRNO | errno.EPROTONOSUPPORT)
    protocols = [_ins(_LD_ABS, 0, 0, 32)]  # its protocol; then a jump to allow each, else refused
    protocols += [_ins(_JEQ, len(INET_PROTOCOLS) - i, 0, k) for i, k in enumerate(INET_PROTOCOLS)] + [no_protocol]
    types = [_ins(_LD_ABS, 0, 0, 24), _ins(_AND, 0, 0, 0xF)]  # its type, SOCK_NONBLOCK and SOCK_CLOEXEC masked
    types += [_ins(_JEQ, len(INET_TYPES) - i, 0, k) for i, k in enumerate(INET_TYPES)] + [no_protocol]
    inet = types + protocols  # (the types' jumps land on the protocols' load)
    families = [_ins(_JEQ, len(SOCKET_FAMILIES) - i + len(INET_FAMILIES) + len(inet), 0, k)  # to allow
                for i, k in enumerate(SOCKET_FAMILIES)]
    families += [_ins(_JEQ, len(INET_FAMILIES) - i, 0, k) for i, k in enumerate(INET_FAMILIES)]  # to inet
    families.append(no_family)
    return [_ins(_JEQ, 1, 0, nr_socket), allow, _ins(_LD_ABS, 0, 0, 16)] + families + inet + [allow]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


LIBC = ctypes.CDLL(None, use_errno=True)  # made once in the zygote: every forked child inherits it


def install() -> None:
    """Install the filter on this process, the zygote (after no_new_privs). Raises OSError if the kernel refuses
    it."""
    program = build(os.getpid())
    if program is None:
        return
    fprog = _Fprog(len(program) // 8, program)  # (the kernel copies it)
    if LIBC.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if LIBC.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")

