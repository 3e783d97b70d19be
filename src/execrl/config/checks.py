"""Every check of a config, in one place, run before any work (`execrl train --dry-run` runs them
all): the batch arithmetic, settings that cannot work together, NeMo RL keys execrl does not act on
(refused where they would change the math, listed in one start-up note where they change only speed
or infrastructure), and what the machine must have. Each error names its fix."""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path

from execrl.config import reward_model
from execrl.config.batch import BatchPlan, gpus, plan
from execrl.config.errors import ConfigError
from execrl.config.schema import MasterConfig
from execrl.config.tree import attribute
from execrl.guided import ConstraintError
from execrl.rewards.base import SCORES, constant_reason
from execrl.tasks.registry import DATASETS, DatasetError, check_trainable, dataset_key, local_source, origin

# keys read only with grpo.use_dynamic_sampling
DYNAMIC_ONLY = ("grpo.dynamic_sampling_max_gen_batches",)  # (batch_multiplier without it: refused, as NeMo RL)

# key -> why it has no effect here
NO_EFFECT = {
    "grpo.val_batch_size": "validation generates with the training slots (policy.generation_batch_size)",
    "logger.monitor_gpus": "GPU memory is logged on GPUs regardless (memory/peak_gib)",
    "policy.generation.vllm_cfg": "the execrl engine reserves its KV cache itself",
    **{key: "only with grpo.use_dynamic_sampling" for key in DYNAMIC_ONLY},
}


def validate(cfg: MasterConfig) -> BatchPlan:
    """All the checks that need no data and no model; returns the batch arithmetic."""
    batch_plan = plan(cfg)
    check_learnable(cfg)
    check_lengths(cfg)
    check_model_directory(cfg)
    check_overlong_penalty(cfg)
    check_turns(cfg)
    check_async(cfg)
    check_supported(cfg)
    check_machine(cfg)
    check_scheduler(cfg, batch_plan)
    check_loss(cfg, batch_plan)
    check_datasets(cfg)
    check_lora(cfg)
    check_memory_options(cfg)
    check_reward_model(cfg)
    check_guided(cfg)
    check_config_overrides(cfg)
    return batch_plan


def check_config_overrides(cfg: MasterConfig) -> None:
    """policy.hf_config_overrides name fields of the model's config, where its config.json is on this machine (a
    model's own directory or the hub cache; elsewhere the load checks them)."""
    p = cfg.policy
    if not p.hf_config_overrides or p.model_name.startswith("builtin:"):
        return
    from execrl.models import local_config, with_overrides

    config = local_config(p.model_name)
    if config is None:  # (not here: the load checks them)
        return
    try:
        with_overrides(config, p.hf_config_overrides)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_learnable(cfg: MasterConfig) -> None:
    """Settings under which every group's rewards are equal, so that every advantage, loss and
    gradient is 0."""
    grpo, gen = cfg.grpo, cfg.policy.generation
    if grpo.num_generations_per_prompt < 2 and grpo.advantage != "rae":
        raise ConfigError("grpo.num_generations_per_prompt=1: a group of one answer has no baseline to beat, so every "
                          "advantage is 0 and nothing is learned: set grpo.num_generations_per_prompt >= 2 (NeMo RL's "
                          "recipes: 8 or 16)")
    if gen.temperature == 0:
        raise ConfigError("policy.generation.temperature=0 samples every answer of a group alike (greedy), so every "
                          "advantage is 0 and nothing is learned: set policy.generation.temperature > 0 (e.g. 1.0); "
                          "validation samples with policy.generation.val_temperature (0: greedy)")
    lr = optimizer_lr(cfg)
    if lr is not None and not 0 < lr < float("inf"):  # (NaN too)
        raise ConfigError(f"policy.optimizer.kwargs.lr={lr}: the learning rate must be > 0 and finite (e.g. 5e-6, NeMo "
                          "RL's)")
    if grpo.advantage_clip_low == 0 and grpo.advantage_clip_high == 0:
        raise ConfigError("grpo.advantage_clip_low=0 and grpo.advantage_clip_high=0 clip every advantage to 0, so "
                          "nothing is learned: set them to null (no clip) or apart (e.g. -5 and 5)")
    if gen.top_k == 1:
        raise ConfigError("policy.generation.top_k=1 samples every answer of a group alike (greedy), so every "
                          "advantage is 0 and nothing is learned: set policy.generation.top_k to null or above 1")
    if cfg.data.default.env_name == "reward_model" and [c.name for c in cfg.reward.components].count("reward_model") > 1:
        raise ConfigError("data.default.env_name=reward_model turns reward.components' test_pass_fraction into a "
                          "reward_model component (config/reward_model.py), and they hold one already: for the reward "
                          "model's score alone set \"reward.components=[{name: reward_model}]\" too; to keep the "
                          "tests beside it, drop data.default.env_name")  # (it read "names reward_model twice", a
        # hunt's find: the user had named it once, following reward_model_cpu.yaml's own comment)
    constant = constant_reason(cfg.reward)
    if constant:
        raise ConfigError(constant)
    graded = [c for c in cfg.reward.components if c.name in CORRECTNESS and c.weight != 0]
    if graded and all(c.weight < 0 for c in graded):
        raise ConfigError(f"reward.components: {graded[0].name} has weight {graded[0].weight:g}, so the run is rewarded "
                          "for wrong answers (its reward rises as fewer tests pass, and reads as progress): give it a "
                          "positive weight (e.g. 1.0)")
    check_penalties(cfg)


# the components that score right answers
CORRECTNESS = ("test_pass_fraction", "all_tests_pass", "turn_discounted_pass_fraction", "math_correct")
PENALTIES = {"error_penalty": "programs that fail to compile or crash", "repetition_penalty": "repeated text",
             "overlong_penalty": "answers past its length"}  # (a penalty's own values are <= 0)


def check_penalties(cfg: MasterConfig) -> None:
    """No penalty turned into a bonus (a weight of -1, as other frameworks write a penalty, on a component that
    gives values <= 0 already; error_penalty's penalty > 0), and no reward.scaling that maps right answers below
    wrong ones: each trained toward what it meant to penalize, its reward rising (a hunt's finds: syntax errors 3% ->
    99%, pass@1 0.19 -> 0)."""
    for c in cfg.reward.components:
        if c.name in PENALTIES and c.weight != 0 and c.bounds()[1] > 0:
            given = ", ".join(f"{k}={v!r}" for k, v in c.params.items() if k == "penalty")
            raise ConfigError(f"reward.components: {c.name} with weight {c.weight:g}{' and ' + given if given else ''} "
                              f"adds up to +{c.bounds()[1]:g} to the reward: a bonus for {PENALTIES[c.name]}, which "
                              "the run would learn to write. The component gives values <= 0 itself: give it a "
                              "positive weight (its size)" + (" and a penalty <= 0" if given else ""))
    s = cfg.reward.scaling
    scaled = [c.name for c in cfg.reward.components if c.scaled and c.weight > 0 and c.name in CORRECTNESS]
    if s.enabled and s.target_max < s.target_min and scaled:
        raise ConfigError(f"reward.scaling maps source_max onto target_max={s.target_max:g}, below "
                          f"target_min={s.target_min:g}: a right answer ({scaled[0]}) would get less reward than a "
                          "wrong one, and the run would learn to fail: swap target_min and target_max")


def correctness_note(cfg: MasterConfig) -> str | None:
    """A warning where no reward component scores correctness (each of execrl's own and none of them does): the run
    learns the format, or code that runs, not right answers; None: none."""
    if cfg.env.multi_turn.kind in ("game", "sliding_puzzle"):  # (scored by their outcome: check_outcome_rewards)
        return None
    names = [c.name for c in cfg.reward.components if c.weight != 0]
    if not names or any(n not in PENALTIES and n not in ("format", "execution_tiers") for n in names):
        return None
    return (f"warning: reward.components ({', '.join(names)}) score no answer's correctness: the run learns "
            f"{'the format' if 'format' in names else 'programs that run'}, not right answers, and where every "
            "answer meets it nothing at all; add test_pass_fraction (code) or math_correct (math)")


def optimizer_lr(cfg: MasterConfig) -> float | None:
    kwargs = cfg.policy.optimizer.kwargs
    lr = kwargs.get("lr")  # (a number: the schema converts YAML's strings)
    if "lr" in kwargs and lr is None:  # (passed on as None, torch's optimizer raised a TypeError once the model loaded)
        raise ConfigError("policy.optimizer.kwargs.lr is null: give the learning rate (e.g. 5e-6, NeMo RL's), or "
                          "delete the key (~policy.optimizer.kwargs.lr) for the optimizer's own default")
    if lr is not None and not isinstance(lr, (int, float)):
        raise ConfigError(f"policy.optimizer.kwargs.lr={lr!r} is not a number (e.g. 5e-6)")
    return lr


def check_guided(cfg: MasterConfig) -> None:
    """policy.generation.guided_decoding: the execrl engine, and a constraint llguidance
    compiles."""
    gen = cfg.policy.generation
    per_turn = gen.guided_decoding_per_turn
    if per_turn is not None and gen.guided_decoding is not None:
        raise ConfigError("policy.generation.guided_decoding_per_turn replaces guided_decoding: set one of them (the "
                          "same constraint on every turn: guided_decoding alone)")
    if per_turn is not None and not per_turn:
        raise ConfigError("policy.generation.guided_decoding_per_turn is empty: give one entry per turn (null: free), "
                          "or drop it")
    named = {"policy.generation.guided_decoding": gen.guided_decoding} if per_turn is None else {
        f"policy.generation.guided_decoding_per_turn[{i}]": c for i, c in enumerate(per_turn)}
    named = {k: c for k, c in named.items() if c is not None}
    if named and gen.backend != "execrl":
        raise ConfigError(f"{next(iter(named))} needs the execrl engine (it masks tokens in its sampling step): set "
                          "policy.generation.backend=execrl")
    for key, c in named.items():
        try:
            from execrl.guided.constraints import admits_text  # (torch: only for runs that constrain)

            admits_text(*c.constraint)  # (compiled; an empty character class compiled, then stopped the run at step 1)
        except ConstraintError as e:
            raise ConfigError(f"{key}: {e}") from None


