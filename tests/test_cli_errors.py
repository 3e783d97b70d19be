"""A careless user gets one clear line naming the fix and a non-zero exit, before any work, and nothing is
overwritten: bad flags, bad config values, files where directories go and the other way round."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import shared_data

EXAMPLES = Path(__file__).parents[1] / "examples"


def execrl(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "execrl.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


ROW = '{"id": "a", "code": "print(1)", "tests": {"inputs": [""], "outputs": ["1\\n"]}}\n'


@pytest.mark.parametrize("flags, message", [
    (["--timeout", "-1"], "argument --timeout: must be >= 0.01, got -1"),
    (["--timeout", "0"], "argument --timeout: must be >= 0.01, got 0"),
    (["--memory-mb", "-5"], "argument --memory-mb: must be >= 16, got -5"),
    (["--workers", "-1"], "argument --workers: must be >= 0, got -1"),  # (0: one per CPU core, as env.code.num_workers)
    (["--timeout", "abc"], "argument --timeout: 'abc' is not a number"),
])
def test_grade_refuses_bad_numbers(tmp_path, flags, message):
    (tmp_path / "in.jsonl").write_text(ROW)
    proc = execrl("grade", tmp_path / "in.jsonl", "--out", tmp_path / "out.jsonl", *flags)
    assert proc.returncode == 2 and message in proc.stderr and not (tmp_path / "out.jsonl").exists()


def test_grade_never_writes_over_its_input_or_into_a_directory(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text(ROW)
    same = execrl("grade", data, "--out", data)
    assert same.returncode == 2 and "is the input file" in same.stderr and data.read_text() == ROW
    folder = execrl("grade", data, "--out", tmp_path)
    assert folder.returncode == 2 and "is a directory" in folder.stderr and "Traceback" not in folder.stderr
    os.link(data, tmp_path / "linked.jsonl")  # (a hunt's find: a hard link to the input was written over)
    linked = execrl("grade", data, "--out", tmp_path / "linked.jsonl")
    assert linked.returncode == 2 and "is the input file" in linked.stderr and data.read_text() == ROW


@pytest.mark.parametrize("override, message", [
    ("grpo.max_num_steps=-5", "grpo.max_num_steps: Input should be greater than or equal to 1"),
    ("grpo.seed=99999999999999999999999", "grpo.seed: Input should be less than 2147483648"),  # (a hunt's find: it
    # passed --dry-run and failed at start, "Overflow when unpacking long long", leaving the checkpoint folder)
    ("env.code.timeout_s=-1", "env.code.timeout_s: Input should be greater than or equal to 0.01"),
    ("policy.generation_batch_size=0", "policy.generation_batch_size: Input should be greater than or equal to 1"),
    ("data.max_input_seq_length=100000", "is over policy.max_total_sequence_length"),
    ("policy.device=cuda", "no CUDA GPU is visible"),
])
def test_train_refuses_bad_values_in_one_line_before_any_work(tmp_path, override, message):
    if override == "policy.device=cuda" and __import__("torch").cuda.is_available():
        pytest.skip("a GPU is visible")
    proc = execrl("train", override, f"logger.log_dir={tmp_path}/run", f"checkpointing.checkpoint_dir={tmp_path}/ck")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "ck").exists()


def test_train_refuses_a_file_as_a_directory_and_a_directory_as_the_config(tmp_path):
    (tmp_path / "file").write_text("x")
    proc = execrl("train", f"logger.log_dir={tmp_path / 'file'}", "--dry-run")
    assert proc.returncode == 2 and "is a file, not a directory" in proc.stderr
    proc = execrl("train", tmp_path, "--dry-run")
    assert proc.returncode == 2 and "is a directory" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
    (["--samples", "0"], "argument --samples: must be >= 1, got 0"),
    (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--chat-template-kwargs", "enable_thinking=false"], "--chat-template-kwargs takes a JSON object"),
    (["--k", "1.5"], "--k takes whole numbers separated by commas, e.g. 1,5,10; got '1.5'"),
    (["--k", "1,x"], "--k takes whole numbers"),
    (["--samples", "4", "--temperature", "0", "--k", "1,4"], "are 4 copies of one answer, and pass@k over them is "
                                                              "pass@1"),  # (greedy: the table's pass@4 was pass@1)
])
def test_eval_refuses_bad_numbers(tmp_path, flags, message):
    proc = execrl("eval", "--model", "builtin:tiny-coder", "--out", tmp_path / "o", *flags)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_eval_refuses_a_file_as_its_output_directory(tmp_path):
    (tmp_path / "o").write_text("keep me")
    proc = execrl("eval", "--model", "builtin:tiny-coder", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "is a file" in proc.stderr and (tmp_path / "o").read_text() == "keep me"


def test_max_new_tokens_of_the_whole_context_means_up_to_the_context_as_in_nemo(tmp_path):
    """NeMo RL's configs set max_new_tokens: ${policy.max_total_sequence_length}: prompts are kept and each
    completion gets the room its prompt leaves."""
    from execrl.config import load_config
    from execrl.trainer.loop import train

    cfg = load_config(None, ["policy.generation.max_new_tokens=${policy.max_total_sequence_length}",
                             "grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.val_period=0", "grpo.val_at_start=false",
                             "checkpointing.enabled=false", f"logger.log_dir={tmp_path}", "logger.tensorboard_enabled=false",
                             "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
                             "policy.train_global_batch_size=4", "env.code.num_workers=2"])
    run = train(cfg)
    assert run.step == 1 and len(run.sampler.problems) == 4096  # no prompt dropped
    lengths = [len(t) for t in run.pipeline.training.rollouts.trajectories]
    assert max(lengths) <= cfg.policy.max_total_sequence_length


def test_a_model_that_cannot_be_had_stops_before_torchrun_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    proc = execrl("train", "policy.model_name=nobody/no-such-model", "cluster.gpus_per_node=2",
                  f"logger.log_dir={tmp_path}/run", f"checkpointing.checkpoint_dir={tmp_path}/ck")
    assert proc.returncode == 2 and "not in the local hub cache and offline mode is on" in proc.stderr
    assert "launching" not in proc.stderr and "Traceback" not in proc.stderr and not (tmp_path / "ck").exists()
    proc = execrl("train", f"policy.model_name={tmp_path}/missing", f"logger.log_dir={tmp_path}/run")
    assert proc.returncode == 2 and "no such directory" in proc.stderr


def test_start_up_notes_are_said_once_by_rank_0_under_a_torchrun_started_by_hand(tmp_path, monkeypatch):
    """(A hunt's find) the processes of a torchrun started by hand said no start-up note (they left them to an
    `execrl train` that launched them, which there was not), and the batch plan's notes (an uneven split over the
    GPUs) were said by --dry-run only."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["train", "policy.model_name=nobody/no-such-model", "cluster.gpus_per_node=2", "grpo.num_prompts_per_step=3",
            "grpo.num_generations_per_prompt=3", "policy.train_global_batch_size=9", f"logger.log_dir={tmp_path}/r"]
    uneven = "note: the 3 groups of an optimizer step do not split evenly over 2 GPUs"
    for env, said in (({}, True), ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, True),
                      ({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, False),
                      ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "EXECRL_NOTES_SAID": "1"}, False)):
        proc = subprocess.run([sys.executable, "-m", "execrl.cli", *args], capture_output=True, text=True,
                              timeout=300, env={**os.environ, **env})
        assert proc.returncode == 2 and "not in the local hub cache" in proc.stderr, proc.stderr
        assert (uneven in proc.stderr) == said, (env, proc.stderr)


