"""YAML -> MasterConfig, loaded as NeMo RL loads its configs: OmegaConf, `defaults:` inheritance (a
file or a list, found next to the including file), interpolations (${a.b}, relative ${.x}, NeMo's
resolvers such as ${mul:a,b}), dotted key=value overrides; then the pydantic schema validates, with
errors that name the fix (an unknown key suggests the closest valid one). A ${a.b} of a key the file
does not set reads the schema's default."""

from __future__ import annotations

import difflib
import re
import sys
import typing
from pathlib import Path
from typing import Any

import omegaconf
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from execrl.config.errors import ConfigError
from execrl.config.nemo import adapt, refuse_unresolved
from execrl.config.nemo_data import SHARED
from execrl.config.schedule import TAGS
from execrl.config.schema import MasterConfig, OptimizerConfig
from execrl.console import says_notes

CONFIG_DIRS = [Path(__file__).resolve().parents[3] / "configs"]  # the repo's shipped configs
BUILTIN_DEFAULT = Path(__file__).with_name("builtin_default.yaml")  # `execrl train` with no config

# NeMo RL's resolvers, as its configs use them: ${add:a,b}, ${mul:a,b}, ${div:a,b}, ${max:a,b} (and min)
RESOLVERS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
             "max": lambda *a: max(a), "min": lambda *a: min(a)}


# OmegaConf 2.4 renamed register_new_resolver to register_resolver (which in 2.3 is the legacy,
# string-only one)
_register = (OmegaConf.register_resolver if tuple(map(int, omegaconf.__version__.split(".")[:2])) >= (2, 4)
             else OmegaConf.register_new_resolver)


def load_config(path: str | None = None, overrides: list[str] = ()) -> MasterConfig:
    """The config at `path` (the built-in default when None) with `key=value` overrides applied."""
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            _register(name, fn)
    defaults = MasterConfig().model_dump(mode="json")  # what an interpolation of an unset key reads
    del defaults["policy"]["scheduler"]  # one of several forms: the file's own replaces it, never merges into it
    tree = None
    try:
        dirs: list[Path] = []  # the folders of the files read: the config's, then those it inherits
        own: list[str] = []  # the keys the config file itself writes (the rest of `given` it inherits)
        given = _read(Path(path) if path else BUILTIN_DEFAULT, [], dirs, own)
        overridden: set[str] = set()
        deleted: set[str] = set()  # `~key`: the key and those under it are not written, unless written again after

        def apply(tree: DictConfig, item: str) -> None:
            nonlocal overridden
            key, value = _override(tree, item)
            if item.startswith("~"):
                deleted.add(key)
                overridden = {k for k in overridden if not _within(k, key)}
            else:
                overridden |= {key, *_dotted(value, f"{key}.")}

        # the datasets' settings first, into the file's tree: data.default fills the datasets as they are after them
        # (NeMo RL fills them at run time: a validation set added on the command line takes the default's keys);
        # deletions after the fill (the schema's default, not data.default's, takes a deleted key's place), but for
        # one a later setting of the key undoes, as Hydra's order has it (`~data.x data.x=2`: 2)
        keys = [_override_key(item.lstrip("~").split("=", 1)[0]) for item in overrides]
        later = []
        for i, (item, key) in enumerate(zip(overrides, keys)):
            data, deletion = key.split(".")[0] == "data", item.startswith("~")
            if data and not deletion:
                apply(given, item)
            elif not (data and deletion and any(not overrides[j].startswith("~") and _within(keys[j], key)
                                                for j in range(i + 1, len(overrides)))):
                later.append(item)  # (other keys' settings and deletions apply in their order, after the fill)
        _fill_from_data_default(given)
        tree = OmegaConf.merge(OmegaConf.create(_under(defaults, given)), given)
        for item in later:
            apply(tree, item)
        plain = OmegaConf.to_container(tree, resolve=True)
        in_file = {k for k in _dotted(OmegaConf.to_container(given, resolve=False))
                   if not any(_within(k, d) for d in deleted)}
        written = in_file | overridden
        _sections_are_mappings(plain)
        _own_optimizer(plain, written, mine=overridden | (set(own) if path else set()))
    except OmegaConfBaseException as e:
        if isinstance(tree, DictConfig):  # a feature the config turns on and execrl refuses says more
            refuse_unresolved(OmegaConf.to_container(tree, resolve=False))
        if unset := re.search(r"Environment variable '([^']+)' not found", str(e)):
            key = f" ({e.full_key})" if getattr(e, "full_key", None) else ""
            raise ConfigError(f"the config reads the environment variable {unset[1]}{key} (${{oc.env:{unset[1]}}}), "
                              f"which is not set: set it ({unset[1]}=... execrl train ...), or give the key its value "
                              "on the command line") from None
        raise ConfigError(f"cannot resolve the config: {str(e).splitlines()[0]}") from None
    sources = {**dict.fromkeys(in_file, "inherited"), **dict.fromkeys(set(own) & in_file, "file"),
               **dict.fromkeys(overridden, "override")}
    plain, ignored, mapped = adapt(plain, _known, dirs if path else [], sources)
    cfg = validate(plain)
    cfg._nemo_ignored, cfg._nemo_mapped, cfg._written = ignored, mapped, written
    return cfg


