"""The one typed config schema. Every default lives here; YAML files and `key=value` overrides only
override it. Names follow NeMo RL's where they exist (policy.*, grpo.*, loss_fn.*, data.*, env.*,
logger.*, checkpointing.*, cluster.*), so its GRPO configs load unchanged."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from execrl.config.reward_model import replace_verifier
from execrl.config.schedule import Schedule, WarmupSchedule
from execrl.config.section import Section
from execrl.guided import KINDS
from execrl.prompts import PromptConfig
from execrl.rewards.base import RewardConfig
from execrl.tasks.registry import DATASETS, dataset_key


class TokenizerConfig(Section):
    name: str | None = Field(None, description="tokenizer id or directory; null: the model's own")
    chat_template: str | None = Field(None, description="a Jinja chat template to use instead of the tokenizer's, "
                                      "or a .jinja file holding one (read as the config loads); null or `default`: "
                                      "the tokenizer's own")
    chat_template_kwargs: dict[str, Any] | None = Field(None, description="passed to the chat template, e.g. "
                                                        "{enable_thinking: false}; saved with the checkpoints' "
                                                        "tokenizer (null: those the model was saved with, if any)")

    @field_validator("chat_template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        """As NeMo RL's get_tokenizer: `default` keeps the tokenizer's own, a path ending .jinja is read; anything
        else must be a template itself (a name such as a model family's would become the prompt's whole text).
        Named difference: null here is the tokenizer's own, where NeMo RL makes it a passthrough template."""
        if value is None or value == "default":
            return None
        if value.endswith((".jinja", ".jinja2")):
            path = Path(value).expanduser()
            if not path.is_file():
                raise ValueError(f"chat template file {value} not found (a path ending .jinja is read as the template)")
            return path.read_text(encoding="utf-8")
        if "{{" not in value and "{%" not in value:
            raise ValueError(f"{value!r} is neither a Jinja template (it has no {{{{ }}}} or {{% %}}) nor a .jinja "
                             "file: set `default` (or null) for the tokenizer's own, a file path, or the template")
        return value


class VllmConfig(Section):
    max_model_len: int | None = Field(None, description="vLLM backend only: the context length it reserves")
    gpu_memory_utilization: float = Field(0.6, description="vLLM backend only: share of GPU memory it may take")
    tensor_parallel_size: int = Field(1, description="vLLM backend only: GPUs per vLLM instance")


class GuidedDecodingConfig(Section):
    regex: str | None = Field(None, description="every completion matches this regular expression")
    json_schema: dict[str, Any] | str | None = Field(None, description="every completion is a JSON value of this "
                                                     "schema (an object, or its JSON text)")
    grammar: str | None = Field(None, description="every completion is a sentence of this Lark grammar (start rule "
                                "`start`)")

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"policy.generation.guided_decoding takes exactly one of {', '.join(KINDS)} "
                             f"(got {', '.join(given) or 'none'})")
        return self

    @property
    def constraint(self) -> tuple[str, Any]:
        """(kind, value) as execrl.guided reads it (exactly one is set: _one)."""
        kind = next(k for k in KINDS if getattr(self, k) is not None)
        return kind, getattr(self, kind)


