"""`execrl train`: the GRPO loop. Each line of `train` is a named step; the algorithm lives in
execrl.algo."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import replace
from pathlib import Path

import torch
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from execrl.algo.advantages import flat_groups
from execrl.config import MasterConfig
from execrl.eval.passk import pass_at_k
from execrl.lora import base_only, base_trainable
from execrl.plugins import OwnCodeFailed
from execrl.prompts import tokenizer_identity
from execrl.rewards import is_correct, sandbox_failures
from execrl.rollout.sampling import scoring_temperature
from execrl.sandbox import SandboxFailing, check_infra_share
from execrl.trainer import checkpoint, memory, startup
from execrl.trainer import distributed as dist
from execrl.trainer.data import problem_set
from execrl.trainer.deferred import Trained
from execrl.trainer.flat import (
    FLAT_WARNING_STEPS,
    deciding_parts,
    flat_reason,
    flat_warning,
    reward_against_correctness,
    shaping_only_warning,
    verdict_note,
)
from execrl.trainer.metrics import INTERRUPTED, LogUnwritable
from execrl.trainer.rollouts import episode_means, episode_sums, prompt_seeds, rollout_rows, sampling
from execrl.trainer.setup import Run, build_run, console, new_run
from execrl.trainer.step import advantages, build_batch, deferrable, optimize, sampler_filter, score_tokens, sharing
from execrl.trainer.warmup import sft_warmup

MAX_NAN_STEPS = 3
ADVANTAGE_WARNING = 100.0  # |advantage| past which a step says so (binary rewards, normalized: ~sqrt(G); G = 10,000)


def train(cfg: MasterConfig) -> Run:
    loading, before = time.monotonic(), startup.so_far()
    with memory.phase("loading the model", cfg):
        run = build_run(cfg)
    load_s = time.monotonic() - loading
    if run.max_steps < cfg.grpo.max_num_steps:
        console.print(f"grpo.max_num_epochs={cfg.grpo.max_num_epochs} passes over the training problems end the run "
                      f"at step {run.max_steps} (before grpo.max_num_steps={cfg.grpo.max_num_steps})")
    owed = owed_validation(run)
    if owed:
        console.print(f"{run.resumed_from}'s validation of step {run.step} is not in the record (a stop cut it "
                      "short): it runs now")
    if run.step >= run.max_steps:
        console.print(f"[yellow]{run.resumed_from} is already at step {run.step}, the last: nothing "
                      f"{'else ' if owed else ''}to do. Raise grpo.max_num_steps (or max_num_epochs) to go on, or start a "
                      f"new run: {new_run(cfg)}[/]")
    gpu = next(run.weights.compute.parameters()).device.type == "cuda"  # (train phases timed on the GPU)
    ctrl_c = CtrlC().__enter__()  # (over everything after loading: a signal in the closing validation or save too)
    deadline = Deadline(cfg)  # (its clock starts here, before the warm-up and val_at_start, as NeMo RL's does)
    outcome = 1  # the run's exit code as its W&B run records it: 0 it ran its course, 130 stopped, 1 failed
    try:
        if run.step == 0 and cfg.warmup.sft_steps:
            warm_up(run)
        if run.step == 0 and run.lora is not None and run.lora.own_base and cfg.checkpointing.enabled:
            checkpoint.save_base(cfg.checkpointing.checkpoint_dir, run.model, run.tokenizer)  # (the adapters' base)
        if run.step == 0 and cfg.grpo.val_at_start or owed:
            with deadline.timed("validation"):
                validate(run)
        late, first_step = False, run.step + 1
        ctrl_c.at_once = False  # (from here a first signal stops after the step under way)
        with progress(run) as bar:
            left = run.step < run.max_steps and not epochs_done(run)  # (once a step: epochs_done says why it ends)
            while left and not ctrl_c.stop() and not late:
                times: dict[str, float] = {}
                with timed(times, "step"):
                    started = time.perf_counter()
                    if run.opponent is not None:  # (a snapshot opponent: the policy's weights every N steps)
                        run.opponent.refresh(run.step, run.weights.compute)
                    with memory.phase("generation", cfg):
                        rollouts, staleness = run.pipeline.next(run.step, times, more=run.step + 1 < run.max_steps)
                    dist.meet("its rollouts")  # (their grading may take some ranks minutes longer than others)
                    # the step before's numbers, ready (generation waited for the GPU): read before this step's
                    # optimizer reads the learning rate; its log line after this step's train phase is launched
                    done = run.left.read(started, times) if run.left else None  # (read() reads once)
                    run.left = None
                    defer = defers(run, first_step)
                    with timed(times, "train"):
                        trained = Trained(run.step + 1, rollouts, staleness, times, gpu=gpu)  # (its clock starts)
                        run.updating = True
                        trained.launched(launch_step(run, rollouts, defer))
                run.left = trained if defer else None
                run.step += 1  # (before the step before's log line: a checkpoint on Ctrl-C there is this step's)
                run.updating = False
                if done:
                    log_step(run, *done, bar)
                if not defer:
                    log_step(run, *trained.read(), bar)
                if run.step == first_step:  # what compiled, in how long (on GPUs)
                    startup.say(load_s, times["step"], before)
                if periodic_validation(cfg, run.step):
                    with deadline.timed("validation"):
                        validate(run)
                if cfg.checkpointing.enabled and run.step % cfg.checkpointing.save_period == 0:
                    with deadline.timed("save"):
                        save(run)
                left = run.step < run.max_steps and not epochs_done(run)
                late = left and deadline.passed(run.step, times["step"])  # (after the last step nothing is late: a
                # review's find, a whole run was marked interrupted)
            finish_left(run, bar)
        stopped = ctrl_c.stop()  # (every process: the closing steps match)
        if late:
            console.print(f"checkpointing.checkpoint_must_save_by={cfg.checkpointing.checkpoint_must_save_by}: "
                          f"another step would end after it, so the run stops at step {run.step}"
                          + (" with a checkpoint (the same command resumes)" if cfg.checkpointing.enabled else ""))
        if cfg.grpo.val_at_end and not late and not stopped and run.step >= first_step and \
                not periodic_validation(cfg, run.step):  # (a run with nothing left to do added an eval row each time)
            validate(run)
        if cfg.checkpointing.enabled and run.last_saved != run.step:
            save(run)
        stopped = ctrl_c.stop()  # (a signal in the closing validation or save too)
        if stopped or late:  # (the record says so: a run stopped at step 13 of 30 read as one that ran its course;
            run.logger.log(run.step, {INTERRUPTED: 1.0})  # checkpoint_must_save_by's stop too, a hunt's find)
            ctrl_c.marked = True
        summarize(run, warn=run.step >= first_step)  # (a run already at its last step: warned when it ran)
        if stopped:
            raise KeyboardInterrupt
        outcome = 0
    except KeyboardInterrupt:
        outcome = 130
        finish_left(run)  # (its scheduler step before the checkpoint)
        save_on_interrupt(run)
        if not ctrl_c.marked and run.step > 0:  # (stopped at once, by a second Ctrl-C: the record says so too)
            run.logger.log(run.step, {INTERRUPTED: 1.0})
        raise
    except memory.OutOfMemory as e:
        raise memory.OutOfMemory(e.phase, f"{e} {resume_note(run)}") from None
    except (LogUnwritable, OwnCodeFailed, SandboxFailing) as e:  # (the steps since the last checkpoint kept, where
        with suppress(Exception):  # the checkpoints' disk takes them; a hunt's find: a reward component that raised
            finish_left(run)  # at step 40 lost them)
        why = {LogUnwritable: "the log cannot be written", SandboxFailing: "the sandbox is failing"}.get(
            type(e), "the run's own code failed")
        with suppress(LogUnwritable, checkpoint.WriteFailed):
            save_on_interrupt(run, why=f"stopping: {why}")
        raise type(e)(f"{str(e).rstrip('.')}. {resume_note(run)}") from e.__cause__  # (own code's traceback kept)
    finally:
        with suppress(Exception):  # an error in the step after a deferred one: that step's line, where it can be read
            finish_left(run)
        ctrl_c.__exit__()
        run.close(outcome)
    return run


class CtrlC:
    """The first Ctrl-C (or SIGTERM: a scheduler's stop, `kill`) asks the run to stop after the step under way, with
    a checkpoint (every process at the same step); a second Ctrl-C stops at once (a second SIGTERM is torchrun's
    passing on the first, or a scheduler's repeat: the run still stops after its step; SIGKILL is at once). Before
    the steps begin (`at_once`: the warm-up, the first validation) either stops at once. A flag rather than an
    exception, so it cannot be lost (an exception raised inside a __del__ or a thread is only printed). (A hunt's
    find: SIGTERM killed the run with no checkpoint and no word, its report left at step 0.)"""

    SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}

    def __init__(self):
        self.asked, self.at_once, self.previous, self.marked = False, True, {}, False

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, previous in self.previous.items():
            signal.signal(s, previous)
        self.previous = {}

    def _handle(self, signum, frame) -> None:
        if self.at_once or (self.asked and signum == signal.SIGINT):
            raise KeyboardInterrupt
        if self.asked:
            return
        self.asked = True
        name = self.SIGNALS.get(signum, "a signal")
        console.print(f"[yellow]{name}: stopping after this step, with a checkpoint (Ctrl-C again: at once)[/]")

    def stop(self) -> bool:
        """Whether any process was asked to stop (then every one has been: the closing steps match)."""
        self.asked = dist.sum_floats(float(self.asked))[0] > 0
        return self.asked


def epochs_done(run: Run) -> bool:
    """Dynamic sampling draws a varying number of prompts per step: its grpo.max_num_epochs bound is
    checked here (otherwise it is in run.max_steps)."""
    grpo = run.cfg.grpo
    if not (grpo.use_dynamic_sampling and run.sampler.passes >= grpo.max_num_epochs):
        return False
    console.print(f"grpo.max_num_epochs={grpo.max_num_epochs} passes over the training problems end the run at step "
                  f"{run.step}")
    return True


def defers(run: Run, first_step: int) -> bool:
    """Whether the coming step's optimizer runs on while the next step generates (optimize's `defer`, where
    deferrable): not the first step (the start-up line times it), nor one that a validation, a checkpoint or the
    run's end follows (they need its numbers, or its weights read)."""
    cfg, coming = run.cfg, run.step + 1
    return (coming != first_step and coming < run.max_steps and not periodic_validation(cfg, coming)
            and not (cfg.checkpointing.enabled and coming % cfg.checkpointing.save_period == 0)
            and deferrable(run.weights, run.optimizer, cfg, run.plan))


def finish_left(run: Run, bar=None) -> None:
    """The log line of a step whose numbers were left to read (the loop ended after it, or was stopped)."""
    if run.left is not None:
        done = run.left.read()
        run.left = None
        log_step(run, *done, bar)


def train_step(run: Run, rollouts) -> dict:
    """One train phase, its numbers read (the host waits for the GPU)."""
    return launch_step(run, rollouts)()


def launch_step(run: Run, rollouts, defer: bool = False) -> Callable[[], dict]:
    """The train phase: advantages, the batch, scoring where needed, the optimizer step(s). Returns the function
    that reads its numbers: with `defer`, the host has not waited for the GPU (optimize's `defer`)."""
    cfg = run.cfg
    adv, rewards, valid = advantages(rollouts, cfg, run.baselines)
    batch = build_batch(rollouts, adv, run.tokenizer.pad_token_id, cfg.grpo.overlong_filtering)
    temperature = scoring_temperature(cfg.policy.generation.temperature)
    with memory.phase("scoring", cfg):
        if run.plan.optimizer_steps_per_rollout > 1:  # later optimizer steps need the logprobs as this step began
            batch.old_logprobs = score_tokens(run.weights.compute, batch, run.plan.score_split, temperature,
                                              sampler_filter(cfg), share=sharing(cfg, run.weights.compute))
        if run.ref_model is not None:
            batch.ref_logprobs = score_tokens(run.ref_model, batch, run.plan.score_split, temperature,
                                              share=sharing(cfg, run.ref_model))
        elif run.lora is not None and cfg.loss_fn.reference_policy_kl_penalty > 0:  # the base: the adapters off
            with base_only(run.lora.peft_model):
                batch.ref_logprobs = score_tokens(run.weights.compute, batch, run.plan.score_split, temperature,
                                                  share=sharing(cfg, run.weights.compute))
    per_step = cfg.policy.scheduler.per_grpo_step  # NeMo RL's torch schedulers count GRPO steps
    lr = run.optimizer.param_groups[0]["lr"]  # the rate this step's (first) update uses, before the scheduler moves it
    numbers = optimize(run.weights, run.optimizer, None if per_step else run.scheduler, batch, cfg, run.plan, defer)
    if per_step:
        run.scheduler.step()
    num_valid, num_samples = dist.sum_floats(valid.sum().item(), valid.numel())
    # groups with no signal: equal rewards (GRPO gives them 0), or under another estimator every advantage 0 (RAE's
    # role baselines make a drawn match's advantages nonzero)
    flat = flat_groups(rewards, valid) if cfg.grpo.advantage == "grpo" else \
        ((adv.reshape(rewards.shape) == 0) | ~valid).all(1)
    # groups none of whose samples is in the loss (grpo.overlong_filtering leaves out the truncated ones)
    unkept = ~batch.kept.reshape(rewards.shape).any(1) if batch.kept.numel() == rewards.numel() else flat & False
    # groups told apart only by the components that shape the reward (flat.shaping_only_warning)
    rest = deciding_parts(cfg.reward) if cfg.grpo.advantage == "grpo" else None
    blind = flat_groups(*rollouts.reward_table(parts=rest)) if rest else flat & False
    num_flat, num_groups, num_unkept, num_blind = dist.sum_floats(
        (flat | unkept).sum().item(), len(rewards), (unkept & valid.any(1)).sum().item(), (blind | unkept).sum().item())
    kept = adv[batch.kept] if batch.kept is not None and batch.kept.numel() == adv.numel() else adv
    adv_max = dist.largest(kept.abs().max().item() if kept.numel() else 0.0)  # (of the samples in the loss)
    step = run.step + 1
    return lambda: checked(run, step, numbers(), num_valid / num_samples, num_flat, num_groups, lr, num_unkept,
                           adv_max, num_blind)


def checked(run: Run, step: int, stats: dict, valid_frac: float, num_flat: float, num_groups: float,
            lr: float, num_unkept: float = 0.0, adv_max: float = 0.0, num_blind: float = 0.0) -> dict:
    """A train phase's numbers, with the run's checks on them: a skipped (non-finite) step said, three in a row
    stop the run; every group flat for FLAT_WARNING_STEPS steps warned of; the first advantage over
    ADVANTAGE_WARNING said (train/adv_abs_max)."""
    stats["adv_abs_max"] = adv_max
    if adv_max > ADVANTAGE_WARNING and not run.adv_warned:
        run.adv_warned = True
        grpo = run.cfg.grpo
        why = ("with grpo.normalize_rewards, a group whose other rewards are almost equal (continuous or shaped "
               "rewards: test_pass_fraction, overlong_penalty, a reward model) has a std near 0, which divides the odd "
               "one's advantage, and one sample outweighs the batch. Bound them with grpo.advantage_clip_low=-5 "
               "grpo.advantage_clip_high=5, or set grpo.use_leave_one_out_baseline=false (the group's std)") \
            if grpo.advantage == "grpo" and grpo.normalize_rewards else (
            f"the advantages are rewards less a baseline, undivided (grpo.advantage={grpo.advantage}"
            f"{'' if grpo.advantage != 'grpo' else ', grpo.normalize_rewards=false'}), so they have the rewards' "
            "scale: scale the rewards (reward.scaling, or the components' weights), or bound the advantages with "
            "grpo.advantage_clip_low and grpo.advantage_clip_high")
        console.print(f"[yellow]warning: step {step}: an advantage of {adv_max:,.0f} (train/adv_abs_max): "
                      f"{escape(why)}[/]")
    run.nan_streak = run.nan_streak + 1 if stats["skipped_steps"] else 0
    if stats["skipped_steps"]:
        console.print(f"[yellow]step {step}: non-finite loss or gradient, optimizer step skipped[/]")
    if run.nan_streak >= MAX_NAN_STEPS:  # (raised once the step's line is logged: log_step)
        run.diverged = (f"{MAX_NAN_STEPS} steps in a row had a NaN/inf loss: lower policy.optimizer.kwargs.lr, check "
                        "the rewards, or resume from the last checkpoint")
    stats["valid_frac"] = valid_frac
    stats["lr"] = lr  # (the rate the step trained at; the scheduler's last rate is the next step's)
    # as this step left them, read before the next step's launch changes them
    stats.update({f"{key}/baseline": b for key, b in run.baselines.values.items()})  # self-play's role baselines
    stats["flat_group_frac"] = num_flat / max(num_groups, 1)  # groups with no learning signal
    run.flat_streak = run.flat_streak + 1 if num_groups and num_flat == num_groups else 0
    run.blind_streak = run.blind_streak + 1 if num_groups and num_blind == num_groups > num_flat else 0
    run.flat_cut = bool(num_groups) and num_unkept == num_groups  # (the warning says so: log_step)
    return stats


def warm_up(run: Run) -> None:
    n = run.cfg.warmup.sft_steps
    console.print(f"supervised warm-up: {n} steps on reference solutions")
    lora = run.lora is not None  # (the warm-up trains the base, which the adapters start from)
    with base_trainable(run.weights.master, run.weights.compute) if lora else nullcontext():
        with memory.phase("the warm-up", run.cfg):
            loss = sft_warmup(run.weights, run.tokenizer, run.sampler.problems, run.references, run.cfg)
    console.print(f"warm-up done, loss {loss:.3f}")
    if run.ref_model is not None:  # the KL penalty's reference is the policy as GRPO begins: the warmed-up one
        weights, _ = dist.full_state(run.weights.compute, None)
        dist.load_full_state(run.ref_model, None, weights, None)
        if run.cfg.checkpointing.enabled:  # (a resumed run reads it back: it loads the model before the warm-up)
            checkpoint.save_reference(run.cfg.checkpointing.checkpoint_dir, run.model, run.ref_model)


class Deadline:
    """checkpointing.checkpoint_must_save_by: whether one more step, with the validation and the checkpoint that would
    follow it (each as long as its last), would end after the deadline, counted from the loop's start (after
    loading; the warm-up and val_at_start count); every process gets the main one's answer. (NeMo RL's clock starts
    there too; it adds the mean of all iterations where this adds the last step and what would follow it.)"""

    def __init__(self, cfg):
        self.cfg, self.begun, self.took = cfg, time.monotonic(), {"validation": 0.0, "save": 0.0}

    @contextmanager
    def timed(self, part: str):
        started = time.monotonic()
        yield
        self.took[part] = time.monotonic() - started

    def passed(self, step: int, step_seconds: float) -> bool:
        limit = self.cfg.checkpointing.deadline_s
        if limit is None:
            return False
        after = step_seconds + self.took["validation"] * periodic_validation(self.cfg, step + 1) \
            + self.took["save"] * self.cfg.checkpointing.enabled  # (the next save: periodic, or this stop's)
        return dist.from_main(time.monotonic() - self.begun + after >= limit)


def owed_validation(run: Run) -> bool:
    """Whether the step a run resumes at validates and its validation is not in the record: a stop in it (Ctrl-C twice,
    a kill during the closing one) saved the checkpoint without it, and no later step ran it. Due as the run that saved
    it had it (a resume's changes apply from the next step on: a new grpo.val_period made the step due and the run
    said a stop had cut its validation short, a hunt's find), in the record it wrote (not a new logger.log_dir's)."""
    cfg, saved = run.cfg, run.saved_config or {}
    then = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={
        k: saved["grpo"][k] for k in ("val_period", "val_start_at", "val_at_end") if k in saved.get("grpo", {})})})
    due = periodic_validation(then, run.step) or (then.grpo.val_at_end and run.step >= run.max_steps)
    moved = Path(saved.get("logger", {}).get("log_dir", cfg.logger.log_dir)).resolve() != Path(
        cfg.logger.log_dir).resolve()
    return bool(run.resumed_from) and bool(run.val_problems) and not moved and dist.from_main(
        due and run.step not in run.logger.validated)