def _sections_are_mappings(plain: dict) -> None:
    """A ConfigError where a section (grpo, policy, ...) is set to a value, not to keys (`grpo=5`; a file's `grpo:`
    whose keys are all commented out is null): NeMo RL's key mapping read it as keys, with a traceback (a hunt's
    find)."""
    for key, field in MasterConfig.model_fields.items():
        value = plain.get(key)
        if key in plain and not isinstance(value, dict) and isinstance(field.annotation, type) and issubclass(
                field.annotation, BaseModel):
            raise ConfigError(f"{key}: a section of keys ({key}.KEY=VALUE, or KEY: VALUE lines under it), got "
                              f"{value!r}" + ("; write its keys under it, or drop the line for the defaults"
                                              if value is None else ""))


def _fill_from_data_default(given: DictConfig) -> None:
    """NeMo RL's data.default: each dataset (data.train, data.validation, or each of their list's) takes the default's
    keys it does not set itself (update_single_dataset_config); the keys every dataset shares (the environment, the
    processor, the prompt files) stay data.default's."""
    data = given.get("data") if isinstance(given, DictConfig) else None
    default = data.get("default") if isinstance(data, DictConfig) else None
    if not isinstance(default, DictConfig):
        return
    own = {k: default[k] for k in default if k not in SHARED}
    if not own:
        return
    for section in ("train", "validation"):
        value = data.get(section)
        for entry in value if isinstance(value, ListConfig) else [value]:
            if isinstance(entry, DictConfig):
                for key, v in own.items():
                    if key not in entry:
                        entry[key] = v
    if data.get("train") is None:  # (no train section: the default's dataset is it)
        data["train"] = dict(own)
    for key in own:
        del default[key]


def _within(key: str, section: str) -> bool:
    """Whether the dotted `key` is `section` or under it."""
    return key == section or key.startswith(section + ".")


def _dotted(tree, prefix: str = ""):
    """The dotted keys a config file (with its defaults chain) writes, sections included."""
    for k, v in tree.items() if isinstance(tree, dict) else ():
        yield f"{prefix}{k}"
        yield from _dotted(v, f"{prefix}{k}.")


def _under(defaults: dict, tree: DictConfig) -> dict:
    """The schema's defaults less the sections the file gives in another shape (a list of datasets
    where the schema has one): the file's replaces them."""
    out = {}
    for key, value in defaults.items():
        given = tree.get(key) if key in tree else None
        if isinstance(value, dict) and isinstance(given, DictConfig):
            out[key] = _under(value, given)
        elif not (isinstance(value, dict) and key in tree and given is not None):
            out[key] = value
    return out


_LEAF = object()  # a plain value in the schema (no keys below it)


def _schema_at(parts: list[str]) -> Any:
    """What the schema holds at a dotted path: a section's model class, `dict` (a free-form dict
    field such as optimizer.kwargs, or a key under one), _LEAF (a plain value), or None (no such
    key)."""
    node: Any = MasterConfig
    for part in parts:
        if node is dict:
            return dict
        if node is _LEAF or node is None:
            return None
        field = node.model_fields.get(part)
        if field is None:
            return None
        kinds = [_bare(k) for k in (field.annotation, *typing.get_args(field.annotation))]
        models = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        free = any(k is dict or typing.get_origin(k) is dict for k in kinds)
        node = models[0] if models else dict if free else _LEAF
    return node


def _bare(kind: Any) -> Any:
    """A type without its Annotated[...] metadata (the members of a tagged union)."""
    return typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Annotated else kind


def _known(key: str) -> bool:
    """Whether the schema has this dotted key (any key under a free-form dict such as
    optimizer.kwargs)."""
    return _schema_at(key.split(".")) is not None