class GenerationConfig(Section):
    backend: Literal["execrl", "transformers"] = Field(
        "execrl", description="rollout backend: execrl (the built-in engine: static KV cache, CUDA graphs, the "
        "trainer's own weights) | transformers (generate, the reference)")
    cuda_graphs: bool = Field(True, description="execrl engine on a GPU: replay each decode step as a CUDA graph")
    sync_every: int = Field(16, ge=1, description="execrl engine: decode steps between looks at the state from the host "
                                                 "(finished sequences, stop strings, refilling free slots)")
    compile: bool = Field(True, description="execrl engine on a GPU: torch.compile the decode step (fewer, fused "
                                            "kernels; compiling takes half a minute at the start; falls back to eager "
                                            "where compilation fails)")
    ignore_eos: bool = Field(False, description="benchmarks only: always generate max_new_tokens")
    max_new_tokens: int = Field(512, ge=1, description="tokens generated per turn at most")
    temperature: float = Field(1.0, ge=0, description="sampling temperature for rollouts")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling threshold")
    top_k: int | None = Field(None, ge=1, description="sample among the k likeliest tokens only (null, or -1 as in "
                              "NeMo RL and vLLM: all)")
    stop_strings: list[str] | None = Field(None, description="generation stops after any of these strings (unset "
                                           "and no chat template: at a next '\\nUser:' line of the plain transcript)")
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="generation stops after any of these tokens (besides the model's EOS tokens)")
    val_temperature: float = Field(0.0, ge=0, description="validation's sampling temperature (0: greedy; NeMo RL's "
                                   "configs set ${.temperature})")
    val_top_p: float = Field(1.0, gt=0, le=1, description="validation's nucleus sampling threshold")
    val_top_k: int | None = Field(None, ge=1, description="validation samples among the k likeliest tokens only "
                                  "(null or -1: all)")
    vllm_cfg: VllmConfig = Field(default_factory=VllmConfig, description="settings read by the vLLM backend")

    @field_validator("top_k", "val_top_k", mode="before")
    @classmethod
    def _no_filter(cls, k):
        """-1 is no filtering, as NeMo RL's configs and vLLM read it (0 stays refused, as NeMo RL refuses it)."""
        if isinstance(k, bool):  # (pydantic would read true as 1: greedy)
            raise ValueError("a number of tokens (null or -1: all), not true/false")
        k = int(k) if isinstance(k, str) and k.strip() in ("-1", "0") else k  # (a quoted "-1")
        if isinstance(k, int) and k == 0:
            raise ValueError("0 keeps no token: null or -1 sample from all of them")
        return None if isinstance(k, int) and k == -1 else k
    guided_decoding: GuidedDecodingConfig | None = Field(
        None, description="execrl engine: constrain every model turn to a regex, JSON schema or Lark grammar (masks "
        "from llguidance, applied in sampling; logprobs and training under the masked distribution)")
    guided_decoding_per_turn: list[GuidedDecodingConfig | None] | None = Field(
        None, description="multi-turn: model turn i keeps to entry i (null: free), the last entry to every later "
        "turn; replaces guided_decoding")


