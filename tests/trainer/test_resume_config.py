"""A resumed run compares its config with the checkpoint's (issue 40): what cannot apply is refused before anything
is written, what can is named, and config.yaml is always the config that ran."""

import shutil

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


def test_a_checkpoint_of_the_old_split_validation_size_default_resumes():
    """split_validation_size's default became null (0.0 before, the same for every dataset but OpenMathInstruct-2):
    every earlier checkpoint's "0.0 -> None" was refused; and gsm8k's 0.05, now not read, stays as written."""
    saved = {"data": {"train": {"dataset_name": "gsm8k", "split_validation_size": 0.0}}}
    refused = config_changes(saved, load_config(None, ["data.train.dataset_name=gsm8k"]).model_dump(mode="json"))[1]
    assert not [c for c in refused if "split_validation" in c]
    saved["data"]["train"]["split_validation_size"] = 0.05
    now = load_config(None, ["data.train.dataset_name=gsm8k", "data.train.split_validation_size=0.05"])
    assert now.data.train.split_validation_size == 0.05
    assert not [c for c in config_changes(saved, now.model_dump(mode="json"))[1] if "split_validation" in c]


def test_resuming_with_another_learning_rate_is_refused_and_config_yaml_is_what_ran(tmp_path, capsys):
    base = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={tmp_path}",
            f"checkpointing.checkpoint_dir={tmp_path}/ck"]
    from execrl.cli import main

    assert main(["train", *base, "--dry-run"]) == 0 and f"# start\nstarts at step 0 (no checkpoint in {tmp_path}/ck)" \
        in capsys.readouterr().out
    train(load_config(None, base))
    written = (tmp_path / "config.yaml").read_text()
    # --dry-run says so too (it passed a command the run refused, and said nothing of resuming: a hunt's find)
    assert main(["train", *base, "grpo.max_num_steps=2", "policy.optimizer.kwargs.lr=1e-3", "--dry-run"]) == 2
    assert "cannot apply policy.optimizer.kwargs.lr: 0.0002 -> 0.001" in capsys.readouterr().err
    assert main(["train", *base, "grpo.max_num_steps=2", "--dry-run"]) == 0
    assert f"resumes from {tmp_path}/ck/step_000001 (step 1) to grpo.max_num_steps=2" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"cannot apply policy.optimizer.kwargs.lr: 0.0002 -> 0.001"):
        train(load_config(None, [*base, "grpo.max_num_steps=2", "policy.optimizer.kwargs.lr=1e-3"]))
    assert (tmp_path / "config.yaml").read_text() == written  # nothing that did not run is recorded
    resumed = train(load_config(None, [*base, "grpo.max_num_steps=2"]))  # how long it runs: applies
    assert resumed.step == 2 and "max_num_steps: 2" in (tmp_path / "config.yaml").read_text()
    # (a record's find) it says it resumed: in a new logger.log_dir it read as a fresh run of one step
    assert (tmp_path / "config.yaml").read_text().startswith(f"# resumed from {tmp_path}/ck/step_000001 (step 1): ")
    # the config that ran step 1 is kept beside it (config.yaml was overwritten: the record no longer said what ran)
    assert (tmp_path / "config.to_step_000001.yaml").read_text() == written
    # resumed again from step 2 twice, with no step left to run: the record of steps 1-2 stays the config that ran
    # them, not the one of a resume that ran none
    ran_2 = (tmp_path / "config.yaml").read_text()
    train(load_config(None, [*base, "grpo.max_num_steps=2", "logger.rollouts_period=3"]))
    train(load_config(None, [*base, "grpo.max_num_steps=2", "logger.rollouts_period=4"]))
    assert (tmp_path / "config.yaml").read_text() == ran_2
    assert not (tmp_path / "config.to_step_000002.yaml").exists()


def test_a_model_or_lora_change_is_named_before_the_weights_load(tmp_path):
    """LoRA switched on (or another model) when resuming: the checkpoint's tensors were loaded first, and the user
    read PyTorch's 'unexpected keys' in place of the config's difference."""
    base = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={tmp_path}",
            f"checkpointing.checkpoint_dir={tmp_path}/ck"]
    train(load_config(None, base))
    with pytest.raises(ValueError, match=r"cannot apply policy.lora.enabled: False -> True"):
        train(load_config(None, [*base, "grpo.max_num_steps=2", "policy.lora.enabled=true"]))


