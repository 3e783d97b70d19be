"""`execrl train` end to end on CPU: resume is bit-exact, checkpoints load with transformers, NaN steps stop the run,
a local HF model directory trains, and (slow tier) the built-in default learns."""

import contextlib
import json
import os
import re
import time
from pathlib import Path

import pytest
import torch

from execrl.config import load_config
from execrl.trainer.loop import train

SMALL = ["policy.device=cpu", "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=8",
         "policy.train_micro_batch_size=4", "policy.logprob_batch_size=8", "policy.generation_batch_size=16",
         "warmup.sft_steps=20", "grpo.val_period=2", "grpo.max_val_samples=8", "grpo.val_at_start=false",
         "checkpointing.save_period=2", "logger.tensorboard_enabled=false", "env.code.num_workers=2"]


def run(tmp_path, name, *overrides):
    d = tmp_path / name
    cfg = load_config(None, [*SMALL, f"logger.log_dir={d}", f"checkpointing.checkpoint_dir={d}/ckpt", *overrides])
    return train(cfg), d


def metrics(d):
    return [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]


def test_resume_is_bit_identical(tmp_path):
    straight, d1 = run(tmp_path, "straight", "grpo.max_num_steps=4")
    first, d2 = run(tmp_path, "resumed", "grpo.max_num_steps=2")
    second, _ = run(tmp_path, "resumed", "grpo.max_num_steps=4")  # the same command again, further: resumes
    assert second.resumed_from.endswith("step_000002")
    a, b = straight.model.state_dict(), second.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    drop = ("time/",)
    strip = [{k: v for k, v in m.items() if not k.startswith(drop)} for m in metrics(d1)]
    assert strip == [{k: v for k, v in m.items() if not k.startswith(drop)} for m in metrics(d2)]


def test_a_checkpoint_without_its_weights_is_refused_not_resumed_from_the_base_model(tmp_path):
    """(A newcomer's find) a checkpoint whose model.safetensors was gone said "resumed from step N" and trained on from
    the base model's weights: torch loads an empty state dict as nothing missing."""
    run(tmp_path, "gone", "grpo.max_num_steps=2", "warmup.sft_steps=0")
    (weights,) = (tmp_path / "gone" / "ckpt" / "step_000002" / "policy").glob("*.safetensors")
    weights.unlink()
    with pytest.raises(ValueError, match="holds no weights .* the checkpoint is incomplete. Move .*step_000002 aside"):
        run(tmp_path, "gone", "grpo.max_num_steps=3", "warmup.sft_steps=0")


def test_a_damaged_checkpoint_is_named_and_an_incomplete_one_passed_over_with_a_word(tmp_path, capsys):
    """(A careless user's finds) a latest checkpoint whose model.safetensors was damaged ended the resume in
    safetensors' own traceback ('header too large'); one without trainer_state.pt was passed over without a word
    (and later overwritten)."""
    run(tmp_path, "hurt", "grpo.max_num_steps=2", "warmup.sft_steps=0", "checkpointing.save_period=1")
    ckpt = tmp_path / "hurt" / "ckpt"
    (weights,) = (ckpt / "step_000002" / "policy").glob("*.safetensors")
    weights.write_bytes(b"garbage" * 3)
    with pytest.raises(ValueError, match="model.safetensors cannot be read .* the checkpoint is damaged. Move "
                                         ".*step_000002 aside"):
        run(tmp_path, "hurt", "grpo.max_num_steps=3", "warmup.sft_steps=0")
    (ckpt / "step_000002" / "trainer_state.pt").unlink()
    capsys.readouterr()
    resumed, _ = run(tmp_path, "hurt", "grpo.max_num_steps=2", "warmup.sft_steps=0")
    assert resumed.resumed_from.endswith("step_000001")
    assert "step_000002 passed over: incomplete (no trainer_state.pt); resuming from step_000001" in \
        capsys.readouterr().err.replace("\n", " ")


def test_keep_top_k_counts_complete_checkpoints_and_keeps_the_one_just_written(tmp_path):
    """(A hunt's find) an incomplete checkpoint newer than the one resumed from counted among keep_top_k's K: with
    K = 1 the resumed run's step 3 was deleted as soon as written, the incomplete step 4 kept, nothing to resume."""
    from execrl.trainer import checkpoint

    run(tmp_path, "k", "grpo.max_num_steps=4", "warmup.sft_steps=0", "checkpointing.keep_top_k=null")
    ckpt = tmp_path / "k" / "ckpt"
    (ckpt / "step_000004" / "trainer_state.pt").unlink()
    for left in (".old-step_000001", ".tmp-step_000009"):  # (a deletion and a save cut short by a kill: a deleted
        (ckpt / left / "policy").mkdir(parents=True)  # checkpoint is renamed first, so none is left half-deleted)
    run(tmp_path, "k", "grpo.max_num_steps=3", "warmup.sft_steps=0", "checkpointing.keep_top_k=1")
    assert checkpoint.latest(ckpt) == ckpt / "step_000003"
    assert sorted(p.name for p in ckpt.iterdir()) == [".execrl.lock", "step_000003", "step_000004"]


