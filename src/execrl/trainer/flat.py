"""Why a run learns nothing: the words of the warning for steps whose every group is flat (equal rewards: GRPO's
advantages all 0), with what the samples' verdicts say about the cause."""

from __future__ import annotations

from execrl.config.checks import CORRECTNESS

FLAT_WARNING_STEPS = 3  # steps in a row with every group flat before the run says it learns nothing
DOMINANT = 0.5  # a verdict this share of the samples (or more) gets its hint
MIXED = 0.05  # right answers this share of the samples, and wrong ones too: flat groups may hold both


def deciding_parts(reward) -> dict[str, float] | None:
    """The weights of the reward's components other than those that shape it (rewards.base.SHAPING: DAPO's length
    penalty), where it has both: a group whose answers those others score alike is told apart by the shaping alone.
    None: no shaping component, or nothing else."""
    from execrl.rewards.base import SHAPING

    weights = {c.name: c.weight for c in reward.components if c.weight}
    rest = {name: w for name, w in weights.items() if name not in SHAPING}
    return rest if rest and len(rest) < len(weights) else None


def flat_reason(cfg) -> str:
    """What made a step's every group flat, as the warnings say it."""
    if cfg.grpo.advantage == "rae":
        return "every advantage was 0 (each return its role's baseline)"
    s = cfg.reward.scaling
    clamp = (f" (reward.scaling clamps rewards to [{s.source_min:g}, {s.source_max:g}] first: does that range hold the "
             "rewards the components give?)") if s.enabled else ""
    stops = cfg.policy.generation.stop_strings
    if stops:
        clamp += f" (policy.generation.stop_strings {stops} end answers where they appear: before the answer?)"
    cut = " or its samples all truncated and left out of the loss (grpo.overlong_filtering)" \
        if cfg.grpo.overlong_filtering else ""
    return "every group's rewards were all equal" + clamp + cut


def hints(cfg) -> dict[str, str]:
    """What a verdict that most samples got says about a run that learns nothing."""
    code, style = cfg.env.code, cfg.prompt.code_style
    where = {"fence": "a fenced code block", "tags": "<code> tags", "auto": "a fenced block or <code> tags",
             "plain": "the whole answer: every answer was empty"}.get(style)
    return {
        "no_code": f"no answer held a program where prompt.code_style={style} looks ({where}): the prompt may not ask "
                   "for one, or the answers end before it (train/truncated_frac)",
        "timeout": f"the programs ran past env.code.timeout_s={code.timeout_s:g} s on a test: raise it if the tests "
                   "are heavy, or see whether the programs wait for input the tests do not give",
        "memory": f"the programs went past env.code.memory_mb={code.memory_mb}: raise it if the tests need more",
        "syntax_error": "the programs do not compile: answers cut short (train/truncated_frac), or in another language "
                        "than the tests run (the task's language)",
        "runtime_error": "the programs raised on every test: a function name or an input format other than the tests "
                         "use (does the prompt give them?)",
        "output_limit": "the programs printed past the sandbox's output limit",
        "infra_error": "the sandbox failed, not the programs: `execrl grade` on one row shows why",
        "fail": "the programs ran and gave wrong answers: the problems may be too hard for the model",
        "wrong": "the answers were wrong: the problems may be too hard for the model, or the answer format not the one "
                 "the grader reads (see the rollouts)",
        "pass": "every program passed: the problems are too easy for the model",
        "correct": "every answer was right: the problems are too easy for the model",
    }


def verdict_note(cfg, rows: list[dict]) -> str:
    """The samples' verdicts over these steps' metrics rows (train/verdict/*, their shares averaged), largest
    first, and what the one most samples got says; without such a verdict (or without verdicts), the usual causes."""
    rows = [r for r in rows if any(k.startswith("train/verdict/") for k in r)]  # (not an eval's row)
    keys = sorted({k for r in rows for k in r if k.startswith("train/verdict/")})
    shares = {k.removeprefix("train/verdict/"): sum(r.get(k, 0.0) for r in rows) / len(rows) for k in keys}
    seen = sorted(((v, s) for v, s in shares.items() if s > 0), key=lambda x: (-x[1], x[0]))
    said = f" The samples' verdicts: {', '.join(f'{v} {s:.0%}' for v, s in seen[:4])};" if seen else ""
    hint = hints(cfg).get(seen[0][0]) if seen and seen[0][1] >= DOMINANT else None
    text = hint or ("the problems may be too hard or too easy for the model, or the reward may not score this dataset "
                    "(reward.components)")
    right = sum(shares.get(v, 0.0) for v in ("pass", "correct"))
    scored = any(c.name in (*CORRECTNESS, "reward_model") and c.weight > 0 for c in cfg.reward.components)  # (with one, flat groups are all right or all wrong: a review's find)
    if MIXED <= right <= 1 - MIXED and not scored:  # (a hunt's find: a format-only reward's flat groups blamed on
        # hard problems)
        text += (f"; but {right:.0%} of the samples were right: where a group held right and wrong answers, its equal "
                 "rewards say the reward does not tell them apart (reward.components: a correctness component, "
                 "test_pass_fraction or math_correct, with a positive weight)")
    return f"{said} {text}." if said else f" {text[0].upper()}{text[1:]}."


