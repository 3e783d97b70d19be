"""Training and evaluating with a reward model on CPU: the reward model's score reaches the loss through the reward
(its component in every breakdown, its mean in validation), sync and async, and `execrl eval --reward-model`."""

import json
import subprocess
import sys

import pytest
import torch

from execrl.rewards.reward_model import RewardModel
from tests.rewards.test_reward_model import rm_dir  # noqa: F401  (the fixture)
from tests.trainer.test_train import metrics, run


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_reward_model_scores_every_episode_and_its_mean_is_validated(tmp_path, rm_dir, mode):  # noqa: F811
    extra = ["grpo.async_grpo.enabled=true"] if mode == "async" else []
    r, d = run(tmp_path, mode, "grpo.max_num_steps=2", "env.reward_model.enabled=true",
               f"env.reward_model.model_name={rm_dir}", "env.reward_model.batch_size=5", "logger.rollouts_period=1",
               "reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.5}]", *extra)
    assert isinstance(r.judge, RewardModel)
    rows = metrics(d)
    train = [m for m in rows if "train/reward_mean" in m]
    evals = [m for m in rows if "eval/pass@1" in m]
    assert len(train) == 2 and all("train/reward/reward_model" in m and m["time/reward_model"] > 0 for m in train)
    for m in train:  # the reward is the weighted sum of its parts
        assert m["train/reward_mean"] == pytest.approx(m["train/reward/test_pass_fraction"]
                                                       + 0.5 * m["train/reward/reward_model"], abs=1e-5)
    assert evals and all("eval/reward_model_mean" in m for m in evals)
    rollouts = [json.loads(x) for x in next((d / "rollouts").glob("*.jsonl")).read_text().splitlines()]
    conversations = [row["messages"] for row in rollouts]
    scores = r.judge(conversations)  # what the reward model says of the logged conversations
    for row, s in zip(rollouts, scores):
        assert row["parts"]["reward_model"] == pytest.approx(s, abs=1e-5)
        assert row["reward"] == pytest.approx(row["parts"]["test_pass_fraction"] + 0.5 * s, abs=1e-5)


def test_eval_reports_the_reward_models_mean_score(tmp_path, rm_dir):  # noqa: F811
    rows = [{"id": "a", "completion": "```python\nprint(int(input()) + 1)\n```", "tests": {"inputs": ["1\n"], "outputs": ["2\n"]}},
            {"id": "b", "completion": r"so \boxed{7}", "answer": "7"}]
    path = tmp_path / "own.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "eval", "--completions", str(path), "--dataset", "",
                           "--reward-model", str(rm_dir), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "reward model mean score" in proc.stdout
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    results = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    scores = [s for r in results for s in r["reward_model_scores"]]
    assert len(scores) == 2 and summary["reward_model_mean"] == pytest.approx(sum(scores) / 2)
    assert summary["pass@1"] == 1.0


def test_a_resume_takes_a_new_batch_size_and_refuses_a_replaced_reward_model_and_eval_reads_it_as_the_run(
        tmp_path, rm_dir):  # noqa: F811
    """A hunt's finds: the out-of-memory advice's env.reward_model.batch_size was refused at the resume; a reward
    model retrained in place kept its name and the run trained on toward another reward, without a word; and
    `execrl eval --reward-model` read the run's reward model without the run's settings (max_model_len here), and a
    reward model it could not load failed after sampling and grading, the eval lost."""
    import shutil

    from transformers import AutoModelForSequenceClassification

    own = tmp_path / "rm"
    shutil.copytree(rm_dir, own)
    rm = ["env.reward_model.enabled=true", f"env.reward_model.model_name={own}", "env.reward_model.max_model_len=512",
          "reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.5}]"]
    run(tmp_path, "r", "grpo.max_num_steps=1", *rm)
    r, _ = run(tmp_path, "r", "grpo.max_num_steps=2", *rm, "env.reward_model.batch_size=3")
    assert r.step == 2 and r.judge.batch_size == 3
    model = AutoModelForSequenceClassification.from_pretrained(own)
    with torch.no_grad():
        model.score.weight.mul_(-1)
    model.save_pretrained(own)
    with pytest.raises(ValueError, match="reward model .*differ from those this run was rewarded by"):
        run(tmp_path, "r", "grpo.max_num_steps=3", *rm)
    policy = tmp_path / "r" / "ckpt" / "step_000002" / "policy"
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "eval", "--model", str(policy), "--dataset",
                           "builtin:arith-code", "--split", "validation", "--limit", "2", "--max-new-tokens", "8",
                           "--reward-model", str(own), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "its env.reward_model's max_model_len" in proc.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["reward_model_settings"] == {"max_model_len": 512}
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "eval", "--model", str(policy), "--dataset",
                           "builtin:arith-code", "--split", "validation", "--limit", "2", "--max-new-tokens", "8",
                           "--reward-model", str(policy), "--out", str(tmp_path / "o2")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "not a sequence classifier" in proc.stderr and "sampled" not in proc.stderr
