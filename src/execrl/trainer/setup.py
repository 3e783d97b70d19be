"""Everything a training run holds, built once from the config (and resumed from the latest
checkpoint)."""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.text import Text

from execrl.algo.role_baselines import RoleBaselines
from execrl.compiling import warm_compile_workers
from execrl.config import BatchPlan, ConfigError, MasterConfig, to_yaml
from execrl.config.checks import (
    check_dataset_names,
    check_reward_fits,
    check_schedule_left,
    check_stop_strings,
    data_sources,
    dataset_entries,
    no_references,
    prompt_limit,
    validate,
)
from execrl.console import stderr_console
from execrl.envs import called, make_env
from execrl.lora import Adapter
from execrl.models import TINY_CODERS, pick_device, position_limit, weights_identity
from execrl.prompts import check_roles, conversation_ids, templated, tokenizer_identity
from execrl.rewards.judges import load_reward_model
from execrl.rewards.reward_model import RewardModel
from execrl.rollout import build_generator
from execrl.rollout.models import REGISTRY, has_family
from execrl.rollout.models.base import rotary_bound
from execrl.sandbox import Grader, Limits
from execrl.tasks import DATASETS, Problem, dataset_key
from execrl.tasks.problem import err as problem_err
from execrl.tasks.registry import local_source
from execrl.trainer import checkpoint, memory, precision
from execrl.trainer import distributed as dist
from execrl.trainer.data import ProblemSampler, load_data
from execrl.trainer.lock import RunLock
from execrl.trainer.memory_plan import bounded_slots, engine_slots, gpu_memory, shape_of, summary
from execrl.trainer.metrics import SAVED, MetricsLogger
from execrl.trainer.opponent import Opponent, build_opponent
from execrl.trainer.optim import make_optimizer
from execrl.trainer.pipeline import RolloutPipeline, build_pipeline
from execrl.trainer.policy import build_policy
from execrl.trainer.rollouts import EpisodeRunner
from execrl.trainer.step import sharing_note
from execrl.writable import write_whole

console = stderr_console()


@dataclass
class Run:
    cfg: MasterConfig
    plan: BatchPlan
    weights: precision.Weights  # master (optimizer, checkpoints) and compute (forward passes, rollouts)
    tokenizer: object
    ref_model: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: ProblemSampler
    val_problems: list[Problem]
    references: dict[str, list[dict]]  # warm-up: the model's turns (and the environment's) after each prompt
    grader: Grader
    logger: MetricsLogger
    pipeline: RolloutPipeline | None = None  # each step's rollouts (generated ahead with async GRPO)
    max_steps: int = 0  # grpo.max_num_steps, or fewer where grpo.max_num_epochs passes over the data come first
    step: int = 0
    resumed_from: str | None = None
    saved_config: dict | None = None  # the config of the run that wrote the checkpoint resumed from (as JSON)
    last_saved: int = -1
    updating: bool = False  # a train phase under way: the weights are partway between step and step + 1
    nan_streak: int = 0
    diverged: str | None = None  # why the run stops after this step's line is logged (NaN/inf steps in a row)
    flat_streak: int = 0  # steps in a row whose every group had equal rewards
    flat_cut: bool = False  # at the last step every group's samples were truncated and left out of the loss
    flat_rows: list = field(default_factory=list)  # the metrics of the last steps of that streak (up to 3)
    blind_streak: int = 0  # steps in a row whose every group's rewards were equal but for the shaping components
    adv_warned: bool = False  # an advantage over loop.ADVANTAGE_WARNING was said (once a run)
    left: object = None  # trainer.deferred.Trained: a step whose optimizer ran on as the next generated, its log to come
    started: float = field(default_factory=time.monotonic)
    baselines: RoleBaselines = field(default_factory=RoleBaselines)  # self-play's role baselines (grpo.advantage rae)
    opponent: Opponent | None = None  # self-play's frozen opponent (env.game.opponent)
    lora: Adapter | None = None  # with policy.lora: the peft model around `model` and the base it adapts
    lock: RunLock | None = None  # the run directories, held while the run runs (the main process's)
    episodes: EpisodeRunner | None = None  # runs the environments' episodes with generator, grader, opponent, judge
    base_identity: str | None = None  # policy.model_name's weight files as the run started (models.weights_identity)
    judge_identity: str | None = None  # env.reward_model's weight files and tokenizer as the run started (same_judge)

    @property
    def judge(self) -> RewardModel | None:
        """env.reward_model: scores finished conversations (reward component reward_model)."""
        return self.episodes.judge if self.episodes is not None else None

    @property
    def model(self) -> torch.nn.Module:
        """The master model: what the optimizer updates and checkpoints save."""
        return self.weights.master

    def close(self, outcome: int = 0) -> None:
        """outcome: the run's exit code (0 it ran its course, 130 stopped, 1 failed), for its W&B run."""
        if self.pipeline is not None:
            self.pipeline.close()
        if self.episodes is not None:
            self.episodes.close()
        self.grader.close()
        self.logger.close(outcome)
        if self.lock is not None:
            self.lock.release()


def resumable(cfg: MasterConfig, state: dict, found: Path) -> list[str]:
    """A resumed run's config against its checkpoint's: changes that cannot apply (the learning
    rate, which the checkpoint's optimizer and schedule hold; the model, the data, the algorithm)
    stop it before it writes anything; the others are returned, to be named."""
    if "config" not in state:  # (a checkpoint from before configs were saved in it)
        return []
    applied, refused = checkpoint.config_changes(state["config"], cfg.model_dump(mode="json"))
    if refused:
        shown = "; ".join(refused[:6]) + (f"; and {len(refused) - 6} more" if len(refused) > 6 else "")
        raise ValueError(f"{found} was trained with another config, and resuming it cannot apply {shown}: set those "
                         f"back to the checkpoint's values, or start a new run: {new_run(cfg)}")
    return applied


