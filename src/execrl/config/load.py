"""YAML -> MasterConfig: `defaults:` inheritance, ${a.b} interpolation, dotted key=value overrides, and errors that
name the fix (an unknown key suggests the closest valid one)."""

from __future__ import annotations

import copy
import difflib
import re
import typing
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from execrl.config.schema import MasterConfig

CONFIG_DIRS = [Path(__file__).resolve().parents[3] / "configs"]  # the repo's shipped configs
BUILTIN_DEFAULT = Path(__file__).with_name("builtin_default.yaml")  # `execrl train` with no config
_REF = re.compile(r"\$\{([^}]+)\}")


class ConfigError(ValueError):
    """A config that cannot be used; the message names the key and the fix."""


def load_config(path: str | None = None, overrides: list[str] = ()) -> MasterConfig:
    """The config at `path` (the built-in default when None) with `key=value` overrides applied."""
    tree = _read(Path(path) if path else BUILTIN_DEFAULT, [])
    for item in overrides:
        _override(tree, item)
    return validate(_interpolate(tree))


def _find(name: str, near: Path | None) -> Path:
    for base in ([near] if near else []) + [Path.cwd(), Path.cwd() / "configs", *CONFIG_DIRS]:
        if (base / name).is_file():
            return base / name
    raise ConfigError(f"config file {name!r} not found (looked next to the including file, in ./ and in configs/)")


def _read(path: Path, chain: list[Path]) -> dict:
    if path.is_dir():
        yamls = sorted(p.name for p in path.glob("*.yaml"))[:3]
        raise ConfigError(f"{path} is a directory: pass a YAML config file" + (f", e.g. {path / yamls[0]}" if yamls else ""))
    path = path if path.is_file() else _find(str(path), None)
    if path.resolve() in chain:
        raise ConfigError(f"{path}: `defaults` loop through {' -> '.join(map(str, chain))}")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (policy:, grpo:, ...)")
    parents = tree.pop("defaults", None) or []
    merged: dict = {}
    for parent in [parents] if isinstance(parents, str) else parents:
        merged = _merge(merged, _read(_find(parent, path.parent), [*chain, path.resolve()]))
    return _merge(merged, tree)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _override(tree: dict, item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not key=value (e.g. grpo.num_prompts_per_step=8)")
    key, raw = item.split("=", 1)
    node = tree
    *parents, leaf = key.strip().split(".")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {key}: {part} is not a section")
    node[leaf] = _number_or_self(yaml.safe_load(raw)) if raw.strip() else None


def _number_or_self(value):
    """YAML 1.1 reads 1e-5 as a string; a researcher typing lr=1e-5 means the number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _lookup(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _default_of(dotted)
        node = node[part]
    return node


def _default_of(dotted: str):
    node = MasterConfig()
    for part in dotted.split("."):
        if not hasattr(node, part):
            raise ConfigError(f"${{{dotted}}} refers to a key that does not exist")
        node = getattr(node, part)
    return node


def _interpolate(tree, root=None, depth: int = 0):
    root = tree if root is None else root
    if depth > 20:
        raise ConfigError("${...} references nest too deeply (a loop?)")
    if isinstance(tree, dict):
        return {k: _interpolate(v, root, depth) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_interpolate(v, root, depth) for v in tree]
    if isinstance(tree, str) and "${" in tree:
        whole = _REF.fullmatch(tree)
        if whole:
            return _interpolate(_lookup(root, whole.group(1)), root, depth + 1)
        return _REF.sub(lambda m: str(_interpolate(_lookup(root, m.group(1)), root, depth + 1)), tree)
    return tree


def validate(tree: dict) -> MasterConfig:
    try:
        return MasterConfig.model_validate(tree)
    except ValidationError as e:
        raise ConfigError("\n".join(_explain(err) for err in e.errors())) from None


def _explain(err: dict) -> str:
    loc = [str(x) for x in err["loc"]]
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        valid = _fields_at(loc[:-1])
        close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
        hint = f": did you mean {'.'.join([*loc[:-1], close[0]])}?" if close else f"; valid keys here: {', '.join(valid)}"
        return f"unknown key {key}{hint}"
    return f"{key}: {err['msg']} (got {err.get('input')!r})"


def _fields_at(loc: list[str]) -> list[str]:
    model: type[BaseModel] = MasterConfig
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return []
        inner = [a for a in typing.get_args(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = inner[0] if inner else field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    return list(model.model_fields)


def to_yaml(cfg: MasterConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, width=120)