def test_a_resume_over_other_training_problems_is_refused(tmp_path, monkeypatch):
    """(A newcomer's find) the training file cut from 6 rows to 4 after 3 steps: the resume stopped on an IndexError
    (its place was past the end) after rewriting config.yaml; a file that grew or changed drew another stream without
    a word. The checkpoint keeps the problems' fingerprint."""
    import json as js

    rows = [{"id": f"r{i}", "prompt": f"Print {i}.", "tests": {"inputs": [""], "outputs": [f"{i}\n"]}} for i in range(6)]
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(js.dumps(r) for r in rows) + "\n")
    monkeypatch.chdir(tmp_path)  # (a path relative to where the run started: its record names the file)
    mine = ["data.train.dataset_name=jsonl", "data.train.path=mine.jsonl", "warmup.sft_steps=0", "grpo.val_period=0",
            "grpo.num_prompts_per_step=2", "policy.train_global_batch_size=8", "policy.generation_batch_size=8",
            "policy.logprob_batch_size=8"]
    run(tmp_path, "changed", "grpo.max_num_steps=2", *mine)
    config = (tmp_path / "changed" / "config.yaml").read_text()
    # the record says what was read: the file, found from where the run started, and the problems' hashes
    assert f"\n# data.train: jsonl/train from {data.resolve()}\n# 6 training problems (prompts " in config
    data.write_text("\n".join(js.dumps(r) for r in rows[:4]) + "\n")
    with pytest.raises(ValueError, match="not those .*step_000002 was trained on .6 problems then, 4 now.*Resume with "
                                         "the data it ran on, or start a new run: logger.log_dir=.*changed-2 "):
        run(tmp_path, "changed", "grpo.max_num_steps=3", *mine)
    assert (tmp_path / "changed" / "config.yaml").read_text() == config
    rows[1]["prompt"] = "Print one."
    data.write_text("\n".join(js.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError, match="6 problems then and now, not the same ones"):
        run(tmp_path, "changed", "grpo.max_num_steps=3", *mine)
    rows[1]["prompt"] = "Print 1."  # (a careless user's find) the same prompts, other expected outputs: resumed
    rows[2]["tests"] = {"inputs": [""], "outputs": ["1\n"]}
    data.write_text("\n".join(js.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError, match="but their reference answers or tests are not the same"):
        run(tmp_path, "changed", "grpo.max_num_steps=3", *mine)
    rows[2]["tests"] = {"inputs": [""], "outputs": ["2\n"]}
    data.write_text("\n".join(js.dumps(r) for r in rows) + "\n")
    assert run(tmp_path, "changed", "grpo.max_num_steps=3", *mine)[0].resumed_from.endswith("step_000002")


def test_keep_top_k_null_keeps_every_checkpoint(tmp_path):
    """NeMo RL reads checkpointing.keep_top_k: null as keep them all; it was refused (not an integer)."""
    run(tmp_path, "all", "grpo.max_num_steps=3", "warmup.sft_steps=0", "checkpointing.save_period=1",
        "checkpointing.keep_top_k=null")
    assert [p.name for p in sorted((tmp_path / "all" / "ckpt").glob("step_*"))] == [
        "step_000001", "step_000002", "step_000003"]


def test_a_resume_without_a_warm_up_keeps_its_own_kl_reference(tmp_path):
    """(A review's find) a reference that another run's warm-up left in the checkpoint directory (it stopped before
    its first checkpoint) was read back by a resumed run without a warm-up: train/kl went from 0.002 to 6.9."""
    from execrl.trainer import checkpoint

    kl = ["loss_fn.reference_policy_kl_penalty=0.05", "checkpointing.save_period=1", "warmup.sft_steps=0"]
    first, d = run(tmp_path, "own", "grpo.max_num_steps=1", *kl)
    checkpoint.save_reference(d / "ckpt", first.model, first.model)  # (trained weights: not this run's reference)
    second, _ = run(tmp_path, "own", "grpo.max_num_steps=2", *kl)
    a, b = first.ref_model.state_dict(), second.ref_model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_that_cannot_be_written_says_so_and_leaves_no_partial_copy(tmp_path, monkeypatch):
    """(A hunt's find) a full disk at a save ended the run with torch's "unexpected pos 600704 vs 600596" or a
    safetensors traceback, naming neither the checkpoint nor the disk, and left the partial copy filling it."""
    import errno

    from execrl.trainer import checkpoint

    saves, real = [], torch.save

    def full_disk(obj, path, *args, **kwargs):
        saves.append(path)
        if len(saves) > 2:  # (a save writes two files with torch.save: the second checkpoint's first write fails)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(checkpoint.WriteFailed, match=r"checkpoint step_000004 could not be written to .*No space "
                                                     r"left on device; .* [MG]iB free there\): its partial copy is "
                                                     r"removed\. Make room there .*step_000002, is intact"):
        run(tmp_path, "full", "grpo.max_num_steps=4", "warmup.sft_steps=0")
    ckpt = tmp_path / "full" / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir() if p.name != ".execrl.lock") == ["step_000002"]


