"""The page: plotly.js (from the plotly package, inlined: the file opens offline), the figures and
rollouts as JSON, and a small script of ours (page.js) that draws the charts and runs the rollout
browser."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

from execrl.report.charts import figures
from execrl.report.runs import (
    INTERRUPTED,
    MAX_ROWS_PER_STEP,
    RunData,
    config_differences,
    load_run,
    section,
    unique_names,
    validation_sets_differ,
)
from execrl.writable import write_whole

HERE = Path(__file__).parent
ROLLOUT_BYTES = 12 << 20  # the rollout browser's data at most: fewer rows per step where a run's are long (4K-token
# answers made a 164 MiB page that took minutes to open)


def write_report(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Write the report of these run directories to `out` (one self-contained HTML file); returns
    its path."""
    paths = [Path(d) for d in run_dirs]
    runs = [load_run(p, n) for p, n in zip(paths, unique_names(paths))]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_whole(out, render(runs), encoding="utf-8", errors="replace")  # (a reader never sees half a page; a lone
    return out  # surrogate: "?")


def render(runs: list[RunData]) -> str:
    from plotly.offline import get_plotlyjs

    data = {"runs": [r.name for r in runs], "charts": figures(runs),
            "rollouts": shown_rollouts(runs),
            "no_rollouts": {r.name: no_rollouts_hint(r) for r in runs if not r.rollouts},
            "limits": {r.name: length_limits(r) for r in runs}}
    differences = config_differences(runs) if len(runs) > 1 else []
    title = "execrl report: " + ", ".join(r.name for r in runs)
    return (HERE / "page.html").read_text().format(
        title=esc(title), css=(HERE / "page.css").read_text(), summary=_summary(runs, differences),
        plotly=get_plotlyjs(), data=_script_json(data), js=(HERE / "page.js").read_text())


def _summary(runs: list[RunData], differences: list[tuple[str, list]]) -> str:
    """The runs' headline numbers, and their config differences (several runs)."""
    rows = []
    for r in runs:
        evals = [m for m in r.metrics if m.get("eval/pass@1") is not None]
        train = [m for m in r.metrics if m.get("train/reward_mean") is not None]
        first, last = (evals[0]["eval/pass@1"], evals[-1]["eval/pass@1"]) if evals else (None, None)
        other = validation_sets_differ(evals[0], evals[-1]) if evals else ""
        other = f" ({other})" if other else ""
        end = max((m.get("step", 0) for m in r.metrics), default=0)  # (a run stopped by a signal says so; one
        stopped = any(m.get(INTERRUPTED) and m.get("step", 0) >= end for m in r.metrics)  # resumed since: not)
        steps = f"{len(train)} (interrupted)" if stopped else len(train)
        rows.append("<tr>" + "".join(f"<td>{esc(str(x))}</td>" for x in (
            r.name, section(r.config, "policy").get("model_name", "?"), setup_of(r.config), steps,
            "-" if first is None else f"{first:.3f} -> {last:.3f}{other}",
            train_reward([m["train/reward_mean"] for m in train]))) + "</tr>")
    table = ("<table class='summary'><tr><th>run</th><th>model</th><th>set-up</th><th>steps</th><th>eval pass@1 (first -> last)</th>"
             "<th>train reward, mean of the first k steps -> last k (k = min(5, steps / 2))</th></tr>"
             + "".join(rows) + "</table>")
    if differences:
        head = "".join(f"<th>{esc(r.name)}</th>" for r in runs)
        body = "".join("<tr><td><code>" + esc(k[:MAX_CELL]) + "</code></td>" + "".join(
            f"<td>{esc(_cell(v))}</td>" for v in values) + "</tr>" for k, values in differences)
        table += f"<h3>Config differences</h3><table class='diff'><tr><th>key</th>{head}</tr>{body}</table>"
    several = len(runs) > 1
    return table + "".join(f"<p class='note'>{esc((r.name + ': ') * several + note)}</p>"
                           for r in runs for note in r.notes)


def setup_of(config: dict) -> str:
    """What kind of run it was, from its config.yaml (a single run's page said only its model, a hunt's find): full
    fine-tuning or LoRA, sync or async, single- or multi-turn, guided decoding, a reward model."""
    policy, grpo, env = section(config, "policy"), section(config, "grpo"), section(config, "env")
    lora, turns, multi = section(policy, "lora"), grpo.get("max_rollout_turns", 1), section(env, "multi_turn")
    parts = [f"LoRA r={lora.get('dim', '?')}" if lora.get("enabled") else "full fine-tuning"]
    if (run_async := section(grpo, "async_grpo")).get("enabled"):
        age = run_async.get("max_trajectory_age_steps", "?")
        parts.append(f"async (rollouts up to {age} step{'' if age == 1 else 's'} old)")
    kind = multi.get("kind", "single_turn")
    if kind != "single_turn":
        parts.append(f"{kind}" + (f", up to {turns} turns" if isinstance(turns, int) and turns > 1 else ""))
    generation = section(policy, "generation")
    guided = section(generation, "guided_decoding")
    if generation.get("guided_decoding_per_turn") or any(guided.get(k) for k in ("regex", "json_schema", "grammar")):
        parts.append("guided decoding")
    if section(env, "reward_model").get("enabled"):
        parts.append(f"reward model {section(env, 'reward_model').get('model_name', '?')}")
    return ", ".join(parts)