def check_reward_model(cfg: MasterConfig) -> None:
    """env.reward_model is loaded exactly where a reward component reads it, and only as a
    Bradley-Terry model."""
    rm = cfg.env.reward_model
    reward_model.check(cfg)
    if not rm.enabled:
        refuse_settings_while_off(rm, "env.reward_model", "the reward model is off: set env.reward_model.enabled=true "
                                  "(and a reward_model component), or remove it")
        return
    if rm.model_name is None:
        raise ConfigError("env.reward_model.model_name is not set: name a sequence-classification reward model (a hub "
                          "id or an HF directory), or builtin:arith-judge for the built-in task")
    if rm.model_name == reward_model.ARITH_JUDGE and rm.tokenizer.name not in (None, rm.model_name):
        raise ConfigError(f"env.reward_model.tokenizer.name is set, but {reward_model.OWN_TOKENIZER}: remove it")
    if not rm.reward_model_cfg.enabled:
        raise ConfigError("env.reward_model.reward_model_cfg.enabled=false: the reward-model environment always loads "
                          "its model as a reward model (as NeMo RL's); set it to true")
    if cfg.env.multi_turn.kind == "game":
        raise ConfigError("self-play games are scored by their outcome, not by reward components: a reward model "
                          "has nothing to score there (set env.reward_model.enabled=false)")


def refuse_settings_while_off(section, prefix: str, why: str) -> None:
    """A section that is off, with a setting changed from its default (which would do nothing):
    refused."""
    default = type(section)()
    changed = sorted(k for k in type(section).model_fields if getattr(section, k) != getattr(default, k))
    if changed:
        raise ConfigError(f"{prefix}.{changed[0]} is set but {why}")


def check_lora(cfg: MasterConfig) -> None:
    """policy.lora's settings: only while it is on, and only as peft can do them."""
    lora = cfg.policy.lora
    if not lora.enabled:
        refuse_settings_while_off(lora, "policy.lora", "LoRA is off: set policy.lora.enabled=true, or remove it")
        return
    if lora.dropout and lora.dropout_position == "post":
        raise ConfigError("policy.lora.dropout_position=post (dropout on the adapter's output) is not what peft does: "
                          "set policy.lora.dropout_position=pre (dropout on its input), or dropout=0")
    if not (lora.match_all_linear or lora.target_modules or lora.exclude_modules):
        raise ConfigError("policy.lora targets no layer: set match_all_linear=true, name target_modules (e.g. [q_proj, "
                          "k_proj, v_proj, o_proj]) or the layers to leave out of all of them (exclude_modules)")
    if lora.match_all_linear and lora.target_modules:
        raise ConfigError("policy.lora.match_all_linear=true adapts every linear layer, so target_modules would do "
                          "nothing: set match_all_linear=false to pick target_modules, or target_modules=[]")


def check_optimizer_kwargs(name: str, cls: type, kwargs: dict) -> None:
    """Each of policy.optimizer.kwargs a parameter of the optimizer's class (a typo would reach it as the run
    starts, a TypeError after the model loaded)."""
    import inspect

    from execrl.trainer.optim import FUSED_ADAMW, FUSED_ONLY

    params = inspect.signature(cls.__init__).parameters
    if any(q.kind is q.VAR_KEYWORD for q in params.values()):
        return
    known = set(params) - {"self", "params"} | {"foreach", "fused"}  # (the two make_optimizer sets itself)
    if name in FUSED_ADAMW:
        known |= set(FUSED_ONLY)  # (read, and dropped, for a fused AdamW of another library)
    if kwargs.get("maximize"):
        raise ConfigError(f"policy.optimizer.kwargs.maximize={kwargs['maximize']!r} climbs the loss: the policy would "
                          "be pushed away from the answers that scored well; drop it")
    for key in kwargs:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f": did you mean {close[0]}?" if close else f"; it takes {', '.join(sorted(known))}"
            raise ConfigError(f"policy.optimizer.kwargs.{key}: {name} takes no argument {key!r}{hint}")
    if cls.__module__.split(".")[0] not in ("torch", "torchao"):  # (another library's may build CUDA code, or want
        return  # a GPU, as it starts)
    import torch

    if "betas" in kwargs and not (isinstance(kwargs["betas"], (list, tuple)) and len(kwargs["betas"]) == 2):
        raise ConfigError(f"policy.optimizer.kwargs.betas={kwargs['betas']!r}: two numbers, e.g. [0.9, 0.999]")
    stand_in = torch.nn.Parameter(torch.zeros(2, 2))  # (2-D: Muon takes matrices alone)
    try:  # (its values as the class checks them: weight_decay=-5 passed --dry-run, then failed as the run started,
        # after the model loaded, in torch's words naming no key: a hunt's find)
        cls([stand_in], **{k: v for k, v in kwargs.items() if k not in (*FUSED_ONLY, "foreach", "fused")})
    except (ValueError, TypeError) as e:
        raise ConfigError(f"policy.optimizer.kwargs: {name} refuses them ({e}): {kwargs}") from None
    except Exception:  # noqa: BLE001 - the stand-in, not the kwargs (the run builds the real one and says)
        pass


def check_memory_options(cfg: MasterConfig) -> None:
    """The optimizer class importable; no float16 (no loss scaling); a checkpointing scope only with checkpointing on;
    policy.cpu_offload where it applies (one GPU, mixed precision, all weights trained)."""
    import torch

    from execrl.trainer.optim import optimizer_class

    try:
        cls = optimizer_class(cfg.policy.optimizer.name)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    p = cfg.policy
    if p.precision in ("float16", "fp16"):
        raise ConfigError(f"policy.precision={p.precision} needs loss scaling, which execrl does not do: set "
                          "policy.precision=bfloat16 (or float32)")
    if p.activation_checkpointing_scope != "layer" and not p.activation_checkpointing:
        raise ConfigError(f"policy.activation_checkpointing_scope={p.activation_checkpointing_scope} says what "
                          "checkpointing recomputes, and checkpointing is off: set policy.activation_checkpointing=true "
                          "(or leave the scope out)")
    if p.optimizer.kwargs.get("bf16_stochastic_round"):
        check_stochastic_round(cfg, cls)  # (before the kwargs' own check: it names the optimizers that round)
    if cls.__module__.startswith("torchao") and gpus(cfg) > 1 and cfg.checkpointing.enabled:  # (a hunt's find:
        # trained and saved, never resumed)
        raise ConfigError(f"policy.optimizer.name={p.optimizer.name} runs on one GPU: with several, FSDP2 would save "
                          "its 8-bit or bf16 states unfinished and could not broadcast them back, so no checkpoint of "
                          "the run could be resumed; name torch.optim.AdamW, or run on one GPU (cluster.gpus_per_node=1, "
                          "cluster.num_nodes=1)")
    check_optimizer_kwargs(p.optimizer.name, cls, p.optimizer.kwargs)
    if not p.cpu_offload:
        return
    why = None
    if p.lora.enabled:
        why = "with LoRA only the adapters train: their optimizer state is small"
    elif p.precision in ("float32", "fp32") or p.device == "cpu":
        why = "on the CPU, or in float32, the master is the model itself: there is nothing to move"
    elif cls is not torch.optim.AdamW:
        why = f"the host runs torch.optim.AdamW, not {cfg.policy.optimizer.name}"
    if why:
        raise ConfigError(f"policy.cpu_offload=true: {why}; set policy.cpu_offload=false")


def check_stochastic_round(cfg: MasterConfig, cls: type) -> None:
    """bf16_stochastic_round (torchao's optimizers): bf16 weights are their own master, on one GPU
    with every weight trained."""
    import inspect

    p, key = cfg.policy, "policy.optimizer.kwargs.bf16_stochastic_round=true"
    why = None
    if "bf16_stochastic_round" not in inspect.signature(cls).parameters:
        why = (f"{p.optimizer.name} takes no bf16_stochastic_round: name an optimizer that rounds, "
               "policy.optimizer.name=torchao.optim.AdamW8bit (8-bit moments) or torchao.optim._AdamW (bf16 moments)")
    elif p.precision in ("float32", "fp32"):
        why = "it rounds bf16 weights, and this run's are float32: set policy.precision=bfloat16"
    elif p.cpu_offload:
        why = "policy.cpu_offload moves an fp32 master to the host, and with stochastic rounding there is none"
    elif p.lora.enabled:
        why = "with LoRA only the adapters train: their fp32 master is small"
    elif gpus(cfg) > 1:
        why = "with several GPUs it is not checked yet (FSDP2 shards an fp32 master and its state instead)"
    if why:
        raise ConfigError(f"{key}: {why}; or drop bf16_stochastic_round")


def prompt_limit(cfg: MasterConfig) -> int:
    """Tokens a prompt may have: less than data.max_input_seq_length (the bound NeMo RL's processors use; they cut
    a prompt of that length to a few tokens and leave its samples out of the loss, execrl leaves it out) and than
    the context, else what leaves room for max_new_tokens. As in NeMo RL, each completion is cut where the
    context ends (its prompt leaves it less room than max_new_tokens): a max_new_tokens of the whole
    context or more is NeMo RL's idiom for "until the context is full", and a max_input_seq_length
    of the whole context its idiom for "no limit but the context"."""
    total, new = cfg.policy.max_total_sequence_length, cfg.policy.generation.max_new_tokens
    if cfg.data.max_input_seq_length is not None:
        return min(cfg.data.max_input_seq_length, total) - 1
    return total - new if new < total else total - 1