class OptimizerConfig(Section):
    name: str = Field("torch.optim.AdamW", description="optimizer class (AdamW)")
    kwargs: dict[str, Any] = Field(default_factory=lambda: {"lr": 5e-6, "weight_decay": 0.01, "betas": [0.9, 0.999],
                                                            "eps": 1e-8}, description="passed to the optimizer")

    @field_validator("kwargs")
    @classmethod
    def _numbers(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """YAML 1.1 reads 1e-5 as a string: a number is meant (the one place this is read; a typed
        field's string pydantic converts itself). Other strings stay (e.g. exp_avg_dtype)."""
        out = dict(kwargs)
        for key, value in kwargs.items():
            if isinstance(value, str):
                try:
                    out[key] = float(value)
                except ValueError:
                    continue
        return out


class DynamicBatchingConfig(Section):
    enabled: bool = Field(False, description="micro-batches by a token budget instead of a number of sequences: "
                          "sequences of similar length together, as many as fit (NeMo RL's dynamic batching)")
    train_mb_tokens: int | None = Field(None, ge=1, description="padded tokens per training micro-batch at most "
                                        "(null: max_total_sequence_length x train_micro_batch_size)")
    logprob_mb_tokens: int | None = Field(None, ge=1, description="padded tokens per scoring pass at most "
                                          "(null: max_total_sequence_length x logprob_batch_size)")
    sequence_length_round: int = Field(64, ge=1, description="each micro-batch's length counted rounded up to a "
                                       "multiple of this")


class LoraConfig(Section):
    enabled: bool = Field(False, description="train low-rank adapters (peft) on the frozen model instead of all of it")
    dim: int = Field(8, ge=1, description="the adapters' rank r")
    alpha: float = Field(32, gt=0, description="scale: the adapter adds alpha / dim * B A x")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input (training only)")
    dropout_position: Literal["pre", "post"] = Field("post", description="NeMo RL's: where dropout applies; peft "
                                                     "applies it before the adapter (pre): post is refused with "
                                                     "dropout > 0")
    lora_A_init: Literal["xavier", "uniform"] = Field("xavier", description="A's initialisation: xavier (normal), or "
                                                      "uniform (kaiming-uniform, as nn.Linear's); B starts at zero")
    target_modules: list[str] = Field(default_factory=list, description="layers to adapt: names (q_proj) or "
                                      "wildcard patterns on full names (*.mlp.*); with match_all_linear=false")
    exclude_modules: list[str] = Field(default_factory=list, description="layers not to adapt (names or patterns)")
    match_all_linear: bool = Field(True, description="adapt every linear layer of the decoder (not the LM head)")
    save_merged: bool = Field(False, description="checkpoints also hold the merged model (HF format, merged/)")

    @property
    def scaling(self) -> float:
        return self.alpha / self.dim


class PolicyConfig(Section):
    model_name: str = Field("builtin:tiny-coder", description="hub id, HF directory, or a built-in tiny model: "
                            "builtin:tiny-coder (the default's: a byte-level tokenizer) or builtin:tiny-coder-bpe (a BPE of the built-in "
                            "task's text)")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="tokenizer settings")
    hf_config_overrides: dict[str, Any] = Field(default_factory=dict, description="values replacing those of the "
                                                "model's config.json when it loads (a hub or local model)")
    max_total_sequence_length: int = Field(1024, ge=2, description="prompt + completion tokens at most")
    train_global_batch_size: int = Field(64, ge=1, description="samples per optimizer step, over all GPUs")
    train_micro_batch_size: int = Field(4, ge=1, description="samples per forward/backward pass on one GPU")
    logprob_batch_size: int = Field(4, ge=1, description="samples per forward pass when computing logprobs")
    generation_batch_size: int | None = Field(64, ge=1, description="sequences generated at once on one GPU (null: "
                                              "every sample of a step; on a GPU the execrl engine decodes as many as "
                                              "its KV cache fits beside training)")
    precision: Literal["auto", "bfloat16", "bf16", "float32", "fp32", "float16", "fp16"] = Field(
        "auto", description="bfloat16: mixed precision (bf16 compute, fp32 master weights, gradients "
        "and optimizer state) | float32 | auto (bfloat16 on GPUs that have it, float32 on CPU)")
    device: str = Field("auto", description="auto | cpu | cuda")
    torch_compile: bool = Field(True, description="GPU: torch.compile each decoder layer for training (fused norms, "
                                                  "rotary and activations; compiling takes a minute at the start; "
                                                  "falls back to eager where compilation fails)")
    activation_checkpointing: bool = Field(False, description="recompute activations in backward to save memory")
    activation_checkpointing_scope: Literal["layer", "mlp"] = Field(
        "layer", description="what activation checkpointing recomputes: layer (each decoder layer's forward; the "
        "least memory) | mlp (each layer's MLP up to its down projection: its intermediate tensors, most of a "
        "layer's activations, are dropped, attention and the down projection are not run twice; less recompute, "
        "more memory)")
    shared_prompts: bool = Field(True, description="training and scoring forward each group's prompt once, its "
                                 "samples packed after it, where the model is one of the engine's families with "
                                 "causal SDPA attention (no sliding window, soft-capping or dropout); the same "
                                 "logprobs up to rounding, fewer tokens through every layer. false: one row per "
                                 "sample")
    dynamic_batching: DynamicBatchingConfig = Field(default_factory=DynamicBatchingConfig, description="micro-batches "
                                                    "by tokens (NeMo RL's keys)")
    max_grad_norm: float | None = Field(1.0, gt=0, description="gradient clipping by global norm (null: none, as "
                                        "NeMo RL; the norm is still logged)")
    cpu_offload: bool = Field(False, description="the fp32 master weights and AdamW's state in host memory, the "
                              "optimizer step on the CPU (one GPU, mixed precision; NeMo RL: "
                              "policy.dtensor_cfg.cpu_offload)")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="the optimizer")
    scheduler: Schedule = Field(default_factory=WarmupSchedule, description="the learning-rate schedule: "
                                "{warmup_steps: N} (per optimizer step), or NeMo RL's torch schedulers (per GRPO "
                                "step): {name, kwargs}, a list of them with {milestones: [...]}, or null (constant)")
    generation: GenerationConfig = Field(default_factory=GenerationConfig, description="rollout sampling")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA: train adapters, the model frozen "
                             "(NeMo RL: policy.dtensor_cfg.lora_cfg)")


class AsyncGRPOConfig(Section):
    enabled: bool = Field(False, description="generate the next step's rollouts before training this step's, and "
                          "grade them in a background thread while the GPU trains: rollouts are one step old, "
                          "corrected with the sampler's logprobs (execrl engine only)")
    max_trajectory_age_steps: int = Field(1, ge=0, description="train on no rollout sampled more than this many "
                                          "training steps earlier (older ones are dropped and their prompts "
                                          "regenerated); at least 1 with async")