def test_a_file_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """(A hunt's find) metrics.jsonl was rewritten in place at a resume (a kill there emptied it), and a report
    that failed to write left its partial copy, which filled the disk for the run's next write."""
    from pathlib import Path

    from execrl.writable import write_whole

    path = tmp_path / "metrics.jsonl"
    write_whole(path, "old\n")

    def fails(self, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", fails)
    with pytest.raises(OSError):
        write_whole(path, "new\n")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_val_at_end_adds_no_row_to_a_run_with_nothing_left_to_do(tmp_path):
    """(A review's find) each rerun of a finished run added another eval row at its last step."""
    args = ["grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.val_period=0", "grpo.val_at_end=true"]
    run(tmp_path, "end", *args)
    run(tmp_path, "end", *args)
    assert sum("eval/pass@1" in m for m in metrics(tmp_path / "end")) == 1


def test_a_validation_a_stop_cut_short_runs_when_the_run_resumes(tmp_path, capsys):
    """(A hunt's find) a kill in the closing validation (after the last checkpoint), or Ctrl-C twice in a periodic
    one, left its step without an eval row, and the same command said "nothing to do" (or went on): never run."""
    args = ["grpo.max_num_steps=2", "warmup.sft_steps=0", "grpo.val_period=0", "grpo.val_at_end=true"]
    _, d = run(tmp_path, "cut", *args)
    rows = (d / "metrics.jsonl").read_text().splitlines()
    (d / "metrics.jsonl").write_text("".join(line + "\n" for line in rows if "eval/pass@1" not in line))
    capsys.readouterr()
    run(tmp_path, "cut", *args)
    assert "validation of step 2 is not in the record" in capsys.readouterr().err
    assert [m["step"] for m in metrics(d) if "eval/pass@1" in m] == [2]
    run(tmp_path, "cut", *args)  # (in the record now: nothing owed)
    assert [m["step"] for m in metrics(d) if "eval/pass@1" in m] == [2]
    # (a hunt's find) a resume with a new grpo.val_period that makes its step due: the changes apply from the next
    # step on, and the run said a stop had cut the step's validation short, and ran it
    args = ["warmup.sft_steps=0", "grpo.val_at_end=false"]
    run(tmp_path, "period", "grpo.max_num_steps=2", "grpo.val_period=3", *args)
    capsys.readouterr()
    run(tmp_path, "period", "grpo.max_num_steps=3", "grpo.val_period=2", *args)
    assert "is not in the record" not in capsys.readouterr().err
    assert not [m for m in metrics(tmp_path / "period") if "eval/pass@1" in m]


def test_the_kl_reference_is_the_policy_as_grpo_begins_after_a_warm_up(tmp_path):
    """(A review's finding) the reference was copied before the supervised warm-up: the KL penalty pulled the policy
    back to the untrained model (train/kl 2.13 at the first GRPO step after 10 warm-up steps, 4.95 after 70). It is the
    warmed-up policy now, saved beside the checkpoints, and a resumed run reads it back."""
    kl = ["loss_fn.reference_policy_kl_penalty=0.05", "checkpointing.save_period=1"]
    first, d = run(tmp_path, "kl", "grpo.max_num_steps=1", *kl)
    assert [m["train/kl"] for m in metrics(d) if "train/kl" in m] == [pytest.approx(0.0, abs=1e-6)]
    assert (d / "ckpt" / "reference" / "config.json").is_file()
    second, _ = run(tmp_path, "kl", "grpo.max_num_steps=2", *kl)  # resumed: the model loads before any warm-up
    assert second.resumed_from.endswith("step_000001")
    a, b = first.ref_model.state_dict(), second.ref_model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_train_lr_is_the_rate_each_step_trained_at(tmp_path):
    """(A review's finding) train/lr was read after the scheduler had moved on: the next step's rate, so a warm-up's
    logged curve reached its peak a step early. NeMo RL's LinearLR from 0.1 x over 4 GRPO steps: 0.1 x, then 0.325 x."""
    sched = "policy.scheduler={name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.1, end_factor: 1.0, " \
            "total_iters: 4}}"
    result, d = run(tmp_path, "lr", "grpo.max_num_steps=2", "checkpointing.enabled=false", sched)
    base = float(result.cfg.policy.optimizer.kwargs["lr"])
    assert [m["train/lr"] for m in metrics(d) if "train/lr" in m] == pytest.approx([0.1 * base, 0.325 * base])


def test_run_directory_has_config_metrics_rollouts_and_loadable_checkpoints(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, d = run(tmp_path, "r", "grpo.max_num_steps=2", "logger.rollouts_period=1", "checkpointing.keep_top_k=1")
    assert (d / "config.yaml").is_file() and (d / "rollouts" / "step_000002.jsonl").is_file()
    keys = set().union(*metrics(d))
    for k in ("train/reward_mean", "train/loss", "train/kl", "train/clip_frac", "train/entropy", "train/grad_norm",
              "train/completion_len_mean", "train/reward/test_pass_fraction", "time/generate", "time/grade",
              "time/train", "eval/pass@1", "train/logprob_mismatch", "train/trajectory_age_mean", "time/step",
              "time/decode_batch_full"):
        assert k in keys, k
    assert any(k.startswith("train/verdict/") for k in keys)
    rows = [m for m in metrics(d) if "train/loss" in m]
    assert all(0 < m["time/decode_batch_full"] <= 1 for m in rows)
    samples = result.cfg.grpo.num_prompts_per_step * result.cfg.grpo.num_generations_per_prompt
    for m in rows:  # (it was 0 at every step: the last turn's tokens were counted before they were in the trajectories)
        assert m["time/tokens_per_s"] == pytest.approx(m["train/completion_len_mean"] * samples / m["time/generate"])
    assert all(m["train/logprob_mismatch"] < 1e-4 and m["train/trajectory_age_mean"] == 0 for m in rows)  # on-policy
    (ckpt,) = sorted((d / "ckpt").glob("step_*"))  # keep_top_k=1
    model = AutoModelForCausalLM.from_pretrained(ckpt / "policy")
    tok = AutoTokenizer.from_pretrained(ckpt / "policy")
    assert model.config.model_type == "qwen2" and tok.eos_token == "<|im_end|>"
    from execrl.models import saved_prompt  # (how the run posed problems, for an eval of a copied policy/ folder)

    assert saved_prompt(str(ckpt / "policy")) == result.cfg.prompt.model_dump()


def test_repeated_nan_steps_are_skipped_then_stop_the_run(tmp_path, monkeypatch):
    import execrl.trainer.step as step

    real, seen = step.policy_loss, {}

    def nan_loss(*args, **kwargs):  # the loss goes non-finite (as a diverging run's would)
        loss, m = real(*args, **kwargs)
        return loss * float("nan"), m

    real_optimize = step.optimize

    def watch(weights, *args, **kwargs):
        seen.setdefault("before", {k: v.clone() for k, v in weights.master.state_dict().items()})
        seen["model"] = weights.master
        return real_optimize(weights, *args, **kwargs)

    monkeypatch.setattr(step, "policy_loss", nan_loss)
    monkeypatch.setattr("execrl.trainer.loop.optimize", watch)
    with pytest.raises(RuntimeError, match="3 steps in a row had a NaN/inf loss"):
        run(tmp_path, "nan", "grpo.max_num_steps=6", "checkpointing.enabled=false")
    after = seen["model"].state_dict()  # a skipped step is never applied: no weight moved
    assert all(torch.equal(seen["before"][k], after[k]) for k in after)
    # (a review's find) each skipped step's row read loss 0 and grad_norm 0, a perfect-looking point, and the step
    # that stopped the run had no row; the report was the last evaluation's
    rows = [m for m in metrics(tmp_path / "nan") if "train/skipped_steps" in m]
    assert [m["step"] for m in rows] == [1, 2, 3] and all(m["train/skipped_steps"] == 2 for m in rows)  # (2 a step)
    assert not any("train/loss" in m or "train/grad_norm" in m for m in rows)
    assert (tmp_path / "nan" / "report.html").stat().st_mtime >= (tmp_path / "nan" / "metrics.jsonl").stat().st_mtime


def test_trains_a_local_model_directory_on_mbpp(tmp_path, tiny_model_dir):
    from ..conftest import shared_data

    shared_data("mbpp")
    trained, d = run(tmp_path, "mbpp", f"policy.model_name={tiny_model_dir}", "data.train.dataset_name=mbpp",
                     "data.train.split_validation_size=0.02", "warmup.sft_steps=0", "grpo.max_num_steps=1",
                     "policy.generation.max_new_tokens=16", "policy.max_total_sequence_length=1024")
    assert trained.step == 1 and len(trained.val_problems) == 8  # 2% of the 374 train problems (7.48), held out as NeMo RL rounds it
    assert metrics(d)[0]["train/verdict/no_code"] >= 0


def test_long_prompts_are_dropped_with_a_count(tmp_path, capsys):
    trained, _ = run(tmp_path, "long", "grpo.max_num_steps=1", "data.max_input_seq_length=78",
                     "policy.model_name=builtin:tiny-coder")  # (byte-level: the shortest phrasing is 77 tokens with
    assert 0 < len(trained.sampler.problems) < 4096  # the template)
    said = capsys.readouterr().err  # (NeMo RL's processors drop a prompt of the limit's length too: over 77)
    assert "problems have a prompt over 77 tokens" in said and "data.max_input_seq_length (78:" in said
    # every prompt over the limit: the error names the key that set it (it advised raising the total length, which
    # data.max_input_seq_length overrides)
    with pytest.raises(ValueError, match=r"nothing is left to train on; raise data.max_input_seq_length \(or unset"):
        run(tmp_path, "none", "grpo.max_num_steps=1", "data.max_input_seq_length=10", "policy.model_name=builtin:tiny-coder")
    # data.max_input_seq_length as long as the context (NeMo RL's idiom): raising it alone is refused, so the total
    with pytest.raises(ValueError, match=r"nothing is left to train on; raise policy.max_total_sequence_length, and "
                       r"data.max_input_seq_length with it"):
        run(tmp_path, "ctx", "grpo.max_num_steps=1", "data.max_input_seq_length=64",
            "policy.max_total_sequence_length=64", "policy.generation.max_new_tokens=16",
            "policy.model_name=builtin:tiny-coder")


def test_evaluation_splits_cannot_be_trained_on(tmp_path):
    from execrl.config import ConfigError

    with pytest.raises(ConfigError, match="data.train: mbpp/test is an evaluation split"):  # before any work
        run(tmp_path, "bad", "data.train.dataset_name=mbpp", "data.train.split=test", "grpo.max_num_steps=1")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_builtin_default_learns_from_any_seed(tmp_path, seed):
    cfg = load_config(None, [f"grpo.seed={seed}", f"logger.log_dir={tmp_path}",
                             f"checkpointing.checkpoint_dir={tmp_path}/ckpt"])
    train(cfg)
    rows = metrics(tmp_path)
    rewards = [r["train/reward_mean"] for r in rows if "train/reward_mean" in r]
    evals = [r["eval/pass@1"] for r in rows if "eval/pass@1" in r]
    assert sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5 >= 0.15
    assert evals[-1] - evals[0] >= 0.15


def test_wandb_offline_needs_no_network(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _, d = run(tmp_path, "wb", "grpo.max_num_steps=1", "checkpointing.enabled=false", "logger.wandb_enabled=true",
               "logger.wandb.mode=offline")
    assert list((d / "wandb").glob("offline-run-*"))


def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    """(A hunt's find) every resume began a W&B run of its own (resume="allow" with no id); the log directory keeps
    the id the run started with, and logger.wandb.id names one."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    w = ["logger.wandb_enabled=true", "logger.wandb.mode=offline", "warmup.sft_steps=0", "grpo.val_period=0"]
    _, d = run(tmp_path, "wb", "grpo.max_num_steps=2", *w)
    run(tmp_path, "wb", "grpo.max_num_steps=4", *w)
    ids = {p.name.rsplit("-", 1)[-1] for p in (d / "wandb").glob("offline-run-*")}
    assert ids == {(d / "wandb_id").read_text().strip()}, ids
    _, d = run(tmp_path, "named", "grpo.max_num_steps=1", "checkpointing.enabled=false", "logger.wandb.id=mine", *w)
    assert {p.name.rsplit("-", 1)[-1] for p in (d / "wandb").glob("offline-run-*")} == {"mine"}


def test_wandb_takes_its_environment_and_records_how_the_run_ended(tmp_path, monkeypatch):
    """(A hunt's finds) WANDB_MODE=offline, a compute node's usual set-up, was overridden by the config's default
    (online: no API key, a traceback once the model had loaded); a failed or stopped run read as finished in W&B."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    wandb.teardown()  # (W&B reads the environment when a process first starts it: as a run's process does)
    ended, init = [], wandb.init

    def watched(**kwargs):  # the real run, its finish's exit code seen on the way
        wandb_run = init(**kwargs)
        finish = wandb_run.finish
        wandb_run.finish = lambda exit_code=None, **k: ended.append((kwargs["project"], exit_code)) or finish(
            exit_code=exit_code, **k)
        return wandb_run

    monkeypatch.setattr(wandb, "init", watched)
    w = ["logger.wandb_enabled=true", "warmup.sft_steps=0", "grpo.val_period=0", "checkpointing.enabled=false"]
    _, d = run(tmp_path, "env", "grpo.max_num_steps=1", *w)
    assert list((d / "wandb").glob("offline-run-*")) and ended == [("from-env", 0)]
    from execrl.trainer import loop

    monkeypatch.setattr(loop, "summarize", lambda *a, **k: 1 / 0)  # (a failure at the run's end)
    with pytest.raises(ZeroDivisionError):
        run(tmp_path, "fails", "grpo.max_num_steps=1", *w)
    assert ended[-1] == ("from-env", 1)


def test_wandb_lost_mid_run_costs_neither_the_run_nor_its_checkpoint(tmp_path, monkeypatch, capsys):
    """(A hunt's find) W&B's own process killed with the job (a scheduler's stop signals every process): the next
    wandb.log raised out of the loop, and the run ended with no checkpoint. Now the run says so once and goes on,
    its metrics in metrics.jsonl and TensorBoard."""
    import signal

    pytest.importorskip("wandb")
    from execrl.trainer.metrics import MetricsLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    real = MetricsLogger.log

    def log(self, step, values):
        if step == 2 and self.wandb is not None:  # its service process, a child of this one, killed
            for pid in os.listdir("/proc"):
                with contextlib.suppress(OSError):
                    stat, cmd = Path(f"/proc/{pid}/stat").read_text(), Path(f"/proc/{pid}/cmdline").read_bytes()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"wandb" in cmd:
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(1)
        return real(self, step, values)

    monkeypatch.setattr(MetricsLogger, "log", log)
    result, d = run(tmp_path, "lost", "grpo.max_num_steps=4", "checkpointing.save_period=10", "warmup.sft_steps=0",
                    "grpo.val_period=0", "logger.wandb_enabled=true", "logger.wandb.mode=offline")
    assert result.step == 4 and (d / "ckpt" / "step_000004").is_dir()
    assert [r["step"] for r in metrics(d) if "train/loss" in r] == [1, 2, 3, 4]
    assert "W&B stopped taking the run's metrics" in " ".join(capsys.readouterr().err.split())


def test_the_transformers_reference_backend_still_trains(tmp_path):
    result, d = run(tmp_path, "hf", "policy.generation.backend=transformers", "grpo.max_num_steps=1",
                    "checkpointing.enabled=false", "warmup.sft_steps=0", "grpo.val_period=0")
    assert result.step == 1 and "train/loss" in metrics(d)[0]


def test_a_failing_sandbox_refuses_at_start_and_stops_a_run(tmp_path, monkeypatch):
    """A sandbox that cannot run the interpreter (e.g. a venv it cannot see) stops `execrl train` before any work,
    with the fix; one that starts failing mid-run stops the run instead of training on nothing."""
    import execrl.sandbox.grader as grader_module
    from execrl.sandbox import Grader, SandboxFailing, SandboxUnusable
    from execrl.sandbox.pool import WorkerDied

    def dead(*args, **kwargs):
        raise WorkerDied("runner sandbox failed; its output: bwrap: execvp /tmp/x/.venv/bin/python: No such file")

    monkeypatch.setattr(grader_module, "_grade_on", dead)
    with pytest.raises(SandboxUnusable, match="execvp.*Fix: "):
        run(tmp_path, "refused", "grpo.max_num_steps=1", "warmup.sft_steps=0")
    assert not (tmp_path / "refused" / "ckpt").exists()
    monkeypatch.setattr(Grader, "self_test", lambda self, languages: None)  # it passed; the sandbox fails later
    with pytest.raises(SandboxFailing, match=r"step 1: (\d+) of \1 programs graded \(100%\) ended infra_error.*execvp"):
        run(tmp_path, "stopped", "grpo.max_num_steps=3")  # warmed up: it writes programs


def test_a_run_resumed_after_a_hard_kill_has_the_records_of_one_that_never_stopped(tmp_path):
    """Killed after step 4 was logged but before its checkpoint: the resumed run does steps 3-4 again, and its
    metrics.jsonl must read as the uninterrupted run's (no duplicate rows), TensorBoard's later events purged."""
    import shutil

    straight, d1 = run(tmp_path, "straight", "grpo.max_num_steps=4", "logger.tensorboard_enabled=true")
    killed, d2 = run(tmp_path, "killed", "grpo.max_num_steps=4", "logger.tensorboard_enabled=true")
    shutil.rmtree(d2 / "ckpt" / "step_000004")  # as if killed before this checkpoint was written
    resumed, _ = run(tmp_path, "killed", "grpo.max_num_steps=4", "logger.tensorboard_enabled=true")
    assert resumed.resumed_from.endswith("step_000002")
    strip = [{k: v for k, v in m.items() if not k.startswith("time/")} for m in metrics(d1)]
    assert strip == [{k: v for k, v in m.items() if not k.startswith("time/")} for m in metrics(d2)]


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])  # (a hunt's find: SIGTERM, a scheduler's stop, killed the
def test_ctrl_c_finishes_the_step_saves_and_exits_130(tmp_path, stop):  # run unsaved, its report at step 0)
    import signal
    import subprocess
    import sys
    import time

    d = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "execrl.cli", "train", *SMALL, "grpo.max_num_steps=50",
                             "checkpointing.save_period=100", f"logger.log_dir={d}",
                             f"checkpointing.checkpoint_dir={d}/ckpt"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not ((d / "metrics.jsonl").exists() and (d / "metrics.jsonl").read_text()):
        time.sleep(0.2)
    proc.send_signal(getattr(signal, stop))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert f"{'Ctrl-C' if stop == 'SIGINT' else stop}: stopping after this step" in err
    steps = [r["step"] for r in metrics(d) if "train/loss" in r]
    saved = sorted(p.name for p in (d / "ckpt").glob("*step_*"))
    assert 1 <= steps[-1] < 50 and saved == [f"step_{steps[-1]:06d}"]  # the last step done, saved
    assert f"<td>{steps[-1]} (interrupted)</td>" in (d / "report.html").read_text()  # (its page: stopped early)


@pytest.mark.parametrize("family", ["gemma3", "phi3", "olmo2", "granite", "qwen3-moe"])
def test_a_local_model_of_another_family_trains_on_the_engine(tmp_path, family, capsys):
    """A saved HF directory of a family outside Qwen/Llama (tiny, random) runs a GRPO step with the execrl engine
    generating (fused projections, its own layer order) and the trainer's logprobs from the HF forward."""
    from ..rollout.test_architectures import save_family

    directory = save_family(family, tmp_path / family)
    trained, d = run(tmp_path, "run", f"policy.model_name={directory}", "grpo.max_num_steps=1",
                     "warmup.sft_steps=0", "policy.generation.max_new_tokens=16")
    kind = {"gemma3": "gemma3_text", "qwen3-moe": "qwen3_moe"}.get(family, family)
    assert trained.step == 1 and trained.model.config.model_type == kind
    assert metrics(d)[0]["train/logprob_mismatch"] < 1e-4  # the engine's logprobs are the trainer's (fp32)
    assert f"rollouts: the execrl engine, {kind} (" in capsys.readouterr().err


def test_a_mixture_of_experts_says_its_router_loss_is_left_out(tmp_path, capsys):
    from ..rollout.test_architectures import save_family

    directory = save_family("qwen3-moe", tmp_path / "moe", output_router_logits=True)
    run(tmp_path, "run", f"policy.model_name={directory}", "grpo.max_num_steps=1", "warmup.sft_steps=0",
        "policy.generation.max_new_tokens=8")
    assert "router load-balancing loss (output_router_logits, router_aux_loss_coef=0.001) is not added" in \
        capsys.readouterr().err


def test_a_family_without_a_file_trains_on_the_generic_path(tmp_path, capsys):
    """GPT-NeoX has no file in rollout/models/: the engine runs transformers' own layers over its cache, and the
    start-up line says so; the sampler's logprobs are the trainer's."""
    from transformers import AutoModelForCausalLM

    from execrl.models import build_tokenizer
    from execrl.tasks.arith import corpus

    from ..rollout.test_architectures import GENERIC

    tok = build_tokenizer(corpus(), vocab_size=384)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(GENERIC["gpt_neox"](len(tok))).save_pretrained(tmp_path / "neox")
    tok.save_pretrained(tmp_path / "neox")
    trained, d = run(tmp_path, "run", f"policy.model_name={tmp_path / 'neox'}", "grpo.max_num_steps=1",
                     "warmup.sft_steps=0", "policy.generation.max_new_tokens=16")
    assert trained.step == 1 and metrics(d)[0]["train/logprob_mismatch"] < 1e-4
    assert "rollouts: the execrl engine's generic path, gpt_neox" in capsys.readouterr().err


@pytest.fixture
def fused_on_cpu(monkeypatch):
    """torch's fused AdamW on CPU weights (as on a GPU): the optimizer a deferred step needs (step.deferrable)."""
    monkeypatch.setattr("execrl.trainer.optim.fused_kernel", lambda cls, params: True)


def test_a_deferred_optimizer_step_trains_and_logs_what_a_waited_one_does(tmp_path, monkeypatch, fused_on_cpu):
    import execrl.trainer.loop as loop

    real, deferred = loop.launch_step, []

    def launch(run, rollouts, defer=False):
        deferred.append(defer)
        for i, reward in enumerate(rollouts.rewards):  # rewards that are not flat: a gradient to apply
            reward.total = float(i % 3)
        return real(run, rollouts, defer)

    monkeypatch.setattr(loop, "launch_step", launch)
    args = ("grpo.max_num_steps=5", "grpo.val_period=4", "checkpointing.save_period=4", "policy.train_global_batch_size=16",
            "policy.optimizer.kwargs.lr=1e-3")
    left, d1 = run(tmp_path, "deferred", *args)
    # not the first step (the start-up line times it), nor one a validation, a checkpoint or the end follows
    assert deferred == [False, True, True, False, False]
    monkeypatch.setattr(loop, "deferrable", lambda *a: False)
    waited, d2 = run(tmp_path, "waited", *args)
    assert deferred[5:] == [False] * 5
    # the same numbers: the train phases' exactly up to step 4 (a second run in one process may round step 4's
    # update otherwise in the last bit, deferred or not), the weights to fp32 rounding
    trained, same = ([m for m in metrics(d) if "train/loss" in m] for d in (d1, d2))
    assert [m["step"] for m in trained] == [1, 2, 3, 4, 5]
    # (on a CPU nothing is graded while generation runs; the share is a time/ metric, not a train/ one)
    assert all(m["time/answered_while_generating_frac"] == 0.0 and "train/answered_while_generating_frac" not in m
               for m in trained)
    assert [{k: v for k, v in m.items() if k.startswith("train/")} for m in trained[:4]] == [
        {k: v for k, v in m.items() if k.startswith("train/")} for m in same[:4]]
    a, b = left.model.state_dict(), waited.model.state_dict()
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a)
    assert all(m["train/lr"] == 1e-3 and m["time/train"] > 0 for m in trained)
    assert any(m["train/flat_group_frac"] < 1 and m["train/grad_norm"] > 0 for m in trained[1:3])  # (deferred, learning)


def test_a_deferred_nan_step_is_skipped_on_the_device(tmp_path, monkeypatch, fused_on_cpu):
    import execrl.trainer.step as step

    real, seen = step.policy_loss, {}

    def nan_loss(*args, **kwargs):
        loss, m = real(*args, **kwargs)
        return loss * float("nan"), m

    def watch(weights, optimizer, *args, **kwargs):
        seen.setdefault("before", {k: v.clone() for k, v in weights.master.state_dict().items()})
        seen["model"], seen["defer"] = weights.master, [*seen.get("defer", []), args[-1]]
        return real_optimize(weights, optimizer, *args, **kwargs)

    real_optimize = step.optimize
    monkeypatch.setattr(step, "policy_loss", nan_loss)
    monkeypatch.setattr("execrl.trainer.loop.optimize", watch)
    with pytest.raises(RuntimeError, match="3 steps in a row had a NaN/inf loss"):
        run(tmp_path, "nan", "grpo.max_num_steps=6", "checkpointing.enabled=false", "grpo.val_period=0",
            "warmup.sft_steps=0", "policy.train_global_batch_size=16")
    assert seen["defer"][:3] == [False, True, True]  # the kernel skipped steps 2 and 3, not a host check
    after = seen["model"].state_dict()
    assert all(torch.equal(seen["before"][k], after[k]) for k in after)


def test_ctrl_c_within_a_train_phase_saves_no_half_updated_step(tmp_path, monkeypatch, capsys):
    """A second Ctrl-C after step 3's first of its two optimizer steps: the weights are neither step 2's nor step
    3's, so no checkpoint is written under step 2 (one was, with step 3's first update in it, and the resumed run
    trained step 3 again on top of it)."""
    import execrl.trainer.loop as loop

    real, calls = loop.optimize, []

    def optimize(weights, optimizer, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # step 2's train phase
            real_step = optimizer.step

            def step_then_stop(*a, **k):
                real_step(*a, **k)
                raise KeyboardInterrupt
            optimizer.step = step_then_stop
        return real(weights, optimizer, *args, **kwargs)

    monkeypatch.setattr(loop, "optimize", optimize)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "half", "grpo.max_num_steps=5", "grpo.val_period=0", "checkpointing.save_period=10",
            "warmup.sft_steps=0", "policy.train_global_batch_size=16")
    assert not list((tmp_path / "half" / "ckpt").glob("step_*"))
    said = capsys.readouterr()
    assert "not saved (its weights are partly updated)" in " ".join((said.out + said.err).split())
    assert metrics(tmp_path / "half")[-1] == {"step": 2, "run/interrupted": 1.0}  # (a hunt's find: a second Ctrl-C
    # left no mark, and the record read as a run that ended at step 2)


def test_a_full_log_disk_stops_the_run_with_a_checkpoint_and_no_half_row(tmp_path, monkeypatch, capsys):
    """(A hunt's find) logger.log_dir's disk full at step 3: three chained tracebacks, metrics.jsonl ending in half a
    row, and the steps since the last checkpoint lost. Now one error naming the directory, the steps done saved
    (the checkpoints' disk had room), and the file's rows whole."""
    import errno

    from execrl.trainer.metrics import LogUnwritable, MetricsLogger

    class FullDisk:  # metrics.jsonl once its disk is full: part of a row reaches it, then the write fails
        def __init__(self, f):
            self.f, self.name = f, f.name

        def write(self, text):
            self.f.write(text[:12])
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    real = MetricsLogger.log

    def log(self, step, values):
        if step == 3 and "train/reward_mean" in values and not isinstance(self.jsonl, FullDisk):
            self.jsonl = FullDisk(self.jsonl)
        return real(self, step, values)

    monkeypatch.setattr(MetricsLogger, "log", log)
    args = ["grpo.val_period=0", "checkpointing.save_period=10", "warmup.sft_steps=0", "logger.rollouts_period=1"]
    with pytest.raises(LogUnwritable, match="logger.log_dir .*No space left on device .*metrics.jsonl.*step_000003, "
                                            "is intact"):
        run(tmp_path, "full", "grpo.max_num_steps=5", *args)
    said = " ".join(capsys.readouterr().err.split())  # (not the Ctrl-C path's "interrupted", a review's find)
    assert "stopping: the log cannot be written: saving a checkpoint" in said and "interrupted" not in said
    assert [p.name for p in (tmp_path / "full" / "ckpt").glob("step_*")] == ["step_000003"]
    assert [row["step"] for row in metrics(tmp_path / "full")][-1] == 2  # (whole rows only)
    # (a hunt's find) step 3's row and samples, which the full disk refused, were lost for good with the step
    # checkpointed: kept in its checkpoint, they are written as the run resumes
    monkeypatch.setattr(MetricsLogger, "log", real)
    run(tmp_path, "full", "grpo.max_num_steps=4", *args)
    assert [row["step"] for row in metrics(tmp_path / "full")] == [1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "full" / "rollouts").glob("step_*")) == [
        f"step_00000{i}.jsonl" for i in (1, 2, 3, 4)]
    assert "the records of step 3 that a full disk held back" in " ".join(capsys.readouterr().err.split())