def check_lengths(cfg: MasterConfig) -> None:
    total = cfg.policy.max_total_sequence_length
    if cfg.data.max_input_seq_length is not None and cfg.data.max_input_seq_length > total:
        raise ConfigError(f"data.max_input_seq_length ({cfg.data.max_input_seq_length}) is over "
                          f"policy.max_total_sequence_length ({total}), the whole context: lower it to at most that, "
                          "or set it to null")


def check_overlong_penalty(cfg: MasterConfig) -> None:
    """An overlong_penalty whose buffer is not shorter than its length limit would start below 0 tokens: every answer,
    however short, penalized by its length (and a group of wrong answers trained on length alone)."""
    for c in cfg.reward.components:
        if c.name != "overlong_penalty" or c.weight == 0:  # (weight 0: off, as NeMo RL's converted configs write it)
            continue
        buffer = c.params.get("buffer_tokens", 256)
        limit = c.params.get("max_tokens")
        named = "its max_tokens" if limit is not None else "policy.generation.max_new_tokens"
        limit = cfg.policy.generation.max_new_tokens if limit is None else limit
        if buffer <= 0 or buffer >= limit:
            raise ConfigError(f"reward.components: overlong_penalty's buffer_tokens={buffer} must be above 0 and below "
                              f"the length it penalizes up to ({named}, {limit}), or every answer however short is "
                              f"penalized by its length: set buffer_tokens to e.g. {max(1, limit // 4)} (DAPO: a "
                              "quarter of it), or raise the limit (NeMo RL's grpo.reward_shaping: "
                              "overlong_buffer_length below max_response_length)")
        new = cfg.policy.generation.max_new_tokens
        alone = all(o.weight == 0 for o in cfg.reward.components if o is not c)
        if alone and cfg.grpo.max_rollout_turns == 1 and limit - buffer >= new:
            raise ConfigError(f"reward.components: overlong_penalty is the only reward, and it penalizes answers past "
                              f"{limit - buffer} tokens ({named} {limit} less buffer_tokens {buffer}), where no answer "
                              f"is longer than policy.generation.max_new_tokens={new}: every reward is 0 and nothing "
                              "is learned; add the component that scores correctness (e.g. {name: test_pass_fraction, "
                              "weight: 1.0})")


def check_turns(cfg: MasterConfig) -> None:
    """The environment exists; a multi-turn budget needs a multi-turn environment (the other way
    round is allowed: one turn)."""
    from execrl.envs import environment_class  # (the environments import the config's users, not the other way)
    from execrl.plugins import PluginError

    try:
        environment_class(cfg.env.multi_turn.kind)
    except PluginError as e:
        raise ConfigError(str(e)) from None
    if cfg.grpo.max_rollout_turns > 1 and cfg.env.multi_turn.kind == "single_turn":
        raise ConfigError(f"grpo.max_rollout_turns={cfg.grpo.max_rollout_turns} needs a multi-turn environment: set "
                          "env.multi_turn.kind=interpreter or unit_tests (or grpo.max_rollout_turns=1)")
    if cfg.env.multi_turn.kind == "interpreter" and cfg.prompt.code_style == "plain":
        raise ConfigError("prompt.code_style=plain (the whole answer is the code) leaves the interpreter no cell to "
                          "find in a turn of text: set prompt.code_style=fence, tags or auto")


def check_machine(cfg: MasterConfig) -> None:
    """What this machine must have for the run: the device asked for, and directories where files
    are not."""
    if cfg.policy.device.startswith("cuda"):
        import torch  # (only here: the other checks run without it)

        if not torch.cuda.is_available():
            raise ConfigError(f"policy.device={cfg.policy.device} but no CUDA GPU is visible here: set "
                              "policy.device=auto (a GPU when there is one, else the CPU) or cpu")
    dirs = [("logger.log_dir", cfg.logger.log_dir)] + ([("checkpointing.checkpoint_dir",
                                                          cfg.checkpointing.checkpoint_dir)]
                                                        if cfg.checkpointing.enabled else [])  # (off: never written)
    for key, where in dirs:
        if Path(where).exists() and not Path(where).is_dir():
            raise ConfigError(f"{key}={where} is a file, not a directory: name a directory (it is created)")
        if why := unusable(Path(where).expanduser()):  # (found at the first checkpoint, after steps of work)
            raise ConfigError(f"{key}={where} cannot be {'written' if Path(where).expanduser().exists() else 'created'}"
                              f": {why}: name a directory you can write")


def unusable(directory: Path) -> str | None:
    """Why `directory` could not be made, or takes no new folder (read-only, /proc), or None: probed with a folder
    made and removed in it or in its nearest existing parent, nothing left behind. (A checkpoint is written as a
    folder; an existing read-only directory was found at the first checkpoint, after steps of work.)"""
    import tempfile

    base = next(p for p in [directory.absolute(), *directory.absolute().parents] if p.exists())
    if not base.is_dir():
        return f"{base} is a file"
    try:
        os.rmdir(tempfile.mkdtemp(dir=base, prefix=".execrl-probe-"))
    except OSError as e:
        return f"no folder can be made in {base} ({e.strerror or type(e).__name__})"
    return None


def dataset_entries(cfg: MasterConfig):
    """(key, dataset config) of every configured dataset, training ones first: data.train, or
    data.train[i] where the config lists several."""
    for where, sets, given in (("data.train", cfg.data.train_sets, cfg.data.train),
                               ("data.validation", cfg.data.validation_sets, cfg.data.validation)):
        for i, d in enumerate(sets):
            yield (f"{where}[{i}]" if isinstance(given, list) else where), d


def check_datasets(cfg: MasterConfig) -> None:
    """Every dataset named is one execrl reads, and no training split is an evaluation one (before
    any download)."""
    for key, d in dataset_entries(cfg):
        try:
            split = d.split_name
            if key.startswith("data.train"):
                check_trainable(dataset_key(d.dataset_name), split, d.path)
        except DatasetError as e:
            raise ConfigError(f"{key}: {e}") from None
        info = DATASETS[dataset_key(d.dataset_name)]
        if d.path is not None and info.generated:
            raise ConfigError(f"{key}.path={d.path}: {d.dataset_name} is generated and reads no files: drop "
                              f"{key}.path, or read your file with {key}.dataset_name=jsonl")
        try:
            local_source(info, d.path)  # (the file's there, or a copy, or a hub)
        except DatasetError as e:  # (its own path key: data.validation's is data.validation.path)
            raise ConfigError(f"{key}: {str(e).replace('data.train.path', key.split('[')[0] + '.path')}") from None
        takes = loader_options(info)
        for name in d.options:  # an option the loader does not take is a note (unread_options), a typo of one an error
            close = difflib.get_close_matches(name, takes, n=1, cutoff=0.75) if name not in takes else []
            if close:
                raise ConfigError(f"{key}.options.{name}: {d.dataset_name} takes no such option (did you mean "
                                  f"{close[0]!r}?)")
    kinds = {DATASETS[dataset_key(d.dataset_name)].kind for d in cfg.data.train_sets}
    check_reward_fits(cfg, kinds - {None})
    check_stop_strings(cfg, kinds - {None})
    check_dataset_names(cfg, {(f"{key} ({d.dataset_name})", DATASETS[dataset_key(d.dataset_name)].kind)
                              for key, d in dataset_entries(cfg)})  # (the kinds known before any row: a built-in's)
    infos = [DATASETS[dataset_key(d.dataset_name)] for d in cfg.data.train_sets]
    if cfg.warmup.sft_steps and infos and not any(i.generated or i.own for i in infos):  # (files carry no references;
        raise ConfigError(no_references(cfg))  # a loader of one's own may: the run checks its problems)


def no_references(cfg: MasterConfig) -> str:
    """The error of a warm-up over training problems of which none carries a reference solution."""
    return (f"warmup.sft_steps is {cfg.warmup.sft_steps} but no training problem carries a reference solution to warm "
            "up on (the generated builtin: tasks and the self-play games do; data.train does not): set "
            "warmup.sft_steps=0")


def validation_overlap_note(cfg: MasterConfig) -> str | None:
    """A warning where a validation dataset is one of the training ones (the same dataset, split and file; a dataset
    of no splits, a JSONL file, whatever its split says): its eval/ metrics would measure problems the run trains
    on. The fix it names is one that separates them: another split of the dataset, else another file or a share
    held out."""
    def source(d):  # (the files read: no path and a path naming the same copy are one source)
        info = DATASETS[dataset_key(d.dataset_name)]
        try:
            local = local_source(info, d.path)
        except DatasetError:  # (check_datasets says what is wrong with it)
            local = None
        split = d.split_name if info.splits else None  # (read by no loader of a dataset that has none)
        return dataset_key(d.dataset_name), split, str(local.resolve()) if local is not None else d.path

    trained = {source(d) for d in cfg.data.train_sets}
    same = [d for key, d in dataset_entries(cfg) if key.startswith("data.validation") and source(d) in trained]
    if not same:
        return None
    info = DATASETS[dataset_key(same[0].dataset_name)]
    used = {d.split_name for d in cfg.data.train_sets if dataset_key(d.dataset_name) == dataset_key(info.name)}
    other = sorted((s for s in info.splits if s not in used and (s == "validation" or s not in info.eval_only)),
                   key=lambda s: (s != "validation", s != "train"))  # (a generated task's validation: held out)
    fix = (f"data.validation.split={other[0]}" if other else "another file as data.validation.path, or data.validation: "
           "null with data.train.split_validation_size: 0.05 (a share of the training set held out)")
    return (f"warning: data.validation {', '.join(f'{d.dataset_name}/{d.split_name}' for d in same)} is also a training "
            f"set: eval/ metrics would measure problems the run trains on (validate on problems it does not train on: "
            f"{fix})")