@pytest.mark.parametrize("where", ["/sys/execrl-results", "a-file/results"])
def test_an_unwritable_out_fails_before_any_work(tmp_path, where):
    """Nothing is sampled or graded for results that could not be written (issue 40): one line, exit 2, at once."""
    (tmp_path / "a-file").write_text("x")
    out = where if where.startswith("/") else tmp_path / where
    (tmp_path / "in.jsonl").write_text(ROW)
    proc = execrl("grade", tmp_path / "in.jsonl", "--out", f"{out}/out.jsonl", "--quiet")
    assert proc.returncode == 2 and "is not writable here" in proc.stderr and "Traceback" not in proc.stderr
    proc = execrl("eval", "--model", "builtin:tiny-coder", "--dataset", "mbpp", "--out", out)
    assert proc.returncode == 2 and "is not writable here" in proc.stderr and "Traceback" not in proc.stderr
    assert "sampling" not in proc.stderr.lower() and (tmp_path / "a-file").read_text() == "x"


def test_a_second_run_into_a_run_directory_in_use_stops_at_once_naming_the_holder(tmp_path):
    """Two `execrl train` into one log_dir (issue 40): the second says who holds it and writes nothing there."""
    from execrl.trainer.lock import RunLock

    held = RunLock({"logger.log_dir": str(tmp_path / "run")})
    try:
        proc = execrl("train", f"logger.log_dir={tmp_path / 'run'}", f"checkpointing.checkpoint_dir={tmp_path}/ck",
                      "grpo.max_num_steps=1")
        assert proc.returncode == 2 and "is in use by another run (pid" in proc.stderr
        assert "logger.log_dir" in proc.stderr and not (tmp_path / "run" / "metrics.jsonl").exists()
        assert not (tmp_path / "ck").exists()  # nothing locked or made past the refusal
    finally:
        held.release()
    RunLock({"logger.log_dir": str(tmp_path / "run")}).release()  # free again once the holder is done