def periodic_validation(cfg, step: int) -> bool:
    """Whether step `step` validates: every grpo.val_period steps, from grpo.val_start_at on."""
    g = cfg.grpo
    return g.val_period > 0 and step % g.val_period == 0 and step >= g.val_start_at


def validate(run: Run) -> float:
    """pass@1 on the validation problems (their final submissions), sampled with
    policy.generation.val_* (greedy by default); with grpo.val_num_generations_per_prompt = k > 1,
    the mean over k samples of each problem, and pass@k."""
    if not run.val_problems:
        return float("nan")
    k = run.cfg.grpo.val_num_generations_per_prompt
    seeds = prompt_seeds(run.cfg.grpo.seed, -1 - run.step, len(run.val_problems))  # (a stream apart from training's)
    evaluating = replace(run.episodes, opponent=None)  # (every seat the policy's: against fixed players)
    with memory.phase("validation", run.cfg):
        rollouts = evaluating.run(dist.this_rank(run.val_problems), k, sampling(run.cfg, validation=True),
                                  dist.this_rank(seeds))
    dist.meet("its share of validation")
    check_sandbox(run, rollouts.episodes, f"eval at step {run.step}")
    groups = [rollouts.samples[i:i + k] for i in range(0, len(rollouts.samples), k)]
    counts = [(sum(s.valid for s in g), sum(s.valid and is_correct(s) for s in g)) for g in groups]  # (n, c)
    at_k = sum(pass_at_k(n, c, k) for n, c in counts if n >= k)
    num_correct, num_valid, num_problems, sum_at_k, num_at_k = dist.sum_floats(
        sum(c for _, c in counts), sum(n for n, _ in counts), sum(n > 0 for n, _ in counts), at_k,
        sum(n >= k for n, _ in counts))
    score = num_correct / max(num_valid, 1)
    how = sampling(run.cfg, validation=True)  # (recorded: a resume may change them, and the curve then joins two)
    metrics = {"eval/pass@1": score, "eval/num_problems": num_problems,
               "eval/problem_set": problem_set(run.val_problems), "eval/temperature": how.temperature,
               "eval/top_p": how.top_p, "eval/top_k": how.top_k or 0,  # (0: none)
               "eval/max_new_tokens": run.cfg.policy.generation.max_new_tokens}
    if k > 1:
        metrics[f"eval/pass@{k}"] = sum_at_k / max(num_at_k, 1)
    games = episode_means(dist.sum_dicts(episode_sums(rollouts)))  # (self-play: rates against each fixed player)
    metrics.update({f"eval/{name}": v for name, v in games.items() if "_rate_vs_" in name})
    if any("_rate_vs_" in name for name in games):  # (its pass@1 was the win rate over every opponent at once, and
        metrics = {k: v for k, v in metrics.items() if not k.startswith("eval/pass@")}  # the report showed it as one)
    if "reward_model_score" in games:  # the reward model's mean (raw) score (env.reward_model)
        metrics["eval/reward_model_mean"] = games["reward_model_score"]
        metrics["eval/reward_model_truncated_frac"] = games["reward_model_truncated_frac"]
    run.logger.log(run.step, metrics)
    write_report(run)
    games = dict(sorted(((name[5:], v) for name, v in metrics.items() if "win_rate_vs_" in name),
                        key=lambda kv: (kv[0].count("/"), kv[0])))  # self-play: the rates that matter, by role last
    shown = games or {name[5:]: v for name, v in metrics.items() if "pass@" in name or "reward_model" in name}
    console.print(f"step {run.step}: eval " + ", ".join(f"{name} = {v:.3f}" for name, v in shown.items())
                  + (f" over {num_problems:.0f} matches" if games else f" on {num_problems:.0f} problems"))
    return score


