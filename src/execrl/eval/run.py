"""`execrl eval`: a model (or a file of completions) on a dataset split -> per-problem results and
pass@k."""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from execrl.console import shown, stderr_console
from execrl.eval.grading import EarlyGrading
from execrl.eval.passk import mean_pass_at_k
from execrl.extract import extract
from execrl.prompts import PromptConfig, build_messages, drop_long_prompts, templated
from execrl.rewards import CORRECT, Sample, outcome, sandbox_failures
from execrl.rewards.math_answers import boxed_under_dapo
from execrl.rewards.outcome import NO_CODE, graded_in_sandbox
from execrl.sandbox import (
    LANGUAGES,
    Grader,
    Limits,
    TestSpecError,
    check_infra_share,
    language_named,
    parse_tests,
    tests_refused,
)
from execrl.sandbox.inside.protocol import valid_text
from execrl.sandbox.spec import entry_names, truncate_tests
from execrl.tasks import Problem, dataset_key, load_problems
from execrl.tasks.generic import answer_kind, answer_text, digits
from execrl.tasks.problem import VERIFIER, DatasetError, missing, read_rows
from execrl.tasks.registry import DATASETS, find_path, local_source
from execrl.tasks.shown import distinct
from execrl.writable import write_whole

err = stderr_console()


def say(line: str, style: str = "yellow") -> None:
    """A warning whose text (paths, a row's id, a program's output) is printed as it is, never read as markup."""
    err.print(Text(line, style=style), highlight=False)


@dataclass
class EvalConfig:
    dataset: str = "mbpp"
    split: str = "test"
    data_path: str | None = None
    limit: int | None = None  # first N problems
    max_tests: int = 0  # at most this many tests per problem (0: all)
    samples: int = 1
    ks: tuple[int, ...] = (1,)
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    stop_token_ids: list[int] | None = None  # ids that end a completion besides the model's EOS ids
    end_token_ids: list[int] | None = None  # (recorded once sampled) every id that ended a completion: EOS and stops
    turn_end_id: int | None = None  # (found once sampled) the token the chat template ends a turn with
    first_prompt: str | None = None  # (recorded once sampled) the first problem's prompt as the model read it
    stop_strings: list[str] | None = None  # texts that end a completion (None: a checkpoint's run's; recorded so)
    max_prompt_tokens: int = 2048
    batch_size: int | None = None  # sequences decoded at once (None: eval.generate.auto_slots)
    backend: str = "execrl"  # execrl | transformers
    seed: int = 0
    data_seed: int | None = None  # a generated dataset's seed (None: its loader's own)
    data_options: dict = field(default_factory=dict)  # the loader's options (data.*.options of a training config)
    out: str = "results/eval"  # (execrl eval's default: results/eval/MODEL_DATASET-SPLIT)
    workers: int = 0
    timeout_s: float = 5.0
    reward_model: str | None = None  # a reward model whose mean score is reported too
    reward_model_batch_size: int = 8
    reward_model_settings: dict = field(default_factory=dict)  # env.reward_model's tokenizer, max_model_len, precision
    grading_share: float = 0.5  # of the sandbox's workers, grading while sampling runs on a GPU (0: after it)
    guided: tuple[str, Any] | None = None  # guided decoding: (regex | json_schema | grammar, its value)
    math_verify_impl: str | None = None  # math answers' check (None: the dataset's own, else hf_math_verify)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    chat_template_kwargs: dict | None = None  # None: those the model's tokenizer was saved with (a checkpoint's run's)
    trained_multi_turn: dict | None = None  # the checkpoint's run's multi-turn settings (eval itself is single-turn)
    thinking: bool = False  # the chat template's generation prompt opens a <think> block (prompts.opens_think)


