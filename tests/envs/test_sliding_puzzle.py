"""NeMo RL's sliding puzzle: its rules and texts, the environment's turns and reward, its generated problems, and
NeMo RL's own grpo_sliding_puzzle.yaml loading as execrl's environment."""

import random
from pathlib import Path

import pytest

from execrl.config import load_config
from execrl.config.checks import validate
from execrl.envs import SlidingPuzzleEnv, make_envs
from execrl.envs.puzzle import last_action
from execrl.puzzles import Board, act, generate, render, solved
from execrl.rewards import is_correct
from execrl.tasks import load_problems

ONE_OFF = Board(((1, 0), (3, 2)))  # the empty cell above tile 2: `up` (or `slide 2 2`) solves it


def test_moves_follow_nemo_rls_directions():
    assert act(ONE_OFF, "up") == (Board(((1, 2), (3, 0))), "Slid tile 2 up.")
    assert act(ONE_OFF, "slide 2 2")[0] == Board(((1, 2), (3, 0)))
    assert act(ONE_OFF, "right") == (Board(((0, 1), (3, 2))), "Slid tile 1 right.")
    assert act(ONE_OFF, "down") == (ONE_OFF, "Cannot slide down.")
    assert act(ONE_OFF, "slide 2 1") == (ONE_OFF, "Tile must be adjacent to the empty space.")
    assert act(ONE_OFF, "slide 9 9")[1].startswith("Invalid position")
    assert act(ONE_OFF, "slide x")[1].startswith("Invalid input format")
    assert act(ONE_OFF, "jump")[1].startswith("Unknown command")
    assert solved(Board(((1, 2), (3, 0)))) and not solved(ONE_OFF)
    assert render(ONE_OFF).splitlines()[2:5] == ["  +------+", "1 | 1    |", "2 | 3  2 |"]


def test_an_odd_shuffle_is_never_solved():
    rng = random.Random(0)
    for _ in range(200):
        n, k = rng.randint(2, 4), rng.choice([1, 3, 5, 7, 31])
        board = generate(rng, n, k)
        assert not solved(board) and sorted(v for row in board.grid for v in row) == list(range(n * n))


def test_last_action_is_the_last_closed_tag():
    assert last_action("think <action>left</action> no, <ACTION> up </action>") == "up"
    assert last_action("<action>left") is None and last_action("nothing") is None


def episode(max_moves=3):
    cfg = load_config(None, ["env.multi_turn.kind=sliding_puzzle", "grpo.max_rollout_turns=5",
                             f"env.sliding_puzzle.max_moves={max_moves}"])
    problem = load_problems("sliding_puzzle", "train", count=1, size=2, shuffle_moves=1)[0][0]
    problem.metadata["grid"] = [[1, 0], [3, 2]]
    env = make_envs(cfg, None, problem, 1)[0]
    assert isinstance(env, SlidingPuzzleEnv) and env.stop_strings == ["</action>"]
    return env, env.reset(problem)


def test_an_episode_is_rewarded_when_a_move_solves_the_puzzle():
    env, first = episode()
    assert "SLIDING PUZZLE" in first[0]["content"] and "<action>your_action</action>" in first[0]["content"]
    step = env.step("hmm")  # no action: nothing moves, not counted, the board shown with the format
    assert not step.done and "Invalid response format" in step.observation[0]["content"] and env.moves == 0
    step = env.step("<action>view</action>")
    assert "Viewing the board" in step.observation[0]["content"] and env.moves == 0
    step = env.step("<action>down</action>")
    assert step.observation[0]["content"] == "<environment>\nCannot slide down.\n</environment>\n" and env.moves == 1
    step = env.step("<action>up</action>")
    assert step.done and step.reward.total == 1.0 and is_correct(step.sample)


