"""A researcher's own reward function and dataset loader, named by import path from files outside the package
(examples/): they train-validate, score and load as built-in ones do; a bad path or signature is one clear line."""

import re
from pathlib import Path

import pytest

from execrl.config import ConfigError, load_config
from execrl.config.checks import validate
from execrl.extract import Extracted
from execrl.rewards import Sample, score
from execrl.tasks import DatasetError, Problem, load_problems
from execrl.tasks.registry import dataset_key
from execrl.trainer.data import load_data

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REWARD = f"{EXAMPLES}/own_reward.py:brevity"
DATASET = f"{EXAMPLES}/own_dataset.py:load"


def components(*extra: str) -> str:
    return "reward.components=[{name: test_pass_fraction, weight: 1.0}, " + ", ".join(extra) + "]"


def test_an_own_reward_component_scores_with_its_parameters():
    cfg = load_config(None, [components(f"{{name: '{REWARD}', weight: 0.5, max_chars: 10}}")])
    validate(cfg)
    p = Problem("p", [{"role": "user", "content": "q"}], "math", answer="1")
    short, long = (Sample(p, text, Extracted(text, True)) for text in ("x" * 10, "x" * 15))
    assert score(short, cfg.reward).parts[REWARD] == 1.0
    assert score(long, cfg.reward).parts[REWARD] == 0.5


@pytest.mark.parametrize("name, said", [
    (f"{EXAMPLES}/own_reward.py:nothing", "has no 'nothing'"),
    ("no_such_rewards:brevity", "cannot import no_such_rewards"),
    (f"{EXAMPLES}/own_dataset.py:WORDS", "not a function fn\\(sample"),
])
def test_a_bad_reward_import_path_is_one_line(name, said):
    with pytest.raises(ConfigError, match=said):
        load_config(None, [components(f"{{name: '{name}'}}")])


def test_an_own_rewards_parameters_are_checked():
    with pytest.raises(ConfigError, match="has no parameter"):
        load_config(None, [components(f"{{name: '{REWARD}', max_len: 3}}")])


def test_an_own_dataset_loads_with_the_runs_seed_and_options():
    cfg = load_config(None, [f"data.train.dataset_name={DATASET}", "data.train.options={count: 40}",
                             f"data.validation.dataset_name={DATASET}", "data.validation.split=validation",
                             "data.validation.options={count: 8}"])
    validate(cfg)
    train, val, _ = load_data(cfg)
    assert len(train) == 40 and len(val) == 8 and train[0].tests is not None and train[0].kind == "code"
    again, _ = load_problems(dataset_key(DATASET), "train", seed=cfg.grpo.seed, count=40)
    assert [p.tests.inputs for p in again] == [p.tests.inputs for p in train]  # seeded by grpo.seed


def test_a_bad_dataset_is_one_line():
    with pytest.raises(DatasetError, match="takes no option"):
        load_problems(dataset_key(DATASET), "train", colour="red")
    with pytest.raises(DatasetError, match="takes no `path`"):
        load_problems(dataset_key(DATASET), "train", path=str(EXAMPLES / "problems.jsonl"))
    with pytest.raises(ConfigError, match="has no 'nope'"):
        validate(load_config(None, [f"data.train.dataset_name={EXAMPLES}/own_dataset.py:nope"]))


@pytest.mark.parametrize(("problem", "says"), [
    ("Problem('c', [{'role': 'user', 'content': 'x'}], 'code')", "is a code problem without tests"),
    ("Problem('m', [{'role': 'user', 'content': 'x'}], 'math')", "is a math problem whose answer is None"),
    ("Problem('m', [{'role': 'user', 'content': 'x'}], 'math', answer=2)", "is a math problem whose answer is 2"),
    ("Problem('k', [{'role': 'user', 'content': 'x'}], 'Code', tests=StdioTests(['1'], ['1']))", "has kind 'Code'"),
    ("Problem('t', 'text', 'code', tests=StdioTests(['1'], ['1']))", "has messages that are no chat"),
])
def test_a_loaders_problem_that_cannot_be_posed_or_graded_is_named(tmp_path, problem, says):
    """(A hunt's find) A code problem without tests trained on reward 0 (no_code), a math one without an answer on
    "wrong", without a word; a kind of another spelling, an int answer, messages of no chat were tracebacks mid-step.
    Each is refused as the loader returns it, naming the loader and the problem."""
    (tmp_path / "mine.py").write_text("from execrl.sandbox import StdioTests\nfrom execrl.tasks import Problem\n\n"
                                      f"def load(split):\n    return [{problem}]\n")
    spec = f"{tmp_path / 'mine.py'}:load"
    with pytest.raises(DatasetError, match=rf"mine.py:load: problem '.' {re.escape(says)}"):
        load_problems(dataset_key(spec), "train")


