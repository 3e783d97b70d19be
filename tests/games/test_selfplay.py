"""Self-play episodes: a match's two seats take turns through the episode runner, each seeing the game from its side;
each seat's trajectory trains on its own moves only (the opponent's appear in observation tokens); role baselines
give the advantages and survive a resume; evaluation against fixed players reports rates by opponent."""

import json
import re

import pytest
import torch

from execrl.algo.role_baselines import RoleBaselines
from execrl.config import ConfigError, load_config
from execrl.config.checks import validate
from execrl.models import BYTE_VOCAB, build_tokenizer
from execrl.rollout import Completion, SamplingParams
from execrl.sandbox import Grader, Limits
from execrl.tasks import load_problems
from execrl.trainer.rollouts import EpisodeRunner, Rollouts, episode_means, episode_sums
from execrl.trainer.step import advantages


def role_advantages(rollouts, baselines):
    """The advantages of grpo.advantage rae, as the trainer computes them. [N]"""
    return advantages(rollouts, load_config(None, [*GAME, "grpo.advantage=rae"]), baselines)[0]


GAME = ["env.multi_turn.kind=game", "grpo.max_rollout_turns=9", "grpo.num_generations_per_prompt=2",
        "data.train.dataset_name=selfplay:tictactoe", "policy.max_total_sequence_length=2048",
        "env.multi_turn.observation_role=user"]


class FirstLegal:
    """A player behind the generator's interface: it answers each prompt with the lowest legal cell the prompt lists
    (the real runner, tokenizer and environments around it; only the model is replaced, by a known player)."""

    def __init__(self, tok):
        self.tok, self.seen = tok, []

    def generate(self, prompts, num_samples, max_new_tokens, params, stop_strings=None, on_batch=None, seeds=None):
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            self.seen.append(text)
            move = min(text.rsplit("Legal moves: ", 1)[1].split("<|im_end|>")[0].split(", "), key=int)  # (scrambled)
            answer = self.tok(f"Move: {move}", add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Completion(answer, f"Move: {move}", False) for _ in range(num_samples)])
        return out


@pytest.fixture(scope="module")
def match():
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    cfg = load_config(None, GAME)
    problems, _ = load_problems("selfplay:tictactoe", "train", count=1)
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        player = FirstLegal(tok)
        rollouts = EpisodeRunner(cfg, player, tok, grader).run(problems, 2, SamplingParams(1.0))
    return rollouts, player, tok


def test_the_seats_take_turns_and_the_match_ends_for_both(match):
    rollouts, player, _ = match
    x, o = rollouts.episodes
    # first legal move each time: X 1, O 2, X 3, O 4, X 5, O 6, X 7: X wins on the 3-5-7 diagonal
    assert [e.turns for e in (x, o)] == [4, 3] and len(player.seen) == 7
    assert (x.reward.total, o.reward.total) == (1.0, -1.0)
    assert (x.sample.outcome, o.sample.outcome) == ("win", "loss")
    assert "you play O" in player.seen[1] and "1 2 3" not in player.seen[1].split("you play O")[1]  # X took 1
    assert "X 2 3\n" in player.seen[1] and "X O 3\n" in player.seen[2]  # each sees the other's move
    assert player.seen[2].count("TicTacToe") == 1  # the rules once, in the prompt


def test_a_seat_trains_on_its_own_moves_only(match):
    rollouts, _, tok = match
    x, o = rollouts.episodes
    for e, moves in ((x, ["1", "3", "5", "7"]), (o, ["2", "4", "6"])):
        traj = e.trajectory
        own = [tok.decode(s.ids) for s in traj.segments if s.sampled]
        assert [t.replace("<|im_end|>", "").strip() for t in own] == [f"Move: {m}" for m in moves]
        observed = tok.decode([t for s in traj.segments if not s.sampled for t in s.ids])
        assert not re.search(r"Move: \d", observed) and "Legal moves" in observed  # the opponent's moves: as boards
        mask = traj.loss_mask
        assert sum(mask) == sum(len(s.ids) for s in traj.segments if s.sampled) < len(mask)


