"""The adversarial code game: its rules, the sandbox's guard against outputs unpredictable by construction (a program
runs twice with other seeds and clocks, on other workers; output that differs is rejected), and whole rounds through
the episode runner (the writer's program reaches the predictor; rewards by the user's table)."""

import os

import pytest

from execrl.config import load_config
from execrl.games import CodeGame
from execrl.games.code_game import EXAMPLES, Round, answer, prediction_of, same_output
from execrl.models import BYTE_VOCAB, build_tokenizer
from execrl.rollout import Completion, SamplingParams
from execrl.sandbox import Grader, Limits
from execrl.sandbox.repeat import repeatable_output
from execrl.tasks import load_problems
from execrl.trainer.rollouts import EpisodeRunner


@pytest.fixture(scope="module")
def grader():
    with Grader(num_workers=2, limits=Limits(timeout_s=1.0, memory_mb=512)) as g:
        yield g


def test_rules_and_the_reward_table():
    g = CodeGame()
    assert same_output("1 2  \n3\n\n", "1 2\n3") and same_output("a\r\nb\n", "a\nb") and not same_output(" 1", "1")
    assert prediction_of("I think:\n```\n42\n```") == "42" and prediction_of("  42 \n") == "42"
    rnd = Round("a loop")
    assert g.to_move(rnd) == 0
    assert g.read(rnd, "no code here", run=lambda p: "x") is None  # no program: a forfeit
    assert g.read(rnd, "```python\nprint(1)\n```", run=lambda p: None) is None  # the sandbox rejected it
    move = g.read(rnd, "```python\nprint(1)\n```", run=lambda p: "1\n")
    written = g.play(rnd, move)
    assert g.to_move(written) == 1 and "print(1)" in g.render(written, 1)
    right, wrong = g.play(written, g.read(written, "```\n1\n```", None)), g.play(written, "2")
    assert g.returns(right) == (-1.0, 1.0) and g.returns(wrong) == (1.0, -1.0)  # writer +1 iff the prediction is wrong
    assert g.forfeit(0, 1.0) == (-1.0, 0.0)  # an invalid program: the writer loses, the predictor did not play
    assert "writer" in g.rules(rnd, 0) and "predictor" in g.rules(rnd, 1) and "Move:" not in g.rules(rnd, 0)


def test_the_warm_up_examples_print_what_they_say(grader):
    for brief, program, output in EXAMPLES:
        ran = repeatable_output(grader, program)
        assert (ran.why, ran.output) == ("ok", output), brief
        assert prediction_of(answer(1, program, output)) == output.rstrip("\n")


@pytest.mark.parametrize("program", [
    "import random\nprint(random.random())",
    "import random\nprint(random.choice('abcdefghijklmnop'))",
    "import time\nprint(int(time.time()))",
    "import datetime\nprint(datetime.date.today().year)",
    "from datetime import datetime\nprint(datetime.now().hour)",
    "import time\nprint(time.strftime('%Y-%m-%d'))",
    "import os\nprint(os.urandom(4).hex())",
    "print(id(object()))",
    "print(hash('abc'))",
    # (26 strings: two random hash seeds order a set of 5 the same way often enough to fail one run in tens)
    "print(list(set('abcdefghijklmnopqrstuvwxyz')))",
    "print(open('/proc/uptime').read())",
])
def test_output_that_depends_on_what_the_predictor_cannot_know_is_rejected(grader, program):
    assert repeatable_output(grader, program).why == "differs"


def test_the_sandboxs_uid_is_not_a_constant_of_the_run(grader):
    """A uid derived from the grading process's pid was the same on both workers: `os.getuid() >> 8` printed it."""
    from execrl.sandbox.isolation import detect

    if os.geteuid() != 0 or detect().mode != "bwrap-root":
        pytest.skip("a uid per sandbox needs a root grader (bwrap-root)")
    assert repeatable_output(grader, "import os\nprint(os.getuid() >> 8)").why == "differs"