class GRPOConfig(Section):
    num_prompts_per_step: int = Field(32, ge=1, description="prompts sampled per step")
    num_generations_per_prompt: int = Field(16, ge=1, description="completions per prompt: the group size G")
    max_num_steps: int = Field(1000, ge=1, description="training steps (one rollout batch each)")
    max_num_epochs: int = Field(1000, ge=1, description="passes over the training set at most: training stops at "
                                                          "whichever of this and max_num_steps comes first")
    advantage: Literal["grpo", "dr_grpo", "rae"] = Field("grpo", description="advantage estimator: grpo | dr_grpo | rae (self-play: SPIRAL's "
                           "role-conditioned baselines, a moving average of each game and role's returns)")
    role_baseline_decay: float = Field(0.95, ge=0, lt=1, description="rae: each step's baseline = decay x the last + "
                                       "(1 - decay) x the step's mean return of that game and role")
    normalize_rewards: bool = Field(True, description="divide advantages by the group's reward std")
    use_leave_one_out_baseline: bool = Field(True, description="baseline = mean of the other G-1 rewards")
    max_rollout_turns: int = Field(1, ge=1, description="model turns per episode at most (>1: multi-turn, with "
                                                        "env.multi_turn.kind interpreter or unit_tests)")
    overlong_filtering: bool = Field(False, description="exclude truncated completions from the loss")
    advantage_clip_low: float | None = Field(None, le=0, description="advantages below are raised to this (null: "
                                             "no bound)")
    advantage_clip_high: float | None = Field(None, ge=0, description="advantages above are cut to this (null: no "
                                              "bound)")
    use_dynamic_sampling: bool = Field(False, description="DAPO dynamic sampling: train only on groups whose rewards "
                                       "differ, generating more rounds of prompts until the step has "
                                       "num_prompts_per_step of them (sync GRPO)")
    dynamic_sampling_max_gen_batches: int = Field(10, ge=1, description="dynamic sampling: generation rounds per step "
                                                  "at most, less one (NeMo RL's count: 10 allows 11 rounds); the run "
                                                  "stops with an error if they do not fill the batch")
    batch_multiplier: float = Field(1.0, gt=0, description="dynamic sampling: prompts drawn per round = this x "
                                    "num_prompts_per_step, truncated (NeMo RL's int(): 16 x 1.3 = 20)")
    val_period: int = Field(10, ge=-1, description="evaluate every N steps (0 or -1, NeMo RL's never: never)")
    val_at_start: bool = Field(False, description="evaluate before the first step")
    val_start_at: int = Field(-1, description="the first step val_period may validate at (-1: from the start)")
    val_at_end: bool = Field(False, description="evaluate after the last step (if val_period did not just)")
    max_val_samples: int = Field(256, ge=0, description="validation problems at most")
    val_num_generations_per_prompt: int = Field(1, ge=1, description="validation samples per problem: pass@1 is "
                                                "their mean, and with k > 1 pass@k is logged too (needs "
                                                "policy.generation.val_temperature > 0)")
    val_batch_size: int = Field(256, ge=1, description="accepted for NeMo RL configs, no effect: validation generates with "
                                                "the policy.generation_batch_size slots of training")
    seed: int = Field(42, ge=-2**31, lt=2**31, description="seed for data order, sampling and initialisation (a "
                      "32-bit integer)")
    async_grpo: AsyncGRPOConfig = Field(default_factory=AsyncGRPOConfig, description="asynchronous GRPO")


class LossConfig(Section):
    reference_policy_kl_penalty: float = Field(0.0, ge=0, description="KL-to-reference coefficient (0: no reference model)")
    reference_policy_kl_type: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator, as NeMo RL: k1 = -r, k2 = r^2/2, k3 = e^r - 1 - r, r = log ref - log pi")
    kl_input_clamp_value: float | None = Field(20.0, gt=0, description="clamp r to +-this before the estimate "
                                                                       "(NeMo RL's default; null: none)")
    kl_output_clamp_value: float | None = Field(10.0, gt=0, description="clamp the per-token KL estimate to +-this "
                                                                        "(NeMo RL's default; null: none)")
    ratio_clip_min: float = Field(0.2, ge=0, description="PPO clip below: ratio >= 1 - this (1 or more: no lower "
                                  "clip, as NeMo RL's CISPO recipes set it)")
    ratio_clip_max: float = Field(0.2, ge=0, description="PPO clip above: ratio <= 1 + this (larger: DAPO clip-higher)")
    ratio_clip_c: float | None = Field(None, gt=1, description="dual-clip bound for negative advantages, > 1 "
                                                               "(null: off)")
    token_level_loss: bool = Field(True, description="mean over all tokens of the batch (false: per sequence first)")
    sequence_level_importance_ratios: bool = Field(
        False, description="GSPO: one ratio per sequence, exp of the mean token log-ratio, clipped as a whole (and "
        "the importance-sampling weight of the whole sequence); needs token_level_loss: false")
    force_on_policy_ratio: bool = Field(False, description="the ratio is 1 (with log pi's gradient) and unclipped: "
                                        "needs one optimizer step per GRPO step (train_global_batch_size = prompts x "
                                        "generations)")
    disable_ppo_ratio: bool = Field(False, description="no ratio: the loss is REINFORCE's -A log pi")
    use_cispo: bool = Field(False, description="CISPO: -A log pi weighted by the clipped ratio, detached (not with "
                            "the three keys above)")
    constant_normalizer: int | None = Field(None, ge=1, description="Dr.GRPO: divide token sums by this, not token counts")
    use_on_policy_kl_approximation: bool = Field(False, description="weight each token's KL estimate by pi / "
                                                 "pi_sampler (as NeMo RL: the KL of the current policy, estimated "
                                                 "from the sampler's tokens); needs the execrl engine")
    use_importance_sampling_correction: bool | None = Field(
        None, description="weight each token's loss by pi_trainer/pi_sampler (the sampler's logprobs: the behaviour "
        "policy), truncated; null: on with async GRPO, off otherwise; needs the execrl engine")
    truncated_importance_sampling_ratio: float | None = Field(
        None, gt=0, description="upper bound for the importance weight, as in NeMo RL (null: none)")
    truncated_importance_sampling_type: Literal["tis", "icepop"] | None = Field(
        None, description="tis (also null): weights above the bound are cut to it; icepop: tokens whose weight is "
        "outside [ratio_min, ratio] leave the loss (NeMo RL's seq-mask-tis is not implemented)")
    truncated_importance_sampling_ratio_min: float | None = Field(
        None, ge=0, description="lower bound: icepop's (needed with it); tis clamps to it (null: 0, as NeMo RL)")