def test_a_fresh_start_never_erases_another_runs_metrics(tmp_path):
    """The same log directory with the checkpoints elsewhere (or off), or with a config that computes otherwise: the
    run started from step 0 and emptied metrics.jsonl of a run whose checkpoints it did not resume. Without
    checkpoints, the same config again is refused too; the same run started again before its first checkpoint still
    redoes its steps."""
    log = tmp_path / "run"
    base = [*SMALL, "grpo.max_num_steps=2", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={log}",
            f"checkpointing.checkpoint_dir={log}/ck"]
    train(load_config(None, base))
    rows = (log / "metrics.jsonl").read_text()
    for change, why in ((f"checkpointing.checkpoint_dir={tmp_path}/new", "which this run does not resume.*, or "
                         f"resume that run \\(checkpointing.checkpoint_dir={log / 'ck'}\\)"),
                        ("checkpointing.enabled=false", "which this run does not resume.*, or resume that run "
                                                        "\\(checkpointing.enabled=true\\)")):
        with pytest.raises(ValueError, match=f"holds the metrics of another run \\(2 rows; its checkpoints are in .*{why}"):
            train(load_config(None, [*base, change]))
        assert (log / "metrics.jsonl").read_text() == rows
    shutil.rmtree(log / "ck")  # (a hunt's find: checkpoints deleted, the same command started over and erased all)
    with pytest.raises(ValueError, match=f"holds the metrics of a run \\(2 rows\\) that saved checkpoints, to step 2, "
                                         f"in {log / 'ck'}, and they are gone: .*Restore the checkpoints to resume "
                                         f"it, or start a new run: logger.log_dir={tmp_path / 'run-2'}"):
        train(load_config(None, base))
    assert (log / "metrics.jsonl").read_text() == rows
    again = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={tmp_path}/b",
             "checkpointing.enabled=false"]
    train(load_config(None, again))
    rows = (tmp_path / "b" / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=r"config.yaml differs in policy.generation.temperature: 0.6 -> 0.5\)"):
        train(load_config(None, [*again, "policy.generation.temperature=0.5"]))
    assert (tmp_path / "b" / "metrics.jsonl").read_text() == rows
    with pytest.raises(ValueError, match="checkpointing.enabled is false, so this run cannot resume it"):
        train(load_config(None, again))  # (a newcomer's find: the same config again erased a whole earlier run's rows)
    assert (tmp_path / "b" / "metrics.jsonl").read_text() == rows
    with pytest.raises(ValueError, match="it ran with checkpointing.enabled false, so no run can resume it"):
        train(load_config(None, [*again[:-1], f"checkpointing.checkpoint_dir={tmp_path}/b/ck"]))  # (a hunt's find:
    assert (tmp_path / "b" / "metrics.jsonl").read_text() == rows  # with checkpoints on, the same erasure)
    crashed = [*again[:-1], f"logger.log_dir={tmp_path}/c", f"checkpointing.checkpoint_dir={tmp_path}/c/ck",
               "checkpointing.save_period=5"]
    train(load_config(None, crashed))  # (stopped before its first checkpoint: the same run is done again)
    assert train(load_config(None, crashed)).step == 1


def test_relative_checkpoints_are_read_from_where_their_run_started(tmp_path, monkeypatch):
    """(A hunt's find) a relative checkpointing.checkpoint_dir in a log directory's config.yaml was read from the
    working directory of the run after it: the same config started elsewhere found no checkpoints there, and started
    from step 0 over the first run's record."""
    log = tmp_path / "log"
    base = [*SMALL, "grpo.max_num_steps=2", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={log}",
            "checkpointing.checkpoint_dir=ck"]
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    train(load_config(None, base))
    assert f"# started in {tmp_path / 'a'} (relative paths below are from there)\n" in (log / "config.yaml").read_text()
    rows = (log / "metrics.jsonl").read_text()
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(ValueError, match=f"its checkpoints are in {tmp_path / 'a' / 'ck'}, which this run does not"):
        train(load_config(None, base))
    assert (log / "metrics.jsonl").read_text() == rows
    monkeypatch.chdir(tmp_path / "a")
    assert train(load_config(None, [*base, "grpo.max_num_steps=3"])).step == 3  # (from where it started: resumed)