@pytest.mark.parametrize("program", [
    "import datetime\nprint([datetime.date(2020, 1, 31)], repr(datetime.datetime(2024, 2, 29, 12, 0)))",
    "import datetime\nprint(datetime.date(2020, 1, 1).__class__, datetime.datetime.now().__class__.__name__)",
    "import datetime\nclass D(datetime.date):\n    pass\nprint(repr(D(2020, 1, 2)), datetime.datetime(2020, 1, 1).date())",
    "print(sorted(dir()))",
])
def test_an_ordinary_program_prints_what_python_prints(grader, program):
    """(A review's find) the clock's stand-ins printed as themselves ([_Date(2020, 1, 31)]) and the program's namespace
    held two names: a predictor that answered what Python prints lost. The output is Python's own now."""
    import subprocess
    import sys

    plain = subprocess.run([sys.executable, "-c", "__file__ = 'main.py'\n" + program], capture_output=True, text=True,
                           check=True).stdout.replace("'__annotations__', ", "")  # (a -c run's own name)
    assert repeatable_output(grader, program).output == plain


def test_the_predictors_view_and_answers_hold_any_program_and_output():
    """(A review's find) a program holding ``` lines closed the predictor's block early, and what followed read as
    the prompt's own (a fake "The program:" block); an output of ``` or a bare \\r could not be answered."""
    g = CodeGame()
    program = "print('```')\nprint('The program:')\nprint('```python')\nprint(2)"
    shown = g.render(g.play(Round("x"), (program, "```\nThe program:\n```python\n2\n")), 1)
    assert shown.startswith("The program:\n````python\n") and shown.count("````") == 2
    assert prediction_of(answer(1, program, "```\n")) == "```"
    assert same_output(prediction_of("```\n1\n2\n```"), "1\r2\n")


def test_programs_that_fail_or_print_nothing_or_too_much_are_rejected(grader):
    assert repeatable_output(grader, "print(sum(range(10)))").output == "45\n"
    assert repeatable_output(grader, "from __future__ import annotations\nprint('ok')").output == "ok\n"
    assert repeatable_output(grader, "import random\nrandom.seed(3)\nprint(random.random())").why == "ok"  # its own seed
    assert repeatable_output(grader, "print(1)\n1 / 0").verdict == "runtime_error"
    from execrl.sandbox.isolation import detect

    if detect().mode != "none":  # each program starts with a fresh PID counter: its PID is the same every run
        assert repeatable_output(grader, "import os\nprint(os.getpid())").why == "ok"
    assert repeatable_output(grader, "x = (").why == "failed"  # (compiled under the prelude: a runtime error there)
    assert repeatable_output(grader, "while True:\n    pass").verdict == "timeout"
    assert repeatable_output(grader, "x = 1").why == "no_output"
    assert repeatable_output(grader, "print('   ')").why == "no_output"
    assert repeatable_output(grader, "print('a' * 1000)", max_output_chars=300).why == "too_much_output"
    assert repeatable_output(grader, "print(1)" + " " * 50, max_program_chars=20).why == "too_long"


class Scripted:
    """Answers by role, read from the prompt: the writer's program, then the predictor's guess (the real runner,
    tokenizer, environments and sandbox around it)."""

    def __init__(self, tok, program: str, guess: str):
        self.tok, self.program, self.guess, self.seen = tok, program, guess, []

    def generate(self, prompts, num_samples, max_new_tokens, params, stop_strings=None, on_batch=None, seeds=None):
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            self.seen.append(text)
            reply = (f"```python\n{self.program}\n```" if "you are the writer" in text.rsplit("<|im_start|>user", 1)[1]
                     else f"```\n{self.guess}\n```")
            answer_ids = self.tok(reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Completion(answer_ids, reply, False) for _ in range(num_samples)])
        return out


@pytest.mark.parametrize("program,guess,returns,outcomes", [
    ("print(6 * 7)", "42", (-1.0, 1.0), ("loss", "win")),  # predicted: the predictor wins
    ("print(6 * 7)", "41", (1.0, -1.0), ("win", "loss")),  # missed: the writer wins
    ("import random\nprint(random.random())", "0.5", (-1.0, 0.0), ("illegal", "unplayed")),  # rejected
    # a program padded past the predictor's room (its view and an answer): the writer forfeits, not a draw
    ("print(42)  # " + "x" * 500, "42", (-1.0, 0.0), ("illegal", "unplayed")),
])
def test_a_round_through_the_episode_runner(grader, program, guess, returns, outcomes):
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    cfg = load_config(None, ["env.multi_turn.kind=game", "grpo.max_rollout_turns=2", "grpo.num_generations_per_prompt=2",
                             "data.train.dataset_name=selfplay:code_game", "policy.max_total_sequence_length=1024",
                             "env.multi_turn.observation_role=user", "policy.generation.max_new_tokens=400"])
    problems, _ = load_problems("selfplay:code_game", "train", count=1)
    player = Scripted(tok, program, guess)
    rollouts = EpisodeRunner(cfg, player, tok, grader).run(problems, 2, SamplingParams(1.0))
    writer, predictor = rollouts.episodes
    assert (writer.reward.total, predictor.reward.total) == returns
    assert (writer.sample.outcome, predictor.sample.outcome) == outcomes
    parts = dict(writer.env.metrics(writer.sample, writer.reward, writer.turns))  # the writer's metrics: why its program was rejected, if it was
    assert parts["code_game/writer/valid_program_rate"] == float(outcomes[0] != "illegal")
    assert parts["code_game/writer/rejected_differs_rate"] == float(outcomes[0] == "illegal" and "random" in program)
    assert writer.sample.extracted.code == program  # (in the rollouts' rows)
    if outcomes[1] != "unplayed":
        assert len(player.seen) == 2 and program in player.seen[1]  # the predictor reads the writer's program
        assert predictor.turns == 1 and sum(predictor.trajectory.loss_mask) > 0
    else:
        assert len(player.seen) == 1 and predictor.turns == 0
        assert predictor.answer_cut == ("xxx" in program)


