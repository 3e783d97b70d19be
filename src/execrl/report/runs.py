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

INTERRUPTED = "run/interrupted"  # the metric a run stopped by a signal logs at its last step


@dataclass
class RunData:
    name: str
    path: Path
    config: dict
    metrics: list[dict]  # metrics.jsonl's rows, in order (a step may have a train row and an eval row)
    rollouts: dict[int, list[dict]] = field(default_factory=dict)  # step -> rollouts/step_N.jsonl's rows
    rewards_seen: tuple[float, float] | None = None  # (lowest, highest) reward of every row of those steps' files
    notes: list[str] = field(default_factory=list)  # what of its files could not be read (lines skipped)


MAX_ROLLOUT_STEPS = 20  # logged steps whose rollouts the report holds: the first and the latest ones
MAX_ROWS_PER_STEP = 256  # rollouts per logged step in the browser (the first ones: whole groups)
MAX_TEXT = 20_000  # characters of one prompt, completion or message in the report (the rest cut, with a marker)


STEP_FILE = re.compile(r"step_(\d+)\.jsonl")


def load_run(path: str | Path, name: str | None = None) -> RunData:
    """A run directory (logger.log_dir). Raises FileNotFoundError naming what is missing, ValueError for a config.yaml
    that is not the mapping a run writes; a line that is not JSON (a run killed mid-write) or not a row of the
    file's kind (a metrics row without an integer step, a rollout that is not an object) is skipped and counted in
    the run's notes, and a rollout's fields are given the types the page reads (a hand-edited row blanked it).
    Rollouts: the first MAX_ROWS_PER_STEP rows of MAX_ROLLOUT_STEPS logged steps (the first, then the latest), their
    long texts cut to MAX_TEXT characters, so that a long run's page stays small."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory (pass logger.log_dir of a run)")
    if not (path / "metrics.jsonl").is_file():
        if (path / "summary.json").is_file() and (path / "results.jsonl").is_file():
            raise FileNotFoundError(f"{path} is an execrl eval's output: its figures are in {path / 'summary.json'}, "
                                    "each problem's samples in results.jsonl; execrl report draws training runs "
                                    "(logger.log_dir)")
        raise FileNotFoundError(f"{path} is not a run directory: it has no metrics.jsonl (pass logger.log_dir of a run)")
    files = sorted((f for f in (path / "rollouts").glob("step_*.jsonl") if STEP_FILE.fullmatch(f.name) and f.is_file()),
                   key=lambda f: int(f.stem.split("_")[-1]))
    files = files[:1] + files[1:][-(MAX_ROLLOUT_STEPS - 1):]
    rollouts, seen, notes = {}, [], []
    for f in files:
        rows, rewards, unread = _rows(f, MAX_ROWS_PER_STEP, rewards=True)
        kept = rollouts[int(f.stem.split("_")[-1])] = [_cut(r) for r in map(_rollout, rows) if r is not None]
        seen += rewards
        _note(notes, f, unread + len(rows) - len(kept))
    rows, _, unread = _rows(path / "metrics.jsonl")
    metrics = [m for m in map(_metric, rows) if m is not None]
    _note(notes, path / "metrics.jsonl", unread + len(rows) - len(metrics))
    if not metrics:
        notes.append("metrics.jsonl has no step yet: the run has logged none")
    config = _config(path / "config.yaml")
    notes += _earlier_configs(path, config)
    return RunData(name or path.resolve().name, path, config, metrics, rollouts,
                   (min(seen), max(seen)) if seen else None, notes)


def _earlier_configs(path: Path, config: dict) -> list[str]:
    """What the configs of a resumed run's earlier steps (config.to_step_N.yaml) set otherwise than config.yaml
    (the page's config is the last one's)."""
    said, now = [], dict(dotted_leaves(config))
    for f in sorted(path.glob("config.to_step_*.yaml")):
        try:
            before = dict(dotted_leaves(_config(f)))
        except ValueError:
            continue
        changed = [f"{k} {before.get(k)} -> {now.get(k)}" for k in sorted(set(before) | set(now))
                   if before.get(k) != now.get(k)]
        if changed:
            step = int(f.stem.rsplit("_", 1)[-1])
            said.append(f"steps up to {step} ran {f.name}: " + "; ".join(changed[:6])
                        + (f" and {len(changed) - 6} more" if len(changed) > 6 else ""))
    return said


def _note(notes: list[str], file: Path, skipped: int) -> None:
    if skipped:
        notes.append(f"{file.parent.name}/{file.name}: {skipped} unreadable line{'s' * (skipped > 1)} skipped")


def _config(file: Path) -> dict:
    if not file.is_file():
        return {}
    try:
        config = yaml.load(file.read_text(encoding="utf-8", errors="replace"), Loader=_NoAliases)
    except yaml.YAMLError as e:
        raise ValueError(f"{file} is not YAML ({str(e).splitlines()[0]}): restore the run's config.yaml, or move it "
                         "away (the report then shows no config)") from None
    if config is not None and not isinstance(config, dict):
        raise ValueError(f"{file} holds a {type(config).__name__}, not the mapping of keys a run writes: restore the "
                         "run's config.yaml, or move it away (the report then shows no config)")
    return config or {}


class _NoAliases(yaml.SafeLoader):
    """YAML without aliases (*name): a run writes none, and ten nested ones of ten make a page of gigabytes (a
    recursive one, endless recursion)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("it holds an alias (*name), which no config a run writes holds")
        return super().compose_node(parent, index)