def data_sources(cfg: MasterConfig, advice: bool = True) -> list[str]:
    """Where each configured dataset will be read from (--dry-run's lines; check_datasets has passed); `advice`:
    with how to read another file instead."""
    lines = []
    for key, d in dataset_entries(cfg):
        info = DATASETS[dataset_key(d.dataset_name)]
        local = local_source(info, d.path)
        lines.append(f"{key}: {info.name}/{d.split_name} {origin(info, local and local.resolve(), d.path, advice)}")
    return lines


# what an answer writes before what is graded: (text, what follows it), by answer format and by code style
FORMAT_OPENINGS = {"think": [("<think>", "reasoning and answer"), ("</think>", "answer")],
                   "reasoning": [("<reasoning>", "reasoning and answer"), ("</reasoning>", "answer"),
                                 ("<answer>", "answer")], "code": []}
CODE_OPENINGS = {"fence": "```python\n", "auto": "```python\n", "tags": "<code>", "plain": None}  # (the line break
# after the fence is the opening's: a stop string "\n" ended every answer there)


def check_stop_strings(cfg: MasterConfig, kinds: set[str]) -> None:
    """No stop string ends every answer before what is graded: an empty one (every text holds it), or one inside
    the opening the prompt asks for ("```" of "```python": every answer stopped at its code block's first fence, with
    no code). `kinds`: of the training problems (those known)."""
    refused = stop_refused(cfg.policy.generation.stop_strings or [], cfg.prompt, kinds)
    if refused:
        raise ConfigError(f"policy.generation.stop_strings: {refused}, and nothing is learned")


def stop_refused(stops: list[str], p, kinds: set[str]) -> str | None:
    """Why a stop string ends every answer before what is graded (an empty one; one inside the opening prompt `p`
    asks for), else None."""
    if "" in stops:
        return "an empty string, which every text holds: each answer would end at its first token: drop it"
    openings = list(FORMAT_OPENINGS[p.answer_format])
    if "code" in kinds and CODE_OPENINGS[p.code_style]:
        openings.append((CODE_OPENINGS[p.code_style], "code"))
    for stop in stops:
        for opening, what in openings:
            if stop in opening:
                return (f"{stop!r} is in {opening!r}, which an answer writes before its {what} (answer format "
                        f"{p.answer_format}, code style {p.code_style}): every answer would stop there, with nothing "
                        "to grade; drop it, or stop on what ends an answer (e.g. '\\n```\\n', a code block's "
                        "closing fence)")
    return None


def check_reward_fits(cfg: MasterConfig, kinds: set[str]) -> None:
    """No reward component is blind to the training problems' kind (math_correct on programs would
    give every answer the same reward, and nothing would be learned). `kinds`: of the training
    problems (those known). Self-play matches and sliding puzzles alone: the reward settings left as they are."""
    check_outcome_rewards(cfg, kinds)
    for c in cfg.reward.components:
        blind = sorted(kinds & {"code", "math"} - set(SCORES.get(c.name, kinds)))
        if blind:
            names = ", ".join(d.dataset_name for d in cfg.data.train_sets)
            raise ConfigError(f"reward.components: {c.name} scores {' and '.join(SCORES[c.name])} answers only, but "
                              f"the training problems ({names}) are {' and '.join(blind)}: every answer would get the "
                              "same reward from it. Use test_pass_fraction (a program's tests, a math answer's "
                              "check), e.g. reward.components=[{name: test_pass_fraction}]")
        if c.name == "format" and c.weight != 0 and kinds == {"math"} and cfg.prompt.answer_format == "code":
            raise ConfigError("reward.components: format checks an answer format, and for math problems under "
                              "prompt.answer_format=code there is none (every answer, an empty one too, would get 1 "
                              "from it): set prompt.answer_format=reasoning or think, or drop format")


def check_outcome_rewards(cfg: MasterConfig, kinds: set[str]) -> None:
    """Where every training problem is a self-play match or a sliding puzzle, scored by its outcome (a seat's return,
    1 for a solved puzzle), reward.components and reward.scaling (NeMo RL's grpo.reward_shaping and reward_scaling
    map there) score no training answer: components other than the default, or scaling enabled, refused (a hunt's
    find: they were accepted, and the run trained on the outcome alone, unsaid)."""
    if not kinds or kinds - {"game", "puzzle"}:
        return
    changed = (["reward.components"] if cfg.reward.components != type(cfg.reward)().components else []) + \
        (["reward.scaling"] if cfg.reward.scaling.enabled else [])
    if changed:
        what = " and ".join(n for k, n in (("game", "self-play matches, scored by a seat's return"),
                                           ("puzzle", "sliding puzzles, scored 1 when solved")) if k in kinds)
        named = " and ".join(changed)
        raise ConfigError(f"{named} set, and the training problems are {what}: execrl scores them by that outcome "
                          f"alone, where NeMo RL would shape or scale it too; remove {named} (NeMo RL's "
                          "grpo.reward_shaping and grpo.reward_scaling are read as them)")


def check_loss(cfg: MasterConfig, batch_plan: BatchPlan) -> None:
    """The loss variants' preconditions, as NeMo RL asserts them."""
    lf = cfg.loss_fn
    if lf.sequence_level_importance_ratios and lf.token_level_loss:
        raise ConfigError("loss_fn.sequence_level_importance_ratios (GSPO) averages each sequence first: set "
                          "loss_fn.token_level_loss=false")
    if lf.use_cispo:
        clash = [k for k in ("disable_ppo_ratio", "force_on_policy_ratio", "sequence_level_importance_ratios")
                 if getattr(lf, k)]
        if clash:
            raise ConfigError(f"loss_fn.use_cispo weights each token by its own clipped ratio: set loss_fn.{clash[0]}"
                              "=false (or use_cispo=false)")
        if lf.ratio_clip_c is not None:
            raise ConfigError("loss_fn.use_cispo has no dual clip (NeMo RL refuses ratio_clip_c with it): set "
                              "loss_fn.ratio_clip_c=null (or use_cispo=false)")
        if not lf.token_level_loss:
            raise ConfigError("loss_fn.use_cispo is a token-level loss (as NeMo RL requires): set "
                              "loss_fn.token_level_loss=true (or use_cispo=false)")
    if lf.force_on_policy_ratio and batch_plan.optimizer_steps_per_rollout != 1:
        raise ConfigError(f"loss_fn.force_on_policy_ratio is right only for one optimizer step per GRPO step, here "
                          f"{batch_plan.optimizer_steps_per_rollout}: set policy.train_global_batch_size="
                          f"{batch_plan.samples_per_step} (grpo.num_prompts_per_step x num_generations_per_prompt)")


SCHEDULE_PROBE = 10_000  # scheduler steps stepped through at start-up, looking for the run's peak learning rate
LOW_PEAK, FEW_PEAK = 0.01, 0.1  # a peak under 1% of the configured rate is refused, under 10% warned
DEAD_SHARE = 0.25  # more of a run's steps than this under LOW_PEAK after the peak: warned


def schedule_peak(cfg: MasterConfig, batch_plan: BatchPlan) -> tuple[float, int, int, bool, tuple[int, ...]]:
    """The schedule's peak factor (of policy.optimizer.kwargs.lr) over the scheduler steps the run takes (optimizer
    steps for {warmup_steps}, GRPO steps for NeMo RL's torch schedulers), the step it comes at (1-based), how many
    steps were looked at, whether that is the whole run (else its first SCHEDULE_PROBE), and the steps whose factor
    is under LOW_PEAK (1-based). Raises where the schedule fails."""
    schedule = cfg.policy.scheduler
    total = cfg.grpo.max_num_steps * (1 if schedule.per_grpo_step else batch_plan.optimizer_steps_per_rollout)
    return _stepped(type(schedule), schedule.model_dump_json(), total)


@functools.lru_cache(maxsize=4)  # (check_scheduler and schedule_note each ask at start-up: stepped through once)
def _stepped(kind: type, schedule_json: str, total: int) -> tuple[float, int, int, bool, tuple[int, ...]]:
    import warnings

    import torch  # (only here: the other checks run without it)

    steps = min(total, SCHEDULE_PROBE)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = kind.model_validate_json(schedule_json).build(optimizer)
    peak, at, low = 0.0, 1, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's "step before optimizer.step()": nothing is trained here)
        for step in range(1, steps + 1):  # (the rate optimizer step `step` uses: the scheduler is stepped after it)
            lr = optimizer.param_groups[0]["lr"]
            if lr > peak:
                peak, at = lr, step
            if lr < LOW_PEAK:
                low.append(step)
            if step == steps:
                break
            try:
                scheduler.step()
            except ArithmeticError as e:  # (ConstantLR with factor 0 divides by it when its iterations end)
                until = ", having kept the learning rate at 0 until then" if peak == 0 else ""
                raise ConfigError(f"policy.scheduler fails at step {step} ({type(e).__name__}: {e}){until}: check "
                                  "its kwargs (e.g. ConstantLR's factor > 0)") from None
    return peak, at, steps, steps == total, tuple(low)