class DatasetConfig(Section):
    dataset_name: str = Field("builtin:arith-code", description="gsm8k | mbpp | nemotron_code | jsonl | "
                              "builtin:arith-code | NeMo RL's names (OpenMathInstruct-2, DeepScaler, DAPOMath17K, "
                              "AIME2024, ResponseDataset, ...) | a hub id of one of these")
    split: str | None = Field(None, description="split to read (null: the dataset's training split, e.g. "
                              "OpenMathInstruct-2's train_1M as in NeMo RL)")
    path: str | None = Field(None, description="local file or directory (default: found in the data directories)")
    split_validation_size: float | None = Field(
        None, ge=0, description="held out of the train split for validation: a share (below 1), or a number of "
        "problems (1 or more), as NeMo RL; null: the dataset's own default (NeMo RL's OpenMathInstruct-2: 0.05, "
        "others 0); not read for the datasets whose NeMo RL class does not read it (DAPOMath17K, DeepScaler, GSM8K)")
    max_tests: int = Field(0, ge=0, description="grade at most this many tests per problem (0: all)")
    repeat: int = Field(1, ge=1, description="the set this many times over, as NeMo RL concatenates it (its AIME "
                                             "validation: 16, a mean over 16 samples)")
    input_key: str | None = Field(None, description="ResponseDataset: the row field with the problem (null: input)")
    output_key: str | None = Field(None, description="ResponseDataset: the row field with the answer (null: output)")
    options: dict[str, Any] = Field(default_factory=dict, description="loader options, e.g. variant, fields")

    @field_validator("split_validation_size")
    @classmethod
    def _share_or_count(cls, v):
        if v is not None and v >= 1 and v != int(v):
            raise ValueError(f"{v} is neither a share (below 1) nor a number of problems (a whole number)")
        return v

    @property
    def split_name(self) -> str:
        """The split read: its own, else the dataset's default (train for most). Raises DatasetError
        for an unknown dataset."""
        return self.split or DATASETS[dataset_key(self.dataset_name)].default_split or "train"


class DataDefaults(Section):
    processor: Literal["auto", "math_hf_data_processor", "math_data_processor", "code_hf_data_processor",
                       "code_data_processor"] = Field(
        "auto", description="NeMo RL name of the row processor: a math or code one (checked against the dataset's "
        "problems; execrl reads each dataset's rows itself and poses them with prompt.*) | auto")
    env_name: Literal["auto", "code", "math", "reward_model"] = Field(
        "auto", description="NeMo RL name of the environment: code | math (checked against the dataset's problems) | "
        "reward_model (env.reward_model's score replaces the verifier's: each test_pass_fraction component becomes a "
        "reward_model one) | auto")


class DataConfig(Section):
    train: DatasetConfig | list[DatasetConfig] = Field(default_factory=DatasetConfig, description="the training "
                                                       "problems (a list: all of their problems, as NeMo RL's)")
    validation: DatasetConfig | list[DatasetConfig] | None = Field(
        None, description="validation problems, besides those held out of each training set by its "
        "split_validation_size (null: those only; a generated dataset's own validation split)")
    default: DataDefaults = Field(default_factory=DataDefaults, description="NeMo RL defaults block")
    max_input_seq_length: int | None = Field(None, ge=1, description="drop prompts of this many tokens or more (NeMo RL cuts them and leaves them out of the loss; null: longer than total - new)")

    @property
    def train_sets(self) -> list[DatasetConfig]:
        return self.train if isinstance(self.train, list) else [self.train]

    @property
    def validation_sets(self) -> list[DatasetConfig]:
        return [] if self.validation is None else self.validation if isinstance(self.validation, list) else [
            self.validation]
    shuffle: bool = Field(True, description="shuffle training problems each epoch")