def test_a_rollouts_file_the_disk_refuses_is_named_and_kept(tmp_path, monkeypatch):
    """(A hunt's find) a rollouts file that a full disk refused was named metrics.jsonl in the error (the write gave
    no file name), and its samples were lost: the error names it, and the samples wait for the checkpoint."""
    import errno

    from execrl.config import load_config
    from execrl.trainer import metrics as metrics_module
    from execrl.trainer.metrics import LogUnwritable, MetricsLogger

    logger = MetricsLogger(load_config(None, [f"logger.log_dir={tmp_path}", "logger.tensorboard_enabled=false"]))
    logger.start(0)

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(metrics_module, "write_whole", full)
    with pytest.raises(LogUnwritable, match="rollouts/step_000004.jsonl"):
        logger.rollouts(4, [{"completion": "x"}])
    assert logger.unwritten == [{"step": 4, "rollouts": [{"completion": "x"}]}]
    monkeypatch.undo()
    assert logger.written_late(logger.unwritten) == [4]
    assert (tmp_path / "rollouts" / "step_000004.jsonl").read_text() == '{"completion": "x"}\n'
    # (a review's finds) a late row written once however often the run resumes from that checkpoint, and a late
    # validation row counts as the step's validation (it was run and written a second time)
    late = [{"step": 4, "metrics": {"train/reward_mean": 0.5, "eval/pass@1": 0.25}}]
    for _ in range(2):
        again = MetricsLogger(load_config(None, [f"logger.log_dir={tmp_path}", "logger.tensorboard_enabled=false"]))
        again.start(4)
        again.written_late(late)
        assert again.validated == {4}
        again.close()
    rows = [line for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line]
    assert rows == ['{"step": 4, "train/reward_mean": 0.5, "eval/pass@1": 0.25}']


