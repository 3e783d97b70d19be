"""The self-play games' rules, by hand-played positions; the opponents; the move format; the role baselines."""

import random

import pytest

from execrl.algo.role_baselines import RoleBaselines
from execrl.games import GAMES, KuhnPoker, Negotiation, TicTacToe, forfeit, minimax_player, parse_move, prompt
from execrl.games.kuhn_poker import Hand
from execrl.games.negotiation import Table


def play(game, state, *moves):
    for m in moves:
        state = game.play(state, m)
    return state


def test_tictactoe_rules():
    g = TicTacToe()
    board = g.initial(random.Random(0))
    assert g.to_move(board) == 0 and g.legal_moves(board) == [str(i) for i in range(1, 10)]
    won = play(g, board, "1", "4", "2", "5", "3")  # X: 1 2 3, a row
    assert g.is_over(won) and g.returns(won) == (1.0, -1.0) and g.legal_moves(won) == []
    o_wins = play(g, board, "1", "3", "2", "5", "9", "7")  # O: 3 5 7, a diagonal
    assert g.returns(o_wins) == (-1.0, 1.0)
    draw = play(g, board, "1", "2", "3", "5", "4", "6", "8", "7", "9")
    assert g.is_over(draw) and g.winner(draw) is None and g.returns(draw) == (0.0, 0.0)
    with pytest.raises(ValueError):
        g.play(play(g, board, "5"), "5")  # taken
    text = g.render(play(g, board, "5"), 1)
    board_text, listed = text.split("\nYour move. Legal moves: ")  # the legal moves last, in a scrambled order
    assert board_text == "1 2 3\n4 X 6\n7 8 9" and sorted(listed.split(", ")) == ["1", "2", "3", "4", "6", "7", "8", "9"]
    assert listed.split(", ") == g.listed(play(g, board, "5")) and len({tuple(g.listed(board, salt)) for salt in
                                                                           range(20)}) > 10  # each match its own
    assert "you play O" in g.rules(board, 1)
    assert "Legal moves" not in g.render(play(g, board, "5"), 0)  # not X's turn


def test_kuhn_poker_rules():
    g = KuhnPoker()
    hand = Hand(("K", "J"))
    assert g.legal_moves(hand) == ["check", "bet"]
    assert g.returns(play(g, hand, "check", "check")) == (1.0, -1.0)  # showdown, pot of antes: K wins 1
    assert g.returns(play(g, hand, "bet", "call")) == (2.0, -2.0)  # called bet: 2
    assert g.returns(play(g, hand, "bet", "fold")) == (1.0, -1.0)  # the folder loses its ante
    assert g.returns(play(g, hand, "check", "bet", "fold")) == (-1.0, 1.0)  # player 0 folds to a bet
    assert g.returns(play(g, Hand(("J", "Q")), "check", "bet", "call")) == (-2.0, 2.0)
    assert g.legal_moves(play(g, hand, "check", "bet")) == ["call", "fold"] and g.to_move(play(g, hand, "check")) == 1
    seen = prompt(g, hand, 1)
    assert "Your card: J" in seen and "K" not in seen.split("Your card")[1]  # the opponent's card is private
    cards = {g.initial(random.Random(s)).cards for s in range(50)}
    assert all(a != b for a, b in cards) and len(cards) == 6


def test_negotiation_rules():
    g = Negotiation()
    table = Table(((1, 5), (5, 1)))  # player 0 prizes gold, player 1 wood
    assert len(g.legal_moves(table)) == 18 and g.legal_moves(play(g, table, "give 3 wood for 1 gold")) == [
        "accept", "reject"]
    traded = play(g, table, "give 3 wood for 1 gold", "accept")  # 0: 2 wood 6 gold; 1: 8 wood 4 gold
    assert traded.holdings == ((2, 6), (8, 4))
    assert g.gain(traded, 0) == 1 * -3 + 5 * 1 and g.gain(traded, 1) == 5 * 3 - 1 * 1  # 2 and 14
    over = play(g, traded, "give 1 gold for 1 wood", "reject", "give 1 wood for 1 gold",
                "reject")
    assert g.is_over(over) and g.returns(over) == (-1.0, 1.0)  # 2 < 14
    nothing = play(g, table, *["give 1 wood for 1 gold", "reject"] * 3)
    assert g.returns(nothing) == (0.0, 0.0)
    poor = Table(((1, 1), (1, 1)), ((5, 5), (5, 0)), (0, "give 1 wood for 2 gold"), 1)
    assert g.legal_moves(poor) == ["reject"]  # player 1 holds no gold: it cannot accept


