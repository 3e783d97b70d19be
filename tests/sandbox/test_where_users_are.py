"""The sandbox works wherever a user's interpreter lives: a virtual environment under /tmp or in a home directory
(paths the sandbox used to hide), found and bound read-only, checked by the start-up self-test."""

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import execrl

SRC = str(Path(execrl.__file__).resolve().parents[1])
GRADE = """
from execrl.sandbox import Grader
with Grader(1, languages=("python", "cpp")) as g:  # the self-test runs both hello-worlds first
    py = g.grade("print(int(input()) + 1)", {"inputs": ["1\\n"], "outputs": ["2\\n"]})
    cc = g.grade("#include <cstdio>\\nint main(){int a; scanf(\\"%d\\", &a); printf(\\"%d\\\\n\\", a + 1);}",
                 {"inputs": ["1\\n"], "outputs": ["2\\n"]}, "cpp")
    secret = g.run("import os, sys; print(sys.prefix, os.path.exists(__import__('sys').argv[0]))")
    print(py.verdict.value, cc.verdict.value, secret.verdict.value, secret.stdout.strip())
"""


def make_venv(where: Path) -> Path:
    """A fresh venv at `where` that reaches execrl and its dependencies through a .pth file (no install)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [SRC, sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    Path(purelib, "execrl_test.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    return python


def grade_with(python: Path, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("EXECRL_SANDBOX", "PYTHONPATH")}
    proc = subprocess.run([str(python), "-c", GRADE], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_venv_under_tmp_grades(tmp_path):
    python = make_venv(tmp_path / "checkout" / ".venv")
    out = grade_with(python)
    assert out.startswith("pass pass pass"), out
    assert str(tmp_path / "checkout" / ".venv") in out  # the program ran on that venv's interpreter


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_venv_in_a_home_directory_grades(tmp_path):
    home = Path("/home") / f"execrl-test-{os.getpid()}"
    try:
        home.mkdir(parents=True)
    except OSError:
        pytest.skip("/home is not writable here")
    try:
        python = make_venv(home / "code" / "execrl" / ".venv")
        out = grade_with(python)
        assert out.startswith("pass pass pass"), out
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_an_interpreter_named_through_a_parent_directory_grades():
    """`cd bench && ../.venv/bin/python script.py`: sys.executable then holds `bench/..`, a directory the sandbox does
    not bind (bwrap could not start the interpreter)."""
    root = Path(SRC).parent
    here = Path(sys.executable)
    if not here.is_relative_to(root):
        pytest.skip("the interpreter is not in the checkout (no .venv beside it)")
    out = grade_with(Path("..") / here.relative_to(root), cwd=root / "bench")
    assert out.startswith("pass pass pass"), out