def evaluate(cfg: EvalConfig, model_name: str | None = None, completions: str | None = None) -> dict:
    if not completions and not model_name:
        raise ValueError("execrl eval needs --model (a hub id or a local directory) or --completions FILE")
    if completions and model_name:
        raise ValueError("execrl eval grades --completions FILE or samples --model, not both: drop one")
    seeded = {} if cfg.data_seed is None else {"seed": cfg.data_seed}
    try:  # (the names training takes: a hub id, a module.path:loader of one's own)
        key = dataset_key(cfg.dataset) if cfg.dataset else None
    except DatasetError as e:
        raise DatasetError(str(e).replace("dataset_name", "--dataset", 1)) from None
    everything, report = (load_problems(key, cfg.split, cfg.data_path, cfg.max_tests, **seeded, **cfg.data_options)
                          if key else ([], None))
    if key and cfg.data_seed is None and (default := loader_seed(key)) is not None:
        cfg = replace(cfg, data_seed=default)  # (summary.json records the seed that posed the problems)
    if not key:  # (no dataset read: summary.json recorded --split's default, "test", a hunt's find)
        cfg = replace(cfg, split="")
    played = sorted({p.kind for p in everything} - {"code", "math"})
    if played:  # (no completion grades them: each is an episode of turns in its environment)
        raise DatasetError(f"{cfg.dataset} holds {played[0]} problems, played over turns in their environment: execrl "
                           "eval grades code and math answers. Measure them in a training run's validation "
                           "(grpo.val_period, grpo.val_at_start=true)")
    problems = everything[: cfg.limit] if cfg.limit else everything
    try:
        texts = read_completions(completions, problems, cfg.max_tests, everything, cfg.limit) if completions else None
    except UnknownProblem as e:
        raise DatasetError(str(e) + _split_of(e.pid, key, cfg, seeded)) from None
    if texts is not None and not texts:
        raise DatasetError(f"{completions}: nothing to evaluate: no completion of "
                           + (f"{cfg.dataset}/{cfg.split}'s problems" + (" within --limit" if cfg.limit else "")
                              if key else "a problem with its own tests or answer"))
    ours = {id(q) for q in everything}
    own = sum(id(p) not in ours for p, _ in texts or ())  # (problems of the file's own rows)
    if texts and key and own == len(texts):
        say(f"no row of {completions} is a problem of {cfg.dataset}/{cfg.split}: each is graded on its own tests or "
            "answer, and recorded so")
        cfg = replace(cfg, dataset="", split="")
    elif texts and key and own:
        raise DatasetError(f"{completions}: {own} of its problems carry their own tests or answer and are not "
                           f"{cfg.dataset}/{cfg.split}'s, the others are: a pass@k over both is neither's. Grade them "
                           "apart: the dataset's rows with --dataset, the others with --dataset ''")
    if texts is None:
        repeated = [pid for pid, n in Counter(p.id for p in problems).items() if n > 1]
        if repeated:
            say(f"{len(repeated)} problem ids repeat in {cfg.dataset}/{cfg.split} (e.g. {repeated[0][:60]!r}): each row "
                "is its own problem; results.jsonl lists them in the dataset's order")
    elif problems and len(texts) < len(problems) and {id(q) for q in problems} & {id(p) for p, _ in texts}:
        say(f"{completions} has completions of {len(texts)} of the {len(problems)} problems of "
            f"{cfg.dataset}/{cfg.split}{' (--limit)' if cfg.limit else ''}: pass@k is over those {len(texts)}")
    posed = problems if texts is None else [p for p, _ in texts]
    if texts is None and cfg.backend == "transformers" and any("guided_decoding" in p.metadata for p in posed):
        raise ValueError(f"rows of {cfg.data_path or cfg.dataset} have a guided_decoding constraint, which needs the "
                         "execrl engine (it masks tokens in its sampling step): drop --backend transformers")
    if texts is None and (note := boxed_under_dapo(posed, cfg.math_verify_impl, cfg.prompt, "--math-verify-impl")):
        say(note)
    for p in posed if cfg.math_verify_impl else ():
        if p.kind == "math":
            p.metadata[VERIFIER] = cfg.math_verify_impl
    if texts is None:  # (a hub that does not answer: one line in seconds, not minutes of retries, before the sandbox)
        from execrl.config.checks import model_reachable
        model_reachable(str(model_name), False, "--model")
        cfg = check_template(cfg, model_name)
        check_stops(cfg, model_name, {p.kind for p in problems})
    # the reward model checked before the sandbox and the sampling (one that could not score lost a whole eval's
    # work), its weights loaded after them (beside the policy they would take its KV cache's memory)
    if cfg.reward_model:
        with_flags(check_judge, cfg)
    if (Path(cfg.out) / "summary.json").exists():  # (said once the inputs are checked: a refused eval replaces none)
        written = time.strftime("%Y-%m-%d %H:%M", time.localtime((Path(cfg.out) / "summary.json").stat().st_mtime))
        say(f"{cfg.out} holds the results of an eval of {written}: this one replaces them (--out: another directory)")
    kept = Path(cfg.out) / "completions.jsonl"  # (an earlier eval's, stopped: a hunt's find, it lay beside this one's
    if kept.exists() and not (completions and Path(completions).resolve() == kept.resolve()):  # results unsaid)
        written = time.strftime("%Y-%m-%d %H:%M", time.localtime(kept.stat().st_mtime))
        say(f"{kept} holds the completions an eval stopped on {written} kept, not this one's: grade them with "
            f"--completions {kept} (--out: another directory), or they are replaced if this one stops too")
    languages = tuple(sorted({p.language for p in posed if p.kind == "code"})) or ("python",)
    # the sandbox first: its workers start and pass their self-test while the model loads, and grade while it samples
    with Grader(num_workers=cfg.workers, limits=Limits(timeout_s=cfg.timeout_s), languages=languages) as grader:
        err.print(grader.describe(), markup=False, highlight=False)
        early = EarlyGrading(grader, cfg.grading_share if texts is None else 0.0)
        try:
            dropped = 0
            if texts is None:
                texts, sampled = sample_completions(cfg, model_name, problems, early)
                dropped = len(problems) - len(texts)  # (prompts over max_prompt_tokens)
                cfg = replace(cfg, **sampled)  # (summary.json records what ran)
            samples = {(i, j): early.sample((i, j)) or make_sample(cfg, p, text, n, sampled=not completions, cut=cut)
                       for i, (p, outs) in enumerate(texts) for j, (text, n, cut) in enumerate(outs)}
            graded = sum(map(graded_in_sandbox, samples.values()))
            try:
                with _bar() as bar:
                    task = bar.add_task("grading", total=graded)
                    done_early = early.finish(samples, progress=lambda: bar.advance(task))
            except (KeyboardInterrupt, Exception) as e:  # (the sampling kept: Ctrl-C while grading threw away every
                if not completions:  # completion, and so did a grading error, a hunt's find)
                    kept = keep_completions(cfg, texts)
                    say(f"{stopped(e)} while grading: the {sum(len(o) for _, o in texts)} sampled completions are in "
                        f"{kept}; {regrade(kept)}")
                raise
        finally:
            early.close()  # (sampling failed: the programs still queued are dropped, not left to a closed sandbox)
        if early.given:
            err.print(f"graded {done_early} of {graded} programs while "
                      f"sampling ({early.most} of {grader.pool.num_workers} sandbox workers meanwhile)",
                      markup=False, highlight=False)
    samples = list(samples.values())
    num_infra, num_sent, example = sandbox_failures(samples)
    # (eval's figures are already paid for: written, with the samples left out counted, rather than lost)
    line = check_infra_share(num_infra, num_sent, "execrl eval", example, stop=False)
    if line is not None:
        say(f"WARNING: {line}", "bold red")
    if cfg.reward_model:
        judge_samples(cfg, samples, with_flags(load_judge, cfg))
    return summarize(cfg, samples, {"completions": str(completions)} if completions else {"model": str(model_name)},
                     dict(report.reasons) if report is not None and cfg.dataset else {},
                     dropped)


