"""The report's curves as Plotly figures (plain JSON: plotly.js draws them in the page): one per
chart, each run's series overlaid; stacked shares (verdicts, time per phase) get one chart per
run."""

from __future__ import annotations

import html

from execrl.report.runs import RunData, section

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]

# (chart id, title, y axis, the metric keys: exact, a prefix ending in "/" or "@", or "*/name": a self-play role's
# train/<game>/<role>/name); drawn where a run has one
LINES = [
    ("eval", "Evaluation: pass@k", "pass@k", ["eval/pass@"]),
    ("eval-other", "Evaluation: other metrics", "", ["eval/"]),
    ("signal", "What a step learns from: groups of equal rewards, answers cut, usable samples", "fraction",
     ["train/flat_group_frac", "train/truncated_frac", "train/valid_frac"]),  # (the console's warnings name them)
    ("lr", "Learning rate", "rate", ["train/lr"]),
    ("loss", "Loss", "loss", ["train/loss"]),
    ("kl", "KL", "KL", ["train/kl", "train/sampler_kl"]),
    ("entropy", "Entropy", "nats per token", ["train/entropy"]),
    ("clip", "Clip fractions", "fraction of tokens", ["train/clip_frac", "train/clip_frac_low", "train/clip_frac_high"]),
    ("length", "Completion length", "tokens", ["train/completion_len_mean"]),
    ("components", "Reward components", "mean value", ["train/reward/", "train/reward_model_score"]),
    ("tokens", "Generation throughput", "tokens/s", ["time/tokens_per_s"]),
    ("grad", "Gradient norm", "norm (before clipping)", ["train/grad_norm"]),
    ("roles", "Self-play: win rate by role", "win rate", ["*/win_rate"]),
    ("role-returns", "Self-play: return and baseline by role", "return", ["*/reward_mean", "*/baseline"]),
    ("role-moves", "Self-play: illegal moves and moves by role", "", ["*/illegal_rate", "*/moves_mean"]),
]
STACKS = [("verdicts", "Verdict shares", "share of samples", "train/verdict/"),
          ("phases", "Time per phase", "seconds", "time/")]
PHASES = ("time/generate", "time/grade", "time/reward_model", "time/train")  # the parts of a step (not its total)
EVAL_SKIP = ("eval/num_problems", "eval/problem_set", "eval/temperature", "eval/top_p", "eval/top_k",
             "eval/max_new_tokens")  # (settings, not results)
OWN_CHART = ("eval/pass@",)  # keys drawn in a chart of their own (not among "eval/"'s others)


def figures(runs: list[RunData]) -> list[dict]:
    """[{id, title, figure}] in the page's order: the train reward (mean and its spread), the line
    charts, the stacks."""
    out = [f for f in [reward_figure(runs)] if f]
    several = len(runs) > 1
    for chart, title, axis, keys in LINES:
        traces, notes = [], []
        for i, run in enumerate(runs):
            present = keys_of(run, keys)
            idle = {k: why for k, why in inactive(run).items() if k in present and not any(series(run, k)[1])}
            traces += _lines(run, i, keys, several, skip=set(idle))
            for why in dict.fromkeys(idle.values()):
                named = ", ".join(k for k in idle if idle[k] == why)
                notes.append(f"{run.name + ': ' if several else ''}{named}: not active in this run ({why})")
        if traces or notes:  # (a chart whose every line is 0 by construction: its note alone, no figure)
            out.append({"id": chart, "title": title, "figure": _figure(traces, title, axis) if traces else None,
                        "notes": notes})
    for chart, title, axis, prefix in STACKS:
        for i, run in enumerate(runs):
            traces = _stack(run, prefix)
            if traces:
                named = f"{title}: {run.name}" if len(runs) > 1 else title
                out.append({"id": f"{chart}-{i}", "title": named, "figure": _figure(traces, named, axis)})
    return out


def inactive(run: RunData) -> dict[str, str]:
    """The metric keys that the run's config makes 0 at every step, and why: no KL penalty
    (train/kl), and a ratio that cannot be clipped (the clip fractions): no ratio, a ratio forced to
    1, or one optimizer step per rollout (the loss's ratio is then to the weights it is computed
    with: exactly 1). A key missing from the config: no claim."""
    loss, grpo, policy = (section(run.config, k) for k in ("loss_fn", "grpo", "policy"))
    out = {}
    if loss.get("reference_policy_kl_penalty") == 0:
        out["train/kl"] = "loss_fn.reference_policy_kl_penalty is 0: no KL penalty"
    prompts, group = grpo.get("num_prompts_per_step"), grpo.get("num_generations_per_prompt")
    batch = policy.get("train_global_batch_size")
    why = None
    if loss.get("disable_ppo_ratio"):
        why = "loss_fn.disable_ppo_ratio: the loss has no ratio"
    elif loss.get("force_on_policy_ratio"):
        why = "loss_fn.force_on_policy_ratio: the ratio is 1"
    elif all(isinstance(v, int) for v in (prompts, group, batch)) and batch >= prompts * group:
        why = (f"one optimizer step per rollout: policy.train_global_batch_size {batch} >= {prompts} prompts x "
               f"{group} generations, so the ratio is 1")
    if why:
        out.update(dict.fromkeys(("train/clip_frac", "train/clip_frac_low", "train/clip_frac_high"), why))
    return out