def _schedule_words(cfg: MasterConfig, batch_plan: BatchPlan, peak: float, at: int, steps: int, whole: bool) -> str:
    schedule, grpo = cfg.policy.scheduler, cfg.grpo
    lr = cfg.policy.optimizer.kwargs.get("lr")
    unit = "GRPO step" if schedule.per_grpo_step else "optimizer step"
    per = "" if schedule.per_grpo_step else f" x {batch_plan.optimizer_steps_per_rollout} optimizer step(s) per rollout"
    over = f"the run's {steps:,} {unit}s (grpo.max_num_steps={grpo.max_num_steps}{per})" if whole else (
        f"the first {steps:,} {unit}s")
    rate = f" ({peak * lr:.3g} of policy.optimizer.kwargs.lr={lr:g})" if isinstance(lr, (int, float)) else ""
    if not schedule.per_grpo_step:
        fix = ("set policy.scheduler.warmup_steps (counted in optimizer steps) to a tenth of the run or less, or raise "
               "grpo.max_num_steps")
    else:
        fix = ("check its kwargs (total_iters, LinearLR's start_factor, ConstantLR's factor, the milestones: NeMo RL's "
               "schedulers count GRPO steps) or raise grpo.max_num_steps")
    return (f"policy.scheduler reaches at most {peak * 100:.2g}% of the configured learning rate{rate} over {over}, at "
            f"{unit} {at}: {fix}")


def check_scheduler(cfg: MasterConfig, batch_plan: BatchPlan) -> None:
    """The learning-rate schedule builds (its kwargs are those of its torch class), and it lifts the learning rate
    to at least LOW_PEAK of the configured one within the run (ConstantLR with factor 0 trained nothing; a warm-up of
    100,000 steps in a 4-step run trained at 1e-11, both without a word)."""
    peak, at, steps, whole, _ = schedule_peak(cfg, batch_plan)
    if peak == 0:
        raise ConfigError(f"policy.scheduler keeps the learning rate at 0 for {'all' if whole else 'the first'} "
                          f"{steps:,} steps, so nothing is learned: check its kwargs (e.g. ConstantLR's factor, "
                          "LinearLR's start_factor and total_iters)")
    if peak < LOW_PEAK and whole:
        raise ConfigError(_schedule_words(cfg, batch_plan, peak, at, steps, whole) + ". So low a rate learns next to "
                          "nothing")


NEAR_GREEDY = 0.1  # a temperature or top_p below it samples a group's answers nearly alike


def sampling_note(cfg: MasterConfig) -> str | None:
    """A warning where sampling is near greedy (temperature 0 and top_k 1 are refused): a group's answers come out
    nearly alike, most groups flat, little learned; None: none."""
    gen = cfg.policy.generation
    low = [f"{k}={v:g}" for k, v in (("temperature", gen.temperature), ("top_p", gen.top_p))
           if v is not None and 0 < v < NEAR_GREEDY]
    if not low:
        return None
    return (f"warning: policy.generation.{' and '.join(low)} samples nearly greedily: a group's answers come out "
            "nearly alike, so most groups' rewards are equal and little is learned (NeMo RL's recipes sample at "
            "temperature 1.0, top_p 1.0); validation has its own val_temperature and val_top_p")


ASYNC_HIGH_LR = 1e-4  # a full fine-tune's learning rate at which async GRPO's step-old rollouts stopped learning


def async_note(cfg: MasterConfig) -> str | None:
    """A warning where async GRPO trains all weights at a learning rate of ASYNC_HIGH_LR or more: on the built-in
    default (2e-4) its eval fell where sync's rose, and at 5e-5 the two matched (docs/algorithms.md); None: none."""
    lr = cfg.policy.optimizer.kwargs.get("lr")
    if not (cfg.grpo.async_grpo.enabled and not cfg.policy.lora.enabled and isinstance(lr, (int, float))
            and lr >= ASYNC_HIGH_LR):
        return None
    return (f"warning: async GRPO at learning rate {lr:g}: rollouts a step old need a policy that moves less per step "
            "(on the built-in default at 2e-4 the eval fell where sync GRPO's rose; at 5e-5 they matched): lower "
            "policy.optimizer.kwargs.lr, or watch train/logprob_mismatch and the eval (docs/algorithms.md)")


def schedule_note(cfg: MasterConfig, batch_plan: BatchPlan) -> str | None:
    """A warning where the schedule's peak within the run (or its first SCHEDULE_PROBE steps) is under FEW_PEAK of
    the configured rate (a smoke run of a recipe with a long warm-up, say); None: none."""
    peak, at, steps, whole, low = schedule_peak(cfg, batch_plan)
    if peak < LOW_PEAK and whole:  # (refused by check_scheduler)
        return None
    if peak < FEW_PEAK:
        return "warning: " + _schedule_words(cfg, batch_plan, peak, at, steps, whole)
    dead = [step for step in low if step > at]  # (after the peak: not a warm-up's start)
    if whole and len(dead) > DEAD_SHARE * steps:  # (a decay to 0 in 2 steps of a 100-step run trained 98 at 0)
        return (f"warning: policy.scheduler keeps the learning rate under {LOW_PEAK:.0%} of the configured one for "
                f"{len(dead):,} of the run's {steps:,} scheduler steps (from step {dead[0]:,}): they learn next to "
                "nothing; check its kwargs (LinearLR's total_iters and end_factor, StepLR's step_size and gamma) "
                "against grpo.max_num_steps")
    return None


def check_schedule_left(cfg: MasterConfig, step: int, old_steps: int | None) -> None:
    """A run resumed after `step` GRPO steps with more steps than it had (`old_steps`): the schedule's rate for the
    steps left is not all under LOW_PEAK after its peak (a LinearLR decayed to 0 at the old end trained every new
    step at 0). The same run resumed in its schedule's tail is left alone."""
    if old_steps is None or cfg.grpo.max_num_steps <= old_steps:
        return
    batch_plan = plan(cfg)
    peak, at, steps, whole, low = schedule_peak(cfg, batch_plan)
    per = 1 if cfg.policy.scheduler.per_grpo_step else batch_plan.optimizer_steps_per_rollout
    first = step * per + 1  # the first scheduler step this run takes
    if not whole or first > steps or first <= at or not set(range(first, steps + 1)) <= set(low):
        return
    unit = "GRPO steps" if per == 1 else "optimizer steps"
    raise ConfigError(f"policy.scheduler keeps the learning rate under {LOW_PEAK:.0%} of the configured one for every "
                      f"step this resumed run takes ({unit} {first:,}-{steps:,} of grpo.max_num_steps="
                      f"{cfg.grpo.max_num_steps}, was {old_steps}): its schedule ended at the run's old length, and "
                      "they would learn nothing. Start a new run with a schedule for the new length (a new "
                      "checkpointing.checkpoint_dir, policy.model_name the last checkpoint's policy/), or keep "
                      "grpo.max_num_steps where it was")


def missing_package(cfg: MasterConfig) -> str | None:
    """An optional package a setting needs and this machine lacks, as the line that names the fix; None: none. Not
    part of validate(): a config dry-runs on any machine (NeMo RL's log to W&B), and the run refuses it before
    anything loads."""
    import importlib.util

    if cfg.logger.wandb_enabled and importlib.util.find_spec("wandb") is None:
        return ("logger.wandb_enabled=true needs wandb, which is not installed here: `.venv/bin/pip install wandb` "
                "(or `pip install 'execrl[wandb]'`), or set logger.wandb_enabled=false")
    return None


def check_model_directory(cfg: MasterConfig) -> None:
    """A policy.model_name that can only be a directory (a path, not org/name) is one on this machine."""
    _local_directory(cfg.policy.model_name, "policy.model_name")


def _local_directory(name: str, key: str) -> bool:
    """Whether `name` is a directory on this machine; raises where it can only be one (a path, not org/name) and
    is not."""
    from execrl.models import looks_like_path

    if Path(name).expanduser().is_dir():
        return True
    if looks_like_path(name):
        raise ConfigError(f"{key} {name!r}: no such directory (a hub id looks like org/name)")
    return False


def check_model(cfg: MasterConfig) -> None:
    """The policy can be loaded (model_reachable). Not part of validate(): --dry-run works without the model."""
    model_reachable(cfg.policy.model_name, cfg.offline, "policy.model_name")


def model_reachable(name: str, offline: bool, key: str) -> None:
    """A model can be loaded: built in, a local directory, in the hub cache, or on a hub that answers (within
    seconds: not after minutes of retries, and before torchrun starts a process per GPU that would each fail)."""
    import os

    if name.startswith("builtin:") or _local_directory(name, key):
        return
    import huggingface_hub

    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        return
    if offline or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ConfigError(f"{key} {name!r} is not in the local hub cache and offline mode is on: pass a local "
                          "HF-format directory, or run online once to cache it")
    try:
        huggingface_hub.model_info(name, timeout=10)
    except Exception as e:  # noqa: BLE001 - unreachable, unknown id, gated: one line either way
        raise ConfigError(f"{key} {name!r}: not in the local hub cache, and the hub did not give it "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:160]}): pass a local HF-format directory, "
                          "or run where the hub is reachable") from None


def check_truncation(cfg: MasterConfig, correcting: bool) -> None:
    """The truncated importance-sampling keys, as NeMo RL asserts them: a type needs the correction
    and a ratio, a ratio needs a type, and ratio_min is at most the ratio."""
    lf = cfg.loss_fn
    kind, high, low = (lf.truncated_importance_sampling_type, lf.truncated_importance_sampling_ratio,
                       lf.truncated_importance_sampling_ratio_min)
    if (kind is not None or high is not None) and not correcting:
        key = "type" if kind is not None else "ratio"
        raise ConfigError(f"loss_fn.truncated_importance_sampling_{key} truncates the importance-sampling correction, "
                          "which is off: set loss_fn.use_importance_sampling_correction=true (or the truncation keys "
                          "to null)")
    if high is not None and kind is None and "loss_fn.truncated_importance_sampling_type" in cfg._written:
        raise ConfigError("loss_fn.truncated_importance_sampling_ratio needs a type (NeMo RL refuses it without one): "
                          "set loss_fn.truncated_importance_sampling_type=tis (weights cut to the ratio) or icepop")
    if kind is not None and high is None:
        raise ConfigError(f"loss_fn.truncated_importance_sampling_type {kind} needs its bound: set "
                          "loss_fn.truncated_importance_sampling_ratio (e.g. 2.0)")
    if kind == "icepop" and low is None:
        raise ConfigError("loss_fn.truncated_importance_sampling_type icepop keeps tokens whose weight is within "
                          "[truncated_importance_sampling_ratio_min, truncated_importance_sampling_ratio]: set both")
    if high is not None and low is not None and low > high:
        raise ConfigError(f"loss_fn.truncated_importance_sampling_ratio_min ({low}) is above "
                          f"truncated_importance_sampling_ratio ({high}): set it to at most the ratio")
    if kind == "icepop" and not low <= 1 <= high:
        raise ConfigError(f"loss_fn.truncated_importance_sampling_type icepop keeps the tokens whose weight is within "
                          f"[{low}, {high}], which leaves out 1, about the weight of every token the policy sampled "
                          "itself: every token would be masked and nothing learned; set ratio_min <= 1 <= ratio "
                          "(e.g. 0.5 and 5)")


