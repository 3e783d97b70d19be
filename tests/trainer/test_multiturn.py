"""Multi-turn GRPO end to end on CPU, with the real engine and sandbox: the unit-test feedback environment on the
built-in task (after a short warm-up many first answers fail the public test or hold no code, so episodes take a
second turn), and the shipped MBPP interpreter config. The batch the trainer builds holds exactly the sampled
tokens at its loss mask; metrics.jsonl has the episode metrics; rollout rows show whole episodes."""

import json
from pathlib import Path

import pytest

from execrl.config import load_config
from execrl.trainer.loop import train

from .test_train import SMALL, metrics

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_a_unit_test_feedback_run_trains_with_masks_on_the_model_tokens_only(tmp_path, monkeypatch):
    import execrl.trainer.loop as loop

    seen = []

    def build_batch(rollouts, *args):  # the real one, watched
        batch = real(rollouts, *args)
        seen.append((rollouts, batch))
        return batch

    real = loop.build_batch
    monkeypatch.setattr(loop, "build_batch", build_batch)
    cfg = load_config(None, [*SMALL, f"logger.log_dir={tmp_path}", f"checkpointing.checkpoint_dir={tmp_path}/ckpt",
                             "grpo.max_num_steps=2", "grpo.max_rollout_turns=2", "env.multi_turn.kind=unit_tests",
                             "env.multi_turn.observation_role=user", "policy.max_total_sequence_length=384",
                             "logger.rollouts_period=1", "checkpointing.enabled=false", "grpo.val_period=0",
                             "policy.generation.max_new_tokens=48"])
    run = train(cfg)
    assert run.step == 2
    rows = [m for m in metrics(tmp_path) if "train/loss" in m]
    for m in rows:
        assert 1.0 <= m["train/turns_mean"] <= 2.0 and m["train/tool_calls_mean"] >= m["train/tool_errors_mean"]
        turns = [int(k.rsplit("/", 1)[1]) for k in m if k.startswith("train/reward_by_turns/")]
        assert turns and set(turns) <= {1, 2} and 0.0 <= m["train/truncated_frac"] <= 1.0
    assert any(m["train/turns_mean"] > 1.0 for m in rows)  # some first programs failed and were tried again
    two_turns = 0
    for rollouts, batch in seen:
        for i, (e, t) in enumerate(zip(rollouts.episodes, rollouts.trajectories)):
            at = batch.loss_mask[i] > 0
            assert batch.input_ids[i, :len(t)].tolist() == t.ids
            assert batch.input_ids[i, 1:][at].tolist() == t.sampled_ids  # the model's tokens, and only those
            if e.turns == 2:
                two_turns += 1
                env_text = run.tokenizer.decode(t.segments[1].ids)  # the failing public test, or "no code"
                assert ("tests failed" in env_text or "No code found" in env_text) and not t.segments[1].sampled
                assert env_text.endswith("<|im_start|>assistant\n")
                assert batch.loss_mask[i].sum() == t.num_sampled == len(t.segments[0].ids) + len(t.segments[2].ids)
    assert two_turns
    for m, (rollouts, _) in zip(rows, seen):  # episodes whose feedback did not fit end early: counted, not silent
        cut = [e for e in rollouts.episodes if e.answer_cut]
        assert all(e.turns == 1 and e.trajectory.truncated and e.cut_by == "answer" for e in cut)
        assert m["train/answer_cut_frac"] == pytest.approx(len(cut) / len(rollouts.episodes))
        for e in rollouts.episodes:  # (a long-context hunt's find: the report named max_new_tokens for every cut)
            assert (e.cut_by is not None) == e.trajectory.truncated and (e.cut_by == "answer") == e.answer_cut
    written = [json.loads(line) for f in (tmp_path / "rollouts").glob("*.jsonl")
               for line in f.read_text().splitlines()]
    assert {r.get("cut_by") for r in written if r["truncated"]} <= {"answer", "context", "max_new_tokens"}
    assert all("cut_by" not in r for r in written if not r["truncated"])
    episode = next(json.loads(line) for line in (tmp_path / "rollouts" / "step_000002.jsonl").read_text().splitlines()
                   if json.loads(line)["turns"] == 2)  # a whole episode: both turns and the feedback between them
    assert [m["role"] for m in episode["messages"]] == ["user", "assistant", "user", "assistant"]
    assert episode["messages"][2]["content"] in episode["completion"]


def test_the_mbpp_interpreter_config_runs(tmp_path):
    from ..conftest import shared_data

    shared_data("mbpp")
    cfg = load_config(str(CONFIGS / "grpo_mbpp_multiturn_cpu.yaml"),
                      [f"logger.log_dir={tmp_path}", "checkpointing.enabled=false", "grpo.max_num_steps=1",
                       "logger.tensorboard_enabled=false", "env.code.num_workers=2"])
    assert train(cfg).step == 1
    (m,) = metrics(tmp_path)
    assert m["train/turns_mean"] >= 1.0 and "train/tool_errors_mean" in m and "train/reward_by_turns/1" in m