def flat_warning(cfg, rows: list[dict], all_cut: bool) -> str:
    """The warning for FLAT_WARNING_STEPS steps in a row of flat groups (`rows`: their metrics); `all_cut`: every
    group's samples were truncated and left out of the loss at the last of them."""
    n = FLAT_WARNING_STEPS
    if all_cut:
        return (f"for {n} steps every sample was cut at policy.generation.max_new_tokens and grpo.overlong_filtering "
                "left it out of the loss (train/truncated_frac 1.0): the loss and its gradient are 0 and nothing is "
                "learned. Raise policy.generation.max_new_tokens, or set grpo.overlong_filtering=false")
    return (f"for {n} steps {flat_reason(cfg)} (train/flat_group_frac 1.0): the loss and its gradient are 0 and "
            "nothing is learned." + verdict_note(cfg, rows)).rstrip(".")


def shaping_only_warning(cfg, rows: list[dict]) -> str:
    """The warning for FLAT_WARNING_STEPS steps in a row in which every group's rewards were equal but for the
    components that shape them (a hunt's find: an overlong penalty beside test_pass_fraction, every answer wrong,
    trained on length alone, and the train reward rose with no word)."""
    rest = deciding_parts(cfg.reward) or {}
    shaping = [c.name for c in cfg.reward.components if c.weight and c.name not in rest]
    return (f"for {FLAT_WARNING_STEPS} steps every group's rewards were equal but for {', '.join(shaping)} (its "
            f"{', '.join(rest)} the same for each of its samples): the advantages came from {', '.join(shaping)} "
            "alone, and the run learns answer length, not what the reward scores." + verdict_note(cfg, rows)
            ).rstrip(".")


FELL = 0.1  # a fall of the share of right answers (or of pass@1) this large, while the reward rose, is said
ROSE = 0.05  # ... where the reward rose by this much at least (less: noise, a hunt's find)


def reward_against_correctness(rows: list[dict], reward=None) -> str | None:
    """What a run whose reward rose by ROSE while its share of right samples (train/verdict/pass or correct) or its
    eval pass@1 fell by FELL (and by two standard errors of the eval's problems) says: the reward scores something
    other than right answers (a sign, a weight, a scaling, a component of one's own); None: it did not (a hunt's
    find: such runs read as progress). `reward` (reward.* config): one of correctness only is not blamed."""
    def first_last(key: str) -> tuple[float, float] | None:
        values = [r[key] for r in rows if key in r]
        k = min(5, len(values) // 2)
        return (sum(values[:k]) / k, sum(values[-k:]) / k) if k >= 2 else None  # (one step each: noise)

    rise = first_last("train/reward_mean")
    if rise is None or rise[1] - rise[0] < ROSE:
        return None
    fallen = [(f"the share of right samples (train/verdict/{v})", *got) for v in ("pass", "correct")
              if (got := first_last(f"train/verdict/{v}")) and got[0] - got[1] >= FELL]
    evals = [r for r in rows if "eval/pass@1" in r]
    if len(evals) >= 2 and (fall := evals[0]["eval/pass@1"] - evals[-1]["eval/pass@1"]) >= FELL:
        p, n = evals[0]["eval/pass@1"], evals[0].get("eval/num_problems", 0)
        if not n or fall >= 2 * (p * (1 - p) / n) ** 0.5:  # (16 problems at 0.375: 3 of them is noise)
            fallen.append(("eval pass@1", evals[0]["eval/pass@1"], evals[-1]["eval/pass@1"]))
    if not fallen:
        return None
    what, before, after = fallen[0]
    said = f"the train reward rose ({rise[0]:.3f} -> {rise[1]:.3f}) while {what} fell ({before:.3f} -> {after:.3f})"
    if reward is not None and not reward.scaling.enabled and all(
            c.name in CORRECTNESS and c.weight >= 0 for c in reward.components if c.weight):
        if what.startswith("eval"):
            return (f"{said}: the model learns the training problems and not the evaluation's (few or easy training "
                    "problems, or too many passes over them), or the two sets differ in kind")
        if any(c.name == "test_pass_fraction" and c.weight for c in reward.components):
            return (f"{said}: answers pass more of their tests and fewer pass all of them, which test_pass_fraction's "
                    "partial credit rewards; reward.components=[{name: all_tests_pass}] rewards only whole passes")
        return (f"{said}: with a reward of right answers only, look at the rollouts (a discount, a verdict the reward "
                "reads otherwise than the metric, or noise over few steps)")
    return (f"{said}: the reward scores something other than right answers. Check reward.components' weights "
            "and signs, reward.scaling, and your own components")