class CodeEnvConfig(Section):
    num_workers: int = Field(0, ge=0, description="sandbox workers per node, shared out among its ranks (0: one per CPU "
                                              "this process may use, fewer under a cgroup CPU quota)")
    terminate_on_evaluation: bool = Field(True, description="single-turn: the episode ends when the code is graded")
    timeout_s: float = Field(2.0, ge=0.01, description="CPU seconds per test (at least 0.01: sandbox.MIN_TIMEOUT_S)")
    memory_mb: int = Field(1024, ge=16, description="memory limit per program")
    grading_share: float = Field(
        0.25, ge=0, le=1, description="on a GPU: the share of the sandbox's workers that grade samples as they end "
        "while the rest of the batch generates (all of them once it ends). Each takes the interpreter's lock from the "
        "decode loop: with all of them, a 0.5B engine decoded 13-17% slower; programs that run for long (looping "
        "tests up to their time limit) gain from more. 0: grade after generation")


class MultiTurnConfig(Section):
    kind: str = Field(
        "single_turn", description="single_turn (one answer, graded) | interpreter (the model runs code cells and "
        "reads their output, then submits) | unit_tests (the model submits, is told which public tests fail, "
        "refines); the reward always comes from all the tests at the end | game (self-play: each seat of a "
        "two-player game's match an episode, data.train.dataset_name=selfplay:<game>) | sliding_puzzle (NeMo RL's: "
        "one action a turn, reward 1 when solved; data.train.dataset_name=sliding_puzzle) | your own environment "
        "class, as module:Class or path/to/file.py:Class (a subclass of execrl.envs.Environment)")
    observation_role: Literal["tool", "user"] = Field("tool", description="the role of the environment's messages "
                                                                          "in the chat template")
    stateful: bool = Field(True, description="interpreter: later cells see earlier definitions, like a notebook "
                                             "(earlier successful cells are replayed)")
    max_output_chars: int = Field(1000, ge=16, description="interpreter output and test feedback are cut to this "
                                                           "many characters and UTF-8 bytes (a bound on their tokens), "
                                                           "with a visible marker")
    final_tag: str = Field("answer", pattern=r"^[A-Za-z_][\w-]*$", description="interpreter: the final submission "
                           "goes inside <final_tag></final_tag> and ends the episode")
    public_tests: int = Field(1, ge=1, description="unit_tests: how many of a problem's tests (the first ones) the "
                                                   "feedback may show; one at least is always held back")


class MathEnvConfig(Section):
    math_verify_impl: Literal["hf_math_verify", "dapo_math_verify"] = Field(
        "hf_math_verify", description="how a math answer is checked: hf_math_verify (the final answer, \\boxed{}, "
        "####, after 'answer is', or the last number or LaTeX math span, against the reference with math-verify) | "
        "dapo_math_verify (DAPO's: the last 'Answer:' line, Minerva-normalized, must equal the reference)")


class GameEnvConfig(Section):
    illegal_move_penalty: float = Field(1.0, ge=0, description="a seat whose answer holds no legal move loses the "
                                        "match by this much (its opponent wins as much; the code game: the writer's "
                                        "invalid program, the predictor gets 0)")
    max_program_chars: int = Field(1000, ge=1, description="the code game: a longer program is not valid")
    max_output_chars: int = Field(300, ge=1, description="the code game: a program printing more is not valid")
    opponent: Literal["self", "snapshot", "model"] = Field(
        "self", description="who plays the other seat: self (the policy plays and trains both) | snapshot (a frozen "
        "copy of the policy, refreshed every opponent_refresh_steps) | model (a fixed model: opponent_model)")
    opponent_refresh_steps: int | None = Field(None, ge=1, description="opponent snapshot: steps between refreshes "
                                               "(null: 10)")
    opponent_model: str | None = Field(None, description="opponent model: a directory in HF format or an execrl "
                                       "checkpoint (its policy/), with the policy's tokenizer")
    policy_roles: list[str] | None = Field(None, description="against a frozen opponent: the roles the policy plays "
                                           "and trains, one per match in turn (null: all of the game's)")
    guided_moves: bool = Field(False, description="hold each answer to `Move: <a legal move>` by guided decoding (in "
                               "training and evaluation): an illegal move cannot be made, RL learns which legal move "
                               "to make; the execrl engine, games of listed moves (not the code game)")