def check_async(cfg: MasterConfig) -> None:
    """Settings async GRPO and the importance-sampling correction cannot work with, each with its
    fix."""
    a, engine = cfg.grpo.async_grpo, cfg.policy.generation.backend == "execrl"
    if cfg.loss_fn.use_importance_sampling_correction and not engine:
        raise ConfigError("loss_fn.use_importance_sampling_correction needs the sampler's logprobs, which only the "
                          "execrl engine returns: set policy.generation.backend=execrl")
    check_truncation(cfg, importance_correction(cfg))
    if not a.enabled:
        return
    if not engine:
        raise ConfigError("grpo.async_grpo needs the sampler's logprobs for its off-policy correction, which only the "
                          "execrl engine returns: set policy.generation.backend=execrl")
    if a.max_trajectory_age_steps < 1:
        raise ConfigError("grpo.async_grpo trains on rollouts sampled one step earlier: set "
                          "grpo.async_grpo.max_trajectory_age_steps >= 1 (or grpo.async_grpo.enabled=false)")
    if cfg.loss_fn.use_importance_sampling_correction is False:
        raise ConfigError("grpo.async_grpo trains on rollouts of an older policy, which the loss must correct with "
                          "the sampler's logprobs: set loss_fn.use_importance_sampling_correction=true (or leave it "
                          "unset: on with async)")


def check_supported(cfg: MasterConfig) -> None:
    """Refuse, with the fix, settings that would change the algorithm in ways execrl does not
    implement."""
    if cfg.grpo.use_dynamic_sampling and cfg.grpo.use_leave_one_out_baseline and cfg.grpo.advantage == "grpo":
        raise ConfigError("grpo.use_dynamic_sampling with grpo.use_leave_one_out_baseline: NeMo RL then filters single "
                          "samples by the std of the others (dropping a group's lone success) where execrl keeps "
                          "groups whole, as DAPO does: set grpo.use_leave_one_out_baseline=false (as NeMo RL's DAPO "
                          "recipes do)")
    if cfg.grpo.batch_multiplier != 1 and not cfg.grpo.use_dynamic_sampling:
        raise ConfigError(f"grpo.batch_multiplier is {cfg.grpo.batch_multiplier} without grpo.use_dynamic_sampling "
                          "(NeMo RL asserts 'batch_multiplier>1 can only be used if use_dynamic_sampling=True'): set "
                          "grpo.use_dynamic_sampling=true, or grpo.batch_multiplier=1")
    if cfg.grpo.use_dynamic_sampling and cfg.grpo.async_grpo.enabled:
        raise ConfigError("grpo.use_dynamic_sampling is not implemented with async GRPO (its later rounds would have "
                          "to wait for grading): set grpo.async_grpo.enabled=false, or grpo.use_dynamic_sampling=false")
    if cfg.loss_fn.use_on_policy_kl_approximation and cfg.policy.generation.backend != "execrl":
        raise ConfigError("loss_fn.use_on_policy_kl_approximation weights the KL by pi / pi_sampler, with the "
                          "sampler's logprobs, which only the execrl engine returns: set "
                          "policy.generation.backend=execrl")
    game = cfg.env.multi_turn.kind == "game"
    if cfg.grpo.advantage == "rae" and not game:
        raise ConfigError("grpo.advantage=rae (role-conditioned baselines) is for self-play: set "
                          "env.multi_turn.kind=game with data.train.dataset_name=selfplay:<game>")
    if cfg.grpo.advantage == "rae" and cfg.grpo.use_dynamic_sampling:  # (a hunt's find)
        raise ConfigError("grpo.use_dynamic_sampling keeps the groups whose rewards differ, and under grpo.advantage="
                          "rae a match of equal returns (a draw) still has advantages against its roles' baselines: "
                          "it dropped every draw. Set grpo.use_dynamic_sampling=false")
    if game and cfg.grpo.num_generations_per_prompt != 2:
        raise ConfigError("self-play plays each match with its two seats: set grpo.num_generations_per_prompt=2")
    check_opponent(cfg, game)
    if cfg.grpo.val_num_generations_per_prompt > 1 and cfg.policy.generation.val_temperature == 0:
        raise ConfigError(f"grpo.val_num_generations_per_prompt={cfg.grpo.val_num_generations_per_prompt} greedy "
                          "samples would all be the same: set policy.generation.val_temperature > 0 (NeMo RL's "
                          "configs: ${policy.generation.temperature})")
    if cfg.grpo.val_num_generations_per_prompt > 1 and cfg.policy.generation.val_top_k == 1:
        raise ConfigError(f"grpo.val_num_generations_per_prompt={cfg.grpo.val_num_generations_per_prompt} samples at "
                          "policy.generation.val_top_k=1 are all the same (greedy), so pass@k would be pass@1: set "
                          "val_top_k to null or above 1, or val_num_generations_per_prompt=1")
    if cfg.policy.hf_config_overrides and cfg.policy.model_name.startswith("builtin:"):
        raise ConfigError(f"policy.hf_config_overrides change a hub or local model's config.json; "
                          f"{cfg.policy.model_name} is built here: set them to {{}}")
    multi = cfg.env.multi_turn.kind == "interpreter" and cfg.grpo.max_rollout_turns > 1
    if not cfg.env.code.terminate_on_evaluation and not multi:
        raise ConfigError("env.code.terminate_on_evaluation=false (episodes go on after the code runs) is execrl's "
                          "code interpreter: set env.multi_turn.kind=interpreter and grpo.max_rollout_turns > 1, or "
                          "terminate_on_evaluation=true")


def check_opponent(cfg: MasterConfig, game: bool) -> None:
    """env.game's opponent settings: each one only where it does something."""
    g = cfg.env.game
    if g.opponent != "self" and not game:
        raise ConfigError(f"env.game.opponent={g.opponent} plays the other seat of a self-play match: set "
                          "env.multi_turn.kind=game, or env.game.opponent=self")
    if (g.opponent == "model") != (g.opponent_model is not None):
        raise ConfigError("env.game.opponent=model plays a fixed model: set env.game.opponent_model to its directory"
                          if g.opponent == "model" else f"env.game.opponent_model is read with env.game.opponent=model "
                          f"only (it is {g.opponent}): set opponent=model, or drop opponent_model")
    if g.opponent != "self" and cfg.cluster.gpus_per_node * cfg.cluster.num_nodes > 1:  # (here, not in each of
        raise ConfigError(f"env.game.opponent={g.opponent} runs in one process: set cluster.gpus_per_node=1 and "
                          "cluster.num_nodes=1, or env.game.opponent=self")  # torchrun's processes, the model loaded)
    if g.opponent_refresh_steps is not None and g.opponent != "snapshot":
        raise ConfigError(f"env.game.opponent_refresh_steps refreshes a snapshot opponent (env.game.opponent is "
                          f"{g.opponent}): set opponent=snapshot, or drop it")
    if g.policy_roles is not None and g.opponent == "self":
        raise ConfigError("env.game.policy_roles: with env.game.opponent=self the policy plays every role; set "
                          "opponent=snapshot or model, or drop policy_roles")
    from execrl.games import GAMES
    names = {d.dataset_name.split(":", 1)[1] for d in cfg.data.train_sets if d.dataset_name.startswith("selfplay:")}
    short = sorted(f"{n} (up to {GAMES[n].max_moves} moves)" for n in names & set(GAMES)
                   if game and cfg.grpo.max_rollout_turns < GAMES[n].max_moves)
    if short:  # (a match cut there is a draw: negotiation at 3 turns was a draw every time, nothing to learn)
        raise ConfigError(f"grpo.max_rollout_turns={cfg.grpo.max_rollout_turns} cuts the matches of {', '.join(short)}, "
                          f"which count both seats' moves: each cut match is a draw. Set grpo.max_rollout_turns="
                          f"{max(GAMES[n].max_moves for n in names & set(GAMES))}")
    if g.guided_moves:
        free = sorted(n for n in names & set(GAMES) if GAMES[n].free_text)
        if not game or free:
            raise ConfigError("env.game.guided_moves holds a self-play game's moves to its legal ones: set "
                              "env.multi_turn.kind=game with a game of listed moves" +
                              (f" ({', '.join(free)}: free-text moves)" if free else "") + ", or drop guided_moves")
        if cfg.policy.generation.backend != "execrl":
            raise ConfigError("env.game.guided_moves masks the moves in the execrl engine's sampling step: set "
                              "policy.generation.backend=execrl")
        gen = cfg.policy.generation
        own = next((k for k in ("guided_decoding", "guided_decoding_per_turn") if getattr(gen, k) is not None), None)
        if own and _kinds(cfg) == {"game"}:  # (a hunt's find: accepted, and every move kept to the legal ones)
            raise ConfigError(f"env.game.guided_moves holds every move to the game's legal ones, so "
                              f"policy.generation.{own} would constrain nothing: drop it, or set "
                              "env.game.guided_moves=false to hold the moves to it")
    if g.policy_roles is not None:
        for name in names & set(GAMES):
            wrong = [r for r in g.policy_roles if r not in GAMES[name].roles]
            if wrong or not g.policy_roles:
                raise ConfigError(f"env.game.policy_roles={g.policy_roles}: {name}'s roles are "
                                  f"{list(GAMES[name].roles)}")


