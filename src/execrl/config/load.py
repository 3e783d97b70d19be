"""YAML -> MasterConfig, loaded as NeMo RL loads its configs: OmegaConf, `defaults:` inheritance (a file or a list,
found next to the including file), interpolations (${a.b}, relative ${.x}, NeMo's resolvers such as ${mul:a,b}),
dotted key=value overrides; then the pydantic schema validates, with errors that name the fix (an unknown key
suggests the closest valid one). A ${a.b} of a key the file does not set reads the schema's default."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import omegaconf
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from execrl.config.errors import ConfigError
from execrl.config.nemo import adapt
from execrl.config.schema import MasterConfig

CONFIG_DIRS = [Path(__file__).resolve().parents[3] / "configs"]  # the repo's shipped configs
BUILTIN_DEFAULT = Path(__file__).with_name("builtin_default.yaml")  # `execrl train` with no config

# NeMo RL's resolvers, as its configs use them: ${mul:a,b}, ${div:a,b}, ${max:a,b}
RESOLVERS = {"mul": lambda a, b: a * b, "div": lambda a, b: a / b, "max": lambda *a: max(a), "min": lambda *a: min(a)}


# OmegaConf 2.4 renamed register_new_resolver to register_resolver (which in 2.3 is the legacy, string-only one)
_register = (OmegaConf.register_resolver if tuple(map(int, omegaconf.__version__.split(".")[:2])) >= (2, 4)
             else OmegaConf.register_new_resolver)


def load_config(path: str | None = None, overrides: list[str] = ()) -> MasterConfig:
    """The config at `path` (the built-in default when None) with `key=value` overrides applied."""
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            _register(name, fn)
    schema = OmegaConf.create(MasterConfig().model_dump(mode="json"))  # what an interpolation of an unset key reads
    try:
        tree = OmegaConf.merge(schema, _read(Path(path) if path else BUILTIN_DEFAULT, []))
        for item in overrides:
            _override(tree, item)
        plain = OmegaConf.to_container(tree, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot resolve the config: {str(e).splitlines()[0]}") from None
    plain, ignored, mapped = adapt(plain, _known)
    cfg = validate(plain)
    cfg._nemo_ignored, cfg._nemo_mapped = ignored, mapped
    return cfg


_LEAF = object()  # a plain value in the schema (no keys below it)


def _schema_at(parts: list[str]) -> Any:
    """What the schema holds at a dotted path: a section's model class, `dict` (a free-form dict field such as
    optimizer.kwargs, or a key under one), _LEAF (a plain value), or None (no such key)."""
    node: Any = MasterConfig
    for part in parts:
        if node is dict:
            return dict
        if node is _LEAF or node is None:
            return None
        field = node.model_fields.get(part)
        if field is None:
            return None
        kinds = [field.annotation, *typing.get_args(field.annotation)]
        models = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        free = any(k is dict or typing.get_origin(k) is dict for k in kinds)
        node = models[0] if models else dict if free else _LEAF
    return node


def _known(key: str) -> bool:
    """Whether the schema has this dotted key (any key under a free-form dict such as optimizer.kwargs)."""
    return _schema_at(key.split(".")) is not None


def _find(name: str, near: Path | None) -> Path:
    for base in ([near] if near else []) + [Path.cwd(), Path.cwd() / "configs", *CONFIG_DIRS]:
        if (base / name).is_file():
            return base / name
    raise ConfigError(f"config file {name!r} not found (looked next to the including file, in ./ and in configs/)")


def _read(path: Path, chain: list[Path]) -> DictConfig:
    if path.is_dir():
        yamls = sorted(p.name for p in path.glob("*.yaml"))
        example = f", e.g. {path / yamls[0]}" if yamls else ""
        raise ConfigError(f"{path} is a directory: pass a YAML config file{example}")
    path = path if path.is_file() else _find(str(path), None)
    if path.resolve() in chain:
        raise ConfigError(f"{path}: `defaults` loop through {' -> '.join(map(str, chain))}")
    try:
        tree = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(tree, DictConfig):
        raise ConfigError(f"{path}: expected a mapping of sections (policy:, grpo:, ...)")
    parents = tree.pop("defaults", None) or []
    merged = OmegaConf.create()
    for parent in [parents] if isinstance(parents, str) else parents:
        merged = OmegaConf.merge(merged, _read(_find(str(parent), path.parent), [*chain, path.resolve()]))
    return OmegaConf.merge(merged, tree)


def _override(tree: DictConfig, item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not key=value (e.g. grpo.num_prompts_per_step=8)")
    key, raw = item.split("=", 1)
    key = key.strip().lstrip("+")  # Hydra's ++key=value (add or override) means the same here
    node = tree
    for part in key.split(".")[:-1]:
        node = node.get(part) if isinstance(node, DictConfig) else None
        if node is not None and not isinstance(node, DictConfig):
            raise ConfigError(f"override {key}: {part} is not a section")
        if node is None:
            break
    OmegaConf.update(tree, key, _number_or_self(yaml.safe_load(raw)) if raw.strip() else None, merge=False,
                     force_add=True)


def _number_or_self(value):
    """YAML 1.1 reads 1e-5 as a string; a researcher typing lr=1e-5 means the number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


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
    node = _schema_at(loc)
    return list(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def to_yaml(cfg: MasterConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, width=120)