# a date (2024-01-01, in a hand-edited config) stays its text: a datetime is no JSON the page can hold
_NoAliases.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in rules if tag != "tag:yaml.org,2002:timestamp"]
                                      for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def section(config: dict, name: str) -> dict:
    """config[name] where it is a mapping (a hand-edited config may hold anything there), else {}."""
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _number(v) -> bool:
    """A number the page can draw: an int or float (not a bool) that a float holds (10**400 does not)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        float(v)
    except OverflowError:
        return False
    return True


def _metric(row) -> dict | None:
    """A metrics row: an integer step and its numeric values (others dropped); None where it has no step."""
    if not isinstance(row, dict) or type(row.get("step")) is not int:
        return None
    return {k: v for k, v in row.items() if k == "step" or _number(v)}


def _rollout(row) -> dict | None:
    """The fields the page reads of a rollout row, each of the type it reads (others are left out: a field nested
    hundreds deep ended the report in a RecursionError); None where the row is not an object."""
    if not isinstance(row, dict):
        return None
    text = {k: row[k] if isinstance(row.get(k), str) else "" if row.get(k) is None else _json(row[k])
            for k in ("problem", "verdict", "prompt", "completion")}
    messages = row.get("messages") if isinstance(row.get("messages"), list) else []
    return {**text,
            "messages": [{"role": str(m.get("role")), "content": m["content"] if isinstance(m.get("content"), str)
                          else _json(m.get("content"))} if isinstance(m, dict)
                         else {"role": "?", "content": _json(m)} for m in messages],
            "tests": [str(t) for t in row["tests"]] if isinstance(row.get("tests"), list) else [],
            "parts": {str(k): v for k, v in row["parts"].items() if _number(v)} if isinstance(row.get("parts"), dict)
            else {},
            "reward": row.get("reward") if _number(row.get("reward")) else None,
            "code": row.get("code") if isinstance(row.get("code"), str) else None,
            "turns": row.get("turns") if type(row.get("turns")) is int else 1,
            "truncated": row.get("truncated") is True,
            **({"cut_by": row["cut_by"]} if row.get("cut_by") in ("max_new_tokens", "context", "answer") else {}),
            **({"trained": False} if row.get("trained") is False else {}),  # (not trained on: dropped, or the frozen
            **({"seat": row["seat"]} if type(row.get("seat")) is int else {})}  # opponent's seat)


def _json(value) -> str:
    try:
        return json.dumps(value)
    except (RecursionError, ValueError, TypeError):  # (nested ~1,000 deep; an integer of over 4,300 digits)
        return f"(a {type(value).__name__} the page cannot show)"


def _cut(row: dict) -> dict:
    def cut(text):
        return text if not isinstance(text, str) or len(text) <= MAX_TEXT else \
            f"{text[:MAX_TEXT]}\n... [{len(text) - MAX_TEXT} more characters in the run's rollouts file]"
    out = {k: cut(v) for k, v in row.items()}
    out["messages"] = [{**m, "content": cut(m["content"])} for m in row["messages"]]
    return out


REWARD = re.compile(r'(?:^\{|, )"reward": (-?[0-9][0-9.eE+-]*)[,}]')  # a row's top-level reward, as json.dumps
# writes it (a quote inside a string is \", so no text of the row can hold it)


def _rows(path: Path, most: int | None = None, rewards: bool = False) -> tuple[list, list[float], int]:
    """A JSONL file's rows (its first `most`), the numeric reward of every row where `rewards` (the rows past `most`
    read for it alone, not parsed), and how many of the lines read were not JSON (skipped)."""
    rows, seen, unread = [], [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in _lines(f):
            if most is not None and len(rows) >= most:
                if not rewards:
                    break
                m = REWARD.search(line)
                reward = _float(m.group(1)) if m else None
                if reward is not None:
                    seen.append(reward)
                continue
            try:
                rows.append(json.loads(line))
            except (ValueError, RecursionError):  # not JSON, nested past Python's stack, an int of 5,000 digits
                unread += bool(line.strip())
                continue
            r = rows[-1].get("reward") if isinstance(rows[-1], dict) else None
            if rewards and _number(r) and math.isfinite(r):
                seen.append(float(r))
    return rows, seen, unread


MAX_LINE = 1 << 26  # characters of one line read (a longer one is skipped, read in parts: never held whole)


def _lines(f):
    """A text file's lines, each over MAX_LINE characters given as "" (skipped, as a line that is not JSON)."""
    while line := f.readline(MAX_LINE):
        if len(line) == MAX_LINE and not line.endswith("\n"):
            while (part := f.readline(MAX_LINE)) and not part.endswith("\n"):
                pass
            line = "-"  # (not JSON: counted)
        yield line


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:  # ("1.2.3": a hand-edited row)
        return None
    return value if math.isfinite(value) else None