def check_dataset_names(cfg: MasterConfig, held: set[tuple[str, str | None]]) -> None:
    """data.default.env_name and processor, NeMo RL's names for how rows are read and graded, must
    fit the kinds of problem (code, math) the training and validation data hold: execrl grades each
    problem by its kind. held: (a dataset's key, a kind of problem it holds; None: not known yet)."""
    holders: dict[str, set[str]] = {}
    for where, kind in held:
        if kind is not None:
            holders.setdefault(kind, set()).add(where)
    d = cfg.data.default
    for key, named in (("env_name", d.env_name), ("processor", d.processor)):
        # code | math (env_name's values, and the processors' prefixes); the reward model reads
        # either
        fits = {"code", "math"} if named == "reward_model" else {named.split("_")[0]}
        if named != "auto" and set(holders) - fits:
            other = "; ".join(f"{', '.join(sorted(holders[k]))} holds {k} problems" for k in sorted(set(holders) - fits))
            raise ConfigError(f"data.default.{key} is {named!r} but {other}: use a {' or '.join(sorted(fits))} "
                              f"dataset there (data.validation: null holds out a share of the training set with "
                              f"split_validation_size), or set data.default.{key}=auto (execrl grades each problem "
                              "by its kind)")


def no_effect_note(cfg: MasterConfig) -> str | None:
    """A line naming the keys this config sets (to other than their defaults) that change nothing
    here, and one naming the NeMo RL keys read as execrl settings (None: neither)."""
    default = MasterConfig()
    seen = []
    for key in NO_EFFECT:
        if key in DYNAMIC_ONLY and cfg.grpo.use_dynamic_sampling:
            continue
        if attribute(cfg, key) != attribute(default, key):
            seen.append(key)
    why = {k: NO_EFFECT[k] for k in seen} | cfg._nemo_ignored | unread_options(cfg) | unread_by_variant(cfg) | \
        unread_by_kind(cfg) | unread_while_off(cfg)
    lines = []
    if cfg._nemo_mapped:
        lines.append("note: NeMo RL keys read as: " + "; ".join(f"{k} -> {v}" for k, v in cfg._nemo_mapped.items()))
    if why:
        lines.append("note: accepted, with no effect here: " + "; ".join(f"{k} ({r})" for k, r in why.items()))
    return "\n".join(lines) or None


def unread_by_variant(cfg: MasterConfig) -> dict[str, str]:
    """Keys the config writes that the chosen advantage or loss variant does not read -> why."""
    out, grpo = {}, cfg.grpo
    if grpo.advantage != "grpo":
        reads = "r - the group's mean, undivided" if grpo.advantage == "dr_grpo" else "each role's return less its baseline"
        for key in ("grpo.normalize_rewards", "grpo.use_leave_one_out_baseline"):
            if key in cfg._written and attribute(cfg, key):
                out[key] = f"grpo.advantage={grpo.advantage} is {reads}"
    if cfg.loss_fn.constant_normalizer and "loss_fn.token_level_loss" in cfg._written:
        out["loss_fn.token_level_loss"] = ("loss_fn.constant_normalizer divides each sequence's token sum by it, "
                                           "whatever the level")
    return out | unread_by_ratio(cfg)


def importance_correction(cfg: MasterConfig) -> bool:
    """Whether the loss weights tokens by pi_old / pi_sampler: as configured, else on exactly when async."""
    on = cfg.loss_fn.use_importance_sampling_correction
    return cfg.grpo.async_grpo.enabled if on is None else on


def unread_by_ratio(cfg: MasterConfig) -> dict[str, str]:
    """The PPO ratio's keys under a loss without one (a hunt's find: GSPO and the clips under disable_ppo_ratio gave
    the run without them, to the bit, with no word). As NeMo RL's loss: force_on_policy_ratio's ratio is 1 and
    unclipped, and wins over disable_ppo_ratio; disable_ppo_ratio's loss is -A log pi, which the PPO clips do not
    read and the dual clip's bound never reaches; sequence_level_importance_ratios then shapes only the importance
    sampling correction's weights."""
    lf = cfg.loss_fn
    variant = "force_on_policy_ratio" if lf.force_on_policy_ratio else "disable_ppo_ratio" if lf.disable_ppo_ratio \
        else None
    if variant is None:
        return {}
    why = f"loss_fn.{variant}=true: " + ("the ratio is 1, unclipped" if lf.force_on_policy_ratio
                                        else "the loss is -A log pi, with no ratio to clip")
    keys = ["loss_fn.ratio_clip_min", "loss_fn.ratio_clip_max"] + ["loss_fn.ratio_clip_c"] * (lf.ratio_clip_c is not None)
    if lf.sequence_level_importance_ratios and not importance_correction(cfg):
        keys.append("loss_fn.sequence_level_importance_ratios")
    default = MasterConfig().loss_fn  # (a config's own values: not the defaults a file writes out, a review's find)
    out = {key: why for key in keys if key in cfg._written and attribute(cfg, key) != getattr(default, key[8:])}
    if lf.force_on_policy_ratio and lf.disable_ppo_ratio:
        out["loss_fn.disable_ppo_ratio"] = "loss_fn.force_on_policy_ratio=true's ratio of 1 is the one used, as NeMo RL's"
    return out


# env.multi_turn's keys read by one or two of the built-in kinds (one of one's own may read any)
BUILT_IN_KINDS = ("single_turn", "interpreter", "unit_tests", "game", "sliding_puzzle")
KIND_KEYS = {"env.multi_turn.final_tag": ("interpreter",), "env.multi_turn.stateful": ("interpreter",),
             "env.multi_turn.public_tests": ("unit_tests",), "env.multi_turn.max_output_chars": ("interpreter",
                                                                                                 "unit_tests")}


def _kinds(cfg: MasterConfig) -> set[str | None]:
    """The kinds of problem the config's datasets, trained and validated on, pose (None: a loader of one's own, or
    an unknown dataset, which is refused elsewhere with its own message)."""
    try:
        return {DATASETS[dataset_key(d.dataset_name)].kind for _, d in dataset_entries(cfg)}
    except DatasetError:
        return {None}


def unread_by_kind(cfg: MasterConfig) -> dict[str, str]:
    """Keys the config writes that its environment and data do not read -> why: a multi-turn kind's settings under
    another built-in kind, a game's or the puzzle's where no dataset holds one, the role baselines' decay without
    grpo.advantage=rae (a hunt's find: accepted without a word)."""
    written, kind = cfg._written, cfg.env.multi_turn.kind
    out = {}
    if kind in BUILT_IN_KINDS:
        out = {k: f"read by env.multi_turn.kind={' or '.join(kinds)} only, and it is {kind}"
               for k, kinds in KIND_KEYS.items() if k in written and kind not in kinds}
    data = _kinds(cfg)  # (a loader of one's own, kind None, may pose games or puzzles: no note of them then)
    for section, held, by in (("env.game.", "game", "a selfplay:<game> dataset"),
                              ("env.sliding_puzzle.", "puzzle", "the sliding_puzzle dataset")):
        if held not in data and None not in data:
            out |= {k: f"read only where {by} is trained or validated on" for k in written if k.startswith(section)}
    if "grpo.role_baseline_decay" in written and cfg.grpo.advantage != "rae":
        out["grpo.role_baseline_decay"] = f"read by grpo.advantage=rae only, and it is {cfg.grpo.advantage}"
    return out


WHILE_ON = {  # settings read only while another is on -> (whether it is, what turns it on); a hunt's find: each was
    # accepted without a word where it did nothing
    ("loss_fn.reference_policy_kl_type", "loss_fn.kl_input_clamp_value", "loss_fn.kl_output_clamp_value",
     "loss_fn.use_on_policy_kl_approximation"):
        (lambda c: c.loss_fn.reference_policy_kl_penalty > 0, "a KL penalty (loss_fn.reference_policy_kl_penalty > 0)"),
    ("grpo.async_grpo.max_trajectory_age_steps",): (lambda c: c.grpo.async_grpo.enabled, "grpo.async_grpo.enabled=true"),
    ("policy.dynamic_batching.train_mb_tokens", "policy.dynamic_batching.logprob_mb_tokens",
     "policy.dynamic_batching.sequence_length_round"):
        (lambda c: c.policy.dynamic_batching.enabled, "policy.dynamic_batching.enabled=true"),
    ("policy.generation.cuda_graphs", "policy.generation.sync_every", "policy.generation.compile"):
        (lambda c: c.policy.generation.backend == "execrl", "the execrl engine (policy.generation.backend=execrl)"),
    ("grpo.val_num_generations_per_prompt", "grpo.max_val_samples", "grpo.val_start_at",
     "policy.generation.val_temperature", "policy.generation.val_top_p", "policy.generation.val_top_k"):
        (lambda c: c.grpo.val_period > 0 or c.grpo.val_at_start or c.grpo.val_at_end,
         "a validation (grpo.val_period > 0, grpo.val_at_start or grpo.val_at_end)"),
}


def unread_while_off(cfg: MasterConfig) -> dict[str, str]:
    """Keys the config writes, other than their defaults, that what reads them is off for -> why."""
    default = MasterConfig()
    return {k: f"read only with {needs}" for keys, (on, needs) in WHILE_ON.items() if not on(cfg) for k in keys
            if k in cfg._written and attribute(cfg, k) != attribute(default, k)}


