"""What a run directory holds, read for the report: its resolved config, its metrics by step, its
rollouts."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from execrl.config.tree import dotted_leaves


@dataclass
class RunData:
    name: str
    path: Path
    config: dict
    metrics: list[dict]  # metrics.jsonl's rows, in order (a step may have a train row and an eval row)
    rollouts: dict[int, list[dict]] = field(default_factory=dict)  # step -> rollouts/step_N.jsonl's rows
    rewards_seen: tuple[float, float] | None = None  # (lowest, highest) reward of every row of those steps' files


MAX_ROLLOUT_STEPS = 20  # logged steps whose rollouts the report holds: the first and the latest ones
MAX_ROWS_PER_STEP = 256  # rollouts per logged step in the browser (the first ones: whole groups)
MAX_TEXT = 20_000  # characters of one prompt, completion or message in the report (the rest cut, with a marker)


def load_run(path: str | Path, name: str | None = None) -> RunData:
    """A run directory (logger.log_dir). Raises FileNotFoundError naming what is missing; a line
    that is not JSON (a run killed mid-write) is skipped. Rollouts: the first MAX_ROWS_PER_STEP rows of
    MAX_ROLLOUT_STEPS logged steps (the first, then the latest), their long texts cut to MAX_TEXT
    characters, so that a long run's page stays small."""
    path = Path(path)
    if not (path / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"{path} is not a run directory: it has no metrics.jsonl (pass logger.log_dir of a run)")
    config = yaml.safe_load((path / "config.yaml").read_text()) if (path / "config.yaml").is_file() else {}
    files = sorted((path / "rollouts").glob("step_*.jsonl"), key=lambda f: int(f.stem.split("_")[-1]))
    files = files[:1] + files[1:][-(MAX_ROLLOUT_STEPS - 1):]
    rollouts, seen = {}, []
    for f in files:
        rows, rewards = _rows(f, MAX_ROWS_PER_STEP, rewards=True)
        rollouts[int(f.stem.split("_")[-1])] = [_cut(r) for r in rows]
        seen += rewards
    return RunData(name or path.resolve().name, path, config or {}, _rows(path / "metrics.jsonl"), rollouts,
                   (min(seen), max(seen)) if seen else None)


def _cut(row: dict) -> dict:
    def cut(text):
        return text if not isinstance(text, str) or len(text) <= MAX_TEXT else \
            f"{text[:MAX_TEXT]}\n... [{len(text) - MAX_TEXT} more characters in the run's rollouts file]"
    out = {k: cut(v) for k, v in row.items()}
    if isinstance(row.get("messages"), list):
        out["messages"] = [{**m, "content": cut(m.get("content"))} if isinstance(m, dict) else m for m in row["messages"]]
    return out


REWARD = re.compile(r'(?:^\{|, )"reward": (-?[0-9][0-9.eE+-]*)[,}]')  # a row's top-level reward, as json.dumps
# writes it (a quote inside a string is \", so no text of the row can hold it)


def _rows(path: Path, most: int | None = None, rewards: bool = False):
    """A JSONL file's rows (its first `most`), lines that are not JSON skipped; with `rewards`, (rows, the numeric
    reward of every row, the rows past `most` read for it alone, not parsed)."""
    rows, seen = [], []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if most is not None and len(rows) >= most:
                if not rewards:
                    break
                m = REWARD.search(line)
                if m:
                    seen.append(float(m.group(1)))
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
            r = rows[-1].get("reward") if isinstance(rows[-1], dict) else None
            if isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r):
                seen.append(float(r))
    return (rows, seen) if rewards else rows


def config_differences(runs: list[RunData]) -> list[tuple[str, list]]:
    """(dotted key, each run's value) for every config key whose values differ between the runs
    (logging and checkpoint paths left out: every run has its own)."""
    flat = [dict(dotted_leaves(r.config)) for r in runs]
    keys = sorted(set().union(*flat)) if flat else []
    skip = ("logger.log_dir", "checkpointing.checkpoint_dir", "logger.wandb.name")
    return [(k, [f.get(k) for f in flat]) for k in keys
            if k not in skip and len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]


def unique_names(paths: list[Path]) -> list[str]:
    """Each run's name: its directory's, with its parent's where two runs share one."""
    names = [p.resolve().name for p in paths]
    return [f"{p.resolve().parent.name}/{n}" if names.count(n) > 1 else n for p, n in zip(paths, names)]


def validation_sets_differ(first: dict, last: dict) -> str:
    """Where an eval curve's first and last rows ran on different validation sets (a resume that changed
    grpo.max_val_samples), what to say beside the curve; else ""."""
    a, b = first.get("eval/num_problems"), last.get("eval/num_problems")
    return "" if a == b else f"on {a} and {b} problems: not one validation set"