def stopped(e: BaseException) -> str:
    """How an eval stopped, for the line that says where its completions were kept."""
    return "interrupted" if isinstance(e, KeyboardInterrupt) else f"stopped by {type(e).__name__}"


def regrade(kept: Path) -> str:
    """How to grade kept completions: the prompt's flags too (--code-style dropped, every one read no_code: a hunt's
    find)."""
    return (f"`execrl eval --completions {kept}` with this command's other flags but --model and those of sampling "
            "(--dataset, --split, --data-path, --data-option, --limit, --max-tests, --k, --answer-format, --code-style, "
            "--math-verify-impl, --timeout, --reward-model...) grades them without sampling again")


def keep_completions(cfg: EvalConfig, texts: list) -> Path:
    """The sampled completions, as rows `--completions` reads, in the output directory."""
    path = Path(cfg.out) / "completions.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, "".join(json.dumps({"problem_id": p.id, "completion": text, "num_tokens": n}) + "\n"
                              for p, outs in texts for text, n, _ in outs))
    return path


def make_sample(cfg: EvalConfig, problem: Problem, text: str, num_tokens: int, sampled: bool = True,
                cut: bool = False) -> Sample:
    """A completion of `problem` as the sample it is graded as (its answer or program extracted); `sampled`: made
    here, under --max-new-tokens (a completions file's were made under a limit not known here); `cut`: it hit that
    limit before it ended (the generator's word: an answer whose end of sequence is its last allowed token ended)."""
    return Sample(problem, text, extract(text, cfg.prompt.answer_format, cfg.prompt.code_style, problem.language,
                                         want_code=problem.kind == "code", entries=entry_names(problem.tests),
                                         thinking=cfg.thinking),
                  num_tokens=num_tokens, max_tokens=cfg.max_new_tokens if sampled else 0, cut=cut)


def judge_config(cfg: EvalConfig):
    """--reward-model and its flags (or the run's settings) as training's env.reward_model."""
    from execrl.config.schema import RewardModelConfig

    return RewardModelConfig(enabled=True, model_name=cfg.reward_model, batch_size=cfg.reward_model_batch_size,
                             **cfg.reward_model_settings)


def check_judge(cfg: EvalConfig) -> None:
    """The reward model can be read and score the eval's conversations, from its config and tokenizer (seconds)."""
    from execrl.config.checks import model_reachable
    from execrl.rewards.judges import check_reward_model

    model_reachable(cfg.reward_model, False, "--reward-model")  # (in seconds: a hub that does not answer)
    check_reward_model(judge_config(cfg), prompt=cfg.prompt)


def load_judge(cfg: EvalConfig):
    """The reward model --reward-model names, with the settings of env.reward_model that eval's flags (or the run
    that saved --model) give."""
    from execrl.rewards.judges import load_reward_model

    return load_reward_model(judge_config(cfg), prompt=cfg.prompt)


def with_flags(fn, cfg: EvalConfig):
    """fn(cfg), its ModelNotFound or ChatTemplateError naming eval's flags where it names training's keys."""
    from execrl.models import ModelNotFound
    from execrl.prompts import ChatTemplateError

    try:
        return fn(cfg)
    except (ModelNotFound, ChatTemplateError) as e:
        said = str(e)
        for key, flag in JUDGE_FLAGS.items():
            said = said.replace(key, flag)
        raise type(e)(said) from None


JUDGE_FLAGS = {" in execrl train (execrl eval reads the directory's own: copy the tokenizer's files into it)": "",
               "env.reward_model.tokenizer.chat_template": "--reward-model-chat-template",
               "env.reward_model.tokenizer.name": "--reward-model-tokenizer",
               "env.reward_model.max_model_len": "--reward-model-max-len", ", or null": ", or drop it",
               "prompt.system_prompt": "--system-prompt"}


def judge_samples(cfg: EvalConfig, samples: list[Sample], rm) -> None:
    """Each valid sample's rm_score: the reward model's score of its conversation (the prompt as
    posed, the completion)."""
    from execrl.rewards.learned import fill_scores

    fill_scores(rm, [([*(build_messages(s.problem, cfg.prompt) if s.problem.messages else []),
                       {"role": "assistant", "content": s.completion}], s) for s in samples])


def check_template(cfg: EvalConfig, model_name: str) -> EvalConfig:
    """The model's chat template on a prompt shaped like the eval's (its system prompt included), before the sandbox
    starts and the model loads: a template that refuses it (Gemma 2's 'System role not supported') is one line
    naming the fix, not a jinja2 traceback after the sandbox's start-up. Its notes are printed; `cfg` comes back
    with the chat_template_kwargs in use (--chat-template-kwargs, else the checkpoint's), for summary.json."""
    from execrl.models import load_tokenizer
    from execrl.prompts import TEMPLATE_KWARGS, opens_think, set_template_kwargs, template_notes

    tok = load_tokenizer(model_name)
    if tok is None:
        return cfg
    if cfg.chat_template_kwargs is not None:
        set_template_kwargs(tok, cfg.chat_template_kwargs)
    for note in template_notes(tok, cfg.prompt.system_prompt, cfg.prompt.answer_format):
        err.print(note.replace("policy.tokenizer.chat_template_kwargs", "--chat-template-kwargs"), markup=False)
    return replace(cfg, chat_template_kwargs=getattr(tok, TEMPLATE_KWARGS, None) or {}, thinking=opens_think(tok))


