"""An environment of one's own, named by import path: examples/second_chance_env.py runs through the real episode
runner, tokenizer and sandbox (only the model is replaced, by a scripted one); bad names are one clear line."""

from pathlib import Path

import pytest

from execrl.config import ConfigError, load_config
from execrl.envs import Environment, Step, environment_class, register
from execrl.models import BYTE_VOCAB, build_tokenizer
from execrl.plugins import PluginError
from execrl.rollout import Completion, SamplingParams
from execrl.sandbox import Grader, Limits
from execrl.tasks import load_problems
from execrl.trainer.rollouts import EpisodeRunner

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "second_chance_env.py"
KIND = f"env.multi_turn.kind={EXAMPLE}:SecondChance"
WRONG = "```python\nprint(0)\n```"


class Scripted:
    """Answers every first turn with a wrong program, every later one with the problem's reference program."""

    def __init__(self, tok, problems):
        self.tok, self.right = tok, {p.messages[0]["content"]: p.metadata["reference_completion"] for p in problems}

    def generate(self, prompts, num_samples, max_new_tokens, params, stop_strings=None, seeds=None, **_):
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            retry = "Try again." in text
            answer = next(r for q, r in self.right.items() if q in text) if retry else WRONG
            tokens = self.tok(answer, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Completion(tokens, answer, False) for _ in range(num_samples)])
        return out