def config_differences(runs: list[RunData]) -> list[tuple[str, list]]:
    """(dotted key, each run's value) for every config key whose values differ between the runs
    (logging and checkpoint paths left out: every run has its own)."""
    flat = [dict(dotted_leaves(r.config)) for r in runs]
    keys = sorted(set().union(*flat)) if flat else []
    skip = ("logger.log_dir", "checkpointing.checkpoint_dir", "logger.wandb.name")
    return [(k, [f.get(k) for f in flat]) for k in keys
            if k not in skip and len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]


def unique_names(paths: list[Path]) -> list[str]:
    """Each run's name: its directory's, with as many of its parents' as tell it from the other runs' (two runs'
    runs/default under alice/ and bob/: alice/runs/default), and (2), (3) where they are one directory; the page keys
    each run's curves and rollouts by it (one runs/default over the other: the second's rollouts under both)."""
    parts = [p.resolve().parts for p in paths]
    depth = [1] * len(paths)
    while True:
        names = ["/".join(q[-d:]) for q, d in zip(parts, depth)]
        longer = [i for i, n in enumerate(names) if names.count(n) > 1 and depth[i] < len(parts[i]) - 1]
        if not longer:
            break
        for i in longer:
            depth[i] += 1
    return [f"{n} ({k + 1})" if (k := names[:i].count(n)) else n for i, n in enumerate(names)]


def _count(n) -> str:
    return f"{n:g}" if isinstance(n, (int, float)) else str(n)  # (logged as a float: 8.0 problems)


def validation_sets_differ(first: dict, last: dict) -> str:
    """Where an eval curve's first and last rows ran on different validation sets or sampled them differently (a
    resume that changed grpo.max_val_samples or a policy.generation.val_* setting), what to say beside the curve;
    else "". (Rows written before the settings were recorded have none: not compared.)"""
    a, b = first.get("eval/num_problems"), last.get("eval/num_problems")
    if a != b:
        return f"on {_count(a)} and {_count(b)} problems: not one validation set"
    if first.get("eval/problem_set", -1) != last.get("eval/problem_set", -1) and "eval/problem_set" in first and \
            "eval/problem_set" in last:
        return f"on two sets of {_count(a)} problems (other problems, or in another order): not one validation set"
    changed = [f"{key[5:]} {first[key]:g} and {last[key]:g}" for key in ("eval/temperature", "eval/top_p",
                                                                        "eval/top_k", "eval/max_new_tokens")
               if key in first and key in last and first[key] != last[key]]
    return f"sampled at {', '.join(changed)}: not one validation setting" if changed else ""