def test_after_max_moves_the_next_answer_ends_the_episode_unsolved():
    env, _ = episode(max_moves=1)
    assert not env.step("<action>left</action>").done  # a move that does not solve it (1 of 1)
    step = env.step("<action>up</action>")  # past max_moves: not played, as NeMo RL
    assert step.done and step.reward.total == 0.0 and step.sample.outcome == "unsolved"
    assert env.finish().reward.total == 0.0


def test_puzzles_are_seeded_and_splits_differ():
    a = load_problems("sliding_puzzle", "train", count=20, size=3, shuffle_moves=9)[0]
    b = load_problems("sliding_puzzle", "train", count=20, size=3, shuffle_moves=9)[0]
    v = load_problems("sliding_puzzle", "validation", count=20, size=3, shuffle_moves=9)[0]
    assert [p.metadata for p in a] == [p.metadata for p in b] != [p.metadata for p in v]
    assert {len(p.metadata["grid"]) for p in a} == {2, 3}


def test_nemo_rls_sliding_puzzle_config_is_this_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nemo = Path(__file__).parents[1] / "assets/nemo_rl/eraG_7ea279a/examples/configs/grpo_sliding_puzzle.yaml"
    cfg = load_config(str(nemo))
    validate(cfg)
    assert cfg.env.multi_turn.kind == "sliding_puzzle" and cfg.env.sliding_puzzle.max_moves == 30
    assert cfg.data.train.dataset_name == "sliding_puzzle" and cfg.data.train.options["size"] == 5
    assert cfg.data.validation.options["count"] == cfg.grpo.max_val_samples


@pytest.mark.slow
@pytest.mark.timeout(900)  # (140 s alone on 2 cores; past 300 s beside another run of tests)
def test_the_cpu_config_learns_which_move_the_board_asks_for(tmp_path):
    """configs/sliding_puzzle_cpu.yaml: 2 x 2 puzzles one slide from solved, one action each."""
    import json

    from execrl.trainer.loop import train

    root = Path(__file__).parents[2]
    train(load_config(str(root / "configs/sliding_puzzle_cpu.yaml"), [f"logger.log_dir={tmp_path}",
                                                                      "checkpointing.enabled=false"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/pass@1"] for r in rows if "eval/pass@1" in r]
    assert evals[-1] >= evals[0] + 0.15


def test_the_last_turn_gets_no_answer_and_an_answer_that_would_not_fit_cuts_nothing():
    """With the turns spent, the environment's answer was still added: tokens no model turn reads, and where they did
    not fit the context an episode whose turns were all whole was marked truncated (overlong_filtering then dropped
    it from training)."""
    from execrl.models import BYTE_VOCAB, build_tokenizer
    from execrl.rollout import Completion, SamplingParams
    from execrl.sandbox import Grader, Limits
    from execrl.tasks import Problem
    from execrl.trainer.rollouts import EpisodeRunner

    class Viewer:
        def generate(self, prompts, num_samples, max_new_tokens, params, stop_strings=None, seeds=None, **_):
            ids = tok("<action>view</action>", add_special_tokens=False)["input_ids"]
            return [[Completion(ids, "<action>view</action>", False) for _ in range(num_samples)] for _ in prompts]

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    puzzle = Problem("pz/0", [], "puzzle", metadata={"grid": [[1, 2], [0, 3]]})
    lengths = []
    for limit in (4096, None):
        cfg = load_config(None, ["env.multi_turn.kind=sliding_puzzle", "data.train.dataset_name=sliding_puzzle",
                                 "grpo.max_rollout_turns=2", "policy.generation.max_new_tokens=30",
                                 f"policy.max_total_sequence_length={limit or lengths[0] + 5}"])
        with Grader(num_workers=1, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
            e, = EpisodeRunner(cfg, Viewer(), tok, grader).run([puzzle], 1, SamplingParams(1.0)).episodes
        t = e.trajectory
        assert e.turns == 2 and not t.truncated and t.segments[-1].sampled, [s.sampled for s in t.segments]
        lengths.append(len(t))
    assert lengths[0] == lengths[1]