def test_every_game_is_zero_sum_and_ends_under_random_play():
    rng = random.Random(1)
    for game in (g for g in GAMES.values() if g.name != "code_game"):  # (free-text moves: tests/games/test_code_game.py)
        for _ in range(200):
            state = game.initial(rng)
            for _ in range(20):
                if game.is_over(state):
                    break
                state = game.play(state, rng.choice(game.legal_moves(state)))
            assert game.is_over(state), game.name
            r0, r1 = game.returns(state)
            assert r0 == -r1


def test_the_minimax_player_never_loses_and_beats_random_often():
    g, rng = TicTacToe(), random.Random(0)
    results = []
    for i in range(60):
        board, me = g.initial(rng), i % 2
        while not g.is_over(board):
            board = g.play(board, (minimax_player if g.to_move(board) == me else
                                   lambda game, s, r: r.choice(game.legal_moves(s)))(g, board, rng))
        results.append(g.returns(board)[me])
    assert min(results) >= 0 and sum(r == 1 for r in results) > 40
    board = play(g, g.initial(rng), "1", "5", "2")  # X threatens 3: O must block (and can still draw)
    assert minimax_player(g, board, rng) == "3"


@pytest.mark.parametrize("text, move", [
    ("I take the centre.\nMove: 5", "5"), ("move : 5 ", "5"), ("Move: `5`.", "5"),
    ("Move: 1\nno, better:\nMove: 9", "9"), ("Move: 10", None), ("5", None), ("The move: 5", None),
])
def test_moves_are_read_from_the_last_move_line(text, move):
    assert parse_move(text, [str(i) for i in range(1, 10)]) == move


def test_move_lines_match_legal_moves_in_any_case_and_spacing():
    assert parse_move("Move: Give  2 WOOD for 1 gold", ["give 2 wood for 1 gold"]) == "give 2 wood for 1 gold"
    assert forfeit(0) == (-1.0, 1.0) and forfeit(1, 0.5) == (0.5, -0.5)
    first, later = prompt(TicTacToe(), ("",) * 9, 0), prompt(TicTacToe(), ("",) * 9, 0, first=False)
    assert "Answer with your move on its own line, as `Move: <move>`." in first and first.endswith(later)
    assert later.endswith(", ".join(TicTacToe().listed(("",) * 9))) and "TicTacToe" not in later  # the rules: once


def test_role_baselines_are_moving_averages_per_game_and_role():
    rb = RoleBaselines(decay=0.9)  # (the advantages are A = R - b: see tests/games/test_selfplay.py's role_advantages)
    # X: returns 1, 1, -1 (mean 1/3): b = 0.9 * 0 + 0.1 * 1/3 = 1/30; A = R - 1/30
    b = rb.update("tictactoe", "X", 1 / 3)
    assert [r - b for r in (1.0, 1.0, -1.0)] == pytest.approx([29 / 30, 29 / 30, -31 / 30])
    # O, its own baseline: returns -1, -1 (mean -1): b = -0.1
    b = rb.update("tictactoe", "O", -1.0)
    assert [r - b for r in (-1.0, -1.0)] == pytest.approx([-0.9, -0.9])
    # X again, mean 1: b = 0.9 * 1/30 + 0.1 = 0.13
    b = rb.update("tictactoe", "X", 1.0)
    assert [r - b for r in (1.0,)] == pytest.approx([0.87])
    restored = RoleBaselines()
    restored.load_state_dict(rb.state_dict())
    assert restored.values == pytest.approx({"tictactoe/X": 0.13, "tictactoe/O": -0.1}) and restored.decay == 0.9
    with pytest.raises(ValueError):
        RoleBaselines(decay=1.0)
