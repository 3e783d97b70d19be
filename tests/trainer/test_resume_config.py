"""A resumed run compares its config with the checkpoint's (issue 40): what cannot apply is refused before anything
is written, what can is named, and config.yaml is always the config that ran."""

import pytest

from execrl.config import load_config
from execrl.trainer.checkpoint import config_changes
from execrl.trainer.loop import train

from .test_train import SMALL


def test_config_changes_sorts_what_applies_from_what_cannot():
    old = {"grpo": {"max_num_steps": 2, "seed": 1}, "policy": {"optimizer": {"kwargs": {"lr": 2e-4}}}}
    new = {"grpo": {"max_num_steps": 5, "seed": 1}, "policy": {"optimizer": {"kwargs": {"lr": 1e-3}}}}
    applied, refused = config_changes(old, new)
    assert applied == ["grpo.max_num_steps: 2 -> 5"] and refused == ["policy.optimizer.kwargs.lr: 0.0002 -> 0.001"]


def test_resuming_with_another_learning_rate_is_refused_and_config_yaml_is_what_ran(tmp_path):
    base = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={tmp_path}",
            f"checkpointing.checkpoint_dir={tmp_path}/ck"]
    train(load_config(None, base))
    written = (tmp_path / "config.yaml").read_text()
    with pytest.raises(ValueError, match=r"cannot apply policy.optimizer.kwargs.lr: 0.0002 -> 0.001"):
        train(load_config(None, [*base, "grpo.max_num_steps=2", "policy.optimizer.kwargs.lr=1e-3"]))
    assert (tmp_path / "config.yaml").read_text() == written  # nothing that did not run is recorded
    resumed = train(load_config(None, [*base, "grpo.max_num_steps=2"]))  # how long it runs: applies
    assert resumed.step == 2 and "max_num_steps: 2" in (tmp_path / "config.yaml").read_text()