def loader_options(info) -> list[str]:
    """The data.*.options a built-in loader takes by name (a researcher's own loader checks its own)."""
    import inspect

    if info.own:
        return []
    params = inspect.signature(info.load).parameters.items()
    return [n for n, p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            and n not in ("path", "split", "report", "hub_id")]


def unread_options(cfg: MasterConfig) -> dict[str, str]:
    """data.*.options a built-in loader does not take (and so ignores): e.g. the built-in default's
    warmup_hidden, kept when a user names another dataset in its place."""
    out = {}
    for key, d in dataset_entries(cfg):
        try:
            info = DATASETS[dataset_key(d.dataset_name)]
        except DatasetError:  # (an unknown dataset is refused elsewhere, with its own message)
            continue
        if info.own:
            continue
        takes = loader_options(info)
        for name in d.options:
            if name not in takes:
                out[f"{key}.options.{name}"] = f"{d.dataset_name} takes no such option: not read"
    return out


def nemo_defaults(cfg: MasterConfig) -> list[tuple[str, object, object]]:
    """(key, this config's value, NeMo RL's current default) for the keys whose defaults differ from NeMo RL's
    GRPOConfig / ClippedPGLossConfig: a config written for NeMo RL that leaves one out runs with execrl's."""
    return [("loss_fn.reference_policy_kl_penalty", cfg.loss_fn.reference_policy_kl_penalty, 0.01),
            ("grpo.max_num_epochs", cfg.grpo.max_num_epochs, 1),
            ("grpo.max_num_steps", cfg.grpo.max_num_steps, 1_000_000)]


def differences_note(cfg: MasterConfig) -> str | None:
    """A line naming the deliberate differences from NeMo RL's current code that this config touches
    (docs/configs.md: "NeMo RL's algorithm keys"); None: none."""
    differences = nemo_differences(cfg)
    return ("note: where execrl's numbers differ from NeMo RL's on purpose: " + "; ".join(differences)) \
        if differences else None


def nemo_differences(cfg: MasterConfig) -> list[str]:
    """The deliberate differences from NeMo RL's current code that this config touches, one phrase
    each."""
    lf, grpo, out = cfg.loss_fn, cfg.grpo, []
    if grpo.normalize_rewards and grpo.advantage == "grpo":
        out.append("grpo.normalize_rewards divides by the exact std of the rewards (NeMo RL's E[r^2] - E[r]^2 in "
                   "float32 loses the difference of close rewards, and with leave-one-out divides a group's one "
                   "odd fractional reward by a rounding residue: 7 x 0.33 and one 0.67 can give that sample thousands "
                   "there, how many depending on the order the device sums in, 0.34 here)")
    if cfg.data.max_input_seq_length is not None:
        out.append(f"a prompt of data.max_input_seq_length ({cfg.data.max_input_seq_length}) tokens or more is left "
                   "out of the run with a count (NeMo RL cuts it to a few tokens, generates from that and leaves "
                   "its samples out of the loss: in its group's baseline and its step's rewards still)")
    if grpo.use_dynamic_sampling:
        out.append("grpo.use_dynamic_sampling decides that a group's rewards differ by comparing them (NeMo RL keeps a "
                   "group of equal fractional rewards whose float32 std rounds above 0), and a step still short of "
                   "groups at an epoch's end keeps them and draws its next round from the next epoch (NeMo RL drops "
                   "them and starts the step again: here such a step can hold a prompt twice)"
                   + ("; with several GPUs each process fills its own share of the step's groups from its own part "
                      "of each round (NeMo RL picks them from the whole round, as one process does: a run on "
                      f"{gpus(cfg)} GPUs trains on other groups than one process, and generates another round while "
                      "any process is short)" if gpus(cfg) > 1 else ""))
    gen = cfg.policy.generation
    if gen.temperature > 0 and (gen.top_k is not None or gen.top_p < 1) and (lf.use_importance_sampling_correction or
                                                      grpo.async_grpo.enabled):
        out.append("with top-k/top-p, a sampled token the trainer's own filter leaves out has importance weight 1 "
                   "(NeMo RL's: e^-(its sampler logprob), which GSPO's sequence weight spreads over the sequence)")
    from execrl.trainer.optim import FUSED_ADAMW

    if cfg.policy.optimizer.name in FUSED_ADAMW:
        out.append(f"policy.optimizer.name {cfg.policy.optimizer.name} runs as torch.optim.AdamW (the same update; "
                   "its moments and master weights in fp32: exp_avg_dtype, master_weights, store_param_remainders "
                   "are not read)")
    if grpo.async_grpo.enabled and grpo.async_grpo.max_trajectory_age_steps > 1:
        out.append(f"grpo.async_grpo.max_trajectory_age_steps={grpo.async_grpo.max_trajectory_age_steps} bounds the "
                   "rollouts' age only: execrl generates one step ahead (rollouts are 1 step old), where NeMo RL's "
                   "generation runs up to that many steps ahead of training")
    if grpo.async_grpo.enabled and lf.use_importance_sampling_correction is None:
        out.append("loss_fn.use_importance_sampling_correction left out is on with async GRPO (NeMo RL's default, "
                   "false, fails its own check that async GRPO has it on)")
    if grpo.async_grpo.enabled:  # (a hunt's find: NeMo RL's examples/run_grpo.py raises NotImplementedError)
        shaped = [k for k, on in (("reward scaling (grpo.reward_scaling, reward.scaling)", cfg.reward.scaling.enabled),
                                  ("the overlong penalty (grpo.reward_shaping)", any(
                                      c.name == "overlong_penalty" for c in cfg.reward.components))) if on]
        if shaped:
            out.append(f"{' and '.join(shaped)} with async GRPO: execrl applies {'them' if len(shaped) > 1 else 'it'} "
                       "to the rollouts as sync GRPO does; NeMo RL's run_grpo.py refuses the pair")
    if grpo.overlong_filtering:  # (a hunt's find)
        out.append("grpo.overlong_filtering leaves out of the loss the samples cut at the length limit; NeMo RL's "
                   "current code also leaves out an answer that ended within the last few tokens of "
                   "policy.max_total_sequence_length, where its environment's reply would not fit")
    val = [f"{k}={getattr(gen, 'val_' + k)}" for k in ("temperature", "top_p", "top_k")
           if getattr(gen, "val_" + k) != getattr(gen, k)]
    if val and bool(getattr(cfg, "_nemo_mapped", None) or getattr(cfg, "_nemo_ignored", None)):
        out.append(f"validation samples at its own {', '.join('val_' + v for v in val)} (policy.generation); NeMo "
                   "RL's current code refuses validation settings other than training's outside vLLM with NeMo-Gym")
    per_rollout = plan(cfg).optimizer_steps_per_rollout
    if per_rollout > 1:
        out.append(f"train/loss and train/grad_norm are the mean over the step's {per_rollout} optimizer steps (NeMo "
                   "RL logs the sum of their losses and the last one's norm)")
    if cfg.policy.cpu_offload and gpus(cfg) > 1:
        out.append("policy.cpu_offload (NeMo RL: policy.dtensor_cfg.cpu_offload) has no effect with several GPUs: "
                   "FSDP2 shards the master weights and AdamW's state over them instead (offloading them as well is "
                   "not implemented)")
    written = getattr(cfg, "_written", set())
    nemo = bool(getattr(cfg, "_nemo_mapped", None) or getattr(cfg, "_nemo_ignored", None))  # a config for NeMo RL
    if nemo and grpo.advantage == "grpo":  # (each flag apart: a section that names only the estimator sets neither)
        off = [k for k in ("normalize_rewards", "use_leave_one_out_baseline")
               if f"grpo.{k}" in written and f"grpo.adv_estimator.{k}" not in written and not getattr(grpo, k)]
        if off:
            out.append(f"{' and '.join('grpo.' + k for k in off)}=false set{'s' if len(off) == 1 else ''} the "
                       "advantages here; NeMo RL's current code reads grpo.adv_estimator's (true where that section "
                       "does not set it) and this key only to filter dynamic sampling's groups")
    if nemo:
        unset = [f"{key}={here} (NeMo RL's default: {theirs})" for key, here, theirs in nemo_defaults(cfg)
                 if key not in written and here != theirs]
        if unset:
            out.append("not in the config, so execrl's defaults: " + ", ".join(unset))
    if nemo and grpo.max_val_samples % grpo.val_batch_size and "grpo.max_val_samples" in written:
        whole = grpo.max_val_samples // grpo.val_batch_size * grpo.val_batch_size
        out.append(f"grpo.max_val_samples={grpo.max_val_samples} validates that many problems; NeMo RL's code "
                   f"validates whole batches of grpo.val_batch_size={grpo.val_batch_size} only, {whole} problems")
    if nemo and cfg.env.math.math_verify_impl == "hf_math_verify" and any(k.startswith("env.math.") for k in written):
        out.append("env.math.math_verify_impl=hf_math_verify: execrl finds the final answer (the last \\boxed{}, an "
                   "'answer is' or 'Answer:' line, else the last number) and math-verify compares it with the "
                   "reference; NeMo RL hands math-verify the whole response, so hedged, unboxed or worded answers can "
                   "score otherwise ('Answer: 2\\sqrt{2}', '\\boxed{18 (or 20)}', '18 thousand', a base model's next "
                   "'Question:' turn: docs/configs.md)")
    if "grpo.reward_shaping" in getattr(cfg, "_nemo_mapped", {}) and grpo.max_rollout_turns > 1:
        out.append("grpo.reward_shaping's overlong penalty reads an episode's last model turn's length (NeMo RL's "
                   "message-log path reads the first assistant message's)")
    if lf.truncated_importance_sampling_ratio is not None and lf.truncated_importance_sampling_type is None:
        out.append("loss_fn.truncated_importance_sampling_ratio without a type is read as tis, as NeMo RL did before "
                   "the type key existed (its current code refuses it)")
    return out