class SlidingPuzzleEnvConfig(Section):
    max_moves: int = Field(30, ge=1, description="actions an episode may take (view and answers without one do not "
                           "count); the next answer ends it unsolved (NeMo RL's env.sliding_puzzle_game.cfg.max_moves)")


class RewardModelTypeConfig(Section):
    enabled: bool = Field(True, description="NeMo RL's: the model is a reward model (its reward-model environment "
                          "always loads one)")
    reward_model_type: Literal["bradley_terry"] = Field("bradley_terry", description="bradley_terry: one logit per "
                                                        "conversation, the score")


class RewardModelConfig(Section):
    enabled: bool = Field(False, description="load a learned reward model (NeMo RL's env.reward_model): its score of "
                          "each finished conversation is the reward component reward_model")
    model_name: str | None = Field(None, description="a sequence-classification model with one output: hub id, HF "
                                   "directory, or builtin:arith-judge (a tiny one trained at start-up on the built-in "
                                   "task's preferences)")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="its tokenizer (null name: the "
                                       "model's own) and chat template")
    precision: Literal["auto", "bfloat16", "bf16", "float16", "fp16", "float32", "fp32"] = Field(
        "auto", description="its weights' dtype: bfloat16 | float16 | float32 | auto (bfloat16 on GPUs that have it, "
        "float32 on CPU)")
    batch_size: int = Field(8, ge=1, description="conversations per forward pass")
    max_model_len: int | None = Field(None, ge=2, description="tokens it reads at most: a longer conversation keeps "
                                      "the head of its prompt and the tail of its answer, with a warning (null: the "
                                      "model's max_position_embeddings)")
    reward_model_cfg: RewardModelTypeConfig = Field(default_factory=RewardModelTypeConfig,
                                                    description="NeMo RL's: the kind of reward model")


class EnvConfig(Section):
    code: CodeEnvConfig = Field(default_factory=CodeEnvConfig, description="the code environment")
    game: GameEnvConfig = Field(default_factory=GameEnvConfig, description="self-play games (env.multi_turn.kind="
                                "game)")
    math: MathEnvConfig = Field(default_factory=MathEnvConfig, description="the math environment")
    sliding_puzzle: SlidingPuzzleEnvConfig = Field(default_factory=SlidingPuzzleEnvConfig, description="the sliding "
                                                   "puzzle (env.multi_turn.kind=sliding_puzzle)")
    multi_turn: MultiTurnConfig = Field(default_factory=MultiTurnConfig, description="the episode's environment "
                                        "(turns: grpo.max_rollout_turns; code style: prompt.code_style)")
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig, description="a learned reward model "
                                            "scoring conversations (reward component reward_model)")


class WandbConfig(Section):
    project: str | None = Field(None, description="W&B project (default: $WANDB_PROJECT, else execrl)")
    entity: str | None = Field(None, description="W&B team or user the project is under (default: $WANDB_ENTITY, else "
                                                 "your W&B default)")
    name: str | None = Field(None, description="run name (default: $WANDB_NAME, else the log directory's name)")
    mode: Literal["online", "offline", "disabled", "shared", "dryrun", "run"] | None = Field(
        None, description="online | offline (no network; sync later with `wandb sync`) | disabled, or another of "
                          "W&B's (default: $WANDB_MODE, else online)")
    id: str | None = Field(None, description="the W&B run's id (default: $WANDB_RUN_ID, else new for a run from its "
                                             "start; a resumed run continues its own, kept in the log directory's "
                                             "wandb_id)")

    @field_validator("project", "id")
    @classmethod
    def _w_and_b_name(cls, v: str | None, info) -> str | None:
        """What W&B's own settings refuse, said before the model loads (it was a traceback after, a hunt's find)."""
        if v is None:
            return v
        reserved = "/\\#?%:" if info.field_name == "project" else ":;,#?/'"
        if bad := sorted(set(v) & set(reserved)):
            hint = (f": write logger.wandb.entity={v.split('/')[0]} logger.wandb.project={v.split('/', 1)[1]}"
                    if info.field_name == "project" and v.count("/") == 1 else "")
            what = "a project" if info.field_name == "project" else "an id"
            raise ValueError(f"W&B takes none of {' '.join(reserved)} in {what}: {' '.join(bad)} in {v!r}{hint}")
        if not v.strip() or v != v.strip() or len(v) > 128:
            raise ValueError(f"a W&B {info.field_name} is 1-128 characters, neither starting nor ending with a space: "
                             f"got {v[:140]!r}")
        return v