def series(run: RunData, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric over a run (the last value a step logged)."""
    at = {m["step"]: m[key] for m in run.metrics if key in m and isinstance(m[key], (int, float))}
    steps = sorted(at)
    return steps, [at[s] for s in steps]


def keys_of(run: RunData, wanted: list[str]) -> list[str]:
    present = sorted({k for m in run.metrics for k in m})
    keys = []
    for w in wanted:
        if w.startswith("*/"):  # (a self-play role's: train/<game>/<role>/<name>)
            keys += [k for k in present if k.startswith("train/") and k.count("/") == 3 and k.endswith(w[1:])]
        elif w.endswith(("/", "@")):
            keys += [k for k in present if k.startswith(w) and not (w == "eval/" and k.startswith(OWN_CHART))]
        elif w in present:
            keys.append(w)
    return [k for k in dict.fromkeys(keys) if k not in EVAL_SKIP]


def reward_range(run: RunData) -> tuple[float, float] | None:
    """(lowest, highest) reward the run's rollouts held by the report show, widened to every step's
    mean reward; None where the report holds no rollout of the run."""
    seen = [r["reward"] for rows in run.rollouts.values() for r in rows
            if isinstance(r.get("reward"), (int, float)) and not isinstance(r.get("reward"), bool)]
    seen += list(run.rewards_seen or ())  # (every row of the steps' files, past those the browser holds)
    if not seen:
        return None
    _, mean = series(run, "train/reward_mean")
    return min(seen + mean), max(seen + mean)


def reward_figure(runs: list[RunData]) -> dict | None:
    """Each run's mean train reward, over a band of mean +- std cut to the rewards seen
    (reward_range): a reward in [0, 1] never has a band below 0 or above 1. A run without rollouts
    in the report: the band uncut, and so named."""
    traces = []
    for i, run in enumerate(runs):
        steps, mean = series(run, "train/reward_mean")
        if not steps:
            continue
        color = PALETTE[i % len(PALETTE)]
        _, std = series(run, "train/reward_std")
        label = "reward (mean)"
        if len(std) == len(mean):  # the spread: a band under the line
            bounds = reward_range(run)
            lo, hi = bounds if bounds else (float("-inf"), float("inf"))
            upper = [min(m + s, hi) for m, s in zip(mean, std)]
            lower = [max(m - s, lo) for m, s in zip(mean, std)]
            traces.append({"x": steps + steps[::-1], "y": upper + lower[::-1], "fill": "toself", "fillcolor": color,
                           "opacity": 0.15, "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False,
                           "type": "scatter", "mode": "lines", "name": _plain(f"{run.name} spread")})
            label = (f"reward (mean; band: +- std within the rewards seen, {lo:.3g} to {hi:.3g})" if bounds
                     else "reward (mean; band: +- std, no rollouts to bound it)")
        traces.append({"x": steps, "y": mean, "type": "scatter", "mode": "lines", "line": {"color": color},
                       "name": _plain(f"{run.name}: {label}" if len(runs) > 1 else label)})
    title = "Train reward"
    return {"id": "reward", "title": title, "figure": _figure(traces, title, "reward")} if traces else None


def _lines(run: RunData, index: int, wanted: list[str], several: bool, skip: set[str] = frozenset()) -> list[dict]:
    traces = []
    for j, key in enumerate(k for k in keys_of(run, wanted) if k not in skip):
        steps, values = series(run, key)
        dash = ["solid", "dash", "dot", "dashdot"][j % 4]
        traces.append({"x": steps, "y": values, "type": "scatter", "mode": "lines+markers" if len(steps) < 30 else "lines",
                       "name": _plain(f"{run.name}: {key}" if several else key),
                       "line": {"color": PALETTE[(index if several else j) % len(PALETTE)], "dash": dash if several else "solid"}})
    return traces


def _stack(run: RunData, prefix: str) -> list[dict]:
    keys = [k for k in keys_of(run, [prefix]) if prefix != "time/" or k in PHASES]
    traces = []
    for j, key in enumerate(keys):
        steps, values = series(run, key)
        if any(values):
            traces.append({"x": steps, "y": values, "type": "scatter", "mode": "lines", "stackgroup": "one",
                           "name": _plain(key[len(prefix):]), "line": {"color": PALETTE[j % len(PALETTE)]}})
    return traces


def _figure(traces: list[dict], title: str, axis: str) -> dict:
    return {"data": traces, "layout": {"title": {"text": _plain(title), "x": 0.02, "xanchor": "left"}, "xaxis": {"title": {"text": "step"}, "gridcolor": "#eee"},
                                       "yaxis": {"title": {"text": axis}, "gridcolor": "#eee"}, "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
                                       "legend": {"orientation": "h", "y": -0.3}, "height": 360,
                                       "plot_bgcolor": "#fff", "paper_bgcolor": "#fff"}}


def _plain(text: str) -> str:
    """Text plotly shows as written: it reads <a href>, <b> and &entities; in names and titles (a metric key or a run
    directory named with them became a live link, or hid part of the name)."""
    return html.escape(text, quote=False)