def check_stops(cfg: EvalConfig, model_name: str, kinds: set[str], recorded: list[str] | None = None) -> None:
    """--stop-string, else the checkpoint's recorded stop strings, refused as training refuses them (a review's
    find), before the sandbox starts and the model loads."""
    from execrl.config.checks import stop_refused
    from execrl.models import saved_stops

    stops = cfg.stop_strings if cfg.stop_strings is not None else recorded or saved_stops(model_name)
    if refused := stop_refused(stops, cfg.prompt, kinds):
        given = "--stop-string" if cfg.stop_strings is not None else (
            f"{model_name}'s stop strings (its run's policy.generation.stop_strings; --stop-string '' for none)")
        raise ValueError(f"{given}: {refused}")


def sample_completions(cfg: EvalConfig, model_name: str | None, problems: list[Problem],
                       early: EarlyGrading | None = None):
    """Each problem's completions [(problem, [(text, num_tokens, cut)])], the problems whose prompts fit, and how they
    were sampled, as EvalConfig's fields: the longest prompt sampled on (prompt_room: a learned position table's limit
    may be lower), the ids that ended a completion (the checkpoint's own among them), the sequences decoded at once,
    the stop strings, the chat template's end-of-turn token (turn_end) and the first prompt's text; `early`: each
    sample handed to it as it ends, where the generator streams (EarlyGrading.give)."""
    # torch and transformers load only here: grading a file of completions needs neither
    from execrl.control_tokens import turn_end
    from execrl.eval.generate import generate
    from execrl.models import STOP_STRINGS, load_model_and_tokenizer
    from execrl.prompts import plain_stops, render, set_template_kwargs
    from execrl.rollout.completion import beyond_vocab, end_ids, unseen_stop

    model, tok = load_model_and_tokenizer(model_name)
    if cfg.chat_template_kwargs is not None:  # (None: the tokenizer's saved ones, which it loaded with)
        set_template_kwargs(tok, cfg.chat_template_kwargs)
    unknown, vocab = beyond_vocab(model, tok, cfg.stop_token_ids)
    if unknown:  # (an id the model cannot sample ends nothing: a typo, or another model's id)
        raise ValueError(f"--stop-token-ids {unknown[0]} is not a token of {model_name} ({vocab:,} tokens): it would "
                         "end no completion; give the id the model ends a turn with (its tokenizer's "
                         "convert_tokens_to_ids of the end-of-turn token)")
    longest = prompt_room(cfg, model, model_name)
    problems, dropped = drop_long_prompts(problems, tok, cfg.prompt, longest)
    if note := templated(problems):
        err.print(Text(note, style="yellow"), highlight=False)
    if dropped and not problems:
        raise ValueError(f"nothing to evaluate: every problem's prompt ({dropped}) is longer than "
                         f"{longest} tokens: raise --max-prompt-tokens" + (
                             "" if longest == cfg.max_prompt_tokens else " and lower --max-new-tokens"))
    if dropped:
        err.print(f"[yellow]dropped {dropped} problems whose prompt is longer than {longest} tokens "
                  + ("(--max-prompt-tokens)" if longest == cfg.max_prompt_tokens else "(the model's position table "
                     "less --max-new-tokens)") + "[/]")
    past_positions(cfg, model, model_name, problems, tok, longest)
    prompts = [build_messages(p, cfg.prompt) for p in problems]
    recorded = getattr(getattr(model, "generation_config", None), STOP_STRINGS, None)  # (its run's: record_ends)
    stops = cfg.stop_strings if cfg.stop_strings is not None else (None if recorded is None else list(recorded))
    if cfg.stop_strings is None and stops:  # (a hub checkpoint downloaded just now: not read before it loaded)
        check_stops(cfg, model_name, {p.kind for p in problems}, stops)
    if hidden := unseen_stop(tok, stops, end_ids(model, tok, cfg.stop_token_ids)):
        stop, token, i = hidden
        given = "--stop-string" if cfg.stop_strings is not None else f"{model_name}'s stop strings"
        raise ValueError(f"{given}: {stop!r} holds {token}, a special token of {model_name} (id {i}) that "
                         "completions are read without: it never ends a completion at that token. Stop on the token: "
                         f"--stop-token-ids {i}, and " + ("drop the --stop-string" if cfg.stop_strings is not None
                                                         else "--stop-string '' for none of the recorded ones"))
    stops = plain_stops(stops, tok) or []  # (a run that set [] stopped at none: its eval too)
    start, slots, ended = time.perf_counter(), [], {}  # (ended: kept on Ctrl-C; every sample was lost, a hunt's find)
    try:
        with _bar() as bar:
            task = bar.add_task("sampling", total=len(prompts))
            outs = generate(model, tok, prompts, cfg.samples, cfg.max_new_tokens, cfg.temperature, cfg.top_p,
                            cfg.batch_size, cfg.backend, cfg.seed, on_batch=lambda n: bar.advance(task, n),
                            guided=[p.metadata.get("guided_decoding", cfg.guided) for p in problems],
                            on_slots=lambda n: slots.append(n) or bar.update(task, description=f"sampling, {n} at once"),
                            on_sample=handed_to(early, cfg, problems), stop_token_ids=cfg.stop_token_ids,
                            stop_strings=stops or None,
                            on_ended=lambda i, j, text, n, cut: ended.__setitem__((i, j), (text, n, cut)))
    except (KeyboardInterrupt, Exception) as e:  # (an error mid-sampling, out of memory at a long tail: the same)
        if ended:
            whole = sorted({i for i, _ in ended})
            kept = keep_completions(cfg, [(problems[i], [ended[i, j] for j in range(cfg.samples) if (i, j) in ended])
                                          for i in whole])
            say(f"{stopped(e)} while sampling: the {len(ended)} completions that had ended ({len(whole)} of "
                f"{len(problems)} problems, some with fewer than {cfg.samples} samples) are in {kept}; {regrade(kept)}")
        raise
    seconds, tokens = time.perf_counter() - start, sum(n for out in outs for _, n, _ in out)
    err.print(f"sampled {sum(map(len, outs))} completions, {tokens} tokens, in {seconds:.1f} s: "
              f"{tokens / max(seconds, 1e-9):,.0f} tokens/s" + (f", {slots[-1]} at once" if slots else ""),
              markup=False, highlight=False)
    return list(zip(problems, outs)), {
        "max_prompt_tokens": longest, "end_token_ids": end_ids(model, tok, cfg.stop_token_ids),
        "batch_size": slots[-1] if slots else cfg.batch_size, "stop_strings": stops, "turn_end_id": turn_end(tok),
        "first_prompt": render(prompts[0], tok) if prompts else None}


