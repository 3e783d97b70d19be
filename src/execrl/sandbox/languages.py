"""The language table: a language is a file name, an optional compile command and a run command.

Placeholders: {file} the source file, {exe} a path for the compiled binary, {dir} the program's directory.
Python is run by forking the sandbox's warm interpreter (no interpreter start per test); every other
language is compiled once per program (if it has a compile command) and exec'd once per test.
Add one from YAML, e.g. for Q where its binary exists:
    q: {file: main.q, run: [q, "{file}"], hello: 'show "hello"'}
`hello` is a program printing hello: the grader's start-up self-test runs it in the real sandbox (without one,
it checks only that the commands exist).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class Language:
    name: str
    file: str
    run: tuple[str, ...] = ()
    compile: tuple[str, ...] = ()
    fork_python: bool = False  # run in the warm Python interpreter instead of exec'ing `run`
    hello: str = ""  # a program that prints "hello" (the self-test)
    address_space_mb: int = 0  # its runs' virtual memory cap where more than the memory limit (a runtime that
    # reserves address space up front: node, the JVM, Go); what it holds is still capped by the memory limit
    title: str = ""  # its name as people write it (Python, C++, Go): what prompts call it; the name where empty

    @property
    def tools(self) -> tuple[str, ...]:
        """The commands this language runs (not the program's own binary)."""
        return tuple(cmd[0] for cmd in (self.compile, self.run) if cmd and "{" not in cmd[0])


def _found(command: list) -> tuple[str, ...]:
    """A command with its tool as the path this machine's PATH finds (the sandbox looks in /usr/local/bin, /usr/bin
    and /bin only: a tool in /opt/x/bin or ~/.cargo/bin on the PATH made every program an infra_error)."""
    command = tuple(str(a) for a in command)
    if command and "/" not in command[0] and "{" not in command[0] and (path := shutil.which(command[0])):
        return (os.path.abspath(path), *command[1:])
    return command


LANGUAGES: dict[str, Language] = {
    "python": Language("python", "main.py", fork_python=True, hello='print("hello")', title="Python"),
    "cpp": Language("cpp", "main.cpp", run=("{exe}",),
                    compile=_found(["g++", "-O2", "-std=c++17", "-o", "{exe}", "{file}"]),  # (g++ as the PATH finds it)
                    hello='#include <cstdio>\nint main() { std::puts("hello"); }\n', title="C++"),
}
ALIASES = {"python3": "python", "py": "python", "c++": "cpp", "cxx": "cpp"}


def get_language(name: str) -> Language:
    if not isinstance(name, str):
        raise KeyError(f"language must be a string naming one of {sorted(LANGUAGES)}, got {name!r}")
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LANGUAGES:
        raise KeyError(f"unknown language {name!r}: known are {sorted(LANGUAGES)}; add one with --languages FILE.yaml")
    return LANGUAGES[key]


def tests_refused(language: str, spec) -> str | None:
    """Why programs in `language` cannot take `spec`'s form of tests (calls, asserts and checks run in Python's
    harness), or None."""
    from execrl.sandbox.spec import StdioTests

    lang = get_language(language)
    if lang.fork_python or isinstance(spec, StdioTests):
        return None
    return f"{type(spec).__name__} need Python; {lang.name} programs take stdin/stdout tests"


def language_named(value, default: str = "python") -> str | None:
    """A row's language (null or "": `default`) by the sandbox's name for it (`Python`, `python3`, `C++` as
    get_language reads them), else None (an unknown name, or not a name: false, 0, a list)."""
    value = default if value is None or value == "" else value
    if not isinstance(value, str):
        return None
    key = ALIASES.get(value.lower(), value.lower())
    return key if key in LANGUAGES else None


def _check_entry(path: str, name, entry: dict) -> None:
    """A languages file's entry as the sandbox can run it, else one error naming the key (a hunt's finds: a number as
    a name or a hello raised a traceback; an unknown placeholder, an empty run, or a file name with a directory in it
    made every row an infra_error)."""
    def refuse(why: str):
        raise ValueError(f"{path}: language {name!r}: {why}")

    if not isinstance(name, str) or not name.strip():
        refuse("its name must be text")
    if not isinstance(entry.get("hello", ""), str):
        refuse("hello must be a program's text")
    file = entry["file"]
    if not file or "/" in file or file in (".", ".."):
        refuse(f"file must be a plain file name (e.g. main.q), got {file!r}")
    if not entry["run"]:
        refuse("run must be a command (a list of its words)")
    for key in ("run", "compile"):
        for word in entry.get(key, []):
            if not isinstance(word, str):
                refuse(f"{key}'s words must be text, got {word!r}")
            try:
                word.format(file="", exe="", dir="")
            except (KeyError, IndexError, ValueError, AttributeError, TypeError) as e:  # ({file.name}, {file[0]})
                refuse(f"{key}'s word {word!r} holds a placeholder other than {{file}}, {{exe}} and {{dir}} ({e!r})")


def load_languages(path: str) -> None:
    """Register the languages in a YAML file: {name: {file, run, compile?, hello?, address_space_mb?}}."""
    try:
        with open(path) as f:
            table = yaml.safe_load(f) or {}
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected a mapping of language name to {{file, run, compile}}")
    for name, entry in table.items():
        if isinstance(entry, dict):  # (hello: or compile: left empty is none)
            entry = {k: v for k, v in entry.items() if not (k in ("hello", "compile") and v is None)}
        if (not isinstance(entry, dict) or not isinstance(entry.get("file"), str)
                or not isinstance(entry.get("run"), list) or not isinstance(entry.get("compile", []), list)):
            raise ValueError(f"{path}: language {name!r} needs 'file' (a name) and 'run' (a command as a list), and "
                             "optionally 'compile' (a list)")
        _check_entry(path, name, entry)
        space = entry.get("address_space_mb", 0)
        if type(space) is not int or not 0 <= space <= 1 << 20:
            raise ValueError(f"{path}: language {name!r}: address_space_mb must be a whole number of MB (0: the "
                             f"memory limit), got {space!r}")
        LANGUAGES[name.lower()] = Language(name.lower(), entry["file"], _found(entry["run"]),
                                           _found(entry.get("compile", [])), hello=entry.get("hello", ""),
                                           address_space_mb=space, title=name)