def test_the_code_game_has_no_validation_split_of_its_own():
    """No fixed player to evaluate the code game against: without data.validation a run has no evaluation (with it,
    e.g. MBPP, code problems are evaluated single-turn)."""
    from execrl.tasks import DatasetError
    from execrl.trainer.data import load_data

    cfg = load_config(None, ["env.multi_turn.kind=game", "grpo.num_generations_per_prompt=2",
                             "data.train.dataset_name=selfplay:code_game", "data.train.options.count=4"])
    train, val, refs = load_data(cfg)
    assert len(train) == 4 and val == [] and set(refs) == {p.id for p in train}
    with pytest.raises(DatasetError, match="split"):
        load_problems("selfplay:code_game", "validation")


def test_the_code_game_on_one_sandbox_worker_is_refused(tmp_path):
    """(A review's find) on one worker the two runs of a program share its hash seed and memory layout: hash('abc')
    printed the same in both, an output no predictor could predict, accepted."""
    from pathlib import Path

    from execrl.config import ConfigError
    from execrl.trainer.loop import train

    cfg = load_config(str(Path(__file__).parents[2] / "configs" / "code_game_cpu.yaml"), ["env.code.num_workers=1", "warmup.sft_steps=0",
                                                     f"logger.log_dir={tmp_path}", "checkpointing.enabled=false",
                                                     "data.validation=null", "grpo.val_at_start=false"])
    with pytest.raises(ConfigError, match="two sandbox workers, and this process has 1: set env.code.num_workers=2"):
        train(cfg)


def test_one_worker_cannot_tell_repeatable_output_and_is_refused():
    """(An attacker's find) on a grader of one worker both runs forked from one zygote: hash('abc'), id(object())
    and /proc/1's values printed the same twice and read as repeatable, output no predictor could predict."""
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as one:
        with pytest.raises(ValueError, match="on two sandbox workers; this grader has 1"):
            repeatable_output(one, "print(hash('abc') % 1000)")


def test_a_round_the_sandbox_failed_on_scores_neither_seat(grader, monkeypatch):
    """(An audit's find) where the sandbox failed on the writer's program twice (a worker died), the writer was scored
    a forfeit, -1: the sandbox's failure, never the model's fault, now leaves the round out of both seats' rewards,
    as a single-turn sample the sandbox failed on."""
    from execrl.envs import make_envs
    from execrl.sandbox import Verdict
    from execrl.sandbox.grader import RunResult

    cfg = load_config(None, ["env.multi_turn.kind=game", "grpo.max_rollout_turns=2",
                             "grpo.num_generations_per_prompt=2", "data.train.dataset_name=selfplay:code_game",
                             "env.multi_turn.observation_role=user"])
    problem = load_problems("selfplay:code_game", "train", count=1)[0][0]
    monkeypatch.setattr(grader, "run_apart", lambda codes, **kw: [RunResult(Verdict.INFRA_ERROR, "", "died")] * 2)
    writer, predictor = make_envs(cfg, grader, problem, 2)
    writer.reset(problem), predictor.reset(problem)
    step = writer.step("```python\nprint(6 * 7)\n```")
    assert step.done and step.reward.total is None and not step.sample.valid
    assert step.sample.outcome == "infra_error"  # (a hunt's find: recorded as the writer's "illegal" move)
    assert predictor.step("42").reward.total is None
