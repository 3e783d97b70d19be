"""A researcher's own code, named in a config by import path: `package.module:name`, or a file,
`path/to/file.py:name` (relative to the working directory)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import sysconfig
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path


class PluginError(ValueError):
    """An import path that names nothing usable; the message names the config key and the fix."""


class OwnCodeFailed(ValueError):
    """Code the run calls on its samples (a reward component, an environment's methods) raised, exited, or returned
    what the run cannot use: one line naming it, what it did and where, and the fix. The training loop saves the steps
    done before it stops (a hunt's find: a component that raised at step 40 lost the steps since the last checkpoint,
    and its message named neither the component nor the problem; one that called sys.exit ended the run without a
    word)."""


def _where(tb) -> str:
    """The deepest frame of a traceback outside Python's own library and installed packages (the researcher's file,
    or execrl's), as file:line in function."""
    frames = traceback.extract_tb(tb)
    library = tuple(str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "purelib", "platlib"))
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(library)] or frames
    return f"{own[-1].filename}:{own[-1].lineno} in {own[-1].name}" if own else "where it was called"


def ours(obj) -> bool:
    """Whether a class or function is execrl's own (not a researcher's, named by import path)."""
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "execrl"


def guarded(obj, what: str, fix: str):
    """own_code(what, fix) around a call of `obj` where it is a researcher's; nothing where it is execrl's own (its
    errors are not the user's to fix: a review's find, a built-in environment's OSError read "fix the environment")."""
    return nullcontext() if ours(obj) else own_code(what, fix)


@contextmanager
def own_code(what: str, fix: str = ""):
    """Runs code of `what` (e.g. "reward component mine:score on problem 7"); what it raises becomes OwnCodeFailed,
    naming it, the error and where it was raised (sys.exit too). execrl's own errors pass through as they are (a
    sandbox failing: their messages name their fix), as do Ctrl-C, running out of memory (the memory phase's advice
    says what to shrink) and OwnCodeFailed."""
    try:
        yield
    except (KeyboardInterrupt, MemoryError, OwnCodeFailed):
        raise
    except SystemExit as e:
        raise OwnCodeFailed(f"{what} called sys.exit({e.code!r}) ({_where(e.__traceback__)}), which would end the "
                            f"run without a word{fix}") from None
    except Exception as e:
        if ours(type(e)) or type(e).__name__ == "OutOfMemoryError":  # (torch's, not imported here)
            raise
        said = " ".join(str(e).split())[:300]
        raise OwnCodeFailed(f"{what} raised {type(e).__name__}{': ' + said if said else ''} "
                            f"({_where(e.__traceback__)}){fix}") from e


def is_import_path(name: str) -> bool:
    return ":" in name and not name.startswith(("builtin:", "selfplay:"))


def load_object(spec: str, key: str):
    """The object `spec` names (`module:name` or `file.py:name`); one clear error naming `key`
    otherwise."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise PluginError(f"{key}={spec!r}: name your code as module:name or path/to/file.py:name")
    try:
        module = _load_file(where) if where.endswith(".py") else importlib.import_module(where)
    except ModuleNotFoundError as e:  # (a module it imports, not installed here: PYTHONPATH was the wrong fix)
        if e.name and not where.endswith(".py") and (where == e.name or where.startswith(e.name + ".")):
            raise PluginError(f"{key}={spec!r}: cannot import {where} ({e}); put its directory on PYTHONPATH or "
                              "name the file, path/to/file.py:name") from None
        raise PluginError(f"{key}={spec!r}: {where} imports {e.name or 'a module'}, which is not installed in the "
                          f"environment execrl runs in ({sys.executable}): install it there "
                          f"({_where(e.__traceback__)})") from None
    except ImportError as e:
        raise PluginError(f"{key}={spec!r}: cannot import {where} ({e}); put its directory on PYTHONPATH or name "
                          "the file, path/to/file.py:name") from None
    except PluginError:
        raise
    except (Exception, SystemExit) as e:  # (its code raised as it was imported: a hunt's find, a bare traceback)
        said = " ".join(str(e.msg if isinstance(e, SyntaxError) else e).split())[:300]
        where_raised = f"{e.filename}:{e.lineno}" if isinstance(e, SyntaxError) else _where(e.__traceback__)
        raise PluginError(f"{key}={spec!r}: importing {where} raised {type(e).__name__}"
                          f"{': ' + said if said else ''} ({where_raised}): fix that file") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise PluginError(f"{key}={spec!r}: {where} has no {attr!r}") from None


def _load_file(path: str):
    file = Path(path).expanduser()
    if not file.is_file():
        raise PluginError(f"{path}: no such file (a path is relative to the working directory, {Path.cwd()})")
    name = f"execrl_user_{file.resolve().as_posix().strip('/').replace('/', '_').replace('.', '_')}"
    if name in sys.modules:
        return sys.modules[name]
    folder = str(file.resolve().parent)  # (its own imports of files beside it work, as when Python runs the file;
    if folder not in sys.path:  # last, so that it shadows no installed module: a review's find, they were blamed
        sys.path.append(folder)  # on a package not installed)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses and pickling look their module up)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