def test_a_turn_budget_needs_a_multi_turn_environment(tmp_path):
    cfg = load_config(None, [*SMALL, f"logger.log_dir={tmp_path}", "grpo.max_rollout_turns=3"])
    with pytest.raises(ValueError, match="env.multi_turn.kind=interpreter or unit_tests"):
        train(cfg)


def test_async_multi_turn_runs_earlier_turns_ahead_and_grades_the_last_in_the_background(tmp_path):
    cfg = load_config(None, [*SMALL, f"logger.log_dir={tmp_path}", "checkpointing.enabled=false", "grpo.val_period=0",
                             "grpo.max_num_steps=3", "grpo.max_rollout_turns=2", "env.multi_turn.kind=unit_tests",
                             "env.multi_turn.observation_role=user", "policy.max_total_sequence_length=384",
                             "policy.generation.max_new_tokens=48", "grpo.async_grpo.enabled=true"])
    assert train(cfg).step == 3
    rows = metrics(tmp_path)
    assert [m["train/trajectory_age_mean"] for m in rows] == [0.0, 1.0, 1.0]
    assert all(1.0 <= m["train/turns_mean"] <= 2.0 and m["time/grade"] > 0 for m in rows)
    assert any(m["train/turns_mean"] > 1.0 for m in rows) and all("train/is_weight" in m for m in rows)


def test_samples_cut_short_are_warned_of_at_the_end():
    from execrl.trainer.loop import cut_warnings

    rows = [{"train/truncated_frac": t, "train/answer_cut_frac": a} for t, a in [(0.9, 0.0)] * 3 + [(0.8, 0.2)] * 5]
    tokens, answers = cut_warnings(rows)
    assert tokens.startswith("in the last steps 60% of the samples were cut before they ended")
    assert answers.startswith("12% of the episodes ended early because an environment's answer did not fit")
    assert cut_warnings([{"train/truncated_frac": 0.3}] * 4 + [{"train/truncated_frac": 0.6}]) == []  # (last 5: 0.36)
    assert cut_warnings([{"step": 1}]) == []


def test_steps_whose_every_sample_overlong_filtering_left_out_are_named():
    from execrl.trainer.loop import cut_warnings

    rows = [{"step": 1, "train/truncated_frac": 0.875}, {"step": 2, "train/truncated_frac": 1.0}]
    cut, empty = cut_warnings(rows, filtered=True)
    assert cut.endswith("grpo.overlong_filtering left them out of the loss, so these steps trained on 6% of their "
                        "samples")
    assert empty.startswith("at step 2 every sample was cut (train/truncated_frac 1.0) and grpo.overlong_filtering")
    assert len(cut_warnings(rows)) == 1  # (without the filter the cut samples are trained on)
    assert "left" not in cut_warnings(rows)[0]


def test_a_template_that_moves_the_system_prompt_is_named_at_build(tmp_path, capsys):
    """A multi-turn run with a system prompt, on a template that writes it in the last user turn (Mistral v0.3's):
    the build says where the model reads it; the same run on ChatML says nothing of it."""
    from execrl.trainer.setup import build_run

    from ..envs.test_chat import MISTRAL_V03

    for template, said in ((MISTRAL_V03, True), (None, False)):
        cfg = load_config(None, [*SMALL, f"logger.log_dir={tmp_path / str(said)}", "checkpointing.enabled=false",
                                 "grpo.max_rollout_turns=2", "env.multi_turn.kind=unit_tests",
                                 "env.multi_turn.observation_role=user", "prompt.system_prompt=Be brief."])
        cfg.policy.tokenizer.chat_template = template
        run = build_run(cfg)
        run.grader.close()
        out = capsys.readouterr()
        assert ("writes the system prompt in a conversation's last user turn" in out.out + out.err) is said


def test_a_rollout_row_names_the_limit_that_cut_it(tmp_path):
    """(A long-context hunt's find) the report labelled every cut single-turn answer "cut at max_new_tokens", where
    with max_new_tokens at or over the context (NeMo RL's idiom, configs/grpo_math_1B.yaml) the context's end cut it.
    Rows say which limit did (`cut_by`); a random model rarely ends an answer, so most are cut."""
    from .test_train import run

    for name, context, new, want in [("ctx", 96, 4096, "context"), ("new", 512, 8, "max_new_tokens")]:
        run(tmp_path, name, "grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.val_period=0",
            "logger.rollouts_period=1", f"policy.max_total_sequence_length={context}",
            f"policy.generation.max_new_tokens={new}", "checkpointing.enabled=false")
        written = (tmp_path / name / "rollouts" / "step_000001.jsonl").read_text()
        rows = [json.loads(line) for line in written.splitlines()]
        cut = [r for r in rows if r["truncated"]]
        assert cut and {r["cut_by"] for r in cut} == {want}, (name, [r.get("cut_by") for r in cut])