def test_the_kinds_a_problem_may_pose_are_those_with_outcomes():
    from execrl.rewards.outcome import OUTCOMES
    from execrl.tasks.problem import KINDS

    assert set(KINDS) == set(OUTCOMES)


@pytest.mark.parametrize("body, said", [
    ("import no_such_dependency_xyz\n", r"imports no_such_dependency_xyz, which is not installed in the environment "
                                        r"execrl runs in \(\S+python\S*\): install it there \(\S+.py:1 in <module>\)"),
    ("def f(s):\n    return 1.0 +\n", r"importing \S+ raised SyntaxError: invalid syntax \(\S+.py:2\): fix that file"),
    ("raise RuntimeError('set MY_KEY first')\n", r"importing \S+ raised RuntimeError: set MY_KEY first \(\S+.py:1 in "
                                                 r"<module>\): fix that file")])
@pytest.mark.parametrize("named", ["module", "file"])
def test_own_code_that_fails_as_it_is_imported_says_why(tmp_path, monkeypatch, body, said, named):
    """(A hunt's find) A reward module importing a package not installed was refused with "put its directory on
    PYTHONPATH", which it was on; a syntax error or an error raised at import was a bare traceback. Each is one
    line naming the cause and the fix."""
    (tmp_path / "broken_rewards_mod.py").write_text(body + "\n\ndef score(sample):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "broken_rewards_mod:score" if named == "module" else f"{tmp_path / 'broken_rewards_mod.py'}:score"
    with pytest.raises(ConfigError, match=said):
        load_config(None, [components(f"{{name: '{name}'}}")])


def test_the_dry_run_calls_an_own_loader_and_names_what_it_raises(tmp_path):
    """(A hunt's find) --dry-run said an own loader's rows were "read when the run starts (not from this machine's
    files)" and checked nothing; a loader that raised was a bare traceback, one that returned ints "got list". The
    dry run calls it, as the run does, and each failure is one line naming the loader."""
    from execrl.trainer.setup import data_counts

    said = data_counts(load_config(None, [f"data.train.dataset_name={DATASET}", "data.train.options={count: 40}"]))
    assert said[0].startswith("rows: 40 training problems (40 code)")
    (tmp_path / "raising.py").write_text("def load(split):\n    return open('/nonexistent/rows.jsonl').read()\n")
    (tmp_path / "ints.py").write_text("def load(split):\n    return [1, 2]\n")
    for name, says in [("raising", r"dataset loader \S+raising.py:load \(split train\) raised FileNotFoundError: "
                                   r".*rows.jsonl' \(\S+raising.py:2 in load\): fix the loader"),
                       ("ints", "it must return a list of execrl.tasks.Problem, got a list holding int")]:
        with pytest.raises(ValueError, match=says):
            data_counts(load_config(None, [f"data.train.dataset_name={tmp_path / name}.py:load"]))


def test_what_execrls_own_code_raises_is_not_blamed_on_the_user():
    """own_code's line tells a researcher to fix their component or environment: execrl's own code (a built-in
    component, environment) runs unwrapped, its errors as they are, and so does running out of memory (a review's
    finds: a built-in environment's OSError read "fix the environment", a CUDA OOM "fix the component")."""
    from execrl.envs import UnitTestsEnv
    from execrl.plugins import OwnCodeFailed, guarded, load_object, ours, own_code
    from execrl.rewards.base import COMPONENTS

    assert ours(COMPONENTS["test_pass_fraction"]) and ours(UnitTestsEnv)
    mine = load_object(REWARD, "reward.components name")
    assert not ours(mine)
    with pytest.raises(KeyError):
        with guarded(COMPONENTS["format"], "reward component format", ": fix the component"):
            {}["x"]
    with pytest.raises(OwnCodeFailed, match="raised KeyError"):
        with guarded(mine, "reward component mine", ": fix the component"):
            {}["x"]

    class OutOfMemoryError(RuntimeError):  # (torch's class, by its name)
        pass

    for oom in (OutOfMemoryError("CUDA out of memory"), MemoryError()):
        with pytest.raises(type(oom)):
            with own_code("reward component mine", ": fix the component"):
                raise oom


def test_an_own_file_imports_the_files_beside_it(tmp_path):
    """(A review's find) A component file importing a helper file beside it was refused as importing a package not
    installed; Python running the file finds it, and so does execrl now."""
    (tmp_path / "helpers_beside.py").write_text("def length(s):\n    return len(s.completion)\n")
    (tmp_path / "uses_helper.py").write_text("from helpers_beside import length\n\n\ndef short(sample):\n"
                                             "    return float(length(sample) < 10)\n")
    load_config(None, [components(f"{{name: '{tmp_path / 'uses_helper.py'}:short'}}")])
