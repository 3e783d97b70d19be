"""Everything a training run holds, built once from the config (and resumed from the latest checkpoint)."""

from __future__ import annotations

import copy
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console

from execrl.algo.role_baselines import RoleBaselines
from execrl.config import BatchPlan, MasterConfig, to_yaml
from execrl.config.checks import check_dataset_names, check_reward_fits, prompt_limit, validate
from execrl.envs import make_env
from execrl.lora import Adapter, apply_lora
from execrl.models import TINY_CODER, load_model_and_tokenizer, pick_device
from execrl.prompts import TEMPLATE_KWARGS
from execrl.rewards.judges import load_reward_model
from execrl.rewards.reward_model import RewardModel
from execrl.rollout import build_generator
from execrl.rollout.engine import eager_fallback
from execrl.rollout.fuse import fuse_projections
from execrl.sandbox import Grader, Limits
from execrl.tasks import Problem
from execrl.trainer import checkpoint, precision
from execrl.trainer import distributed as dist
from execrl.trainer.data import ProblemSampler, load_data
from execrl.trainer.lock import RunLock
from execrl.trainer.metrics import MetricsLogger
from execrl.trainer.opponent import Opponent, build_opponent
from execrl.trainer.pipeline import RolloutPipeline, build_pipeline
from execrl.trainer.rollouts import encode

console = Console(stderr=True, soft_wrap=True)


@dataclass
class Run:
    cfg: MasterConfig
    plan: BatchPlan
    weights: precision.Weights  # master (optimizer, checkpoints) and compute (forward passes, rollouts)
    tokenizer: object
    generator: object  # the rollout backend, holding the model (execrl engine: and its KV cache)
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
    last_saved: int = -1
    nan_streak: int = 0
    flat_streak: int = 0  # steps in a row whose every group had equal rewards
    started: float = field(default_factory=time.monotonic)
    baselines: RoleBaselines = field(default_factory=RoleBaselines)  # self-play's role baselines (grpo.advantage rae)
    opponent: Opponent | None = None  # self-play's frozen opponent (env.game.opponent)
    lora: Adapter | None = None  # with policy.lora: the peft model around `model` and the base it adapts
    judge: RewardModel | None = None  # env.reward_model: scores finished conversations (reward component reward_model)
    lock: RunLock | None = None  # the run directories, held while the run runs (the main process's)

    @property
    def model(self) -> torch.nn.Module:
        """The master model: what the optimizer updates and checkpoints save."""
        return self.weights.master

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        self.grader.close()
        self.logger.close()
        if self.lock is not None:
            self.lock.release()


def resumable(cfg: MasterConfig, state: dict, found: Path) -> None:
    """A resumed run's config against its checkpoint's: changes that cannot apply (the learning rate, which the
    checkpoint's optimizer and schedule hold; the model, the data, the algorithm) stop it before it writes anything;
    the others are named."""
    if "config" not in state:  # (a checkpoint from before configs were saved in it)
        return
    applied, refused = checkpoint.config_changes(state["config"], cfg.model_dump(mode="json"))
    if refused:
        shown = "; ".join(refused[:6]) + (f"; and {len(refused) - 6} more" if len(refused) > 6 else "")
        raise ValueError(f"{found} was trained with another config, and resuming it cannot apply {shown}: set those "
                         "back to the checkpoint's values, or start a new run (another checkpointing.checkpoint_dir "
                         "and logger.log_dir)")
    if applied:
        console.print(f"resuming {found} with changes that apply from step {state['step']} on: " + "; ".join(applied))


def run_directories(cfg: MasterConfig) -> dict[str, str]:
    """The directories to lock, by the key naming each: the log directory, and the checkpoints' where they already
    exist outside it (where they do not, no other run is writing them; a refused run makes none)."""
    log = Path(cfg.logger.log_dir).expanduser().resolve()
    ckpt = Path(cfg.checkpointing.checkpoint_dir).expanduser().resolve()
    dirs = {"logger.log_dir": cfg.logger.log_dir}
    if cfg.checkpointing.enabled and ckpt.is_dir() and log not in (ckpt, *ckpt.parents):
        dirs["checkpointing.checkpoint_dir"] = cfg.checkpointing.checkpoint_dir
    return dirs