BIDI = re.compile("[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")  # direction controls
MAX_CELL = 300  # characters of a config value in the differences table


def esc(text: str) -> str:
    """Text as written, in HTML: markup escaped, and a direction control (U+202E turns what follows it around on
    screen: a model name could read as a score) shown as its code point, as page.js's esc shows it."""
    return BIDI.sub(lambda m: f"&lt;U+{ord(m.group()):X}&gt;", html.escape(text))


def _cell(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= MAX_CELL else f"{text[:MAX_CELL]} ... ({len(text) - MAX_CELL:,} more characters)"


def train_reward(values: list[float]) -> str:
    """The train reward's mean over the first k steps -> over the last k, k = min(5, steps // 2), as
    the CLI's summary prints it (one step's reward is noisy); a run of one step: that step's."""
    if not values:
        return "-"
    if len(values) < 2:
        return f"{values[0]:.3f} (1 step)"
    k = min(5, len(values) // 2)
    return f"{sum(values[:k]) / k:.3f} -> {sum(values[-k:]) / k:.3f} (k = {k})"


def length_limits(run: RunData) -> dict:
    """The limits that cut a rollout (its row's `truncated`): tokens per model turn, and the
    episode's context."""
    policy = section(run.config, "policy")
    return {"max_new_tokens": section(policy, "generation").get("max_new_tokens", "?"),
            "max_total_sequence_length": policy.get("max_total_sequence_length", "?")}


def no_rollouts_hint(run: RunData) -> str:
    """Why a run's page has no rollouts: how often the run writes them (logger.rollouts_period),
    against its steps."""
    every = section(run.config, "logger").get("rollouts_period")
    every = every if type(every) is int else None  # (a hand-edited config may hold anything there)
    steps = max((m["step"] for m in run.metrics if "train/reward_mean" in m), default=0)
    if every is None:
        return "no rollouts written (rollouts/step_N.jsonl): logger.rollouts_period sets every how many steps"
    if every == 0:
        return "no rollouts written: logger.rollouts_period is 0 (set logger.rollouts_period=N to write every N steps)"
    return (f"no rollouts written yet: they are written every logger.rollouts_period = {every} steps (steps {every}, "
            f"{2 * every}, ...) and this run ran {steps} steps; set logger.rollouts_period=1 to write every step")


def shown_rollouts(runs: list[RunData], budget: int = ROLLOUT_BYTES) -> dict:
    """Each run's rollouts by step, the first rows of each step: MAX_ROWS_PER_STEP, or half, a quarter... (whole
    groups, as long as a group fits) until their JSON fits `budget` bytes."""
    steps = [(r.name, str(step), rows) for r in runs for step, rows in sorted(r.rollouts.items())]
    # the largest of 1, 2, 4, ... MAX_ROWS_PER_STEP rows that fits: sized upward, each row once, stopping past the
    # budget (encoding every row of a long run's 20 steps took seconds)
    per_step, total = 1, sum(_size(rows[0]) for _, _, rows in steps if rows)
    while per_step < MAX_ROWS_PER_STEP and total <= budget:
        total += sum(_size(row) for _, _, rows in steps for row in rows[per_step:2 * per_step])
        if total > budget:
            break
        per_step *= 2
    shown: dict = {r.name: {} for r in runs}
    for name, step, rows in steps:
        shown[name][step] = rows[:per_step]
    return shown


def _size(row: dict) -> int:
    """A rollout row's bytes on the page (about), '<' as the 6 bytes of its escape (_script_json): a model's answers
    of markup made a page of 41 MiB."""
    text = json.dumps(row, ensure_ascii=False)
    return len(text.encode("utf-8", "replace")) + 5 * text.count("<")


def _script_json(value) -> str:
    """JSON safe inside a <script> element: no '<' at all (JSON's \\u003c), so that neither '</script' closes it
    nor '<!--<script' puts the HTML parser in the mode where the real '</script>' no longer does (the page's
    own script then never ran: a blank report from one prompt or completion holding that text). A NaN or an
    infinity (a metric of a step that blew up) is null: JSON has none, and JSON.parse of the bare NaN json.dumps
    writes failed, the page blank."""
    return json.dumps(_finite(value), ensure_ascii=False).replace("<", "\\u003c")  # (UTF-8: \\uXXXX took 6 bytes)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