def _find(name: str, near: Path | None) -> Path:
    # the checkout's configs/, and its root (a name such as configs/x.yaml, given from another directory)
    own = [*CONFIG_DIRS, *(d.parent for d in CONFIG_DIRS)]
    for base in ([near] if near else []) + [Path.cwd(), Path.cwd() / "configs", *own, BUILTIN_DEFAULT.parent]:
        if (base / name).is_file():
            if base != near and base in own and (base / name).resolve() != (Path.cwd() / name).resolve() and \
                    says_notes():
                # (e.g. a NeMo RL config's `defaults: grpo_math_1B.yaml` with no NeMo file beside it: say whose)
                print(f"note: {f'`defaults: {name}`' if near is not None else name} read execrl's own {base / name} "
                      f"(no {name} {'next to the including file, ' if near is not None else ''}in ./ or in ./configs/)",
                      file=sys.stderr)
            return base / name
    key = near is None and "." in name and "/" not in name and not name.endswith((".yaml", ".yml"))
    raise ConfigError(f"config file {name!r} not found (looked next to the including file, in ./ and in configs/; "
                      f"{BUILTIN_DEFAULT.name} is the built-in default)" + (
                          f"; a config key is set as one key=value argument, e.g. {name}=VALUE" if key else ""))


def _read(path: Path, chain: list[Path], dirs: list[Path] | None = None, own: list[str] | None = None) -> DictConfig:
    dirs = [] if dirs is None else dirs  # (filled with the folders of the files read; `own` with the keys of the
    # first file's own text, before what it inherits)
    path = path.expanduser()  # ("~/cfg.yaml" quoted, which the shell left as it was)
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
        raise ConfigError(yaml_error(path, e)) from None
    except UnicodeDecodeError:  # (Latin-1's é: the codec's message named no file; its bytes are one read's)
        data = path.read_bytes()
        try:
            data.decode("utf-8")
            at = 0
        except UnicodeDecodeError as e:
            at = e.start
        line = data[:at].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {data[at]:#04x}): save the file as UTF-8") from None
    if not isinstance(tree, DictConfig):
        raise ConfigError(f"{path}: expected a mapping of sections (policy:, grpo:, ...)")
    if not chain and len(tree) == 0:  # (it ran the schema's defaults, not what execrl train with no config runs)
        raise ConfigError(f"{path} is empty: write the sections it sets (policy:, grpo:, data: ...; the keys a file "
                          "leaves out take execrl's defaults), or run execrl train with no config for the built-in "
                          "default")
    if path.resolve().parent not in dirs:
        dirs.append(path.resolve().parent)
    parents = tree.pop("defaults", None) or []
    if own is not None:
        own.extend(_dotted(OmegaConf.to_container(tree, resolve=False)))
    merged = OmegaConf.create()
    for parent in [parents] if isinstance(parents, str) else parents:
        merged = _merge(merged, _read(_find(str(parent), path.parent), [*chain, path.resolve()], dirs), path)
    return _merge(merged, tree, path)


def yaml_error(path: Path, e: Exception) -> str:
    """One line: where the YAML is wrong (line and column, as an editor counts them) and what is
    wrong; a tab in the indentation is named, YAML's most common surprise."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    text = path.read_text(errors="replace").splitlines()
    line = text[mark.line] if mark is not None and mark.line < len(text) else ""
    if "\t" in line[:len(line) - len(line.lstrip())] or ("\t" in what if isinstance(what, str) else False):
        return (f"{where}: not valid YAML: a tab in the indentation (YAML indents with spaces only): replace it by "
                "spaces")
    shown = f": {line.strip()[:80]!r}" if line.strip() else ""
    opened = getattr(e, "context_mark", None)
    if opened is not None and mark is not None and opened.line != mark.line:
        shown += f" ({e.context} at line {opened.line + 1})"
    return f"{where}: not valid YAML ({what}){shown}"


def _merge(base: DictConfig, tree: DictConfig, path: Path) -> DictConfig:
    """`tree` over `base`, as NeMo RL merges a config over its defaults: a top-level section marked
    `_override_: true` replaces the inherited one instead of merging into it. A key given in another shape than the
    inherited one (NeMo RL's list of schedulers over execrl's {warmup_steps: N}) replaces it, where NeMo RL's merge
    refuses the file."""
    for key in list(tree):
        section = tree.get(key)
        if isinstance(section, DictConfig) and section.pop("_override_", False) and key in base:
            base.pop(key)
    _reshaped(base, tree)
    try:
        return OmegaConf.merge(base, tree)
    except (OmegaConfBaseException, TypeError) as e:
        raise ConfigError(f"{path}: cannot merge it over its defaults ({str(e).splitlines()[0]}): a section given in "
                          "another shape than the inherited one needs `_override_: true` in its top-level section"
                          ) from None


def _reshaped(base: DictConfig, tree: DictConfig) -> None:
    """Drops from `base` each key (at any depth) that `tree` gives as a list where `base` has a mapping, or the
    reverse: the merge then takes `tree`'s."""
    for key in list(tree):
        if key not in base:
            continue
        mine, theirs = tree._get_node(key), base._get_node(key)
        if isinstance(mine, DictConfig) and isinstance(theirs, DictConfig):
            _reshaped(theirs, mine)
        elif isinstance(mine, (DictConfig, ListConfig)) and isinstance(theirs, (DictConfig, ListConfig)) and \
                type(mine) is not type(theirs):
            base.pop(key)


def _override_key(key: str) -> str:
    """An override's dotted key: Hydra's ++key=value adds or overrides; x[1] is x.1."""
    return re.sub(r"\[(\d+)\]", r".\1", key.strip().lstrip("+"))


def _override(tree: DictConfig, item: str) -> tuple[str, Any]:
    """Apply one `key=value` override to `tree` (Hydra's `~key`: delete the key); (the dotted key, the value as
    read)."""
    if item.startswith("~"):
        return _delete(tree, item)
    if "=" not in item and item.endswith((".yaml", ".yml")):
        raise ConfigError(f"{item}: a second config file; a run reads one (it may inherit another: `defaults: "
                          f"{item}` in it), and key=value arguments after it")
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not key=value (e.g. {item if '.' in item else 'grpo.max_num_steps'}="
                          "VALUE, as one argument), nor ~key")
    key, raw = item.split("=", 1)
    key = _override_key(key)
    node = tree
    for part in key.split(".")[:-1]:
        if isinstance(node, ListConfig):  # an entry of a list (e.g. data.train.1.dataset_name)
            node = node[int(part)] if part.isdigit() and int(part) < len(node) else None
            if node is None:
                raise ConfigError(f"override {key}: {part} is not an index of that list")
        else:
            node = node.get(part) if isinstance(node, DictConfig) else None
        if node is not None and not isinstance(node, (DictConfig, ListConfig)):
            raise ConfigError(f"override {key}: {part} is not a section")
        if node is None:
            break
    value = _value(key, raw)
    if (glued := _glued_keys(value)) is not None:
        raise ConfigError(f"override {key}={raw}: {glued!r} reads as one key with no value; put a space after the "
                          f"colon ({{{glued.replace(':', ': ', 1)}}})")
    # a mapping merges into the section it names, as Hydra's overrides (NeMo RL's) do; anything else replaces
    merge = isinstance(value, dict) and isinstance(OmegaConf.select(tree, key, throw_on_missing=False), DictConfig)
    OmegaConf.update(tree, key, value, merge=merge, force_add=True)
    return key, value


def _value(key: str, raw: str) -> Any:
    """An override's value, read as YAML (None: empty); a ConfigError naming the fix where it is not YAML."""
    try:
        return yaml.load(raw, _ValueLoader) if raw.strip() else None
    except yaml.YAMLError as e:
        where = getattr(e, "problem", None) or "not valid YAML"
        raise ConfigError(f"override {key}={raw}: the value is read as YAML and is not valid ({where}); close its "
                          "brackets and braces, or quote it to pass it as text (e.g. 'key=\"[1\"')") from None


def _delete(tree: DictConfig, item: str) -> tuple[str, None]:
    """Hydra's `~key` (or `~key=value`, only where the key holds that value): the key goes, and the schema's default
    takes its place (e.g. `~policy.scheduler`: a constant learning rate, as NeMo RL's with no scheduler)."""
    key, _, raw = item[1:].partition("=")
    key = _override_key(key)
    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(tree, parent, throw_on_missing=False) if parent else tree
    if not isinstance(node, DictConfig) or last not in node:
        raise ConfigError(f"override {item}: there is no key {key} to delete")
    if raw and _value(key, raw) != OmegaConf.to_container(node, resolve=True)[last]:
        raise ConfigError(f"override {item}: {key} does not hold {raw}, so it is not deleted (as Hydra)")
    node.pop(last)
    return key, None


def _own_optimizer(plain: dict, written: set[str], mine: set[str]) -> None:
    """An optimizer other than the schema's AdamW gets only the kwargs the config wrote (AdamW's defaults, betas
    and weight decay, would reach it: L2 decay for Adam, a TypeError for SGD), as NeMo RL passes its kwargs; of those
    the built-in default's file sets (where it is the config or what it inherits, and `mine`, the keys the user's own
    file or command line write, do not set them), only lr and weight_decay, which every torch optimizer reads alike:
    `execrl train policy.optimizer.name=torch.optim.SGD` was refused for AdamW's betas, which the user never wrote,
    and Adafactor for an eps it reads as a pair (a hunt's and a review's finds)."""
    opt = (plain.get("policy") or {}).get("optimizer")
    if not isinstance(opt, dict) or not isinstance(opt.get("kwargs"), dict):
        return
    if str(opt.get("name", OptimizerConfig().name)).lower() in ("adamw", "torch.optim.adamw"):
        return
    builtin = (OmegaConf.to_container(OmegaConf.load(BUILTIN_DEFAULT)).get("policy", {}).get("optimizer", {})
               .get("kwargs", {}))

    def kept(key: str, value) -> bool:
        where = f"policy.optimizer.kwargs.{key}"
        from_builtin = where not in mine and key in builtin and builtin[key] == value
        return where in written and (not from_builtin or key in ("lr", "weight_decay"))

    opt["kwargs"] = {k: v for k, v in opt["kwargs"].items() if kept(k, v)}


class _ValueLoader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, but for floats without a dot (1e-7), which OmegaConf's loader (the config
    files') and Hydra read as floats and YAML 1.1 as strings, booleans (only true and false, any case, as Hydra: on,
    off, yes, no are text) and dates (text), and digits with a leading zero, a string as Hydra
    reads them (YAML 1.1 read 010 as an octal 8; an int key then reads "010" as 10, a name keeps "0815"; 0x1f and
    0o17 stay hexadecimal and octal)."""


INT, BOOL, TIMESTAMP = "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp"
# (Hydra's grammar: true and false are the booleans, on/off/yes/no and dates are text: a run named 2026-05-01)
_ValueLoader.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in (INT, BOOL, TIMESTAMP)]
                                        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_ValueLoader.add_implicit_resolver(BOOL, re.compile(r"^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"), list("tTfF"))
_ValueLoader.add_implicit_resolver(INT, re.compile(  # (a leading zero: a string, which an int key reads as decimal)
    r"^[-+]?(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|0|[1-9](?:_?[0-9])*)$"),
    list("-+0123456789"))
_ValueLoader.add_constructor(INT, lambda loader, node: int(loader.construct_scalar(node).replace("_", ""), 0))
_ValueLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
    r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def _glued_keys(value) -> str | None:
    """A key of a mapping, at any depth, written `k:v` without the space YAML needs (Hydra's `{k:v}`): it reads as
    the key "k:v" with no value."""
    if isinstance(value, dict):
        for k, v in value.items():
            if v is None and isinstance(k, str) and ":" in k and not k.startswith(("http:", "https:")):
                return k
            if (inner := _glued_keys(v)) is not None:
                return inner
    elif isinstance(value, list):
        return next((g for g in map(_glued_keys, value) if g is not None), None)
    return None


def validate(tree: dict) -> MasterConfig:
    try:
        return MasterConfig.model_validate(tree)
    except ValidationError as e:
        errors = e.errors()
        ids = {_id(err) for err in errors}
        copies = {_twin(err): err for err in errors if _twin(err) in ids}  # a sampling key's error: its val_ copy's
        lines = []
        for err in errors:
            if _twin(err) in ids:  # (said with its sampling key's)
                continue
            copy = copies.get(_id(err))
            lines.append(_explain(err) + (f" (and {_explain(copy).split(':')[0]}: the same)" if copy else ""))
        raise ConfigError("\n".join(lines)) from None


def _id(err: dict) -> tuple:
    return err["loc"], err["msg"], repr(err.get("input"))


def _twin(err: dict) -> tuple | None:
    """For a validation setting's error, the same error of the sampling setting it copies (val_top_k, copied from
    top_k by NeMo RL's `${.top_k}` or by the mapping of an older config of its): the two are said in one line."""
    if not err["loc"] or err["type"] == "extra_forbidden":  # (two unknown keys are two mistakes)
        return None
    *section, last = err["loc"]
    return ((*section, last[4:]), err["msg"], repr(err.get("input"))) if str(last).startswith("val_") else None


def _explain(err: dict) -> str:
    loc = [str(x) for i, x in enumerate(err["loc"]) if not i or x not in TAGS]  # (a top-level key is no tag: warmup)
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