def prompt_room(cfg: EvalConfig, model, model_name: str | None) -> int:
    """The longest prompt to sample on: --max-prompt-tokens, less where the model's positions are a learned table
    that a prompt and --max-new-tokens would run past (GPT-2's 1,024: an IndexError mid-sampling); a warning where
    its rotary frequencies change within them (longrope, dynamic NTK: the engine samples a sequence past the bound
    with the short ones at its early positions, transformers with the long ones at all)."""
    from execrl.models import position_limit
    from execrl.rollout.models.base import rotary_bound

    limit, longest = position_limit(model), cfg.max_prompt_tokens
    if limit is not None and limit[1] and longest + cfg.max_new_tokens > limit[0]:
        longest = limit[0] - cfg.max_new_tokens
        if longest < 1:
            raise ValueError(f"{model_name}'s positions are a learned table of {limit[0]:,}: --max-new-tokens "
                             f"{cfg.max_new_tokens} leaves no room for a prompt; lower it")
        err.print(f"prompts of at most {longest:,} tokens: {model_name}'s positions are a learned table of "
                  f"{limit[0]:,}, and --max-new-tokens is {cfg.max_new_tokens}", markup=False)
    bound = rotary_bound(model)
    if bound is not None and longest + cfg.max_new_tokens > bound:
        err.print(f"warning: the model's rotary frequencies change past {bound:,} tokens (longrope, dynamic NTK): a "
                  "sample that grows past them is sampled with the short frequencies at its early positions, where "
                  "transformers' forward would use the long ones at all; --max-prompt-tokens and --max-new-tokens "
                  f"within {bound:,} together keep every sample within them", markup=False)
    return longest


def past_positions(cfg: EvalConfig, model, model_name: str | None, problems: list[Problem], tok, longest: int) -> None:
    """A warning where the longest prompt and --max-new-tokens run past the positions a model without a learned table
    of them (rotary, ALiBi) was made for (its config's max_position_embeddings), as training warns for
    policy.max_total_sequence_length (a long-context hunt's find: eval sampled past them without a word). The prompts
    are tokenized again only where --max-prompt-tokens and --max-new-tokens together could pass them."""
    from execrl.models import position_limit
    from execrl.prompts import conversation_ids

    limit = position_limit(model)
    if limit is None or limit[1] or longest + cfg.max_new_tokens <= limit[0] or not problems:
        return  # (a learned table: prompt_room keeps samples within it)
    most = max(map(len, conversation_ids([build_messages(p, cfg.prompt) for p in problems], tok)))
    if most + cfg.max_new_tokens > limit[0]:
        fix = f"--max-new-tokens {limit[0] - most:,}" if most < limit[0] else \
            f"--max-prompt-tokens {max(1, limit[0] - cfg.max_new_tokens):,} (and a smaller --max-new-tokens)"
        err.print(f"warning: the longest prompt ({most:,} tokens) and --max-new-tokens {cfg.max_new_tokens:,} run past "
                  f"the {limit[0]:,} positions {model_name} was made for (its config's max_position_embeddings): a "
                  "sample that grows past them runs at positions the model never trained at (a rope_scaling in its "
                  f"config extends rotary ones); {fix} keeps every sample within them", style="yellow", markup=False,
                  highlight=False)


def handed_to(early: EarlyGrading | None, cfg: EvalConfig, problems: list[Problem]):
    """generate's on_sample for `early` (None where it grades nothing while sampling): a code problem's sample
    goes to the sandbox; others wait for sampling to end (a math check is quick Python, which would only take the
    interpreter's lock from the decode loop)."""
    if early is None or not early.most:
        return None

    def give(i: int, j: int, text: str, num_tokens: int, cut: bool) -> None:
        if problems[i].kind == "code":
            early.give((i, j), make_sample(cfg, problems[i], text, num_tokens, cut=cut))
    return give


