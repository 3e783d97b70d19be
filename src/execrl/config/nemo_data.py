"""NeMo RL's data section, in each of its layouts, as execrl's:

  flat (2025)      data.dataset_name, data.prompt_file, ...: one dataset's keys directly under data
  train/default    data.train and data.validation (one dataset, or a list), each filled from data.default

A dataset entry's keys are execrl's DatasetConfig keys, except data_path (-> path), seed (the split
seed: must be grpo.seed, which seeds it here), download_dir (the hub cache is used). prompt_file,
system_prompt_file, env_name and processor may differ per dataset in NeMo RL; execrl poses and
grades every dataset alike, so they must agree (the entry's own value, else data.default's), and
become data.default's, read as prompt.template etc."""

from __future__ import annotations

from execrl.config.errors import ConfigError

SHARED = ("prompt_file", "system_prompt_file", "env_name", "processor")  # one value for every dataset here
FLAT = {"dataset_name": "dataset_name", "train_data_path": "path", "train_split": "split", "input_key": "input_key",
        "output_key": "output_key"}  # NeMo RL's flat data keys -> the training entry's
FLAT_VALIDATION = {"val_data_path": "path", "val_split": "split"}


def adapt_data(data: dict, grpo_seed) -> tuple[dict[str, str], dict[str, str]]:
    """Rewrites `data` (a resolved tree, schema defaults merged under it) in execrl's layout, in
    place. Returns ({ignored key: why}, {NeMo key: what it became})."""
    ignored: dict[str, str] = {}
    mapped: dict[str, str] = {}
    default = data.setdefault("default", {})
    if any(k in data for k in (*FLAT, *FLAT_VALIDATION)):
        _unflatten(data, default, mapped)
    entries = []
    for section in ("train", "validation"):
        value = data.get(section)
        items = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
        for i, entry in enumerate(items):
            where = f"data.{section}" + (f"[{i}]" if isinstance(value, list) else "")
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: expected a dataset's keys (dataset_name: ..., ...), got {entry!r}")
            _entry(entry, where, grpo_seed, ignored, mapped)
            entries.append((where, entry))
    for key in SHARED:
        values = {where: entry.pop(key) if key in entry else default.get(key) for where, entry in entries}
        if key in ("env_name", "processor"):  # execrl's "auto" (its default) fits any
            values = {where: v for where, v in values.items() if v != "auto"}
        if len(set(map(repr, values.values()))) > 1:
            shown = "; ".join(f"{where}: {v!r}" for where, v in values.items())
            raise ConfigError(f"the datasets have different {key}s ({shown}): execrl poses and grades every dataset "
                              f"alike; give them one {key} (data.default.{key})")
        if values:
            default[key] = next(iter(values.values()))
    # (math_hf_data_processor, NeMo RL's default, adds the system prompt too since its commit c3a2b61 of 2026-04-07)
    return ignored, mapped


def _unflatten(data: dict, default: dict, mapped: dict[str, str]) -> None:
    train = data["train"] if isinstance(data.get("train"), dict) else {}
    data["train"] = train
    for flat, key in FLAT.items():
        if flat in data:
            train[key] = data.pop(flat)
            mapped[f"data.{flat}"] = f"data.train.{key}"
    if any(k in data for k in FLAT_VALIDATION):
        validation = {"dataset_name": train.get("dataset_name", "ResponseDataset"),
                      **{k: train[k] for k in ("input_key", "output_key") if k in train}}
        for flat, key in FLAT_VALIDATION.items():
            if flat in data:
                validation[key] = data.pop(flat)
                mapped[f"data.{flat}"] = f"data.validation.{key}"
        if validation.get("path") is not None:
            data["validation"] = validation
    for key in SHARED:
        if key in data:
            default[key] = data.pop(key)


def _entry(entry: dict, where: str, grpo_seed, ignored: dict[str, str], mapped: dict[str, str]) -> None:
    if "data_path" in entry:
        entry["path"] = entry.pop("data_path")
        mapped[f"{where}.data_path"] = f"{where}.path"
    if "seed" in entry:  # NeMo RL's train/validation split seed
        seed = entry.pop("seed")
        if seed != grpo_seed:
            raise ConfigError(f"{where}.seed={seed} differs from grpo.seed={grpo_seed}: execrl seeds the split with "
                              f"grpo.seed; set {where}.seed=${{grpo.seed}} (NeMo RL's default)")
        ignored[f"{where}.seed"] = "the split is seeded by grpo.seed, the same value"
    if "download_dir" in entry:
        entry.pop("download_dir")
        ignored[f"{where}.download_dir"] = "datasets are cached where the hub library caches them"
    info = _dataset(entry.get("dataset_name"))
    if info is not None and not info.holds_out and entry.get("split_validation_size"):
        # (kept as written, as config.yaml and a checkpoint's config hold it; load_data does not read it)
        ignored[f"{where}.split_validation_size"] = (
            f"NeMo RL's {info.name} does not read it: every row trains, and validation is data.validation's sets; "
            "a share of a file of your own is held out as dataset_name: jsonl")
    if entry.pop("subset", None) is not None:
        raise ConfigError(f"{where}.subset (a hub dataset's configuration) is not read by execrl's loaders: set it "
                          "to null, with a local file in data_path")


def _dataset(name):
    """The registered dataset `name` names (None: none; check_datasets names the fix)."""
    from execrl.tasks.registry import DATASETS, DatasetError, dataset_key

    try:
        return DATASETS.get(dataset_key(name)) if isinstance(name, str) else None
    except DatasetError:
        return None