def test_role_advantages_follow_the_moving_baselines(match):
    rollouts, _, _ = match
    baselines = RoleBaselines(decay=0.5)
    # X won (+1): b_X = 0.5 * 0 + 0.5 * 1 = 0.5, A = 0.5; O lost: b_O = -0.5, A = -0.5
    assert role_advantages(rollouts, baselines).tolist() == [0.5, -0.5]
    assert baselines.values == {"tictactoe/X": 0.5, "tictactoe/O": -0.5}
    assert role_advantages(rollouts, baselines).tolist() == [0.25, -0.25]  # b_X = 0.75


def test_an_illegal_answer_forfeits_the_match():
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    cfg = load_config(None, [*GAME, "env.game.illegal_move_penalty=0.5"])
    problems, _ = load_problems("selfplay:tictactoe", "train", count=1)

    class Babbler(FirstLegal):
        def generate(self, prompts, num_samples, *args, **kwargs):
            return [[Completion(tok("I pass", add_special_tokens=False)["input_ids"], "I pass", False)]
                    for _ in prompts]

    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(cfg, Babbler(tok), tok, grader).run(problems, 2, SamplingParams(1.0))
    x, o = rollouts.episodes
    assert (x.sample.outcome, x.reward.total, o.sample.outcome, o.reward.total) == ("illegal", -0.5, "unplayed", 0.5)
    assert o.turns == 0  # the match ended before O's turn: O's return is in no baseline (it has nothing to train)
    assert role_advantages(rollouts, RoleBaselines(0.5)).tolist() == [-0.25, 0.0]
    # the step's means are over the seats that moved (O's 0.5 for a match it never played is no return of the
    # policy's); the verdicts over both seats
    means = episode_means(episode_sums(rollouts))
    assert (means["reward_mean"], means["turns_mean"]) == (-0.5, 1)
    assert means["verdict/illegal"] == means["verdict/unplayed"] == 0.5


def test_validation_matches_are_against_fixed_players_in_both_seats():
    problems, _ = load_problems("selfplay:tictactoe", "validation", count=4)
    assert [(p.metadata["opponent"], p.metadata["seat"]) for p in problems] == [
        ("random", 0), ("minimax", 0), ("random", 1), ("minimax", 1), ("random", 0), ("minimax", 0), ("random", 1),
        ("minimax", 1)]  # interleaved: grpo.max_val_samples keeps both opponents and both seats