def test_a_stop_in_the_warm_up_says_nothing_was_saved(tmp_path):
    """(A hunt's find) SIGTERM during the warm-up ended the run with 130 and not a word."""
    import signal
    import subprocess
    import sys
    import time

    d = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "execrl.cli", "train", *SMALL, "warmup.sft_steps=100000",
                             f"logger.log_dir={d}", f"checkpointing.checkpoint_dir={d}/ckpt"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (d / "config.yaml").exists():
        time.sleep(0.2)
    time.sleep(3)  # (into the warm-up's steps)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "interrupted before the first step: nothing to save" in err, err[-2000:]
    assert not list((d / "ckpt").glob("step_*"))


def test_ctrl_c_after_a_deferred_step_logs_it_and_checkpoints_it_whole(tmp_path, monkeypatch, fused_on_cpu):
    import execrl.trainer.loop as loop
    from execrl.trainer.pipeline import RolloutPipeline

    real_next, real_save, seen = RolloutPipeline.next, loop.save_on_interrupt, {}

    def next_(self, step, *args, **kwargs):  # the second Ctrl-C lands in step 3's generation
        if step == 2:
            raise KeyboardInterrupt
        return real_next(self, step, *args, **kwargs)

    def save(run):
        seen.update(step=run.step, scheduler=run.scheduler.last_epoch, left=run.left)
        real_save(run)

    monkeypatch.setattr(RolloutPipeline, "next", next_)
    monkeypatch.setattr(loop, "save_on_interrupt", save)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "stopped", "grpo.max_num_steps=5", "grpo.val_period=0", "checkpointing.save_period=10",
            "warmup.sft_steps=0", "policy.train_global_batch_size=16")
    d = tmp_path / "stopped"
    # step 2 ran on (deferred): its line is written and its scheduler step taken before the checkpoint of step 2
    assert [m["step"] for m in metrics(d) if "train/loss" in m] == [1, 2]
    assert seen == {"step": 2, "scheduler": 2, "left": None}
    assert (d / "ckpt" / "step_000002").is_dir()