def test_the_example_environment_gives_a_second_chance():
    cfg = load_config(None, [KIND, "grpo.max_rollout_turns=2", "env.multi_turn.observation_role=user",
                             "policy.max_total_sequence_length=512"])
    problems, _ = load_problems("builtin:arith-code", "train", count=2)
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    with Grader(num_workers=1, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(cfg, Scripted(tok, problems), tok, grader).run(problems, 2, SamplingParams(1.0))
    assert [e.turns for e in rollouts.episodes] == [2, 2, 2, 2]
    assert [e.reward.total for e in rollouts.episodes] == [1.0] * 4  # the second answer is the one scored
    assert all("passed 0 of 4 tests" in e.messages[2]["content"] for e in rollouts.episodes)
    assert all(e.tool_errors == 1 for e in rollouts.episodes)


def test_the_import_path_passes_validation_and_bad_ones_are_one_line():
    from execrl.config.checks import validate

    validate(load_config(None, [KIND, "grpo.max_rollout_turns=2"]))
    for kind, said in [(f"{EXAMPLE}:Nope", "has no 'Nope'"), ("no/such/file.py:X", "no such file"),
                       ("no_such_module:X", "cannot import no_such_module"), ("interpretr", "use one of"),
                       ("execrl.rewards:Reward", "not an environment class")]:
        with pytest.raises(ConfigError, match=said):
            validate(load_config(None, [f"env.multi_turn.kind={kind}", "grpo.max_rollout_turns=2"]))


def test_nemo_rl_env_cls_names_an_execrl_environment_or_is_refused():
    """NeMo RL's env_cls key: an execrl Environment by NeMo's dotted name or by import path becomes
    env.multi_turn.kind; NeMo RL's own classes (Ray actors of another interface) are refused."""
    for given, kind in [(f"{EXAMPLE}:SecondChance", f"{EXAMPLE}:SecondChance"),
                        ("execrl.envs.interpreter.InterpreterEnv", "execrl.envs.interpreter:InterpreterEnv")]:
        cfg = load_config(None, [f"env.math.env_cls={given}", "grpo.max_rollout_turns=2"])
        assert cfg.env.multi_turn.kind == kind
        assert environment_class(kind).__name__ in ("SecondChance", "InterpreterEnv")
    for foreign in ("nemo_skills.training.nemo_rl.environments.math_environment.MathEnvironment",
                    "execrl.rewards.Reward"):
        with pytest.raises(ConfigError, match="env.math.env_cls names a class that is not an execrl Environment"):
            load_config(None, [f"env.math.env_cls={foreign}"])


def test_registering_an_environment_by_name():
    @register("always_one_test_env")
    class AlwaysOne(Environment):
        def reset(self, problem):
            return [{"role": "user", "content": "hi"}]

    assert environment_class("always_one_test_env") is AlwaysOne
    with pytest.raises(PluginError, match="not an environment class"):
        register("not_an_env")(int)


def test_an_environments_metric_named_as_one_of_execrls_own_is_refused():
    """(A hunt's find) An environment's metrics() of reward_mean 42 was train/reward_mean in the record (and the
    console's reward), every reward 0: a name of execrl's own metrics is refused, naming the class."""
    from execrl.extract import Extracted
    from execrl.rewards import Reward, Sample
    from execrl.tasks import Problem
    from execrl.trainer.rollouts import Episode, Rollouts, Trajectory, episode_means, episode_sums

    class Clash(Environment):
        name = "reward_mean"

        def metrics(self, sample, reward, turns):
            return [(self.name, 42.0), ("mine", 1.0)]

    problem = Problem("m", [{"role": "user", "content": "x"}], "math", answer="7")

    def sums(env):
        return episode_sums(Rollouts([Episode(problem, env, [], Trajectory([1]), Sample(problem, "7", Extracted("7", True)),
                                              Reward(0.0), 1)], 1))

    for name in ("reward_mean", "loss", "verdict/correct", "reward/mine"):
        Clash.name = name
        with pytest.raises(ValueError, match=rf"Clash.metrics \(problem m\) returned '{name}', a name of execrl's own "
                                             "metrics"):
            sums(Clash(problem))
    Clash.name = "own_score"
    means = episode_means(sums(Clash(problem)))
    assert means["own_score"] == 42.0 and means["mine"] == 1.0 and means["reward_mean"] == 0.0


class Unruly(Environment):
    """An environment of one's own that gets the contract wrong in one way (`how`), on its first step."""

    how = ""

    def reset(self, problem):
        self.problem = problem
        return "write a program" if self.how == "reset text" else [{"role": "user", "content": "write a program"}]

    def step(self, assistant_text, num_tokens=0):
        from execrl.extract import Extracted
        from execrl.rewards import Reward, Sample

        sample = Sample(self.problem, assistant_text, Extracted(assistant_text, True))
        wrong = {"none": None, "no reward": Step(done=True, sample=sample),
                 "bare number": Step(done=True, reward=0.5, sample=sample),
                 "nan": Step(done=True, reward=Reward(float("nan")), sample=sample),
                 "nan part": Step(done=True, reward=Reward(1.0, {"mine": float("inf")}), sample=sample),
                 "no sample": Step(done=True, reward=Reward(1.0)),
                 "reward not done": Step([{"role": "user", "content": "again"}], reward=Reward(1.0)),
                 "text observation": Step("again"), "raises": None, "exits": None}[self.how]
        if self.how == "raises":
            return {}["no such key"]
        if self.how == "exits":
            raise SystemExit(0)
        return wrong


@pytest.mark.parametrize("how, said", [
    ("reset text", r"Unruly.reset \(problem \S+\) gave str 'write a program': chat messages are a list of"),
    ("none", r"Unruly.step \(problem \S+\) returned NoneType, not a Step: return Step\(observation=\[...\]\)"),
    ("no reward", r"Unruly.step \(problem \S+\) ended the episode with no reward: return Step\(done=True, reward=Rew"),
    ("bare number", r"ended the episode with reward=float 0.5: return Step\(done=True, reward=Reward\(total, parts\)"),
    ("nan", r"ended the episode with Reward.total = nan: a reward is a finite number"),
    ("nan part", r"ended the episode with Reward.parts\['mine'\] = inf: a reward is a finite number"),
    ("no sample", r"ended the episode with no sample \(the record of its answer"),
    ("reward not done", r"returned a reward with done=False: the episode's reward is read at its end only"),
    ("text observation", r"Unruly.step \(problem \S+\)'s Step.observation gave str 'again': chat messages are"),
    ("raises", r"Unruly.step \(problem \S+\) raised KeyError: 'no such key' \(\S+test_own_environment.py:\d+ in step\)"
               r": fix the environment"),
    ("exits", r"Unruly.step \(problem \S+\) called sys.exit\(0\) \(\S+:\d+ in step\), which would end the run")])
def test_an_environment_that_breaks_the_contract_is_named_with_the_fix(how, said):
    """(A hunt's find) An own environment's Step was read as it came: an end without a reward failed in an
    AttributeError far from it, a NaN reward made the loss NaN (the run blamed the learning rate), a reward on a turn
    that goes on was dropped without a word, and sys.exit in step ended the run silently. Each is now one error naming
    the environment, its method, the problem and the fix."""
    from execrl.plugins import OwnCodeFailed

    Unruly.how = how
    register("unruly_test_env")(Unruly)
    cfg = load_config(None, ["env.multi_turn.kind=unruly_test_env", "grpo.max_rollout_turns=2",
                             "policy.max_total_sequence_length=512"])
    problems, _ = load_problems("builtin:arith-code", "train", count=1)
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    with Grader(num_workers=1, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
        runner = EpisodeRunner(cfg, Scripted(tok, problems), tok, grader)
        with pytest.raises(OwnCodeFailed, match=said):
            runner.run(problems, 2, SamplingParams(1.0))
        runner.close()