def test_self_play_trains_logs_role_metrics_and_resumes_its_baselines(tmp_path, capsys):
    from execrl.trainer.loop import train

    base = ["policy.device=cpu", "configs/spiral_tictactoe_cpu.yaml"]
    args = ["grpo.num_prompts_per_step=4", "policy.train_global_batch_size=8", "policy.train_micro_batch_size=8",
            "policy.logprob_batch_size=8", "policy.generation_batch_size=8", "grpo.val_period=2",
            "grpo.max_val_samples=4", "data.validation=null", "grpo.val_at_start=false", "warmup.sft_steps=30",
            "checkpointing.save_period=1", "logger.tensorboard_enabled=false", f"logger.log_dir={tmp_path}",
            f"checkpointing.checkpoint_dir={tmp_path}/ck"]  # (the validation split's own order: both opponents)
    from pathlib import Path

    config = str(Path(__file__).parents[2] / base[1])
    args = [base[0], *args]  # (on the CPU wherever it runs: on a GPU its seeded matches differ, and one step's
    # matches were all draws of returns equal to their baselines: flat, as RAE has it)
    first = train(load_config(config, [*args, "grpo.max_num_steps=1"]))
    state = torch.load(tmp_path / "ck" / "step_000001" / "trainer_state.pt", weights_only=False)
    assert state["role_baselines"]["values"] == first.baselines.values and set(first.baselines.values) == {
        "tictactoe/X", "tictactoe/O"}
    resumed = train(load_config(config, [*args, "grpo.max_num_steps=2"]))
    assert resumed.resumed_from.endswith("step_000001")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    step2 = next(r for r in rows if r["step"] == 2 and "train/loss" in r)
    assert {"train/tictactoe/X/reward_mean", "train/tictactoe/O/reward_mean", "train/tictactoe/X/baseline",
            "train/tictactoe/O/baseline"} <= set(step2)
    # under RAE a drawn match still has a signal (its return less the role's baseline, nonzero from step 1): the
    # groups without one are those whose every advantage is 0, not those of equal rewards (it read the draw rate)
    assert all(r["train/flat_group_frac"] == 0.0 for r in rows if "train/flat_group_frac" in r)
    evals = [r for r in rows if "eval/tictactoe/win_rate_vs_random" in r]
    assert not any("eval/pass@1" in r for r in rows)  # (the win rate over every opponent at once: not a pass@1)
    assert evals and all({"eval/tictactoe/win_rate_vs_random", "eval/tictactoe/draw_rate_vs_random",
                          "eval/tictactoe/win_rate_vs_minimax", "eval/tictactoe/X/win_rate_vs_random",
                          "eval/tictactoe/O/win_rate_vs_random"} <= set(r) for r in evals)
    # what the console says is what self-play is about: win rates (by role), not a pass@1 or a zero-sum reward
    said = capsys.readouterr()
    said = "".join((said.out + said.err).split())  # (the console wraps lines where it likes)
    assert "step2:evaltictactoe/win_rate_vs_minimax=" in said and "tictactoe/X/win_rate_vs_random=" in said
    assert "matches" in said and "pass@1" not in said
    assert "tictactoe/X/winrate,meanofthefirst" in said and "trainreward" not in said
    # the config holds the moves to the legal cells (env.game.guided_moves): none illegal, in training or evaluation
    assert all(r[k] == 0.0 for r in rows for k in r if k.endswith("illegal_rate") or "illegal_rate_vs" in k)
    assert any("train/tictactoe/X/illegal_rate" in r for r in rows)
    # the resumed step moved the baselines from the saved ones: b = 0.95 b1 + 0.05 mean(step 2's returns)
    x2 = step2["train/tictactoe/X/reward_mean"]
    assert resumed.baselines.values["tictactoe/X"] == pytest.approx(0.95 * state["role_baselines"]["values"][
        "tictactoe/X"] + 0.05 * x2)
    # against a fixed model: the checkpoint just saved (its policy/ in HF format), loaded as the frozen opponent
    other = [a.replace(str(tmp_path), str(tmp_path / "vs")) for a in args]
    vs = train(load_config(config, [*other, "grpo.max_num_steps=1", "env.game.opponent=model",
                                    f"env.game.opponent_model={tmp_path}/ck/step_000001"]))
    assert vs.opponent is not None and vs.opponent.refresh_steps is None and vs.step == 1
    assert all(torch.equal(a, b.to(a.dtype)) for a, b in zip(vs.opponent.model.parameters(), first.model.parameters()))


def test_a_turn_budget_shorter_than_the_game_is_refused():
    """(A review's find) negotiation at grpo.max_rollout_turns=3 was a draw in every match (it takes up to 6 moves,
    both seats' counted), without a word."""
    with pytest.raises(ConfigError, match="max_rollout_turns=3 cuts the matches of negotiation .up to 6 moves.*Set "
                                          "grpo.max_rollout_turns=6"):
        validate(load_config(None, [*GAME, "data.train.dataset_name=selfplay:negotiation", "grpo.max_rollout_turns=3",
                                    "grpo.advantage=rae"]))


def test_self_play_settings_that_cannot_work_are_refused():
    with pytest.raises(ConfigError, match="rae .* is for self-play"):
        validate(load_config(None, ["grpo.advantage=rae"]))
    with pytest.raises(ConfigError, match="num_generations_per_prompt=2"):
        validate(load_config(None, [*GAME, "grpo.num_generations_per_prompt=4"]))
    validate(load_config(None, [*GAME, "grpo.advantage=rae"]))
    with pytest.raises(ConfigError, match="it dropped every draw"):  # (a hunt's find)
        validate(load_config(None, [*GAME, "grpo.advantage=rae", "grpo.use_dynamic_sampling=true",
                                    "grpo.use_leave_one_out_baseline=false"]))


def test_a_round_the_sandbox_failed_on_is_in_no_roles_baseline():
    """(A hunt's find) a code-game round the sandbox failed on (both seats invalid) counted as a return of 0 in each
    role's baseline: after it and a won round the writer's mean was 0.5 where its one scored round made it 1."""
    from execrl.algo.role_baselines import RoleBaselines, rae

    roles = [("code", "writer"), ("code", "predictor")] * 2
    rewards, valid = torch.tensor([[0.0, 0.0], [1.0, -1.0]]), torch.tensor([[False, False], [True, True]])
    baselines = RoleBaselines(decay=0.0)  # (the baseline is the batch's mean)
    adv = rae(rewards, valid, roles, sorted(set(roles)), baselines)
    assert baselines.values == {"code/writer": 1.0, "code/predictor": -1.0}
    assert adv.tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("game", ["tictactoe", "kuhn_poker", "negotiation"])