def test_a_resume_into_another_runs_log_directory_is_refused(tmp_path):
    """(A hunt's find) a resume may name a new logger.log_dir, and one naming another run's cut that run's later rows
    as "done again", kept its earlier ones as the resumed run's and renamed its config.yaml as this run's steps."""
    base = [*SMALL, "grpo.max_num_steps=2", "grpo.val_period=0", "warmup.sft_steps=0"]
    a = [*base, f"logger.log_dir={tmp_path}/a", f"checkpointing.checkpoint_dir={tmp_path}/a/ck"]
    train(load_config(None, a))
    train(load_config(None, [*base, f"logger.log_dir={tmp_path}/b", f"checkpointing.checkpoint_dir={tmp_path}/b/ck",
                             "grpo.seed=5"]))
    rows = (tmp_path / "b" / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="holds the metrics of another run .*its checkpoints are in .*this run resumes "
                                         "from .* and would mix its record with theirs"):
        train(load_config(None, [*a, f"logger.log_dir={tmp_path}/b", "grpo.max_num_steps=3"]))
    assert (tmp_path / "b" / "metrics.jsonl").read_text() == rows and not list((tmp_path / "b").glob("config.to_*"))
    assert train(load_config(None, [*a, f"logger.log_dir={tmp_path}/c", "grpo.max_num_steps=3"])).step == 3


def test_the_validation_sets_number_names_its_problems_and_their_order():
    """(A hunt's find) a resume onto another validation set of the same size joined its eval curve silently: each
    eval row carries eval/problem_set, which the report and the closing line compare."""
    from execrl.tasks import Problem
    from execrl.trainer.data import problem_set

    a = [Problem(f"p{i}", [{"role": "user", "content": f"Print {i}."}], "code") for i in range(3)]
    assert problem_set(a) == problem_set(list(a)) < 2 ** 24
    assert problem_set(a[::-1]) != problem_set(a) != problem_set(a[:2] + [Problem("q", a[2].messages, "code")])


def test_settings_added_since_a_checkpoint_and_batching_alone_apply_on_resume():
    """(A hunt's finds) An earlier version's checkpoint lacks the settings added since: each read as "None -> value",
    refused with advice no config could follow (null is no valid value). How passes are batched and when grading
    runs change no step's math (the out-of-memory advice names them): they apply. A review's find: keys of a
    free-form dict (hf_config_overrides, optimizer.kwargs) or of a section null on one side are changes as any."""
    import copy

    from execrl.config import MasterConfig

    now = MasterConfig().model_dump(mode="json")
    old = copy.deepcopy(now)
    del old["env"]["code"]["grading_share"]
    old["grpo"]["a_dropped_setting"] = 3
    new = copy.deepcopy(now)
    new["policy"]["shared_prompts"] = False
    new["policy"]["dynamic_batching"]["enabled"] = True
    applied, refused = config_changes(old, new)
    assert refused == [] and applied == [
        "env.code.grading_share: 0.25 (a setting new since the checkpoint was written)",
        "grpo.a_dropped_setting: 3 (a setting execrl no longer has)",
        "policy.dynamic_batching.enabled: False -> True", "policy.shared_prompts: True -> False"]
    for where, value in ((("policy", "hf_config_overrides"), {"rope_theta": 1e6}),
                         (("policy", "generation", "guided_decoding"), {"regex": "a+"}),
                         (("policy", "optimizer", "kwargs", "amsgrad"), True),
                         (("policy", "tokenizer", "chat_template_kwargs"), {"enable_thinking": False})):
        changed = copy.deepcopy(now)
        node = changed
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = value
        assert config_changes(now, changed)[1] and not config_changes(now, changed)[0], where