def test_a_torn_last_metrics_line_does_not_stop_a_resume(tmp_path, capsys):
    """metrics.jsonl whose last line a crash cut short: the resumed run leaves that line out, says so, and goes on
    (it stopped with 'Unterminated string', naming no file)."""
    from execrl.trainer.metrics import MetricsLogger

    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"step": 1, "train/loss": 0.5}\n{"step": 2, "train/loss": 0.4}\n{"step": 3, "tr')
    logger = MetricsLogger(load_config(None, [f"logger.log_dir={d}", "logger.tensorboard_enabled=false"]))
    logger.start(2)
    logger.close()
    assert metrics(d) == [{"step": 1, "train/loss": 0.5}, {"step": 2, "train/loss": 0.4}]
    said = capsys.readouterr()
    assert "line 3: not a whole record" in said.err


def test_a_resumed_runs_records_drop_the_stop_marker_the_restart_s_step_0_and_non_finite_values(tmp_path):
    """Hunt's finds: a run stopped by a signal and resumed to its end still read "(interrupted)" (its marker row was
    kept); a run started again from the beginning showed TensorBoard's step 0 twice (purge_step 1); a NaN entropy made
    a metrics.jsonl line that JSON readers other than Python's refuse."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from execrl.trainer.metrics import INTERRUPTED, MetricsLogger

    d = tmp_path / "run"
    (d / "metrics.jsonl").parent.mkdir()
    (d / "metrics.jsonl").write_text(f'{{"step": 1, "train/loss": 0.5}}\n{{"step": 1, "{INTERRUPTED}": 1.0}}\n')
    logger = MetricsLogger(load_config(None, [f"logger.log_dir={d}", "logger.tensorboard_enabled=false"]))
    assert logger.start(1) == 0  # (no row of a step done again: the run says none was removed)
    logger.log(2, {"train/loss": 0.4, "train/entropy": float("nan"), "train/kl": float("inf")})
    logger.close()
    lines = (d / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1, "train/loss": 0.5}, {"step": 2, "train/loss": 0.4}]
    for _ in range(2):  # a run from the beginning, twice in one directory
        logger = MetricsLogger(load_config(None, [f"logger.log_dir={d}", "logger.tensorboard_enabled=true"]))
        logger.start(0)
        logger.log(0, {"eval/pass@1": 0.375})
        logger.close()
    events = EventAccumulator(str(d / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval/pass@1")] == [(0, 0.375)]


def test_a_sample_cut_where_the_context_ends_is_overlong(tmp_path):
    """overlong_penalty with max_tokens null (the generation limit) read every sample as drawn under
    policy.generation.max_new_tokens: where the context ends first (max_new_tokens = max_total_sequence_length, as
    grpo_math_1B.yaml and NeMo RL's math configs), a sample cut there was short of that limit and went unpenalized."""
    _, d = run(tmp_path, "cut", "warmup.sft_steps=0", "grpo.max_num_steps=1", "policy.generation.max_new_tokens=192",
               "policy.max_total_sequence_length=192", "logger.rollouts_period=1", "checkpointing.enabled=false",
               "reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, buffer_tokens: 16}]")
    rows = [json.loads(line) for line in (d / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    cut = [r for r in rows if r["truncated"]]
    assert cut and all(r["parts"]["overlong_penalty"] == -1.0 for r in cut), rows[0]
    # a whole answer is measured against max_new_tokens, never against the room its prompt left
    assert all(r["parts"]["overlong_penalty"] == 0.0 for r in rows if not r["truncated"])


def test_a_restart_deletes_the_rollouts_of_the_steps_it_does_again(tmp_path):
    """A run started again in its log directory (or resumed from an earlier checkpoint) cut metrics.jsonl back, but
    the earlier run's rollouts of later steps stayed, and its report showed them as the new run's."""
    from execrl.trainer.metrics import MetricsLogger

    d = tmp_path / "run"
    (d / "rollouts").mkdir(parents=True)
    for step in (1, 2, 3):
        (d / "rollouts" / f"step_{step:06d}.jsonl").write_text("{}\n")
    (d / "rollouts" / "step_notes.jsonl").write_text("{}\n")  # (not a step's: kept)
    for resumed_after, left in ((2, ["step_000001", "step_000002", "step_notes"]), (0, ["step_notes"])):
        logger = MetricsLogger(load_config(None, [f"logger.log_dir={d}", "logger.tensorboard_enabled=false"]))
        logger.start(resumed_after)
        logger.close()
        assert sorted(f.stem for f in (d / "rollouts").iterdir()) == left


def test_brackets_in_a_run_path_print_as_written(tmp_path, capsys):
    """The trainer's lines read paths as rich markup: a checkpoint_dir holding "[/x]" ended the run with a
    MarkupError after its first checkpoint was written, and one of a sweep, runs/sweep[lr=1e-5], printed as runs/sweep.
    A line's leading style tag still styles it."""
    from execrl.console import stderr_console

    r, _ = run(tmp_path, "sweep[lr=1e-5][/x]", "grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.val_period=0")
    said = capsys.readouterr().err.replace("\n", "")
    assert r.step == 1 and f"checkpoint: {tmp_path / 'sweep[lr=1e-5][/x]'}" in said, said[-2000:]
    console = stderr_console(force_terminal=True, color_system="standard")
    with console.capture() as shown:
        console.print("[yellow]warning: runs/a[/x] [bold]b[/]")
    assert shown.get().startswith("\x1b[33mwarning") and re.sub("\x1b\\[[0-9;]*m", "", shown.get()).strip() == \
        "warning: runs/a[/x] [bold]b"


def test_the_same_command_on_a_finished_run_warns_nothing_again(tmp_path, capsys):
    """Run again at its last step, a run said 'nothing to do' and then repeated the warnings of steps it did not run
    (every group flat, samples cut)."""
    args = ("grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.val_period=0", "policy.generation.max_new_tokens=4")
    run(tmp_path, "done", *args)
    first = capsys.readouterr().err.replace("\n", " ")
    assert "nothing was learned" in first and "were cut before they ended" in first, first[-3000:]
    written = (tmp_path / "done" / "config.yaml").read_text()
    run(tmp_path, "done", *args)
    again = capsys.readouterr().err.replace("\n", " ")
    assert "nothing to do" in again and "nothing was learned" not in again and "warning" not in again, again[-3000:]
    # a change a resume allows, with no step to run: config.yaml stays the config of the step that ran
    run(tmp_path, "done", *args, "env.code.num_workers=1")
    assert (tmp_path / "done" / "config.yaml").read_text() == written
    assert not list((tmp_path / "done").glob("config.to_step_*.yaml"))


def test_an_advantage_in_the_thousands_is_said_once_and_logged(capsys):
    """Leave-one-out with normalized rewards divides a sample's advantage by the std of the others, near 0 where
    they are almost equal (one wrong answer a token into overlong_penalty's buffer): 15,616 in a group of 16, as
    NeMo RL's code gives too, with nothing said. train/adv_abs_max logs it; the first step past 100 says why."""
    from types import SimpleNamespace

    from execrl.algo.advantages import grpo
    from execrl.algo.role_baselines import RoleBaselines
    from execrl.trainer.loop import checked

    rewards = torch.tensor([[1.0] + [0.0] * 14 + [-1 / 4096]])
    adv = grpo(rewards, torch.ones_like(rewards, dtype=torch.bool))
    assert adv.abs().max() > 10_000
    from execrl.config import load_config

    run = SimpleNamespace(nan_streak=0, flat_streak=0, adv_warned=False, baselines=RoleBaselines(),
                          cfg=load_config(None, []))
    for step in (1, 2):
        stats = checked(run, step, {"skipped_steps": 0}, 1.0, 0, 1, 1e-6, 0, adv.abs().max().item())
        assert stats["adv_abs_max"] > 10_000
    said = "".join(capsys.readouterr()).replace("\n", " ")
    assert said.count("train/adv_abs_max") == 1 and "grpo.advantage_clip_low=-5" in said, said
    # (a hunt's find) dr_grpo divides by no std: its large advantages are the rewards' scale, not leave-one-out's
    run.adv_warned, run.cfg = False, load_config(None, ["grpo.advantage=dr_grpo"])
    checked(run, 1, {"skipped_steps": 0}, 1.0, 0, 1, 1e-6, 0, 750_000.0)
    said = "".join(capsys.readouterr()).replace("\n", " ")
    assert "use_leave_one_out_baseline" not in said and "undivided (grpo.advantage=dr_grpo)" in said, said


def test_max_val_samples_0_says_validation_is_off(tmp_path, capsys):
    """(A careless user's find) grpo.max_val_samples=0 with validation asked for validated nothing without a word (a
    user may read 0 as "no limit")."""
    run(tmp_path, "noval", "grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.max_val_samples=0", "grpo.val_period=1")
    assert "validation: no problem to validate on (grpo.max_val_samples=0 takes none)" in capsys.readouterr().err


def test_a_resume_past_the_end_of_its_schedule_is_refused(tmp_path):
    """(A hunt's find) A LinearLR decayed to 0 at the run's end; the same command with more steps resumed and trained
    every new step at learning rate 0 (its checkpoints' weights equal), with no word: the start-up check looks at the
    run's whole schedule, where the dead steps were a small share."""
    from execrl.config import ConfigError

    schedule = ("policy.scheduler={name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 1.0, end_factor: "
                "0.0, total_iters: 2}}")
    small = [schedule, "warmup.sft_steps=0", "grpo.val_period=0", "checkpointing.save_period=2"]
    run(tmp_path, "lr", "grpo.max_num_steps=2", *small)
    with pytest.raises(ConfigError, match=r"every step this resumed run takes \(GRPO steps 3-4 of "):
        run(tmp_path, "lr", "grpo.max_num_steps=4", *small)
    from execrl.config.checks import check_schedule_left  # (a review's find: the same run, stopped in its schedule's

    cosine = load_config(None, ["grpo.max_num_steps=100", "policy.scheduler={name: torch.optim.lr_scheduler."  # tail,
                                "CosineAnnealingLR, kwargs: {T_max: 100, eta_min: 0.0}}"])  # resumes)
    check_schedule_left(cosine, 95, 100)


def test_a_step_without_a_loss_token_records_no_token_means(tmp_path):
    """Every sample cut at the length limit and overlong-filtered: no token is in the loss, and the step recorded
    entropy 0 (a certain policy), is_weight 0 (it is 1 on-policy), KL and clip fractions 0 as measured (a hunt's
    find). Token means are left out where there is no token; the loss and the gradient's norm are 0 indeed."""
    _, d = run(tmp_path, "empty", "grpo.max_num_steps=1", "policy.generation.max_new_tokens=6", "grpo.val_period=0",
               "warmup.sft_steps=0",  # (a random model's answers: none ends within 6 tokens)
               "grpo.overlong_filtering=true", "checkpointing.enabled=false", "loss_fn.reference_policy_kl_penalty=0.01")
    (row,) = [m for m in metrics(d) if "train/loss" in m]
    assert row["train/truncated_frac"] == 1.0 and row["train/loss"] == 0.0 and row["train/grad_norm"] == 0.0
    assert not {"train/entropy", "train/kl", "train/clip_frac", "train/is_weight", "train/logprob_mismatch"} & set(row)
    _, d = run(tmp_path, "full", "grpo.max_num_steps=1", "policy.generation.max_new_tokens=6", "grpo.val_period=0",
               "warmup.sft_steps=0", "checkpointing.enabled=false")  # (the same cut samples, in the loss: measured)
    (row,) = [m for m in metrics(d) if "train/loss" in m]
    assert row["train/entropy"] > 0 and row["train/is_weight"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("does, said", [
    ("raise ValueError('cannot read this sample')", r"raised ValueError: cannot read this sample \(\S+mine.py:\d+ in "
                                                    r"flaky\)"),
    ("sys.exit(3)", r"called sys.exit\(3\) \(\S+mine.py:\d+ in flaky\), which would end the run without a word")])
def test_an_own_reward_that_fails_mid_run_is_named_and_the_steps_done_are_saved(tmp_path, capsys, does, said):
    """(A hunt's find) A reward component of one's own that raised at step 3 stopped the run with its bare message
    (neither the component nor the problem named) and lost the steps since the last checkpoint; one that called
    sys.exit ended the run without a word. Now one line names the component, the problem and where it failed, and
    the steps done are checkpointed for the same command to resume from."""
    from execrl.plugins import OwnCodeFailed

    (tmp_path / "mine.py").write_text("import sys\nCALLS = [0]\n\n\ndef flaky(sample):\n    CALLS[0] += 1\n"
                                      f"    if CALLS[0] > 32:\n        {does}\n    return 1.0\n")
    component = f"{{name: '{tmp_path / 'mine.py'}:flaky', weight: 0.1}}"
    with pytest.raises(OwnCodeFailed, match=rf"reward component \S+mine.py:flaky on problem \S+ {said}: fix the "
                                            r"component. The last checkpoint, \S+step_000002, is intact"):
        run(tmp_path, "own", "grpo.max_num_steps=5", "checkpointing.save_period=10", "warmup.sft_steps=0",
            "grpo.val_period=0", f"reward.components=[{{name: test_pass_fraction, weight: 1.0}}, {component}]")
    assert "stopping: the run's own code failed: saving a checkpoint" in " ".join(capsys.readouterr().err.split())
    assert [p.name for p in (tmp_path / "own" / "ckpt").glob("step_*")] == ["step_000002"]


def test_token_means_are_over_the_optimizer_steps_with_loss_tokens():
    """Two optimizer steps of one rollout, the second without a loss token (its samples all cut and overlong-
    filtered): the step's entropy, KL and clip fractions are the first step's own, not halved by the empty one; the
    loss and the gradient's norm are the mean over both steps applied (each had its own, 0 for the empty one)."""
    from execrl.trainer.step import summed

    stats = {"loss": 0.5 + 0.0, "grad_norm": 2.0 + 0.0, "entropy": 1.2, "kl": 0.04, "clip_frac": 0.1,
             "skipped_steps": 0, "applied_steps": 2, "token_steps": 1}
    done = summed(stats, ("kl", "clip_frac"))
    assert done == {"loss": 0.25, "grad_norm": 1.0, "entropy": 1.2, "kl": 0.04, "clip_frac": 0.1, "skipped_steps": 0}
