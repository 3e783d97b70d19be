"""A researcher's own code, named in a config by import path: `package.module:name`, or a file,
`path/to/file.py:name` (relative to the working directory)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path


class PluginError(ValueError):
    """An import path that names nothing usable; the message names the config key and the fix."""


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
    except ImportError as e:
        raise PluginError(f"{key}={spec!r}: cannot import {where} ({e}); put its directory on PYTHONPATH or name "
                          "the file, path/to/file.py:name") from None
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
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses and pickling look their module up)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