def test_warm_up_matches_are_legal_games_seen_from_one_seat(game):
    """The supervised warm-up's examples: a seat of its own plays the problem's opening, then the reference is the
    rest of a legal match from its side: its moves (in the answer format), and after each but the last the game as
    it sees it then, exactly as its environment would show it."""
    from execrl.envs.game import GameSeat
    from execrl.games import GAMES, parse_move, prompt

    cfg = load_config(None, GAME)
    problems, _ = load_problems(f"selfplay:{game}", "train", count=30)
    assert {bool(p.metadata["warmup_opening"]) for p in problems} == {True, False}  # both seats
    g = GAMES[game]
    for p in problems:
        seat = GameSeat(cfg)
        assert "Your move" in seat.reset(p)[0]["content"] and seat.ready
        state, me, turns = seat.match.state, seat.seat, p.metadata["reference_turns"]
        assert [t["role"] for t in turns] == ["assistant", "user"] * (len(turns) // 2) + ["assistant"]
        for t in turns:
            if t["role"] == "assistant":
                state = g.play(state, parse_move(t["content"], g.legal_moves(state)))  # (raises if not legal)
            else:  # the board after one of the opponent's legal moves, as the environment words it
                state = next(s for m in g.legal_moves(state) if prompt(
                    g, (s := g.play(state, m)), me, False, p.metadata["seed"]) == t["content"])
                assert g.to_move(state) == me


def test_a_seat_whose_context_is_full_forfeits_the_match():
    """(A review's find) a seat out of room ended the match as a draw: a losing player padded its answers into one.
    It loses now, as a chess player out of time."""
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    cfg = load_config(None, [*GAME, "policy.max_total_sequence_length=300", "policy.generation.max_new_tokens=8"])
    problems, _ = load_problems("selfplay:tictactoe", "train", count=1)
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(cfg, FirstLegal(tok), tok, grader).run(problems, 2, SamplingParams(1.0))
    x, o = rollouts.episodes
    assert any(e.trajectory.truncated for e in (x, o))
    assert {x.sample.outcome, o.sample.outcome} == {"illegal", "win"} and x.turns + o.turns < 7
    out = next(e for e in (x, o) if e.sample.outcome == "illegal")
    assert out.reward.total == -1.0 and out.trajectory.truncated
    assert all(len(e.trajectory) <= 300 for e in (x, o))


class PaddedAtSecond(FirstLegal):
    """FirstLegal, but its second answer of the match states the move, then pads until max_new_tokens cuts it."""

    def generate(self, prompts, num_samples, max_new_tokens, params, stop_strings=None, on_batch=None, seeds=None):
        out = super().generate(prompts, num_samples, max_new_tokens, params, stop_strings, on_batch, seeds)
        if len(self.seen) == 2:
            text = out[0][0].text + "\n" + "so " * max_new_tokens
            ids = self.tok(text, add_special_tokens=False)["input_ids"][:max_new_tokens]
            out[0] = [Completion(ids, self.tok.decode(ids), True)]
        return out


def test_an_answer_cut_at_max_new_tokens_forfeits_the_match():
    """(A review's find) a seat whose answer stated its move and ran on past max_new_tokens ended the match as a draw:
    any losing seat could pad its answer into one. It forfeits."""
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    cfg = load_config(None, [*GAME, "policy.generation.max_new_tokens=64"])
    problems, _ = load_problems("selfplay:tictactoe", "train", count=1)
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(cfg, PaddedAtSecond(tok), tok, grader).run(problems, 2, SamplingParams(1.0))
    x, o = rollouts.episodes
    assert (x.sample.outcome, o.sample.outcome) == ("win", "illegal") and o.trajectory.truncated
    assert (x.reward.total, o.reward.total) == (1.0, -1.0)


def test_a_frozen_opponent_plays_its_seats_untrained_and_in_no_baseline():
    """env.game.opponent=snapshot|model: one seat of each match is the opponent's: its turns come from the opponent's
    generator, reach its trajectory as context only, and count in no baseline or role metric; the policy takes the
    roles of env.game.policy_roles in turn."""

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    cfg = load_config(None, [*GAME, "env.game.opponent=snapshot"])
    problems, _ = load_problems("selfplay:tictactoe", "train", count=6)
    policy, opponent = FirstLegal(tok), FirstLegal(tok)
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(cfg, policy, tok, grader, opponent=opponent).run(problems, 2, SamplingParams(1.0))
    eps = rollouts.episodes
    frozen = [e.env.frozen for e in eps]
    assert all(a != b for a, b in zip(frozen[::2], frozen[1::2]))  # one frozen seat per match
    from execrl.trainer.rollouts import rollout_rows  # (a hunt's find: the rollouts file had them as the policy's)

    rows = rollout_rows(eps, tok)
    assert [r.get("trained", True) for r in rows] == [not f for f in frozen]
    assert all(r["seat"] in (0, 1) for r in rows if "seat" in r)
    assert {e.env.seat for e in eps if not e.env.frozen} == {0, 1}  # the policy plays both roles, in turn
    assert len(policy.seen) + len(opponent.seen) == sum(e.turns for e in eps)
    assert len(opponent.seen) == sum(e.turns for e in eps if e.env.frozen) > 0
    for e in eps:
        assert (sum(e.trajectory.loss_mask) == 0) == (e.env.frozen or e.turns == 0)
        assert (e.env.metrics(e.sample, e.reward, e.turns) == []) == (e.env.frozen or e.sample.outcome == "unplayed")
    adv = role_advantages(rollouts, RoleBaselines(0.5))
    assert all(a == 0.0 for a, e in zip(adv.tolist(), eps) if e.env.frozen)
    # the step's metrics are the policy's: its seats' returns and turns, not the zero-sum mean over both seats
    some = Rollouts(eps[:8], 2)  # (four matches: the policy as O in three, as X in one)
    mine = [e for e in some.episodes if not e.env.frozen]
    means = episode_means(episode_sums(some))
    assert means["reward_mean"] != 0.0  # (over both seats a zero-sum game's mean)
    assert means["reward_mean"] == pytest.approx(sum(e.reward.total for e in mine) / len(mine))
    assert means["turns_mean"] == pytest.approx(sum(e.turns for e in mine) / len(mine))
    assert sum(means[f"verdict/{v}"] for v in ("win", "draw", "loss")) == pytest.approx(1.0)
    assert means["verdict/win"] == pytest.approx(sum(e.sample.outcome == "win" for e in mine) / len(mine))
    only_o = load_config(None, [*GAME, "env.game.opponent=snapshot", "env.game.policy_roles=[O]"])
    with Grader(num_workers=1, limits=Limits(timeout_s=1.0, memory_mb=512)) as grader:
        rollouts = EpisodeRunner(only_o, policy, tok, grader, opponent=opponent).run(problems, 2, SamplingParams(1.0))
    assert {e.env.role[1] for e in rollouts.episodes if not e.env.frozen} == {"O"}


def test_opponent_settings_are_each_read_or_refused():
    from execrl.config import ConfigError
    from execrl.config.checks import validate

    for wrong, message in [(["env.game.opponent=model"], "set env.game.opponent_model"),
                           (["env.game.opponent_model=/x"], "read with env.game.opponent=model only"),
                           (["env.game.opponent_refresh_steps=5"], "refreshes a snapshot opponent"),
                           (["env.game.policy_roles=[X]"], "the policy plays every role"),
                           (["env.game.opponent=snapshot", "env.game.policy_roles=[writer]"], "roles are"),]:
        with pytest.raises(ConfigError, match=message):
            validate(load_config(None, [*GAME, "grpo.advantage=rae", *wrong]))
    validate(load_config(None, [*GAME, "env.game.opponent=snapshot", "env.game.opponent_refresh_steps=5"]))


def test_guided_moves_are_a_regex_of_the_legal_moves_and_refused_where_they_cannot_work():
    from execrl.config import ConfigError
    from execrl.config.checks import validate
    from execrl.envs.game import GameSeat

    cfg = load_config(None, [*GAME, "env.game.guided_moves=true"])
    validate(cfg)
    problems, _ = load_problems("selfplay:tictactoe", "validation", count=1)
    seat = GameSeat(cfg)
    seat.reset(problems[0])  # against the random player, as X: the empty board
    assert seat.constraint == ("regex", "Move: (1|2|3|4|5|6|7|8|9)")
    seat.step("Move: 5")  # ... and the random player answers
    kind, regex = seat.constraint
    assert sorted(regex[len("Move: ("):-1].split("|")) == seat.match.game.legal_moves(seat.match.state)
    assert len(seat.match.game.legal_moves(seat.match.state)) == 7
    assert GameSeat(load_config(None, GAME)).constraint is None  # off by default
    poker, _ = load_problems("selfplay:kuhn_poker", "validation", count=1)
    seat = GameSeat(load_config(None, [*GAME, "data.train.dataset_name=selfplay:kuhn_poker",
                                       "env.game.guided_moves=true"]))
    seat.reset(poker[0])
    assert seat.constraint[1] in ("Move: (check|bet)", "Move: (call|fold)", "Move: (bet|check)", "Move: (fold|call)")
    for wrong, message in [(["data.train.dataset_name=selfplay:code_game"], "code_game: free-text moves"),
                           (["env.multi_turn.kind=single_turn", "grpo.max_rollout_turns=1",
                             "data.train.dataset_name=builtin:arith-code"], "set env.multi_turn.kind=game"),
                           (["policy.generation.backend=transformers"], "backend=execrl"),
                           # (a hunt's find: accepted, and the moves kept to the legal ones, the config's never read)
                           (["policy.generation.guided_decoding={regex: 'Move: zz'}"], "guided_decoding would "
                            "constrain nothing"),
                           (["policy.generation.guided_decoding_per_turn=[{regex: 'Move: zz'}]"],
                            "guided_decoding_per_turn would constrain nothing")]:
        with pytest.raises(ConfigError, match=message):
            validate(load_config(None, [*GAME, "env.game.guided_moves=true", *wrong]))


def test_a_snapshot_opponent_takes_the_policys_weights_every_n_steps():
    from execrl.models import build_tiny_model
    from execrl.trainer.opponent import build_opponent

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    policy = build_tiny_model(tok, seed=0)
    cfg = load_config(None, [*GAME, "env.game.opponent=snapshot", "env.game.opponent_refresh_steps=3",
                             "policy.generation.backend=transformers"])
    opp = build_opponent(cfg, policy, tok, slots=4)
    same = lambda: all(torch.equal(a, b) for a, b in zip(opp.model.parameters(), policy.parameters()))  # noqa: E731
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    assert not same() and opp.refresh(5, policy) and same()  # the first step a run takes (here: a resumed one)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    assert not opp.refresh(7, policy) and not same() and opp.refresh(9, policy) and same()
    assert not any(p.requires_grad for p in opp.model.parameters())


def test_a_resumed_run_plays_the_snapshot_its_checkpoint_holds(tmp_path):
    """(A review's find) a snapshot opponent was not in the checkpoint: a resumed run took the policy at the resume as
    its opponent, and its step 3 differed from the straight run's (loss 0.2066 against -0.0050). The checkpoint holds
    the snapshot and the step it was taken at; on one thread the resumed run is the straight one."""
    from pathlib import Path

    from execrl.trainer.loop import train

    config = str(Path(__file__).parents[2] / "configs/spiral_tictactoe_cpu.yaml")
    args = ["policy.device=cpu", "grpo.num_prompts_per_step=4", "policy.train_global_batch_size=8",
            "policy.train_micro_batch_size=8", "policy.logprob_batch_size=8", "policy.generation_batch_size=8",
            "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false", "warmup.sft_steps=10",
            "checkpointing.save_period=1", "logger.tensorboard_enabled=false", "env.game.opponent=snapshot",
            "env.game.opponent_refresh_steps=3"]  # (taken before the first step, step 0, and not again by step 3)
    at = lambda name: [f"logger.log_dir={tmp_path / name}", f"checkpointing.checkpoint_dir={tmp_path / name}/ck"]  # noqa: E731
    torch.set_num_threads(1)
    straight = train(load_config(config, [*args, *at("a"), "grpo.max_num_steps=3"]))
    train(load_config(config, [*args, *at("b"), "grpo.max_num_steps=2"]))
    state = torch.load(tmp_path / "b" / "ck" / "step_000002" / "trainer_state.pt", weights_only=False)
    assert state["opponent"]["refreshed_at"] == 0
    resumed = train(load_config(config, [*args, *at("b"), "grpo.max_num_steps=3"]))
    assert resumed.resumed_from.endswith("step_000002") and resumed.opponent.refreshed_at == 0
    for a, b in zip(straight.opponent.model.parameters(), resumed.opponent.model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_guided_moves_need_room_for_a_move():
    """(A hunt's find) guided moves with a budget under any legal move (negotiation's shortest is 29 byte tokens; the
    TicTacToe config's budget 8): every answer cut mid-move, every match a forfeit, and only the truncation warning."""
    from execrl.trainer.setup import check_move_room

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    guided = [*GAME, "env.game.guided_moves=true", "policy.generation.max_new_tokens=8"]
    check_move_room(load_config(None, guided), tok)  # (TicTacToe: "Move: 5" and the end, 8 tokens)
    with pytest.raises(ConfigError, match="negotiation's shortest first move takes 29 tokens.*max_new_tokens to 29"):
        check_move_room(load_config(None, [*guided, "data.train.dataset_name=selfplay:negotiation"]), tok)


def test_a_frozen_opponents_seats_are_in_no_normalizer_and_it_is_refused_before_torchrun(tmp_path, monkeypatch):
    """Hunts' finds: the frozen opponent's seats (never trained on) counted in a sequence-level loss's sequence count,
    halving the loss; and env.game.opponent=snapshot with two GPUs passed the CLI's checks, refused only in each of
    torchrun's processes after the model loaded."""
    from pathlib import Path

    from execrl.config import ConfigError
    from execrl.config.checks import validate
    from execrl.trainer import step
    from execrl.trainer.loop import train

    with pytest.raises(ConfigError, match="opponent=snapshot runs in one process: set cluster.gpus_per_node=1"):
        validate(load_config(None, [*GAME, "env.game.opponent=snapshot", "cluster.gpus_per_node=2"]))
    seen, loss = [], step.policy_loss

    def counted(terms, cfg, *, num_tokens, num_seqs, is_correction=False):
        seen.append((num_seqs, int((terms.mask.sum(1) > 0).sum()), terms.mask.shape[0]))
        return loss(terms, cfg, num_tokens=num_tokens, num_seqs=num_seqs, is_correction=is_correction)

    monkeypatch.setattr(step, "policy_loss", counted)
    config = str(Path(__file__).parents[2] / "configs/spiral_tictactoe_cpu.yaml")
    train(load_config(config, ["policy.device=cpu", "grpo.num_prompts_per_step=4", "policy.train_global_batch_size=8",
                               "policy.train_micro_batch_size=8", "policy.logprob_batch_size=8",
                               "policy.generation_batch_size=8", "grpo.max_num_steps=1", "grpo.val_period=0",
                               "grpo.val_at_start=false", "grpo.val_at_end=false", "logger.tensorboard_enabled=false",
                               "checkpointing.enabled=false", "env.game.opponent=snapshot", "warmup.sft_steps=0",
                               "loss_fn.token_level_loss=false", f"logger.log_dir={tmp_path}"]))
    assert seen and all(n == trained < rows for n, trained, rows in seen)  # (the frozen seats: rows, in no count)


def test_an_opponent_of_another_tokenizer_is_refused():
    """(A hunt's find) env.game.opponent_model of another family (a Phi-3 opponent of a Gemma policy) was accepted on
    its vocabulary's size alone and fed the policy's token ids, its end ids read as the policy's other tokens; a
    tokenizer that only adds tokens of its own reads the policy's ids as the policy does."""
    from execrl.models import build_tokenizer
    from execrl.trainer.opponent import other_ids

    policy = build_tokenizer(["Move: 1\nMove: 2\n"] * 4, vocab_size=300)
    same = build_tokenizer(["Move: 1\nMove: 2\n"] * 4, vocab_size=300)
    other = build_tokenizer(["def add(a, b):\n    return a + b\n"] * 4, vocab_size=300)
    assert other_ids(same, policy) is None
    said = other_ids(other, policy)
    assert said is not None and "of the policy's" in said and "in its own" in said
    same.add_tokens(["<extra_move>"])
    assert other_ids(same, policy) is None