def test_a_resume_with_another_tokenizer_or_template_is_refused_and_a_copied_run_names_its_change(tmp_path):
    """(A hunt's finds) A chat template edited in place (a hub snapshot's update keeps the model's name and weights)
    rendered every resumed step's prompts otherwise, without a word: refused. A copied run directory resumed with a
    key it cannot take read as "another run's" record, whose resume the message then advised: the key is named."""
    import shutil

    from execrl.models import save_tiny

    model = save_tiny(tmp_path / "m0", ["def add(a, b):\n    return a + b\n", "Write a function."] * 10)
    base = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0", f"policy.model_name={model}",
            f"logger.log_dir={tmp_path}/a", f"checkpointing.checkpoint_dir={tmp_path}/a/ck"]
    train(load_config(None, base))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copied = [*base, f"logger.log_dir={tmp_path}/b", f"checkpointing.checkpoint_dir={tmp_path}/b/ck",
              "grpo.max_num_steps=2"]
    with pytest.raises(ValueError, match=r"cannot apply policy.optimizer.kwargs.lr: 0.0002 -> 0.001"):
        train(load_config(None, [*copied, "policy.optimizer.kwargs.lr=1e-3"]))
    import json

    config = json.loads((model / "tokenizer_config.json").read_text())
    jinja = model / "chat_template.jinja"
    if jinja.is_file():
        jinja.write_text(jinja.read_text().replace("m['role'] + '\\n'", "m['role'] + ' (edited)\\n'"))
    else:
        config["chat_template"] = config["chat_template"].replace("m['role'] + '\\n'", "m['role'] + ' (edited)\\n'")
        (model / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="tokenizer or chat template differs from the one this run trained with"):
        train(load_config(None, [*base, "grpo.max_num_steps=2"]))


def test_a_run_of_its_own_is_one_key_on_the_built_in_default_and_refusals_name_it_whole(tmp_path, monkeypatch):
    """(A newcomer hunt's find) README's "your own model is one key" ran into the default's run directory: the resume
    was refused (another model) or, with only logging changed, did nothing. The default's checkpoints follow
    logger.log_dir, and the messages name both keys of a new run, with values."""
    from execrl.config import load_config
    from execrl.trainer.setup import new_run

    monkeypatch.chdir(tmp_path)  # (new_run names folders no run holds yet: none here)
    assert load_config(None, ["logger.log_dir=runs/mine"]).checkpointing.checkpoint_dir == "runs/mine/checkpoints"
    assert new_run(load_config(None, [])) == \
        "logger.log_dir=runs/default-2 checkpointing.checkpoint_dir=runs/default-2/checkpoints"
    apart = load_config(None, [f"logger.log_dir={tmp_path}/a", f"checkpointing.checkpoint_dir={tmp_path}/ck"])
    assert new_run(apart) == f"logger.log_dir={tmp_path}/a-2 checkpointing.checkpoint_dir={tmp_path}/ck-2"


def test_a_new_runs_folders_are_free_and_named(tmp_path, monkeypatch):
    """(A read-through's find) the suggested new run's "-2" could be a folder holding a run already, and a log
    directory of "." was suggested as "-2"."""
    from execrl.config import load_config
    from execrl.trainer.setup import new_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "default-2" / "checkpoints").mkdir(parents=True)
    assert new_run(load_config(None, [])) == \
        "logger.log_dir=runs/default-3 checkpointing.checkpoint_dir=runs/default-3/checkpoints"
    (tmp_path / "ck-3").mkdir()  # (apart: the first suffix free for both)
    apart = load_config(None, ["logger.log_dir=a", "checkpointing.checkpoint_dir=ck"])
    (tmp_path / "a-2").mkdir()
    assert new_run(apart) == "logger.log_dir=a-4 checkpointing.checkpoint_dir=ck-4"
    here = load_config(None, ["logger.log_dir=.", "checkpointing.checkpoint_dir=checkpoints"])
    assert new_run(here) == f"logger.log_dir={tmp_path}-2 checkpointing.checkpoint_dir={tmp_path}-2/checkpoints"
    # (a review's finds) a checkpoint folder beside the log folder ("..") is not inside it, whatever its spelling;
    # an absolute log folder holds a relative checkpoint folder inside it
    beside = load_config(None, ["logger.log_dir=.", "checkpointing.checkpoint_dir=../ck"])
    assert new_run(beside) == f"logger.log_dir={tmp_path}-2 checkpointing.checkpoint_dir=../ck-2"
    assert new_run(load_config(None, ["logger.log_dir=runs/a", "checkpointing.checkpoint_dir=runs/a/../b"])) == \
        "logger.log_dir=runs/a-2 checkpointing.checkpoint_dir=runs/b-2"
    mixed = load_config(None, [f"logger.log_dir={tmp_path}/runs/x", "checkpointing.checkpoint_dir=runs/x/ck"])
    assert new_run(mixed) == f"logger.log_dir={tmp_path}/runs/x-2 checkpointing.checkpoint_dir={tmp_path}/runs/x-2/ck"