def log_step(run: Run, step: int, rollouts, stats: dict, times: dict, bar) -> None:
    metrics = {f"train/{k}": v for k, v in stats.items()}  # already global
    sums = dist.sum_dicts(episode_sums(rollouts, run.sampler.kinds))  # over all processes
    means = episode_means(sums)
    if clash := sorted(set(means) & set(stats)):  # (an environment's metric named as one of the step's own, past
        raise ValueError(f"an environment's metrics() returned {clash[0]!r}, a name of execrl's own metrics "  # OWN_METRICS)
                         f"(train/{clash[0]}), which it would replace in the record: give it another name")
    timing = {"answered_while_generating_frac"}  # (per episode, but a matter of timing: with the time/ metrics)
    metrics.update({f"{'time' if k in timing else 'train'}/{k}": v for k, v in means.items() if k != "reward_sq_mean"})
    metrics["train/reward_std"] = max(means["reward_sq_mean"] - means["reward_mean"] ** 2, 0.0) ** 0.5
    times = dict(times)
    generated = dist.sum_floats(times.pop("generated_tokens", 0.0))[0]
    if times.get("generate"):  # the model's tokens sampled per second of generation (all processes): those this
        metrics["time/tokens_per_s"] = generated / times["generate"]  # step generated (async: the next step's too)
    metrics.update({f"time/{k}": v for k, v in times.items()})
    tokens, slot_steps = dist.sum_floats(rollouts.decoded["tokens"], rollouts.decoded["slot_steps"])
    if slot_steps:  # how full the engine's decode steps were (low: a few long samples decoding alone)
        metrics["time/decode_batch_full"] = tokens / slot_steps
    if torch.cuda.is_available():
        metrics["memory/peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    run.flat_rows = [*run.flat_rows, metrics][-FLAT_WARNING_STEPS:] if run.flat_streak or run.blind_streak else []
    blind = run.blind_streak == FLAT_WARNING_STEPS
    warned = run.flat_streak == FLAT_WARNING_STEPS or blind  # (its step's rollouts are written, named: a hunt's find)
    samples = step_samples(run, rollouts) if run.cfg.logger.rollouts_period and \
        step % run.cfg.logger.rollouts_period == 0 or warned else None
    try:
        run.logger.log(step, metrics)
    except LogUnwritable:  # (the step's samples kept with its row for the checkpoint: written as it resumes)
        if samples is not None and run.logger.jsonl is not None:
            run.logger.unwritten.append({"step": step, "rollouts": samples})
        raise
    if warned:
        where = f"see this step's samples in {run.logger.dir / 'rollouts' / f'step_{step:06d}.jsonl'}" \
            if run.logger.jsonl is not None else "logger.log_dir keeps the samples"
        said = shaping_only_warning(run.cfg, run.flat_rows) if blind else flat_warning(run.cfg, run.flat_rows,
                                                                                         run.flat_cut)
        console.print(f"[yellow]warning: {escape(said)}; {where}[/]")
    if run.diverged:  # (the step that stopped it is in the record, and so in the report)
        write_report(run)
        raise RuntimeError(run.diverged)
    check_sandbox(run, rollouts.generated, f"step {step}")
    if samples is not None:
        run.logger.rollouts(step, samples)
    if bar is None:  # (a line written as the run stops)
        return
    bar.update(bar.task_ids[0], completed=step,
               description=f"step {step}  reward {metrics['train/reward_mean']:.3f}  "
                           f"{times['step']:.1f}s/step")


def check_sandbox(run: Run, episodes, where: str) -> None:
    """A loud line when the sandbox fails on more than 5% of the programs sent to it; the run stops
    above 50% (it never trains on nothing for hours). Every process sees the same global counts, so
    all stop together."""
    num_infra, num_sent, example = sandbox_failures([e.sample for e in episodes])
    num_infra, num_sent = dist.sum_floats(num_infra, num_sent)
    line = check_infra_share(num_infra, num_sent, where, example)
    if line is not None:
        console.print(f"[bold red]WARNING: {line}[/]")


def summarize(run: Run, warn: bool = True) -> None:
    """The run's learning in two lines, from metrics.jsonl (so a resumed run reports all of it); with `warn`, what its
    metrics say went wrong (all-flat groups, samples cut short)."""
    import json

    if not dist.is_main():  # its console is quiet, and multi-node ranks may not see rank 0's files
        return
    rows = [json.loads(line) for line in (run.logger.dir / "metrics.jsonl").read_text().splitlines()]
    selfplay = run.sampler.kinds == {"game"}  # (zero-sum: the reward's mean says nothing; the win rates do)
    keys = sorted({k for r in rows for k in r})
    shown = [k for k in keys if k.startswith("train/") and k.endswith("/win_rate")] if selfplay else [
        "train/reward_mean"]
    for key in shown:
        values = [r[key] for r in rows if key in r]
        if len(values) >= 2:
            k = min(5, len(values) // 2)
            console.print(f"{key[6:].replace('_', ' ').replace('reward mean', 'train reward')}, mean of the first {k} "
                          f"steps -> last {k}: {sum(values[:k]) / k:.3f} -> {sum(values[-k:]) / k:.3f}")
    flats = [r["train/flat_group_frac"] for r in rows if "train/flat_group_frac" in r]
    if warn and flats and len(flats) < FLAT_WARNING_STEPS and all(f == 1.0 for f in flats):  # (longer: warned)
        console.print("[yellow]warning: " + escape(f"at every step {flat_reason(run.cfg)} (train/flat_group_frac 1.0): "
                                                  "the loss and its gradient were 0 and nothing was learned."
                                                  + verdict_note(run.cfg, rows)) + "[/]")
    skipped = sum(r.get("train/skipped_steps", 0) for r in rows)
    if warn and skipped:  # (a run that skipped some updates, its model wrecked by the others, said nothing of them)
        console.print(f"[yellow]warning: {skipped:g} optimizer step(s) had a NaN or inf loss or gradient and were "
                      "skipped (train/skipped_steps): the learning rate may be too high[/]")
    for warning in cut_warnings(rows, run.cfg.grpo.overlong_filtering) if warn else ():
        console.print(f"[yellow]warning: {warning}[/]")
    evals = [k for k in keys if k.startswith("eval/") and "win_rate_vs_" in k] if selfplay else ["eval/pass@1"]
    from execrl.report.runs import validation_sets_differ

    for key in evals:
        points = [r for r in rows if key in r]
        if len(points) >= 2:
            other = validation_sets_differ(points[0], points[-1])
            console.print(f"eval {key[5:]}: {points[0][key]:.3f} (step {points[0]['step']}) -> {points[-1][key]:.3f} "
                          f"(step {points[-1]['step']})" + (f" ({other})" if other else ""))
    if warn and not selfplay and (against := reward_against_correctness(rows, run.cfg.reward)):
        console.print(f"[yellow]warning: {escape(against)}[/]")
    written = write_report(run)
    saved = run.cfg.checkpointing.checkpoint_dir if run.cfg.checkpointing.enabled else \
        "none (checkpointing.enabled=false)"
    console.print(f"logs: {run.logger.dir}  checkpoints: {saved}" + (f"  report: {written}" if written else ""))


def cut_warnings(rows: list[dict], filtered: bool = False) -> list[str]:
    """What the run's metrics say about samples cut short: over its last steps (up to 5), half the samples cut at
    max_new_tokens, or over the run a tenth of the multi-turn episodes ended because an environment's answer did not
    fit (the model never read it). `filtered` (grpo.overlong_filtering): cut samples are left out of the loss, so the
    steps at which every sample was cut trained on nothing, which is said too."""
    def mean(key, last=None):
        values = [r[key] for r in rows if key in r][-last if last else 0:]
        return sum(values) / len(values) if values else 0.0

    warnings = []
    cut = mean("train/truncated_frac", 5) - mean("train/answer_cut_frac", 5)  # (an answer cut is truncated too)
    if cut >= 0.5:
        warnings.append(f"in the last steps {cut:.0%} of the samples were cut before they ended (train/truncated_frac: "
                        "at policy.generation.max_new_tokens or policy.max_total_sequence_length): their answers are "
                        "unfinished; raise the limit, unless the model never ends an answer (its rollouts show it)" +
                        (f"; grpo.overlong_filtering left them out of the loss, so these steps trained on "
                         f"{1 - mean('train/truncated_frac', 5):.0%} of their samples" if filtered else ""))
    empty = [r["step"] for r in rows if r.get("train/truncated_frac", 0.0) >= 1.0 and "step" in r] if filtered else []
    if empty:
        steps = ", ".join(map(str, empty[:5])) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        warnings.append(f"at step {steps} every sample was cut (train/truncated_frac 1.0) and grpo.overlong_filtering "
                        "left it out of the loss: the loss and its gradient were 0 and the step learned nothing. "
                        "Raise policy.generation.max_new_tokens, or set grpo.overlong_filtering=false")
    if mean("train/answer_cut_frac") >= 0.1:
        warnings.append(f"{mean('train/answer_cut_frac'):.0%} of the episodes ended early because an environment's "
                        "answer did not fit in policy.max_total_sequence_length (train/answer_cut_frac): the model "
                        "never read it and took no further turn; raise policy.max_total_sequence_length (or lower "
                        "policy.generation.max_new_tokens)")
    return warnings


def write_report(run: Run):
    """The run's report (log_dir/report.html, execrl.report), from the main process; a failure to
    write it is said and the run goes on."""
    if not dist.is_main() or run.logger.jsonl is None:
        return None
    from execrl.report import write_report as write

    try:
        return write([run.logger.dir], run.logger.dir / "report.html")
    except Exception as e:  # noqa: BLE001 (the report is not worth a run)
        console.print(f"[yellow]the run report could not be written: {type(e).__name__}: {e}[/]")
        return None


def step_samples(run: Run, rollouts) -> list[dict]:
    """The step's samples as its rollouts file holds them (every process's: a collective). Dynamic sampling's groups
    left out of the loss (flat, or beyond the step's), as the step's metrics count them: marked, after the trained
    ones."""
    trained = dist.gather_lists(rollout_rows(rollouts.episodes, run.tokenizer), run.plan.prompts_per_optimizer_step,
                                run.plan.group_size)
    dropped = dist.gather_lists(rollout_rows(rollouts.dropped, run.tokenizer))
    return trained + [{**row, "trained": False} for row in dropped]


def save_on_interrupt(run: Run, why: str = "interrupted") -> None:
    """Ctrl-C (or why: another stop between steps): a checkpoint of the steps done; resuming trains the interrupted
    step's batch again."""
    if run.last_saved == run.step:  # (a first Ctrl-C or SIGTERM: saved after its step, on every process)
        return
    if dist.world_size() > 1:  # each process was stopped somewhere else: a collective save could hang
        last = f"step {run.last_saved}" if run.last_saved >= 0 else "none"
        console.print(f"[yellow]{why}: not saved (several processes); the last checkpoint: {last}[/]")
    elif run.updating:  # a second Ctrl-C within a train phase: its optimizer steps partly taken, a state no step had
        last = f"step {run.last_saved}" if run.last_saved >= 0 else "none"
        console.print(f"[yellow]{why} within step {run.step + 1}'s optimizer steps: not saved (its weights are "
                      f"partly updated); the last checkpoint: {last}[/]")
    elif run.cfg.checkpointing.enabled and run.step > max(run.last_saved, 0):
        console.print(f"[yellow]{why}: saving a checkpoint before exiting[/]")
        save(run)
    elif run.step == 0:  # (the warm-up, the first validation: a SIGTERM there ended the run without a word)
        console.print(f"[yellow]{why} before the first step: nothing to save (the same command starts over)[/]")


def resume_note(run: Run) -> str:
    """Where the run can go on from after a failure: its last checkpoint (written whole, or not
    at all). No collective: the failure may be this rank's alone (a rank out of memory on longer samples hung the
    job here, the other ranks waiting in the step's)."""
    found = checkpoint.latest_here(run.cfg.checkpointing.checkpoint_dir) if run.cfg.checkpointing.enabled else None
    if found is None:
        return "No checkpoint was written yet."
    return f"The last checkpoint, {found}, is intact: the same command resumes from it."


def save(run: Run) -> None:
    data = {"sampler": run.pipeline.data_position(run.step), "problems": run.sampler.identity(),
            "role_baselines": run.baselines.state_dict(),
            "config": run.cfg.model_dump(mode="json"),  # what a resume compares its own config with
            "base_identity": run.base_identity,  # ... and the base's weight files (setup.same_base)
            "tokenizer_identity": tokenizer_identity(run.tokenizer),  # ... and its prompts' tokens (setup.same_tokens)
            "judge_identity": run.judge_identity}  # ... and its reward model's (setup.same_judge)
    if run.opponent is not None and (opponent := run.opponent.state_dict(run.weights.compute)) is not None:
        data["opponent"] = opponent  # (a snapshot: the policy as it was at its last refresh)
    if run.logger.unwritten:  # (a full disk's: written as the run resumes)
        data["unwritten"] = list(run.logger.unwritten)
    try:
        path = checkpoint.save(run.cfg.checkpointing.checkpoint_dir, run.step, run.model, run.tokenizer,
                               run.optimizer, run.scheduler, data, run.cfg.checkpointing.keep_top_k or 0,
                               run.weights.compute_dtype, run.lora)
    except checkpoint.WriteFailed as e:
        raise checkpoint.WriteFailed(f"{e}. Make room there (checkpointing.keep_top_k keeps fewer). "
                                     f"{resume_note(run)}") from None
    run.last_saved = run.step
    run.logger.saved(run.step, path)
    console.print(f"checkpoint: {path}")


@contextmanager
def timed(times: dict, key: str):
    t = time.perf_counter()
    yield
    times[key] = time.perf_counter() - t


def progress(run: Run) -> Progress:
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=False)
    bar.add_task(f"step {run.step}", total=run.max_steps, completed=run.step)
    return bar