class LoggerConfig(Section):
    log_dir: str = Field("runs/default", description="metrics.jsonl, TensorBoard events, rollouts, resolved config")
    wandb_enabled: bool = Field(False, description="log to Weights & Biases (needs `pip install wandb`)")
    tensorboard_enabled: bool = Field(True, description="write TensorBoard events")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="W&B settings")
    rollouts_period: int = Field(10, ge=0, description="write sampled rollouts to rollouts/step_N.jsonl every N steps")
    monitor_gpus: bool = Field(True, description="NeMo RL compatibility; GPU memory is logged when on a GPU")

    @field_validator("log_dir")
    @classmethod
    def _home(cls, v: str) -> str:
        return os.path.expanduser(v)  # (~/runs/x: a folder named ~ in the working directory held the run)


class CheckpointConfig(Section):
    enabled: bool = Field(True, description="save checkpoints")
    checkpoint_dir: str = Field("runs/default/checkpoints", description="where; an existing one is resumed from")
    save_period: int = Field(10, ge=1, description="save every N steps (and at the end)")
    keep_top_k: int | None = Field(3, ge=1, description="keep the last K checkpoints (null: every one, as NeMo RL "
                                                        "reads it)")
    checkpoint_must_save_by: str | None = Field(
        None, pattern=r"^\d+:\d+:\d+:\d+$", description="DD:HH:MM:SS after which no step may end, counted from "
        "the end of loading (the warm-up and val_at_start count): a job's time limit less loading. The run stops with "
        "a checkpoint where the next step, its validation and its save would end later, each as long as its last "
        "(NeMo RL adds the mean iteration) (null: none)")

    @field_validator("checkpoint_dir")
    @classmethod
    def _home(cls, v: str) -> str:
        return os.path.expanduser(v)

    @property
    def deadline_s(self) -> float | None:
        """checkpoint_must_save_by in seconds (None: none)."""
        if self.checkpoint_must_save_by is None:
            return None
        days, hours, minutes, seconds = map(int, self.checkpoint_must_save_by.split(":"))
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


class ClusterConfig(Section):
    gpus_per_node: int = Field(1, ge=1, description="GPUs per node: one training process each (>1: `execrl train` starts "
                                              "torchrun; on CPU, gloo processes)")
    num_nodes: int = Field(1, ge=1, description="nodes (>1: `execrl train` prints the torchrun command to run on each)")
    rank_wait_minutes: float = Field(120.0, gt=0, description="how long a process waits for the others where one may "
                                     "be far behind (its rollouts and grading, validation, rank 0 writing a "
                                     "checkpoint) before the run stops; NCCL's own limit (10 minutes) covers only "
                                     "the collectives after everyone has arrived")


class WarmupConfig(Section):
    sft_steps: int = Field(0, ge=0, description="supervised steps on reference solutions before GRPO (builtin tasks)")
    lr: float = Field(3e-3, gt=0, description="learning rate of the supervised warm-up")
    batch_size: int = Field(32, ge=1, description="examples per warm-up step")


class MasterConfig(Section):
    _nemo_ignored: dict[str, str] = PrivateAttr(default_factory=dict)  # NeMo RL keys dropped on loading -> why
    _nemo_mapped: dict[str, str] = PrivateAttr(default_factory=dict)  # NeMo RL keys -> the execrl setting they became
    _written: set[str] = PrivateAttr(default_factory=set)  # the dotted keys the config file and overrides wrote
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="the model and how it trains")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="the algorithm")
    loss_fn: LossConfig = Field(default_factory=LossConfig, description="the clipped policy-gradient loss")
    data: DataConfig = Field(default_factory=DataConfig, description="training and validation problems")
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="how problems are posed")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="the reward")
    env: EnvConfig = Field(default_factory=EnvConfig, description="environments (the sandbox)")
    logger: LoggerConfig = Field(default_factory=LoggerConfig, description="logging")
    checkpointing: CheckpointConfig = Field(default_factory=CheckpointConfig, description="checkpoints and resume")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="GPUs and nodes")
    warmup: WarmupConfig = Field(default_factory=WarmupConfig, description="supervised warm-up (builtin default)")
    offline: bool = Field(False, description="never touch the network (models and data must be local or cached)")

    @model_validator(mode="after")
    def _reward_model_env(self):
        """data.default.env_name=reward_model: the reward model's score replaces the verifier's
        (config.reward_model holds the rule)."""
        self.reward.components = replace_verifier(self.data.default.env_name, self.reward.components)
        return self