def new_run(cfg: MasterConfig) -> str:
    """The settings that start a new run beside this config's: another logger.log_dir and checkpointing.checkpoint_dir
    (checkpoints inside the log directory stay inside the new one)."""
    log, ckpt = (Path(os.path.normpath(d)) for d in (cfg.logger.log_dir, cfg.checkpointing.checkpoint_dir))
    log, ckpt = (p.resolve() if p.name in ("", "..") else p for p in (log, ckpt))  # ("." or "..": the folder named)
    where, saved = Path(os.path.abspath(log)), Path(os.path.abspath(ckpt))  # (inside: compared where they are)
    inside = saved.relative_to(where) if saved.is_relative_to(where) else None

    def pair(n: int) -> tuple[Path, Path]:
        other = log.parent / f"{log.name}-{n}"
        return other, other / inside if inside is not None else ckpt.parent / f"{ckpt.name}-{n}"

    other, moved = next(pair(n) for n in itertools.count(2) if not any(p.exists() for p in pair(n)))  # (a free one)
    return f"logger.log_dir={other} checkpointing.checkpoint_dir={moved}"


def _refused(cfg: MasterConfig, found: Path | None) -> str | None:
    """Why the checkpoint this run resumes cannot take its config (resumable), checked before the log directory's
    record (a copied run's, resumed with a key it cannot take, read as another run's)."""
    if found is None:
        return None
    try:
        resumable(cfg, checkpoint.trainer_state(found, mmap=True), found)  # (its tensors, an opponent's weights, unread)
    except ValueError as e:
        return str(e)
    return None


def resume_plan(cfg: MasterConfig) -> tuple[str, str | None]:
    """`execrl train --dry-run`'s line on where the run would start (a checkpoint's step, or step 0), and why the run
    would refuse to start there (None: it would not). The dry-run said neither, and passed a command the run then
    refused (a resume with a key it cannot take: a hunt's find)."""
    found = checkpoint.latest_here(cfg.checkpointing.checkpoint_dir) if cfg.checkpointing.enabled else None
    refused = _refused(cfg, found) or erases_a_run(cfg, resuming=found is not None)
    if found is None:
        where = "step 0" + (" (checkpointing.enabled=false)" if not cfg.checkpointing.enabled else
                            f" (no checkpoint in {cfg.checkpointing.checkpoint_dir})")
        return f"starts at {where}", refused
    if refused:  # (its state may be what cannot be read)
        return f"would resume from {found}", refused
    step = checkpoint.trainer_state(found, mmap=True).get("step", "?")
    if isinstance(step, int) and step >= cfg.grpo.max_num_steps:
        return (f"resumes from {found} (step {step}): already at grpo.max_num_steps={cfg.grpo.max_num_steps}, nothing "
                "to do; raise it to go on"), None
    return f"resumes from {found} (step {step}) to grpo.max_num_steps={cfg.grpo.max_num_steps}", None


def same_base(run: Run, state: dict, found: Path) -> None:
    """Where a resume reads policy.model_name's weights again (under LoRA adapters, or as the KL penalty's
    reference), they are those the run trained on: a base trained further or replaced in place kept its name, and
    the adapters were read onto weights they never trained with, without a word."""
    cfg, saved = run.cfg, state.get("base_identity")
    lora = cfg.policy.lora.enabled and not (run.lora is not None and run.lora.own_base)
    reference = run.ref_model is not None and not cfg.warmup.sft_steps
    if not (lora or reference) or saved is None or run.base_identity is None or saved == run.base_identity:
        return
    what = "the LoRA adapters" if lora else "the KL penalty's reference"
    raise ValueError(f"{cfg.policy.model_name}'s weight files differ from those this run trained on (recorded in "
                     f"{found}): resuming would read {what} onto other weights. Restore the model the run started "
                     f"from, or start a new run: {new_run(cfg)}")


def same_tokens(run: Run, state: dict, found: Path) -> None:
    """The resumed run's tokenizer and chat template read prompts as the checkpoint's run did
    (prompts.tokenizer_identity): one edited in place kept its name, and every later step's prompts came out
    otherwise, without a word."""
    saved = state.get("tokenizer_identity")
    if saved is None or saved == tokenizer_identity(run.tokenizer):
        return
    raise ValueError(f"{run.cfg.policy.model_name}'s tokenizer or chat template differs from the one this run trained "
                     f"with (recorded in {found}; its policy/ folder holds that tokenizer): resuming would render or "
                     "tokenize prompts otherwise from here on. Restore it (or set policy.tokenizer.chat_template to "
                     f"the one in the checkpoint), or start a new run: {new_run(run.cfg)}")


def same_judge(run: Run, state: dict, found: Path) -> None:
    """The resumed run's reward model is the one the checkpoint's run was rewarded by (its weight files, tokenizer
    and chat template): one retrained or replaced in place kept its name, and the reward changed without a word."""
    saved = state.get("judge_identity")
    if saved is None or run.judge_identity is None or saved == run.judge_identity:
        return
    raise ValueError(f"the reward model {run.cfg.env.reward_model.model_name}'s weight files, tokenizer or chat "
                     f"template differ from those this run was rewarded by (recorded in {found}): resuming would "
                     "train toward another reward from here on. Restore that reward model, or start a new run: "
                     f"{new_run(run.cfg)}")