def read_completions(path: str, problems: list[Problem], max_tests: int = 0, everything: list[Problem] = (),
                     limit: int | None = None):
    """Rows {"problem_id" (or "id"), "completion"}, or rows that carry their own "tests" / "answer" (a row without
    an id is a problem of its own; rows of one id carry the same tests). `problems`: the dataset's (after --limit),
    `everything`: before it (rows of the problems past --limit are left out, and counted); `limit`: of the rows' own
    problems too, the first that many in the file's order."""
    by_id: dict[str, Problem] = {}
    for p in problems:
        if by_id.setdefault(p.id, p) is not p:
            raise DatasetError(f"problem id {p.id!r} names more than one problem of the dataset: a completion of it "
                               "cannot say which (give each row of the dataset its own id)")
    first_of = dict(by_id)  # the dataset's problem of each id, past --limit too
    for p in everything:
        first_of.setdefault(p.id, p)
    later = set(first_of) - set(by_id)
    grouped: dict[object, tuple[Problem, list]] = {}  # (an id, or a row number for a row with no id)
    past_limit, own_keys = 0, set()  # (the rows' own problems, which --limit counts apart from the dataset's)
    rows = read_rows(path)
    half = len(rows) // 2
    if half and len(rows) % 2 == 0 and rows[:half] == rows[half:] and len({
            str(r.get("problem_id", r.get("id"))) for r in rows[:half] if isinstance(r, dict)}) > 1:  # (taken as twice
        # the samples, without a word: a hunt's find; two equal answers to one problem are not a file joined to itself)
        err.print(f"[yellow]{path}: its second half repeats its first, row for row (a file written twice, or joined "
                  "to itself?): each completion counts twice in pass@k[/]")
    for n, row in enumerate(rows, 1):
        row = {k: v for k, v in row.items() if not missing(v)}  # null or NaN: none (an answer of null was a math
        pid = str(row.get("problem_id", row.get("id", "")))  # problem whose reference is "None", rows of problem_id
        # null one problem)
        text, num_tokens = row.get("completion"), row.get("num_tokens") or 0
        if not isinstance(text, str):
            gym = " (a NeMo-Gym rollout: its text is extracted_model_output)" if "extracted_model_output" in row else ""
            raise DatasetError(f"{path}, row {n}: no 'completion' string: --completions reads rows "
                               f"{{\"problem_id\": ..., \"completion\": \"the model's text\"}}{gym}")
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or not 0 <= num_tokens < 1 << 40:
            given = digits(num_tokens) if isinstance(num_tokens, int) else repr(num_tokens)
            raise DatasetError(f"{path}, row {n}: num_tokens must be a count of tokens, got {given[:40]}")
        text = valid_text(text)  # (a lone surrogate, which JSON carries, stopped a reward model's tokenizer: a hunt's
        # find)
        key = pid or n
        if ("tests" in row or "answer" in row) and (pid in by_id or pid in later):
            if not same_problem(own_problem(path, n, row, pid, max_tests), first_of[pid]):
                raise DatasetError(f"{path}, row {n}: problem id {pid!r} is the dataset's, and the row carries other "
                                   "tests or another answer than the dataset's: drop them (the dataset's grade it), or "
                                   "give the row an id of its own (--dataset '' grades rows on their own tests)")
        if pid in by_id:
            problem = by_id[pid]
        elif pid in later:
            past_limit += 1
            continue
        elif "tests" in row or "answer" in row:
            if limit and key not in own_keys and len(own_keys) >= limit:
                past_limit += 1
                continue
            own_keys.add(key)
            problem = own_problem(path, n, row, pid or f"row {n}", max_tests)
            first = grouped.get(key, (problem,))[0]
            if not same_problem(problem, first):
                raise DatasetError(f"{path}, row {n}: problem id {pid!r} carries other tests or another answer than "
                                   "its first row: give each problem its own id")
            problem = first
        elif not pid:
            other = next((k for k in row if k.lower() in ("task_id", "problem", "pid", "question_id", "name")), None)
            raise DatasetError(f"{path}, row {n} has no \"problem_id\"" + (f" (it has {other!r}: name its problem "
                               f"as problem_id, e.g. {next(iter(by_id), '...')!r})" if other else "") +
                               ", and no tests or answer of its own")
        else:
            raise UnknownProblem(f"{path}, row {n}: problem id {pid!r} is not in the dataset, and the row has no tests "
                                 f"or answer of its own (known ids look like {next(iter(by_id), '...')!r})", pid)
        grouped.setdefault(key, (problem, []))[1].append((text, num_tokens, False))
    if past_limit:
        err.print(f"[yellow]left out {past_limit} completions of problems past --limit[/]")
    return list(grouped.values())


class UnknownProblem(DatasetError):
    def __init__(self, message: str, pid: str):
        super().__init__(message)
        self.pid = pid


def _split_of(pid: str, key: str | None, cfg: EvalConfig, seeded: dict) -> str:
    """Where a completion's problem id is in another split of the dataset: the option that names it (a hunt's find:
    completions of MBPP's test split, graded with --split validation, read as ids of no dataset)."""
    info = DATASETS.get(key)
    if info is None or not (info.generated or find_path(info, cfg.data_path)):  # (only what is on this machine: a
        return ""  # hub dataset's other splits would be downloaded for a hint)
    from execrl.tasks import problem as rows

    quiet, rows.err.quiet = rows.err.quiet, True  # (its lines read as a load of that split for the eval: a hunt's find)
    try:
        for split in info.splits:
            if split == cfg.split:
                continue
            try:
                found, _ = load_problems(key, split, cfg.data_path, cfg.max_tests, **seeded, **cfg.data_options)
            except (DatasetError, OSError, ValueError):
                continue
            if any(p.id == pid for p in found):
                return f": it is a problem of {cfg.dataset}'s {split} split (--split {split})"
    finally:
        rows.err.quiet = quiet
    return ""