@pytest.mark.parametrize("args, message", [
    (["configs/grpo_math_1B.yaml", "data.train.dataset_name=mbpp", "data.train.split=train",
      "reward.components=[{name: math_correct}]"],
     "math_correct scores math answers only, but the training problems (mbpp) are code"),
    (["data.train.path=README.md"], "data.train.path=README.md: builtin:arith-code is generated and reads no files"),
    (["configs/sliding_puzzle_cpu.yaml", "grpo.reward_shaping.enabled=true",
      "grpo.reward_shaping.max_response_length=12", "grpo.reward_shaping.overlong_buffer_length=10",
      "grpo.reward_shaping.overlong_buffer_penalty=1.0"],
     "reward.components set, and the training problems are sliding puzzles, scored 1 when solved: execrl scores"),
    (["configs/spiral_tictactoe_cpu.yaml", "reward.scaling.enabled=true", "reward.scaling.target_min=-10"],
     "reward.scaling set, and the training problems are self-play matches"),
])
def test_configs_that_would_train_on_nothing_are_refused_by_dry_run(args, message):
    """(issue 40) The base math config pointed at MBPP keeps a reward that scores every program 0; a path given to a
    generated dataset was accepted by --dry-run and refused by the run; a reward setting on problems scored by their
    outcome (a puzzle, a game) was accepted and did nothing (a hunt's find)."""
    root = __import__("pathlib").Path(__file__).parents[1]
    proc = execrl("train", *args, "--dry-run", cwd=root)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_every_training_problem_dropped_for_length_is_an_error_naming_the_keys(tmp_path):
    long_prompt = "Write a program that prints the word hello. " * 10
    (tmp_path / "mine.jsonl").write_text(__import__("json").dumps(
        {"id": "a", "prompt": long_prompt, "tests": {"inputs": [""], "outputs": ["hello\n"]}}) + "\n")
    proc = execrl("train", "data.train.dataset_name=jsonl", f"data.train.path={tmp_path / 'mine.jsonl'}",
                  f"logger.log_dir={tmp_path}/run", "checkpointing.enabled=false", "grpo.max_num_steps=1",
                  "warmup.sft_steps=0")  # (a warm-up over rows without references is refused before: its own test)
    assert proc.returncode == 2 and "1 of 1 problems have a prompt over 128 tokens" in proc.stderr
    assert "raise policy.max_total_sequence_length" in proc.stderr and "warm-up" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["data.train.dataset_name=jsonl", "data.train.path=/nonexistent/mine.jsonl"],
     "/nonexistent/mine.jsonl does not exist"),
    (["data.train.dataset_name=jsonl"], "jsonl reads a file of your own: name it (execrl train: data.train.path="),
    (["policy.precision=bf61"], "policy.precision: Input should be 'auto', 'bfloat16'"),
    (["policy.precision=float16"], "policy.precision=float16 needs loss scaling"),
])
def test_dry_run_refuses_what_the_run_would(args, message):
    """(A demanding newcomer's findings) each of these passed --dry-run and stopped the run after the model loaded, or
    with a traceback (a precision's typo)."""
    proc = execrl("train", *args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_dry_run_reads_the_rows_as_the_run_would(tmp_path):
    """--dry-run said nothing of a file whose every row is unusable (the run stopped on it after the model loaded);
    it now reads local and generated datasets' rows, says how many problems each part holds, and refuses what the
    run would."""
    import json

    rows = tmp_path / "mine.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [{"question": "no prompt field"}, {"id": 3}]) + "\n")
    proc = execrl("train", "data.train.dataset_name=jsonl", f"data.train.path={rows}", "warmup.sft_steps=0",
                  "--dry-run")
    assert proc.returncode == 2 and "no row has a prompt in field 'prompt'; its rows' fields are ['question']" in \
        proc.stderr.replace("\n", " ")  # (the first row's: NeMo-Gym's math rows name theirs question, expected_answer)
    assert "data.train.options.fields={prompt: question}" in proc.stderr.replace("\n", " ")
    assert "Traceback" not in proc.stderr
    rows.write_text(json.dumps({"id": "a", "prompt": "Print hello.", "tests": {"inputs": [""], "outputs": ["hello\n"]}})
                    + "\n")
    proc = execrl("train", "data.train.dataset_name=jsonl", f"data.train.path={rows}", "warmup.sft_steps=0",
                  "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "rows: 1 training problems (1 code), 0 validation problems" in proc.stdout
    assert "warning: 1 training problems for grpo.num_prompts_per_step=" in proc.stdout


def test_a_validation_file_that_copies_the_training_one_is_said(tmp_path):
    """(A newcomer's find) a validation file that was a copy of the training file got no word: eval/ metrics then
    measured the problems the run trained on."""
    import shutil

    root = __import__("pathlib").Path(__file__).parents[1]
    shutil.copy(root / "examples" / "problems.jsonl", tmp_path / "val.jsonl")
    proc = execrl("train", "data.train.dataset_name=jsonl", f"data.train.path={root / 'examples' / 'problems.jsonl'}",
                  f"data.validation={{dataset_name: jsonl, path: {tmp_path / 'val.jsonl'}}}", "warmup.sft_steps=0",
                  "--dry-run")
    assert proc.returncode == 0, proc.stderr
    n = len((tmp_path / "val.jsonl").read_text().splitlines())
    assert f"warning: {n} of {n} validation problems pose a training problem's prompt" in proc.stderr


def test_wandb_without_wandb_is_refused_before_anything_loads(tmp_path):
    """(It failed once the model and the sandbox had started.) --dry-run notes it and passes: a config dry-runs on any
    machine, NeMo RL's own (which log to W&B) too."""
    if __import__("importlib.util").util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    proc = execrl("train", "logger.wandb_enabled=true", "--dry-run")
    assert proc.returncode == 0 and "note: logger.wandb_enabled=true needs wandb" in proc.stderr
    proc = execrl("train", "logger.wandb_enabled=true", f"logger.log_dir={tmp_path}/run")
    assert proc.returncode == 2 and "logger.wandb_enabled=false" in proc.stderr
    assert "supervised warm-up" not in proc.stdout + proc.stderr and not (tmp_path / "run").exists()


def test_a_hub_id_read_from_a_local_copy_says_which_file(capsys):
    """A hub id whose local copy is a handful of examples: --dry-run and the run's data loading say where the problems
    come from and how many there are, not silently train on 5."""
    shared_data("nemotron_code_examples")
    proc = execrl("train", "data.train.dataset_name=nvidia/Nemotron-RL-coding-competitive_coding", "warmup.sft_steps=0",
                  "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "data.train: nemotron_code/train from " in proc.stdout
    assert "the local copy of nvidia/Nemotron-RL-coding-competitive_coding" in proc.stdout
    from execrl.tasks import load_problems

    problems, _ = load_problems("nemotron_code", "train")
    assert 0 < len(problems) < 100  # (the examples' file: what the line must make plain)
    assert f"nemotron_code/train: {len(problems)} problems from " in capsys.readouterr().err


@pytest.mark.parametrize("override", ["policy.generation.temperature=[1", "reward.components=[{name:"])
def test_an_override_whose_value_is_not_yaml_is_one_line(override):
    proc = execrl("train", override, "--dry-run")
    assert proc.returncode == 2 and "the value is read as YAML and is not valid" in proc.stderr
    assert "quote it" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("text, message", [
    ("grpo:\n\tmax_num_steps: 3\n", ":2:1: not valid YAML: a tab in the indentation"),
    ("grpo:\n  max_num_steps: [3\n", "(while parsing a flow sequence at line 2)"),
])
def test_a_yaml_error_names_its_line(tmp_path, text, message):
    (tmp_path / "c.yaml").write_text(text)
    proc = execrl("train", tmp_path / "c.yaml", "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_eval_on_a_checkpoint_or_run_directory_points_at_the_model_inside(tmp_path):
    model = tmp_path / "run" / "checkpoints" / "step_000010" / "policy"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    for given in (model.parent, model.parent.parent, tmp_path / "run"):
        proc = execrl("eval", "--model", given, "--dataset", "builtin:arith-code", "--split", "validation", "--out",
                      tmp_path / "o", "--limit", "1")  # (a generated dataset: no data files needed)
        assert proc.returncode == 2 and "pass" in proc.stderr and str(model) in proc.stderr.replace("\n", "")


def test_a_model_directory_missing_its_tokenizer_or_weights_says_which(tmp_path):
    """A local directory's failure is its files, not a download: the error names the part and what the directory
    needs."""
    from transformers import AutoModelForCausalLM, GPT2Config

    from execrl.models import BYTE_VOCAB, ModelNotFound, build_tokenizer, load_pretrained

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "m")
    with pytest.raises(ModelNotFound, match="cannot load the tokenizer of model") as e:
        load_pretrained(AutoModelForCausalLM, str(tmp_path / "m"), "cpu")
    assert "tokenizer.json" in str(e.value) and "downloaded" not in str(e.value)
    tok.save_pretrained(tmp_path / "m")
    assert load_pretrained(AutoModelForCausalLM, str(tmp_path / "m"), "cpu")[0] is not None
    for weights in (tmp_path / "m").glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(ModelNotFound, match="cannot load the weights of model") as e:
        load_pretrained(AutoModelForCausalLM, str(tmp_path / "m"), "cpu")
    assert "model.safetensors" in str(e.value) and "downloaded" not in str(e.value)
    # (a hunt's find) a NeMo RL recipe's policy.tokenizer.name beside a local model: the model was blamed
    with pytest.raises(ModelNotFound, match=r"tokenizer 'meta-llama/Nope' \(policy.tokenizer.name\), which is not "
                                            r"model .*'s own.*policy.tokenizer.name=null"):
        load_pretrained(AutoModelForCausalLM, str(tmp_path / "m"), "cpu", offline=True, tokenizer="meta-llama/Nope")


def test_a_tokenizer_larger_than_the_models_embeddings_is_refused(tmp_path):
    """Its last ids would index past the embeddings: an IndexError deep in the first forward (a device assert on a
    GPU); refused as the model loads, naming the key."""
    from execrl.models import save_tiny

    save_tiny(tmp_path / "small", [], vocab_size=259)
    save_tiny(tmp_path / "big", ["def f(x):\n    return x + 1\n"] * 50, vocab_size=300)
    proc = execrl("train", f"policy.model_name={tmp_path}/small", f"policy.tokenizer.name={tmp_path}/big",
                  "warmup.sft_steps=0", f"logger.log_dir={tmp_path}/run")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "tokens and the model's embeddings 259 rows: set policy.tokenizer.name" in proc.stderr.replace("\n", " ")


def test_the_default_warm_up_on_data_without_references_names_the_key(tmp_path):
    """The built-in default's supervised warm-up kept when data.train names a JSONL: no problem has a reference
    solution; the error told the user to raise warmup.batch_size, which cannot help."""
    proc = execrl("train", "data.train.dataset_name=jsonl", f"data.train.path={EXAMPLES / 'problems.jsonl'}",
                  f"logger.log_dir={tmp_path}/run", f"checkpointing.checkpoint_dir={tmp_path}/ck")
    assert proc.returncode != 0 and "no training problem carries a reference solution" in proc.stderr
    assert "set warmup.sft_steps=0" in proc.stderr and "Traceback" not in proc.stderr
    proc = execrl("train", "data.train.dataset_name=jsonl", f"data.train.path={EXAMPLES / 'problems.jsonl'}",
                  "--dry-run")  # (--dry-run, which runs every check, said nothing: the run stopped after loading)
    assert proc.returncode == 2 and "no training problem carries a reference solution" in proc.stderr


@pytest.mark.parametrize("args, example", [
    (["--dry-run", "grpo.max_num_steps", "200"], "e.g. grpo.max_num_steps=VALUE"),  # (read as a config file's name)
    (["configs/grpo_math_1B.yaml", "--dry-run", "grpo.max_num_steps", "200"], "e.g. grpo.max_num_steps=200"),
    (["configs/grpo_math_1B.yaml", "grpo.max_num_steps", "200", "--dry-run"], "e.g. grpo.max_num_steps=VALUE"),
    (["--dry-run", "--grpo.max_num_steps=200"], "e.g. grpo.max_num_steps=200"),
])
def test_an_override_in_another_tools_form_is_shown_as_key_value(args, example):
    """`a.b 1` (argparse's habit) and `--a.b=1` (Hydra's flags) got argparse's bare 'unrecognized arguments' or a
    config file's name not found: each says a key is set as key=value."""
    proc = execrl("train", *args)
    assert proc.returncode == 2 and "key=value" in proc.stderr and example in proc.stderr, proc.stderr


def test_paths_under_home_are_expanded_where_the_shell_leaves_them(tmp_path):
    """`--out=~/x` (the shell expands no ~ after "=") wrote into a folder named "~" in the working directory, and
    printed a path that looked like the home folder's; `--completions=~/c.jsonl` was "no such file"."""
    import os

    (tmp_path / "in.jsonl").write_text(ROW)
    (tmp_path / "c.jsonl").write_text(json.dumps({"problem_id": "mbpp/11", "completion": "x"}) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "HOME": str(tmp_path)}
    for args in (["grade", "~/in.jsonl", "--out=~/graded.jsonl"],
                 ["eval", "--completions=~/c.jsonl", "--dataset", "mbpp", "--out=~/results"]):
        proc = subprocess.run([sys.executable, "-m", "execrl.cli", *args], capture_output=True, text=True, timeout=300,
                              cwd=work, env=env)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "graded.jsonl").is_file() and (tmp_path / "results" / "summary.json").is_file()
    assert not (work / "~").exists()


def test_control_characters_of_a_dataset_row_are_shown_not_sent_to_the_terminal(tmp_path):
    """A row that is a JSON string holding ESC [2J cleared the terminal in eval's and train's error line, and what
    followed it ("all 500 tests passed") stood alone on the screen."""
    (tmp_path / "ds.jsonl").write_text(json.dumps("\u001b]0;TITLE\u0007\u001b[2J\u001b[Hall 500 tests passed") + "\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"problem_id": "0", "completion": "x"}) + "\n")
    proc = execrl("eval", "--dataset", "jsonl", "--data-path", tmp_path / "ds.jsonl", "--completions",
                  tmp_path / "c.jsonl", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "\x1b" not in proc.stderr and "\x07" not in proc.stderr, proc.stderr
    assert "expected a JSON object" in proc.stderr and "\\x1b[2J" in proc.stderr, proc.stderr


def test_an_unknown_flag_of_train_is_named_without_the_key_value_hint():
    """`execrl train --verbose` was told a config key is set as key=value: no key was in sight."""
    proc = execrl("train", "--dry-run", "--verbose")
    assert proc.returncode == 2 and "unrecognized arguments: --verbose" in proc.stderr, proc.stderr
    assert "key=value" not in proc.stderr


def test_eval_of_a_hub_model_the_hub_does_not_give_stops_in_seconds(tmp_path):
    """With no network, `execrl eval --model org/name` retried the hub for ~100 s (20 'Retrying' lines) after loading
    the data and starting the sandbox; now one line before either."""
    import time

    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "eval", "--model", "no-such-org/no-such-model",
                           "--dataset", "mbpp", "--limit", "2", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and "--model 'no-such-org/no-such-model'" in proc.stderr, proc.stderr
    assert "Retrying" not in proc.stderr and time.monotonic() - t < 60


def test_nemo_gym_rows_given_to_the_jsonl_loader_are_pointed_at_nemotron_code(tmp_path):
    from execrl.tasks.generic import no_prompt_field

    row = {"responses_create_params": {"input": [{"role": "user", "content": "Print 1."}]},
           "verifier_metadata": {"unit_tests": {"inputs": [""], "outputs": ["1\n"]}}, "hash_id": "x"}
    said = no_prompt_field(tmp_path / "rows.jsonl", row, "prompt")
    assert "which the nemotron_code dataset reads: data.train.dataset_name=nemotron_code data.train.path=" in said


def test_a_rows_text_cannot_reorder_or_add_console_lines(tmp_path):
    """A row's tests holding a second form under a key with a newline and U+202E printed a line of the row's own
    ("sandbox: all rows graded OK") and the rest of the line reversed, in `execrl grade`'s skipped-row line."""
    key = "x\nsandbox: all rows graded OK\n\u202eevil"
    (tmp_path / "rows.jsonl").write_text(json.dumps({"id": "r", "code": "print(1)",
                                                     "tests": {"asserts": ["assert 1"], key: [1]}}) + "\n")
    proc = execrl("grade", tmp_path / "rows.jsonl", "--out", tmp_path / "o.jsonl", "--quiet")
    assert "\u202e" not in proc.stdout + proc.stderr, proc.stderr
    assert not any(line.startswith("sandbox: all rows") for line in (proc.stdout + proc.stderr).splitlines())


def test_a_run_of_backslashes_in_a_quoted_error_is_escaped_in_linear_time_as_rich_escapes_it():
    """rich's escape read a run of backslashes from each of them: a line of 32,000 took 4 s."""
    import random
    import time

    from rich.markup import escape as rich_escape

    from execrl.console import escape, shown

    rng = random.Random(0)
    pieces = ["\\", "[", "a", "]", "/", "#", "@", "[b]", "[/]", "x", "\\["]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert escape(text) == rich_escape(shown(text)), text
    start = time.perf_counter()
    escape("\\" * 64000 + "[b]")
    assert time.perf_counter() - start < 1


def test_a_reward_component_that_fails_stops_the_run_and_the_process_exits(tmp_path):
    """(A hunt's find) the component's error printed, and the process never exited: environment steps queued in the
    runner's threads waited for a sandbox worker of a grader already closed (a cluster job kept its GPUs to its time
    limit). Now the one error, and exit code 2, in the time of a short run."""
    (tmp_path / "r.py").write_text("def boom(sample):\n    return float('nan')\n")
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "train", "grpo.max_num_steps=2", "warmup.sft_steps=5",
                           "grpo.val_at_start=false", f"logger.log_dir={tmp_path}/run",
                           f"checkpointing.checkpoint_dir={tmp_path}/run/ck",
                           f"reward.components=[{{name: test_pass_fraction}}, {{name: {tmp_path}/r.py:boom}}]"],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 2 and "boom returned nan" in proc.stderr, proc.stderr[-2000:]


def test_a_kv_cache_past_the_machines_memory_is_refused_before_it_is_allocated_with_each_commands_fix(tmp_path):
    """(A hunt's find) `execrl eval --max-new-tokens 1000000000` was the CPU allocator's traceback, and training's
    policy.max_total_sequence_length of 10^8 said "out of memory in loading the model" with the model's fixes (a host
    that overcommits hands such an allocation out and kills the process as it is zeroed). Refused before any of it is
    allocated, with the sizes and the fixes of the command that asked; eval's --out folder is not left behind."""
    out = tmp_path / "new" / "out"
    proc = execrl("eval", "--model", "builtin:tiny-coder", "--dataset", "builtin:arith-code", "--split", "validation", "--limit", "1",
                  "--max-new-tokens", "1000000000", "--out", out)
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in err, err[-2000:]
    assert re.search(r"error: the KV cache of 1 sequences of up to 1,000,000,\d+ tokens needs [\d,.]+ GiB, and the cpu "
                     r"has [\d,.]+ GiB free: at 1 at once, at most [\d,]+ tokens each fit: lower --max-new-tokens "
                     r"\(now 1,000,000,000; the longest prompt is \d+ tokens\) or --batch-size \(now 1\)", err), err
    assert not (tmp_path / "new").exists()  # (the write check made it, and it stayed, empty)
    proc = execrl("train", "policy.max_total_sequence_length=100000000", "grpo.max_num_steps=1",
                  f"logger.log_dir={tmp_path}/run", "checkpointing.enabled=false")
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in err, err[-2000:]
    assert "out of memory in generation: the KV cache of 128 sequences of up to 100,000,000 tokens needs" in err, err
    assert "policy.generation_batch_size=64 (now 128)" in err and "policy.max_total_sequence_length=" in err, err


def test_small_command_line_slips_get_one_line_or_work(tmp_path):
    """(A hunt's finds) `eval --out ''` wrote into the working directory; `grade -` said "no such file"; a config
    whose path holds `=` was read as an override; a Latin-1 config's error named no file; a refused eval said first
    that it replaced the results already in --out."""
    proc = execrl("eval", "--model", "builtin:tiny-coder", "--dataset", "builtin:arith-code", "--out", "",
                  cwd=tmp_path)
    assert proc.returncode == 2 and "--out is empty: name the directory" in proc.stderr and not list(tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "grade", "-", "--out", str(tmp_path / "g.jsonl"),
                           "--quiet"], input=ROW, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "g.jsonl").read_text())["verdict"] == "pass"
    config = tmp_path / "lr=small.yaml"
    config.write_text("grpo:\n  max_num_steps: 7\n")
    proc = execrl("train", config, "--dry-run")
    assert proc.returncode == 0 and "max_num_steps: 7" in proc.stdout, proc.stderr[-2000:]
    config.write_bytes("grpo:\n  max_num_steps: 7  # café\n".encode("latin-1"))
    proc = execrl("train", config, "--dry-run")
    assert proc.returncode == 2 and f"{config}:2: not UTF-8 text (byte 0xe9): save the file as UTF-8" in proc.stderr
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    (tmp_path / "c.jsonl").write_text('{"problem_id": "x"}\n')
    proc = execrl("eval", "--completions", tmp_path / "c.jsonl", "--dataset", "builtin:arith-code", "--split",
                  "validation", "--out", out)
    assert proc.returncode == 2 and "no 'completion' string" in proc.stderr and "replaces" not in proc.stderr
    assert (out / "summary.json").read_text() == "{}"


def test_the_built_in_judges_own_tokenizer_is_not_replaced_in_silence(tmp_path):
    """(A hunt's find) builtin:arith-judge reads with the tokenizer it was trained with: env.reward_model.tokenizer.name
    and eval's --reward-model-tokenizer were accepted, ignored and recorded."""
    proc = execrl("train", "env.reward_model.enabled=true", "env.reward_model.model_name=builtin:arith-judge",
                  "reward.components=[{name: reward_model}]", "env.reward_model.tokenizer.name=gpt2", "--dry-run")
    assert proc.returncode == 2 and "env.reward_model.tokenizer.name is set, but builtin:arith-judge reads with its " \
        "own tokenizer" in proc.stderr
    proc = execrl("eval", "--model", "builtin:tiny-coder", "--dataset", "builtin:arith-code", "--reward-model",
                  "builtin:arith-judge", "--reward-model-tokenizer", "gpt2", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "--reward-model-tokenizer is given, but builtin:arith-judge" in proc.stderr


def test_the_write_check_leaves_no_folder_it_made_and_a_long_configs_bad_byte_is_on_its_line(tmp_path):
    """(A review's finds) the write check's clean-up stopped at the first folder its failed mkdir never made, leaving
    the ones above; the codec's error holds one read's bytes, so a bad byte past the first ~8 KB was put on a line
    counted from that read."""
    from execrl.config import ConfigError, load_config
    from execrl.writable import unwritable

    assert "is not writable here" in unwritable(tmp_path / "x" / "y" / ("n" * 300))
    assert not list(tmp_path.iterdir())
    config = tmp_path / "long.yaml"
    config.write_bytes(b"grpo:\n" + b"  # a comment line\n" * 1200 + "  max_num_steps: 1  # café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="long.yaml:1202: not UTF-8 text"):
        load_config(str(config))