def check_move_room(cfg, tokenizer) -> None:
    """With env.game.guided_moves, an answer is held to `Move: <a legal move>`: each trained game's shortest first move
    and the answer's end must fit policy.generation.max_new_tokens (negotiation at 8 tokens: every answer was cut
    mid-move, every match a forfeit, and only the truncation warning said anything). ConfigError, with the room."""
    from execrl.games import GAMES

    if not cfg.env.game.guided_moves:
        return
    budget = cfg.policy.generation.max_new_tokens
    for d in cfg.data.train_sets:
        game = GAMES.get(d.dataset_name.split(":", 1)[1]) if d.dataset_name.startswith("selfplay:") else None
        if game is None or game.free_text:
            continue
        moves = game.legal_moves(game.initial(random.Random(0)))
        need = min(len(tokenizer(f"Move: {m}", add_special_tokens=False)["input_ids"]) for m in moves) + 1
        if need > budget:
            raise ConfigError(f"env.game.guided_moves holds each answer to `Move: <a legal move>`, and {game.name}'s "
                              f"shortest first move takes {need} tokens with the answer's end, over "
                              f"policy.generation.max_new_tokens={budget}: every answer would be cut and forfeit. Set "
                              f"policy.generation.max_new_tokens to {need} or more")


def erases_a_run(cfg: MasterConfig, resuming: bool = False) -> str | None:
    """Why this run, starting from step 0, would erase the record of an earlier run in its log directory (metric
    rows, and a config.yaml it would not resume: one that differs in what a step computes, or whose checkpoints are
    elsewhere); None where it would not (no rows, or the same run started again before its first checkpoint).
    `resuming` (from checkpointing.checkpoint_dir): only a record of a run that differs so and whose checkpoints are
    elsewhere, or that kept none, is another run's (a resume into one cut its later rows as "done again" and kept its
    earlier ones as its own)."""
    import yaml

    log = Path(cfg.logger.log_dir).expanduser()
    try:
        lines = [line for line in (log / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rows = len(lines)
        text = (log / "config.yaml").read_text()
        saved = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not rows or not isinstance(saved, dict):
        return None
    _, refused = checkpoint.config_changes(saved, cfg.model_dump(mode="json"))
    was = saved.get("checkpointing") if isinstance(saved.get("checkpointing"), dict) else {}
    old = Path(str(was.get("checkpoint_dir", ""))).expanduser()
    old = (_started_in(text) or Path.cwd()) / old  # (a relative one is from where that run started, not from here: a
    # run started elsewhere found no checkpoints there and erased the record)
    kept = bool(was.get("enabled")) and any((p / "trainer_state.pt").is_file() for p in old.glob(f"{checkpoint.PREFIX}*"))
    elsewhere = kept and (not cfg.checkpointing.enabled or
                          old.resolve() != Path(cfg.checkpointing.checkpoint_dir).expanduser().resolve())
    unresumable = not cfg.checkpointing.enabled  # (the same config again, without checkpoints: a whole earlier run's
    never_saved = not was.get("enabled")  # rows went, with a note; as they did where that run kept no checkpoints)
    if resuming and not (refused and (elsewhere or never_saved)):  # (another run: checkpoints of its own, or none,
        return None  # and a config that differs in what a step computes; a copy of this run's record is its own)
    if not refused and not elsewhere and not unresumable and not never_saved:
        if not kept and (last := saved_a_checkpoint(log, lines, was)):
            return (f"logger.log_dir {log} holds the metrics of a run ({rows} rows) that saved checkpoints, to step "
                    f"{last}, in {old}, and they are gone: this run starts from step 0 and would erase its record. "
                    f"Restore the checkpoints to resume it, or start a new run: {new_run(cfg)} (or remove {log} to "
                    "start over in it)")
        return None
    why = (f"its checkpoints are in {old}, which this run does not resume" if elsewhere else
           "its config.yaml differs in " + "; ".join(refused[:3]) + (" ..." if len(refused) > 3 else "") if refused else
           "checkpointing.enabled is false, so this run cannot resume it" if unresumable else
           "it ran with checkpointing.enabled false, so no run can resume it")
    this = (f"this run resumes from {cfg.checkpointing.checkpoint_dir} and would mix its record with theirs" if resuming
            else "this run starts from step 0 and would erase them")
    return (f"logger.log_dir {log} holds the metrics of another run ({rows} row{'s' if rows > 1 else ''}; {why}): "
            f"{this}. Name another logger.log_dir"
            + (f", or resume that run ({_resuming_it(cfg, old)})" if elsewhere else ""))


def _resuming_it(cfg: MasterConfig, old: Path) -> str:
    """The setting that resumes a run whose checkpoints are in `old`: its directory, or checkpoints on where they
    are this run's already (a hunt's find: the advice named the value the user had set)."""
    here = Path(cfg.checkpointing.checkpoint_dir).expanduser().resolve() == old.resolve()
    return "checkpointing.enabled=true" if here else f"checkpointing.checkpoint_dir={old}"


def saved_a_checkpoint(log: Path, lines: list[str], was: dict) -> int | None:
    """The last step a log directory's run saved a checkpoint of, else None: where its saves wrote it down
    (MetricsLogger.saved), or, in a record from before that, a row past its first save period (a save that fails
    stops the run, so a later step means it was written). A hunt's find: with its checkpoints deleted (a full disk's
    cleanup, a scratch purge, a requeue on a node without them) the same command started over and erased the whole
    record."""
    with suppress(OSError, ValueError, IndexError):
        return int((log / SAVED).read_text().split()[0]) or None
    steps = []
    for line in lines:
        with suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                steps.append(row["step"])
    last, period = max(steps, default=0), was.get("save_period")
    return last if isinstance(period, int) and 0 < period < last else None


def run_directories(cfg: MasterConfig) -> dict[str, str]:
    """The directories to lock, by the key naming each: the log directory and the checkpoints' (each its own lock:
    locked only where it was not in the log directory, or only where it existed, two runs with other log directories
    wrote one checkpoint directory, the second's weights under the first's step names)."""
    dirs = {"logger.log_dir": cfg.logger.log_dir}
    log, ckpt = (Path(d).expanduser().resolve() for d in (cfg.logger.log_dir, cfg.checkpointing.checkpoint_dir))
    if cfg.checkpointing.enabled and ckpt != log:  # (one directory, one lock: a second flock of it waits on the first)
        dirs["checkpointing.checkpoint_dir"] = cfg.checkpointing.checkpoint_dir
    return dirs


def check_positions(cfg: MasterConfig, model) -> None:
    """A context longer than the model's positions: refused where they are a learned table (a sequence past it
    crashed mid-generation with an IndexError), a warning where they are rotary (positions it was never trained at)."""
    limit = position_limit(model)
    length = cfg.policy.max_total_sequence_length
    if limit is None or length <= limit[0]:
        return
    if limit[1]:
        raise ConfigError(f"policy.max_total_sequence_length is {length:,} but {cfg.policy.model_name}'s positions are "
                          f"a learned table of {limit[0]:,} (its config's n_positions / max_position_embeddings): a "
                          f"longer sequence has no position; set policy.max_total_sequence_length={limit[0]}")
    if dist.is_main():
        console.print(f"[yellow]warning: policy.max_total_sequence_length is {length:,} and {cfg.policy.model_name} was "
                      f"made for {limit[0]:,} positions (its config's max_position_embeddings): a sample past them "
                      "runs at positions the model never trained at (a rope_scaling in its config extends them), "
                      f"or set policy.max_total_sequence_length={limit[0]}[/]")


def build_run(cfg: MasterConfig) -> Run:
    """The run's parts, in the order they need each other; a refusal on the way unlocks its directories (and removes
    those the lock made where nothing else was written)."""
    plan, lock = start(cfg)
    try:
        return _parts(cfg, plan, lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _parts(cfg: MasterConfig, plan: BatchPlan, lock: RunLock | None) -> Run:
    gpu = gpu_memory() if pick_device(cfg.policy.device).type == "cuda" else None
    shape = shape_of(cfg) if gpu else None
    for line in summary(cfg, shape, gpu):  # what the GPU will hold, before anything loads
        console.print(line if "does not fit" not in line else f"[yellow]{line}[/]")
    if gpu and (cfg.policy.torch_compile or cfg.policy.generation.compile):
        warm_compile_workers()  # ready by the first compilation
    policy = build_policy(cfg)
    note = sharing_note(cfg, policy.weights.compute, plan.train_split)
    if note and dist.is_main():
        console.print(note, markup=False, highlight=False)
    check_positions(cfg, policy.weights.compute)
    check_move_room(cfg, policy.tokenizer)
    bound = rotary_bound(policy.weights.compute)
    if bound is not None and cfg.policy.max_total_sequence_length > bound and dist.is_main():
        console.print(f"[yellow]warning: the model's rotary frequencies change past {bound:,} tokens (longrope, dynamic "
                      f"NTK) and policy.max_total_sequence_length is {cfg.policy.max_total_sequence_length:,}: a "
                      "sample that grows past them was sampled with the short frequencies at its early positions and "
                      "is scored with the long ones at all (transformers' forward), several nats apart "
                      f"(train/logprob_mismatch); set policy.max_total_sequence_length={bound} to keep every sample "
                      "within them[/]")
    train, val, refs = training_data(cfg, policy.tokenizer)
    optimizer = make_optimizer(policy.weights, cfg.policy.optimizer.name, cfg.policy.optimizer.kwargs)
    slots = engine_slots(cfg)  # (start() checked that the processes are the config's GPUs)
    if cfg.policy.generation.backend == "execrl" and gpu:
        slots = bounded_slots(cfg, shape, gpu)[0]  # (the memory plan's lines above said so)
    generator = rollout_generator(cfg, policy, slots)
    grader = Grader(dist.sandbox_workers(cfg.env.code.num_workers),
                    Limits(timeout_s=cfg.env.code.timeout_s, memory_mb=cfg.env.code.memory_mb),
                    languages=languages(train + val))
    if grader.pool.num_workers < 2 and any(p.metadata.get("game") == "code_game" for p in train):
        grader.close()  # (the code game's two runs of a program on one worker share its hash seed and memory layout:
        raise ConfigError(  # hash('abc') printed the same in both, a program no predictor could predict)
            f"the code game runs each program on two sandbox workers, and this process has "
            f"{grader.pool.num_workers}: set env.code.num_workers=2 or more (per node)")
    identity = weights_identity(cfg.policy.model_name)  # (read once: the resume's check and the adapter's record)
    run = Run(cfg, plan, policy.weights, policy.tokenizer, policy.ref, optimizer,
              cfg.policy.scheduler.build(optimizer), ProblemSampler(train, cfg.grpo.seed, cfg.data.shuffle), val, refs,
              grader, MetricsLogger(cfg, write=dist.is_main()), baselines=RoleBaselines(cfg.grpo.role_baseline_decay),
              lora=adapter(cfg, policy.peft_model, identity), lock=lock, base_identity=identity)
    run.max_steps = cfg.grpo.max_num_steps
    if not cfg.grpo.use_dynamic_sampling:  # (which draws a varying number of prompts per step: the loop checks)
        run.max_steps = min(run.max_steps, cfg.grpo.max_num_epochs * steps_per_epoch(len(train),
                                                                                   cfg.grpo.num_prompts_per_step))
    judge = reward_model(cfg)  # (before the resume, which checks it is the one the run trained against)
    if judge is not None and (files := weights_identity(cfg.env.reward_model.model_name)) is not None:
        run.judge_identity = f"{files} {tokenizer_identity(judge.tokenizer)}"
    resume(run)
    run.opponent = build_opponent(cfg, policy.weights.compute, policy.tokenizer, slots)
    if run.opponent is not None and run.resumed_from:  # (a snapshot opponent as it was, not the policy now)
        saved = checkpoint.trainer_state(Path(run.resumed_from)).get("opponent")
        if saved is not None:
            run.opponent.load_state_dict(saved)
    run.episodes = EpisodeRunner(cfg, generator, policy.tokenizer, grader,
                                 run.opponent.generator if run.opponent else None, judge)
    if observation_role(cfg):
        run.episodes.renderer.check_role(cfg.env.multi_turn.observation_role)  # (before a step: their turns' role)
        if cfg.prompt.system_prompt and dist.is_main() and run.episodes.renderer.system_moves(
                cfg.env.multi_turn.observation_role):
            console.print("note: the chat template writes the system prompt in a conversation's last user turn, and "
                          "an episode's later turns are appended to its tokens, not re-rendered: after its first "
                          "turn the model reads prompt.system_prompt before its first question, where the template "
                          "would not put it; to train as the template renders, fold it into the prompt "
                          "(prompt.system_prompt=null and the text in the task's prompt) or set "
                          "policy.tokenizer.chat_template to one that keeps it first", markup=False, highlight=False)
    run.pipeline = build_pipeline(cfg, plan, run.episodes, run.sampler)
    return run


def steps_per_epoch(problems: int, prompts_per_step: int) -> int:
    """As NeMo RL's loader, which drops an epoch's last short batch: whole steps of the epoch's problems (one step
    where an epoch holds fewer problems than a step draws)."""
    return max(1, problems // prompts_per_step)


def start(cfg: MasterConfig) -> tuple[BatchPlan, RunLock | None]:
    """The config checked (execrl train checked it before; here for train() called from Python), the
    processes joined, the run's directories locked before any work, the seeds set."""
    plan = validate(cfg)
    dist.init(cfg.policy.device, cfg.cluster.rank_wait_minutes)
    console.quiet = problem_err.quiet = not dist.is_main()  # one rank speaks for all (the datasets' lines too)
    if dist.world_size() != plan.num_gpus:
        stray = "" if not dist.launched() or dist.world_size() > 1 or "TORCHELASTIC_RUN_ID" in os.environ else (
            f" (RANK={os.environ['RANK']} and WORLD_SIZE={os.environ['WORLD_SIZE']} in the environment, with no "
            "torchrun, made execrl take this process for one of a launched run's: unset them)")
        raise ValueError(f"{dist.world_size()} training process(es) but cluster.num_nodes x cluster.gpus_per_node = "
                         f"{plan.num_gpus}{stray}: start multi-GPU runs with `execrl train CONFIG` (it launches "
                         "torchrun) or set cluster.gpus_per_node to the number of processes per node")
    lock = RunLock(run_directories(cfg)) if dist.is_main() else None
    found = checkpoint.latest(cfg.checkpointing.checkpoint_dir) if cfg.checkpointing.enabled else None
    erased = dist.from_main(_refused(cfg, found) or erases_a_run(cfg, resuming=found is not None)
                            if dist.is_main() else None)
    if erased:
        if lock is not None:
            lock.release()
        raise ValueError(erased)
    random.seed(cfg.grpo.seed)
    torch.manual_seed(cfg.grpo.seed)
    return plan, lock


def training_data(cfg: MasterConfig, tokenizer) -> tuple[list[Problem], list[Problem], dict]:
    """The training and validation problems (prompts over the limit dropped, with a count) and the
    warm-up's references."""
    train, val, refs = read_data(cfg)
    val = drop_long(val, tokenizer, cfg, "data.validation", want=cfg.grpo.max_val_samples)
    if not val and (cfg.grpo.val_period > 0 or cfg.grpo.val_at_start):
        why = "grpo.max_val_samples=0 takes none" if cfg.grpo.max_val_samples == 0 else "none held out or none fits"
        console.print(f"[yellow]validation: no problem to validate on ({why}): eval/ metrics will not be logged[/]")
    train = drop_long(train, tokenizer, cfg)
    for note in (repeated_prompts_note(train, cfg), few_problems_warning(train, cfg)):
        if note:
            console.print(note, markup=False, highlight=False)
    if cfg.warmup.sft_steps and not any(p.id in refs for p in train):
        raise ValueError(no_references(cfg))
    return train, val, refs


def read_data(cfg: MasterConfig) -> tuple[list[Problem], list[Problem], dict]:
    """load_data, and the checks that need the rows read but not the tokenizer."""
    train, val, refs = load_data(cfg)
    check_dataset_names(cfg, {(where, p.kind) for where, problems in (("data.train", train), ("data.validation", val))
                              for p in problems})
    check_reward_fits(cfg, {p.kind for p in train})  # (the kinds of rows read: a jsonl's known only now)
    check_stop_strings(cfg, {p.kind for p in train})
    return train, val, refs


def data_counts(cfg: MasterConfig) -> list[str]:
    """`execrl train --dry-run`'s lines on the rows, read and checked as the run reads them (a row it skips and a
    dataset it refuses are found here), where every dataset is on this machine or generated; DatasetError,
    ConfigError or ValueError as the run would raise them."""
    remote = [d.dataset_name for _, d in dataset_entries(cfg)  # (a loader of one's own is called: code on this
              if not ((info := DATASETS[dataset_key(d.dataset_name)]).generated or info.own  # machine, whose errors
                      or local_source(info, d.path))]  # the dry run is for, a hunt's find)
    if remote:
        return [f"rows: {', '.join(dict.fromkeys(remote))} read when the run starts (not from this machine's files)"]
    train, val, _ = read_data(cfg)
    return [f"rows: {len(train):,} training problems{kinds(train)}, {len(val):,} validation problems{kinds(val)} "
            "(before prompts longer than the run's limit are dropped, which needs the tokenizer)",
            *(n for n in (repeated_prompts_note(train, cfg), few_problems_warning(train, cfg)) if n)]


def kinds(problems: list[Problem]) -> str:
    """' (120 code, 8 math)': how many problems of each kind; empty where there are none."""
    counts = collections.Counter(p.kind for p in problems)
    return f" ({', '.join(f'{n:,} {kind}' for kind, n in sorted(counts.items()))})" if counts else ""


def all_generated(cfg: MasterConfig) -> bool:
    """Whether every training set is a generated task (builtin:*, self-play, puzzles): problems made by a seeded loader,
    each with its own tests or seed, a few prompts among them."""
    return all(DATASETS[dataset_key(d.dataset_name)].generated for d in cfg.data.train_sets)


def repeated_prompts_note(train: list[Problem], cfg: MasterConfig) -> str | None:
    """A note where training problems repeat another's prompt (DAPOMath17K's hub split holds each of its ~17.9K
    problems ~100 times) and a step draws several groups: NeMo RL's current code pools the groups of one prompt in a
    step (their baseline and std over all their samples); execrl's advantages are each group's own."""
    if cfg.grpo.num_prompts_per_step < 2 or cfg.grpo.advantage != "grpo" or all_generated(cfg):
        return None  # (generated tasks pose a few prompts with fresh tests each: the problems differ)
    seen = {json.dumps(p.messages, sort_keys=True) for p in train}
    if len(seen) == len(train):
        return None
    return (f"note: {len(train) - len(seen):,} of {len(train):,} training problems repeat another's prompt: where one "
            "step draws two groups of one prompt, each group's advantages are its own (NeMo RL's current code pools "
            "them: one baseline and std over all their samples)")


def few_problems_warning(train: list[Problem], cfg: MasterConfig) -> str | None:
    """A warning where a step asks for more prompts than there are problems: each step then draws some problems
    twice or more (groups of their own, across the epoch's end) and no line said so."""
    n, per_step = len(train), cfg.grpo.num_prompts_per_step
    if not train or n >= per_step:  # (a generated task too: its loader makes a fixed list, `count` of them, a hunt's
        return None  # find)
    return (f"warning: {n:,} training problems for grpo.num_prompts_per_step={per_step:,}: every step draws some "
            f"problems more than once, each time as a group of its own (an epoch is less than a step). Lower "
            f"grpo.num_prompts_per_step to at most {n:,} (and policy.train_global_batch_size with it), or add problems")


def rollout_generator(cfg: MasterConfig, policy, slots: int):
    """The rollout backend over the compute model (the execrl engine: `slots` sequences at once)."""
    gen, lora = cfg.policy.generation, cfg.policy.lora.enabled
    with dist.full_weights(policy.weights.master):  # the engine reads the full weights' layout
        # LoRA: generate from merged weights where nothing trains meanwhile (sync, one process;
        # rollout/decoder.py)
        merge = lora and not cfg.grpo.async_grpo.enabled and dist.world_size() == 1
        with memory.phase("generation", cfg):  # (the KV cache: its advice, not the model's)
            generator = build_generator(policy.weights.compute, policy.tokenizer, gen.backend, slots,
                                        cfg.policy.max_total_sequence_length, gen.cuda_graphs, gen.sync_every,
                                        gen.compile, gen.stop_token_ids, merge)
    for line in model_notes(policy.weights.compute, gen.backend):
        console.print(line, markup=False, highlight=False)
    return dist.for_rollouts(generator, policy.weights.master)


def model_notes(model, backend: str) -> list[str]:
    """What the start-up says of the model: which path generates its rollouts, and what of its own
    training recipe (a mixture of experts' router loss) the GRPO loss leaves out."""
    c = model.config
    kind = getattr(c, "model_type", "?")
    if backend == "execrl" and has_family(model):
        arch = REGISTRY[kind]
        lines = [f"rollouts: the execrl engine, {kind} ({arch.__name__} in {arch.__module__.replace('.', '/')}.py)"]
    elif backend == "execrl":
        lines = [f"rollouts: the execrl engine's generic path, {kind} (transformers' own layers over the engine's "
                 "cache: no file for it in execrl/rollout/models/, whose families run faster)"]
    else:
        lines = [f"rollouts: transformers' generate ({kind}; policy.generation.backend={backend})"]
    if getattr(c, "output_router_logits", False):
        lines.append(f"note: {kind}'s router load-balancing loss (output_router_logits, router_aux_loss_coef="
                     f"{getattr(c, 'router_aux_loss_coef', None)}) is not added to the GRPO loss: its routers learn "
                     "from the policy gradient alone (policy.hf_config_overrides: {output_router_logits: false} "
                     "says so in the model's config)")
    return lines


def resume(run: Run) -> None:
    """The latest checkpoint, where there is one (its config compared with this one's first); the
    log directory started at the run's step, this run's config written there."""
    cfg = run.cfg
    found = checkpoint.latest(cfg.checkpointing.checkpoint_dir) if cfg.checkpointing.enabled else None
    skipped = checkpoint.passed_over(cfg.checkpointing.checkpoint_dir, found) if cfg.checkpointing.enabled else []
    if skipped and dist.is_main():
        console.print(f"[yellow]checkpoints: {', '.join(p.name for p in skipped)} passed over: incomplete (no "
                      f"trainer_state.pt); {'resuming from ' + found.name if found else 'starting from step 0'}, "
                      "and this run's checkpoints of those steps will replace them[/]")
    if found is not None:
        state = checkpoint.trainer_state(found)
        applied = resumable(cfg, state, found)  # (before the weights: another model's or LoRA's tensors would not load)
        if applied:
            console.print(f"resuming {found} with changes that apply from step {state['step'] + 1} on: "
                          + "; ".join(applied))
        if state["step"] < run.max_steps:
            check_schedule_left(cfg, state["step"], state["config"].get("grpo", {}).get("max_num_steps"))
        same_base(run, state, found)
        same_tokens(run, state, found)
        same_judge(run, state, found)
        run.sampler.check(state.get("problems", {}), str(found), lambda: new_run(run.cfg))
        checkpoint.load(found, run.model, run.optimizer, run.scheduler, state, lora=cfg.policy.lora.enabled,
                        own_base=run.lora is not None and run.lora.own_base)
        run.weights.refresh()
        # a warm-up's reference, which the warm-up saved; else the reference is the model loaded at start (one that
        # another run's warm-up left in the directory was read as this run's: its KL pulled toward other weights)
        if run.ref_model is not None and cfg.warmup.sft_steps and not checkpoint.load_reference(
                cfg.checkpointing.checkpoint_dir, run.ref_model):
            raise ValueError(f"{Path(cfg.checkpointing.checkpoint_dir) / checkpoint.REFERENCE} is missing: the KL "
                             "penalty's reference (the policy as the warm-up left it), saved beside the checkpoints. "
                             "Restore it, or start a new run")
        run.step, run.resumed_from, run.last_saved = state["step"], str(found), state["step"]
        run.saved_config = state["config"]
        run.sampler.load_state_dict(state["sampler"])
        if "role_baselines" in state:
            run.baselines.load_state_dict(state["role_baselines"])
        console.print(f"resumed from {found} (step {run.step})")
    removed = run.logger.start(run.step)
    if found is not None and (late := run.logger.written_late(state.get("unwritten", []))):
        console.print(f"{run.logger.dir}: the records of step{'s' if len(late) > 1 else ''} "
                      f"{', '.join(map(str, late))} that a full disk held back, kept in {found}, are written")
    if dist.is_main():
        if found is None or run.step < run.max_steps:  # (a resume with no step to run: the record stays the config
            _record_config(run, found is not None)  # of the steps that ran)
        console.print(run.grader.describe(), markup=False, highlight=False)
    if removed:
        console.print(f"{run.logger.dir / 'metrics.jsonl'}: {removed} rows of steps after {run.step} removed (they are "
                      "done again)")


def _record_config(run: Run, resumed: bool) -> None:
    """This run's config as config.yaml; a resumed run's earlier one, where it differs, kept as
    config.to_step_N.yaml (what ran steps 1..N)."""
    written, body = run.logger.dir / "config.yaml", to_yaml(run.cfg)
    now = data_record(run) + body
    kept = run.logger.dir / f"config.to_step_{run.step:06d}.yaml"
    if resumed and written.is_file() and _body(written.read_text()) != body and not kept.exists():
        written.replace(kept)  # (kept once: a resume that died before its next checkpoint ran none of them)
        console.print(f"the config of steps 1-{run.step}: {kept} (config.yaml is this run's, from step "
                      f"{run.step + 1})", markup=False, highlight=False)
    write_whole(written, now)  # (a run killed while writing it left a config.yaml that was not YAML)


def _body(text: str) -> str:
    """A config.yaml's config, without the comment lines before it (data_record's)."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines)):])


STARTED_IN = "started in {} (relative paths below are from there)"  # data_record's line of the working directory


def _started_in(text: str) -> Path | None:
    """The working directory a config.yaml's run started in (data_record's line), where it says."""
    head, tail = f"# {STARTED_IN}".split("{}")
    for line in text.splitlines():
        if not line.startswith("#"):
            return None
        if line.startswith(head) and line.endswith(tail):
            return Path(line[len(head):-len(tail)])
    return None


def data_record(run: Run) -> str:
    """What the run read, as comment lines atop its config.yaml: the config names datasets, and where they are found
    depends on the machine (EXECRL_DATA_DIR, ../shared beside the checkout, a relative path, the hub); the problems'
    counts and hashes (ProblemSampler: the prompts' fingerprint, the answers' and tests' graded) tell two runs'
    data apart where the names are the same."""
    s = run.sampler
    resumed = [f"resumed from {run.resumed_from} (step {run.step}): its steps 1-{run.step} were run by the config "
               "that saved it"] if run.resumed_from else []
    lines = [*resumed, STARTED_IN.format(Path.cwd()), "what this run read (found when it started):",
             *data_sources(run.cfg, advice=False),
             f"{len(s.problems):,} training problems (prompts {s.fingerprint}, answers and tests {s.graded}), "
             f"{len(run.val_problems):,} validation problems"]
    return "".join(f"# {line}\n" for line in lines)


def reward_model(cfg: MasterConfig) -> RewardModel | None:
    """env.reward_model's model, where it is on (and a note where the rewards are continuous)."""
    continuous = [c.name for c in cfg.reward.components if c.name in ("reward_model", "overlong_penalty") and c.weight]
    if continuous and cfg.grpo.use_leave_one_out_baseline and cfg.grpo.normalize_rewards:
        console.print(f"[yellow]note: {' and '.join(continuous)} give continuous rewards: in a group whose other "
                      "answers score almost alike, the leave-one-out std (NeMo RL's) is near 0 and divides that "
                      "answer's advantage into the thousands; set grpo.use_leave_one_out_baseline=false (the group's "
                      "std) if train/loss jumps[/]")
    if not cfg.env.reward_model.enabled:
        return None
    return load_reward_model(cfg.env.reward_model, cfg.policy.device, cfg.offline or None, cfg.prompt,
                             observation_role(cfg))


def observation_role(cfg: MasterConfig) -> str | None:
    """The role of the environment's turns in a multi-turn run's conversations (None: single-turn)."""
    if cfg.grpo.max_rollout_turns > 1 and cfg.env.multi_turn.kind in ("interpreter", "unit_tests", "sliding_puzzle"):
        return cfg.env.multi_turn.observation_role
    return None


def adapter(cfg: MasterConfig, peft_model, identity: str | None = None) -> Adapter | None:
    """A LoRA run's adapter: its base is the model it started from (with policy.hf_config_overrides and `identity`,
    its weight files' models.weights_identity, written beside the adapter), or the run's own (checkpoint.save_base) where the run makes it (the built-in model, built here; a
    supervised warm-up, which trains it)."""
    if peft_model is None:
        return None
    name = cfg.policy.model_name
    own = name in TINY_CODERS or cfg.warmup.sft_steps > 0
    local = Path(name).expanduser()
    base = Path(cfg.checkpointing.checkpoint_dir, checkpoint.BASE).resolve() if own else \
        local.resolve() if local.exists() else name
    return Adapter(peft_model, str(base), cfg.policy.lora.save_merged, own_base=own,
                   base_overrides=None if own else cfg.policy.hf_config_overrides,  # (an own base has them saved)
                   base_identity=None if own else identity)


def languages(problems: list[Problem]) -> tuple[str, ...]:
    """The languages of the code problems: the grader checks each works in the sandbox before
    training starts."""
    return tuple(sorted({p.language for p in problems if p.kind == "code"})) or ("python",)


def drop_long(problems: list[Problem], tokenizer, cfg: MasterConfig, where: str = "data.train",
              want: int | None = None) -> list[Problem]:
    """Prompts of at most prompt_limit(cfg) tokens (long prompts are the classic OOM), with a count
    of the rest that names the keys setting the limit; every training problem dropped is an
    error. want: the first `want` problems that fit (validation's grpo.max_val_samples), read a few
    at a time."""
    check_roles(problems, tokenizer)
    if (note := templated(problems)) and dist.is_main():
        console.print(Text(f"{where}: {note}", style="yellow"), highlight=False)
    limit = prompt_limit(cfg)
    kept, lengths = [], []
    while len(lengths) < len(problems) and (want is None or len(kept) < want):
        end = len(problems) if want is None else len(lengths) + 2 * (want - len(kept))
        chunk = problems[len(lengths):end]
        chunk_lengths = list(map(len, conversation_ids([called(make_env(cfg, None, p), "reset", p, p) for p in chunk],
                                                    tokenizer)))
        kept += [p for p, n in zip(chunk, chunk_lengths) if n <= limit]
        lengths += chunk_lengths
    kept = kept[:want]
    dropped = sum(n > limit for n in lengths)
    if not dropped:
        return kept
    p = cfg.policy
    keys = (f"data.max_input_seq_length ({cfg.data.max_input_seq_length}: a prompt of that length is dropped too; "
            "NeMo RL's processors cut it and train on none of its samples)" if cfg.data.max_input_seq_length is not None else
            f"policy.max_total_sequence_length ({p.max_total_sequence_length}) less "
            f"policy.generation.max_new_tokens ({p.generation.max_new_tokens})"
            if p.generation.max_new_tokens < p.max_total_sequence_length else
            f"policy.max_total_sequence_length ({p.max_total_sequence_length}) less one token (max_new_tokens "
            f"{p.generation.max_new_tokens} fills the context: NeMo RL's idiom for 'until the context is full')")
    say = (f"{where}: {dropped} of {len(lengths)} problems{' read' if len(lengths) < len(problems) else ''} have a "
           f"prompt over {limit} tokens (the longest "
           f"{max(lengths)}), the limit set by {keys}")
    if not kept and where == "data.train":
        data_limit = cfg.data.max_input_seq_length
        if data_limit is None:
            fix = ("raise policy.max_total_sequence_length (or lower policy.generation.max_new_tokens, or set "
                   "data.max_input_seq_length)")
        elif data_limit < p.max_total_sequence_length:
            fix = "raise data.max_input_seq_length (or unset it)"
        else:  # (the context's length already: raising it alone is refused)
            fix = "raise policy.max_total_sequence_length, and data.max_input_seq_length with it (it may not exceed it)"
        raise ValueError(f"{say}: nothing is left to train on; {fix}")
    console.print(f"[yellow]dropped: {say}[/]")
    return kept