def loader_seed(key: str) -> int | None:
    """The seed a generated dataset's loader poses its problems with when none is given (None: it takes none)."""
    import inspect

    info = DATASETS[key]
    seed = inspect.signature(info.load).parameters.get("seed") if info.generated else None
    return seed.default if seed is not None and isinstance(seed.default, int) else None


def same_problem(a: Problem, b: Problem) -> bool:
    """The same tests (or answer) in the same language: what grades a completion."""
    return (a.tests, a.answer, a.language) == (b.tests, b.answer, b.language)


def own_problem(path: str, n: int, row: dict, pid: str, max_tests: int) -> Problem:
    """A completions row's own problem: its "tests" (a code problem) or "answer" (math)."""
    language = language_named(row.get("language"))
    if language is None:
        raise DatasetError(f"{path}, row {n}: language {row.get('language')!r} is not one the sandbox runs "
                           f"({sorted(LANGUAGES)})")
    try:
        tests = truncate_tests(distinct(parse_tests(row["tests"])), max_tests) if "tests" in row else None
    except TestSpecError as e:
        raise DatasetError(f"{path}, row {n}: {e}") from None
    if tests is not None and (refused := tests_refused(language, tests)):  # (found mid-grading, it lost the rows
        raise DatasetError(f"{path}, row {n}: {refused}")  # graded before it)
    answer = None
    if "answer" in row and "tests" not in row:  # (as the jsonl loader reads an answer: nothing can equal "", and
        answer = answer_text(row["answer"])  # true or [1, 2] would be compared as Python writes them)
        if answer is None or not answer.strip():
            raise DatasetError(f"{path}, row {n}: its 'answer' {row['answer']!r} is "
                               f"{'empty' if answer is not None else answer_kind(row['answer'])}: give "
                               "the reference as text or a number")
    return Problem(pid, [], "code" if "tests" in row else "math", tests=tests, answer=answer, language=language)