def build_run(cfg: MasterConfig) -> Run:
    batch_plan = validate(cfg)  # (execrl train ran it before starting; here for train() called from Python)
    dist.init(cfg.policy.device)
    console.quiet = not dist.is_main()  # one rank speaks for all
    lock = RunLock(run_directories(cfg)) if dist.is_main() else None  # before any work
    if dist.world_size() != batch_plan.num_gpus:
        raise ValueError(f"{dist.world_size()} training process(es) but cluster.num_nodes x cluster.gpus_per_node = "
                         f"{batch_plan.num_gpus}: start multi-GPU runs with `execrl train CONFIG` (it launches "
                         "torchrun) or set cluster.gpus_per_node to the number of processes per node")
    random.seed(cfg.grpo.seed)
    torch.manual_seed(cfg.grpo.seed)
    master_dtype, compute_dtype = precision.dtypes(cfg.policy.precision, pick_device(cfg.policy.device))
    lora = cfg.policy.lora.enabled  # the frozen base in the compute dtype alone; the adapters (fp32) are the master
    load_dtype = compute_dtype if lora else master_dtype
    model, tok = load_model_and_tokenizer(cfg.policy.model_name, cfg.policy.device, str(load_dtype).split(".")[1],
                                          offline=cfg.offline or None, tokenizer=cfg.policy.tokenizer.name
                                          if cfg.policy.tokenizer.name != cfg.policy.model_name else None,
                                          seed=cfg.grpo.seed, config_overrides=cfg.policy.hf_config_overrides)
    if cfg.policy.tokenizer.chat_template:
        tok.chat_template = cfg.policy.tokenizer.chat_template
    setattr(tok, TEMPLATE_KWARGS, cfg.policy.tokenizer.chat_template_kwargs)
    sharded = dist.world_size() > 1
    # LoRA: fp32 adapters, unless they are the bf16 compute copy of a mixed-precision run (its master: below)
    split_master = lora and not sharded and compute_dtype != master_dtype
    peft_model = apply_lora(model, cfg.policy.lora, cfg.grpo.seed, fp32=not split_master) if lora else None
    compute = precision.compute_model(model, compute_dtype, sharded=sharded)  # every forward runs on it
    ref = None
    if cfg.loss_fn.reference_policy_kl_penalty > 0 and not lora:  # the policy as the run started (a resumed run
        # keeps it); with LoRA the base itself, adapters off (execrl.lora.base_only)
        ref = copy.deepcopy(compute).eval().requires_grad_(False)
    if cfg.policy.generation.backend == "execrl" and dist.world_size() == 1:
        # the engine's wide GEMMs; parameters stay separate views (before the optimizer). Not when sharded: FSDP
        # shards each parameter on its own, and the engine then uses the separate projections
        fuse_projections(compute)
    if split_master:  # (after fusing, before compiling: the master shares the fused base)
        model = precision.lora_master(compute)
    if cfg.policy.activation_checkpointing:
        compute.gradient_checkpointing_enable()
        if lora:  # (the frozen embeddings give checkpointed layers no input that needs a gradient)
            compute.enable_input_require_grads()
    if cfg.policy.torch_compile and next(compute.parameters()).is_cuda:
        eager_fallback()  # where compilation fails, eager (with torch's warning)
        for layer in [*compute.get_decoder().layers, *(ref.get_decoder().layers if ref is not None else [])]:
            layer.compile()  # the engine calls the layers' submodules, so rollouts are unaffected
    train, val, refs = load_data(cfg)
    check_dataset_names(cfg, {p.kind for p in train + val})
    check_reward_fits(cfg, {p.kind for p in train})  # (the kinds of rows read: a jsonl's known only now)
    train, val = drop_long(train, tok, cfg), drop_long(val, tok, cfg, "data.validation")
    model, ref = dist.shard(model, compute_dtype), dist.shard(ref, compute_dtype)  # in place: compute is model still
    weights = precision.Weights(model, compute, compute_dtype)
    opt = make_optimizer(model, cfg)
    sched = cfg.policy.scheduler.build(opt)
    gen = cfg.policy.generation
    slots = min(cfg.policy.generation_batch_size, batch_plan.samples_per_step // dist.world_size())
    with dist.full_weights(model):  # the engine reads the full weights' layout
        # LoRA: generate from merged weights where nothing trains meanwhile (sync, one process; rollout/decoder.py)
        merge = lora and not cfg.grpo.async_grpo.enabled and dist.world_size() == 1
        generator = build_generator(weights.compute, tok, gen.backend, slots, cfg.policy.max_total_sequence_length,
                                    gen.cuda_graphs, gen.sync_every, gen.compile, gen.stop_token_ids, merge)
    generator = dist.for_rollouts(generator, model)
    run = Run(cfg, batch_plan, weights, tok, generator, ref, opt, sched,
              ProblemSampler(train, cfg.grpo.seed, cfg.data.shuffle),
              val, refs, Grader(dist.sandbox_workers(cfg.env.code.num_workers),
                                Limits(timeout_s=cfg.env.code.timeout_s, memory_mb=cfg.env.code.memory_mb),
                                languages=languages(train + val)),
              MetricsLogger(cfg, write=dist.is_main()), baselines=RoleBaselines(cfg.grpo.role_baseline_decay),
              lora=adapter(cfg, peft_model), lock=lock)
    found = checkpoint.latest(cfg.checkpointing.checkpoint_dir) if cfg.checkpointing.enabled else None
    if found is not None:
        state = checkpoint.load(found, model, opt, sched, lora=lora)
        resumable(cfg, state, found)
        weights.refresh()
        run.step, run.resumed_from, run.last_saved = state["step"], str(found), state["step"]
        run.sampler.load_state_dict(state["sampler"])
        if "role_baselines" in state:
            run.baselines.load_state_dict(state["role_baselines"])
        console.print(f"resumed from {found} (step {run.step})")
    removed = run.logger.start(run.step)
    if dist.is_main():
        (run.logger.dir / "config.yaml").write_text(to_yaml(cfg))
        console.print(run.grader.describe(), markup=False, highlight=False)
    if removed:
        console.print(f"{run.logger.dir / 'metrics.jsonl'}: {removed} rows of steps after {run.step} removed (they are "
                      "done again)")
    run.opponent = build_opponent(cfg, weights.compute, tok, slots)
    if cfg.env.reward_model.enabled:
        if cfg.grpo.use_leave_one_out_baseline and cfg.grpo.normalize_rewards:
            console.print("[yellow]note: a reward model's scores are continuous: in a group whose other answers score "
                          "almost alike, the leave-one-out std (NeMo RL's) is near 0 and divides that answer's "
                          "advantage into the thousands; set grpo.use_leave_one_out_baseline=false (the group's std) "
                          "if train/loss jumps[/]")
        run.judge = load_reward_model(cfg.env.reward_model, cfg.policy.device, cfg.offline or None, cfg.prompt)
    run.pipeline = build_pipeline(cfg, batch_plan, generator, tok, run.grader, run.sampler,
                                  run.opponent.generator if run.opponent else None, run.judge)
    steps_per_epoch = -(-len(train) // cfg.grpo.num_prompts_per_step)
    run.max_steps = cfg.grpo.max_num_steps
    if not cfg.grpo.use_dynamic_sampling:  # (which draws a varying number of prompts per step: the loop checks)
        run.max_steps = min(run.max_steps, cfg.grpo.max_num_epochs * steps_per_epoch)
    return run


def adapter(cfg: MasterConfig, peft_model) -> Adapter | None:
    """A LoRA run's adapter: its base is the model it started from, or the run's own (checkpoint.save_base) where
    the run makes it (the built-in model, built here; a supervised warm-up, which trains it)."""
    if peft_model is None:
        return None
    name = cfg.policy.model_name
    own = name == TINY_CODER or cfg.warmup.sft_steps > 0
    local = Path(name).expanduser()
    base = Path(cfg.checkpointing.checkpoint_dir, checkpoint.BASE).resolve() if own else \
        local.resolve() if local.exists() else name
    return Adapter(peft_model, str(base), cfg.policy.lora.save_merged, own_base=own)


def languages(problems: list[Problem]) -> tuple[str, ...]:
    """The languages of the code problems: the grader checks each works in the sandbox before training starts."""
    return tuple(sorted({p.language for p in problems if p.kind == "code"})) or ("python",)


def drop_long(problems: list[Problem], tokenizer, cfg: MasterConfig, where: str = "data.train") -> list[Problem]:
    """Prompts of at most prompt_limit(cfg) tokens (long prompts are the classic OOM), with a count of the rest that
    names the keys setting the limit; every training problem dropped is an error."""
    limit = prompt_limit(cfg)
    lengths = [len(encode(make_env(cfg, None, p).reset(p), tokenizer)) for p in problems]
    kept = [p for p, n in zip(problems, lengths) if n <= limit]
    dropped = len(problems) - len(kept)
    if not dropped:
        return kept
    p = cfg.policy
    keys = ("data.max_input_seq_length" if cfg.data.max_input_seq_length is not None else
            f"policy.max_total_sequence_length ({p.max_total_sequence_length}) less "
            f"policy.generation.max_new_tokens ({p.generation.max_new_tokens})")
    say = (f"{where}: {dropped} of {len(problems)} problems have a prompt over {limit} tokens (the longest "
           f"{max(lengths)}), the limit set by {keys}")
    if not kept and where == "data.train":
        raise ValueError(f"{say}: nothing is left to train on; raise policy.max_total_sequence_length (or lower "
                         "policy.generation.max_new_tokens, or set data.max_input_seq_length)")
    console.print(f"[yellow]dropped: {say}[/]")
    return kept


def make_optimizer(model, cfg: MasterConfig) -> torch.optim.Optimizer:
    name = cfg.policy.optimizer.name
    if name.lower() not in ("torch.optim.adamw", "adamw"):
        raise ValueError(f"policy.optimizer.name {name!r}: only torch.optim.AdamW is supported")
    kwargs = {k: _number(k, v) for k, v in cfg.policy.optimizer.kwargs.items()}
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    kwargs.pop("foreach", None), kwargs.pop("fused", None)
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], **kwargs)


def _number(key: str, value):
    if isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"policy.optimizer.kwargs.{key}: {value!r} is not a number") from None
    return value