def summarize(cfg: EvalConfig, samples: list[Sample], source: dict | None = None, skipped: dict | None = None,
              dropped: int = 0) -> dict:
    """results.jsonl (a row per problem) and summary.json (pass@k, the verdicts, and what ran: `source`, the model or
    the completions file, and the settings that decide the figures; `skipped`: the dataset's unusable rows, by
    reason)."""
    per_problem: dict[int, list[Sample]] = defaultdict(list)  # (by problem, not by id: ids may repeat)
    for s in samples:
        per_problem[id(s.problem)].append(s)
    out_dir = Path(cfg.out)
    counts, outcomes, invalid, rows = [], Counter(), 0, []
    for group in per_problem.values():
        outs = [outcome(s) for s in group]  # once per sample: math answers are verified here
        valid = [o for s, o in zip(group, outs) if s.valid]
        c = sum(o in CORRECT for o in valid)
        invalid += len(group) - len(valid)
        counts.append((len(valid), c))
        outcomes.update(outs)
        row = {"id": group[0].problem.id, "samples": len(group), "valid": len(valid), "correct": c, "outcomes": outs,
               "completions": [s.completion for s in group]}
        if cfg.reward_model:
            row["reward_model_scores"] = [s.rm_score for s in group]  # (null: the sandbox failed on it)
        rows.append(row)
    cut = sum(s.cut for s in samples)  # (at --max-new-tokens before they ended)
    summary = {"dataset": cfg.dataset, "split": cfg.split, "problems": len(per_problem),
               **({"rows_skipped": skipped} if skipped else {}),  # (a hunt's find: 4 of 5 rows skipped read as 1 of 1)
               **({"problems_dropped_long_prompt": dropped} if dropped else {}), "samples": len(samples),
               **({} if "completions" in (source or {}) else {"samples_cut_at_max_new_tokens": cut}),
               "invalid_samples": invalid, "outcomes": dict(outcomes),
               "ran": ran(cfg, source or {}, {s.problem.metadata.get(VERIFIER, "hf_math_verify") for s in samples
                                             if s.problem.kind == "math"})}
    if cfg.reward_model:
        judged = [s.rm_score for s in samples if s.rm_score is not None]
        summary["reward_model"] = cfg.reward_model
        summary["reward_model_settings"] = cfg.reward_model_settings
        summary["reward_model_mean"] = sum(judged) / len(judged) if judged else None
        summary["reward_model_truncated"] = sum(s.rm_cut for s in samples)  # (read in part: over its length)
    for k in cfg.ks:
        value, left_out = mean_pass_at_k(counts, k)
        summary[f"pass@{k}"] = None if math.isnan(value) else value
        if left_out:
            summary[f"pass@{k}_problems_left_out"] = left_out
    sizes = sorted({len(group) for group in per_problem.values()}) or [0]  # (a completions file's differ by problem)
    per = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    try:  # results.jsonl and summary.json of one eval, or no summary.json: each file whole, the summary last (a hunt's
        # find: an eval stopped or refused by a full disk while writing its rows left them beside an earlier eval's
        # summary, and a traceback, its figures unprinted)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").unlink(missing_ok=True)
        write_whole(out_dir / "results.jsonl", (json.dumps(row) + "\n" for row in rows))  # (a row at a time:
        # not joined, twice the completions in memory, a review's find)
        write_whole(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    except OSError as e:
        _print(summary, cfg, None, per)
        raise ValueError(f"{out_dir}: the results could not be written ({e.strerror or e}): the figures above are this "
                         "eval's; free space there or name another --out, and run the command again") from None
    _print(summary, cfg, out_dir, per)
    no_code = outcomes[NO_CODE]
    if cut and cut * 2 >= len(samples):  # (their answers unfinished: no code, no answer, a constraint unmet)
        turn = cfg.turn_end_id
        fix = "raise it" if turn is None or turn in (cfg.end_token_ids or [turn]) else (
            f"the chat template's end of turn (id {turn}) ends none of them: --stop-token-ids {turn}")
        err.print(f"[yellow]{cut} of {len(samples)} samples were cut at --max-new-tokens {cfg.max_new_tokens} before "
                  f"they ended: their answers are unfinished; {fix}[/]")
    elif samples and no_code * 2 >= len(samples) and cfg.prompt.code_style != "plain":
        err.print(f"[yellow]{no_code} of {len(samples)} samples hold no code where --code-style "
                  f"{cfg.prompt.code_style} looks for it ({_LOOKS_IN[cfg.prompt.code_style]}): where the model "
                  "writes bare code, grade the whole completion with --code-style plain[/]")
    return summary


def ran(cfg: EvalConfig, source: dict, verifiers: set[str] = frozenset()) -> dict:
    """What decided the figures: the model (and how it sampled) or the completions file, the data, the grading
    (`verifiers`: the math problems' answer checks)."""
    sampled = {"samples_per_problem": cfg.samples, "temperature": cfg.temperature, "top_p": cfg.top_p, "seed": cfg.seed,
               "max_new_tokens": cfg.max_new_tokens, "max_prompt_tokens": cfg.max_prompt_tokens,
               "stop_token_ids": cfg.stop_token_ids, "end_token_ids": cfg.end_token_ids,
               "stop_strings": cfg.stop_strings,
               "backend": cfg.backend, "batch_size": cfg.batch_size, "guided": cfg.guided,
               "chat_template_kwargs": cfg.chat_template_kwargs, "first_prompt": cfg.first_prompt,
               **({"trained_multi_turn": cfg.trained_multi_turn} if cfg.trained_multi_turn else {})} \
        if "model" in source else {}
    data_path = None if cfg.data_path is None else str(cfg.data_path)
    return {**source, **sampled, "data_path": data_path, "data_read_from": read_from(cfg), "data_seed": cfg.data_seed,
            **({"data_options": cfg.data_options} if cfg.data_options else {}),
            "limit": cfg.limit,
            "max_tests": cfg.max_tests, "timeout_s": cfg.timeout_s, "system_prompt": cfg.prompt.system_prompt,
            "answer_format": cfg.prompt.answer_format, "code_style": cfg.prompt.code_style,
            "add_instructions": cfg.prompt.add_instructions, "template": cfg.prompt.template,
            **({"math_verify_impl": sorted(verifiers)} if verifiers else {})}


def read_from(cfg: EvalConfig) -> str | None:
    """Where the dataset's problems were read: the file or directory (a hub id's local copy, which may be a handful
    of examples), "hub:<id>", or "generated"; None without a dataset."""
    if not cfg.dataset:
        return None
    info = DATASETS[dataset_key(cfg.dataset)]
    local = local_source(info, cfg.data_path)
    if local is not None:
        return str(local)
    return "generated" if info.generated else f"hub:{info.hub_id}" if info.hub_id else f"loader:{info.name}"


_LOOKS_IN = {"fence": "a ```python block", "tags": "<code></code> tags", "auto": "a ``` block or <code> tags"}


def _print(summary: dict, cfg: EvalConfig, out_dir: Path | None, per_problem: str) -> None:
    """The table; `per_problem`: the samples each problem had ("10", or "1-10" where they differ); `out_dir`: where
    results.jsonl was written (None: it was not)."""
    source = f"{cfg.dataset}/{cfg.split}" if cfg.dataset else "the completions' own problems"
    if cfg.dataset in DATASETS and not DATASETS[cfg.dataset].splits and cfg.data_path:  # (a file's loader: its
        source = f"{cfg.dataset} ({Path(cfg.data_path).name})"  # split is the file, not --split)
    title = f"{source}: {summary['problems']} problems x {per_problem} sample"
    table = Table(title=Text(shown(title + ("" if per_problem == "1" else "s"))), min_width=64)  # (Text: a path's
    # brackets are not markup)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in cfg.ks:
        v, left_out = summary[f"pass@{k}"], summary.get(f"pass@{k}_problems_left_out")
        short = f" ({left_out} problems with fewer than {k} valid samples left out)" if left_out else ""
        table.add_row(f"pass@{k}" + (" (accuracy)" if k == 1 and cfg.dataset == "gsm8k" else "") + short,
                      "n/a" if v is None else f"{v:.4f}")
    if cfg.reward_model:
        v = summary["reward_model_mean"]
        table.add_row("reward model mean score", "n/a" if v is None else f"{v:.4f}")
    for name, n in sorted(summary["outcomes"].items(), key=lambda x: -x[1]):
        table.add_row(f"  {name}", str(n))
    if summary["invalid_samples"]:
        table.add_row("invalid (sandbox failure)", str(summary["invalid_samples"]))
    Console().print(table)
    if out_dir is not None:  # (unwrapped: a table's caption wrapped a long path mid-name in a log, a hunt's find)
        Console().print(Text(shown(f"per-problem results: {out_dir / 'results.jsonl'}")), soft_wrap=True)


def _bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=False)
