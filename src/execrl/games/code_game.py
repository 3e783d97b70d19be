"""The adversarial code game: the writer (player 0), given a short brief, writes a small Python
program that prints something; the predictor (player 1) reads the program and predicts its exact
output. Writer +1 if the prediction is wrong, -1 if right; the predictor the opposite. A program
that does not run to the end, times out, prints nothing, prints too much or prints differently from
one run to the next loses for the writer (-penalty) and ends the round there: the predictor, which
did not play, gets 0.

Unlike the other games, moves are free text (`read`): the writer's is the program with what it
printed (running it is the environment's job: execrl.sandbox.repeat), the predictor's any text (the
last fenced block, else the whole answer). Outputs are compared after stripping each line's trailing
whitespace and the trailing blank lines."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from execrl.extract import extract, fenced_blocks
from execrl.games.base import Game

# (brief, a program for it, what it prints): the supervised warm-up's examples of both roles
# (tests/games check the outputs in the sandbox)
EXAMPLES = (
    ("a loop that builds up a number", "n = 1\nfor i in range(1, 6):\n    n = n * 3 - i\nprint(n)", "64\n"),
    ("a string transformed character by character", "s = 'execrl'\nprint(''.join(chr(ord(c) + 1) for c in s))",
     "fyfdsm\n"),
    ("a list sorted by an unusual key", "xs = [15, 4, 23, 8, 42, 16]\nprint(sorted(xs, key=lambda x: (x % 5, -x)))",
     "[15, 16, 42, 23, 8, 4]\n"),
    ("a small recursive function", "def f(n):\n    return n if n < 2 else f(n - 1) + 2 * f(n - 2)\nprint(f(9))",
     "171\n"),
    ("a dictionary updated in a loop",
     "d = {}\nfor w in 'to be or not to be'.split():\n    d[w] = d.get(w, 0) + len(w)\nprint(d)",
     "{'to': 4, 'be': 4, 'or': 2, 'not': 3}\n"),
    ("integer arithmetic with // and %", "a, b = 1234, 37\nprint(a // b, a % b, -a // b, -a % b)", "33 13 -34 24\n"),
    ("a while loop with an early break", "n, steps = 27, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1"
     "\n    steps += 1\n    if steps == 20:\n        break\nprint(n, steps)", "274 20\n"),
    ("string slicing with negative steps", "s = 'abcdefghij'\nprint(s[::-3], s[-2:2:-2])", "jgda ige\n"),
    ("a list comprehension with a condition", "print([x * x for x in range(20) if x % 3 == 1 and x % 2])",
     "[1, 49, 169, 361]\n"),
    ("bit operations on small integers", "x = 0b1011\nprint(x << 2, x >> 1, x ^ 6, x & 13, ~x)", "44 5 13 9 -12\n"),
    ("nested loops that print a pattern",
     "for i in range(4):\n    print(''.join('#' if (i + j) % 3 == 0 else '.' for j in range(5)))",
     "#..#.\n..#..\n.#..#\n#..#.\n"),
    ("a generator consumed in part", "def gen():\n    k = 1\n    while True:\n        yield k\n        k = k * 2 + 1"
     "\ng = gen()\nnext(g)\nprint([next(g) for _ in range(4)])", "[3, 7, 15, 31]\n"),
)
BRIEFS = tuple(brief for brief, _, _ in EXAMPLES)


@dataclass(frozen=True)
class Round:
    brief: str
    program: str | None = None
    output: str | None = None  # what the program printed (the same in every run)
    prediction: str | None = None


def same_output(a: str, b: str) -> bool:
    """Equal after stripping each line's trailing whitespace and trailing blank lines (\\r\\n and a bare \\r count
    as \\n: an answer's fenced block cannot hold a bare \\r)."""
    def norm(s: str) -> str:
        lines = s.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        return "\n".join(line.rstrip() for line in lines).rstrip("\n")
    return norm(a) == norm(b)


def fence(text: str) -> str:
    """Backticks that open a block holding `text`: more than its longest run of them (a program's own ``` lines
    would close a ``` block early, and what followed them would read as the prompt's)."""
    return "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))


def answer(player: int, program: str, output: str) -> str:
    """A model's answer in the expected format: the writer's program, the predictor's output."""
    text = program if player == 0 else output.rstrip(chr(10))
    return f"{fence(text)}{'python' if player == 0 else ''}\n{text}\n{fence(text)}"


def prediction_of(text: str) -> str:
    """The predicted output in an answer: its last fenced block, else the whole answer."""
    blocks = fenced_blocks(text)
    return blocks[-1][1] if blocks else text.strip()


class CodeGame(Game):
    name = "code_game"
    max_moves = 2
    roles = ("writer", "predictor")
    free_text = True
    opponents = ()  # no fixed player to measure it against: no validation matches (evaluate on code instead)

    def warmup(self, state: Round, seat: int) -> tuple[list, list[dict]]:
        """The supervised warm-up's reference for `seat` (tasks/matches.warmup_game): the brief's
        example program, written (the writer) or predicted (the predictor, the writer's move being
        its opening)."""
        _, program, output = next(e for e in EXAMPLES if e[0] == state.brief)
        return ([(program, output)] if seat else []), [{"role": "assistant", "content": answer(seat, program, output)}]

    def initial(self, rng: random.Random) -> Round:
        return Round(rng.choice(BRIEFS))

    def to_move(self, state: Round) -> int:
        return 0 if state.program is None else 1

    def legal_moves(self, state: Round) -> list[str]:
        return []  # free text: see read

    def read(self, state: Round, text: str, run) -> tuple[str, str] | str | None:
        """The move in an answer: the writer's (program, output), with `run(program)` the output it
        prints the same in every run (None: no valid program, a forfeit); the predictor's prediction
        (any text)."""
        if self.to_move(state) == 1:
            return prediction_of(text)
        program = extract(text, "code", "fence").code
        output = run(program) if program else None
        return None if output is None else (program, output)

    def play(self, state: Round, move) -> Round:
        if self.is_over(state):
            raise ValueError("the code game's round is over")
        if self.to_move(state) == 0:
            program, output = move
            return Round(state.brief, program, output)
        return Round(state.brief, state.program, state.output, move)

    def is_over(self, state: Round) -> bool:
        return state.prediction is not None

    def returns(self, state: Round) -> tuple[float, float]:
        return (-1.0, 1.0) if same_output(state.prediction, state.output) else (1.0, -1.0)

    def forfeit(self, player: int, penalty: float) -> tuple[float, float]:
        """The writer's program is not valid: it loses, the predictor (which did not play) gets
        nothing."""
        return (-penalty, 0.0) if player == 0 else (penalty, -penalty)

    def out_of_room(self, player: int) -> int:
        """The writer: its program is what fills the predictor's view (a program padded past the predictor's context
        was a draw, not a loss)."""
        return 0

    REJECTIONS = ("no_program", "too_long", "failed", "no_output", "too_much_output", "differs")  # why a writer's
    # program is not valid (execrl.sandbox.repeat): each a rate in the metrics

    def seat_metrics(self, verdict: str, player: int, rejected: str | None) -> list[tuple[str, float]]:
        """The writer's valid-program rate and why its programs were rejected; the predictor's
        accuracy (its win rate, by another name)."""
        if player == 1:
            return [("accuracy", float(verdict == "win"))]
        return [("valid_program_rate", float(verdict != "illegal")),
                *((f"rejected_{why}_rate", float(rejected == why)) for why in self.REJECTIONS)]

    def rules(self, state: Round, player: int) -> str:
        if player == 0:
            return (f"Code game: you are the writer. Brief: {state.brief}. Write a short Python program (no input) "
                    "that prints something the predictor, reading your program, will get wrong. It runs twice, with "
                    "different random seeds and clocks: an error, a timeout, no output, or output that depends on "
                    "them loses. Answer with the program in a ```python block.")
        return ("Code game: you are the predictor. Predict exactly what the writer's program prints. Answer with the "
                "output in a ``` block (a ```` block if the output holds ```).")

    def render(self, state: Round, player: int, salt: int = 0) -> str:
        if player == 0 or state.program is None:
            return "Your move." if self.to_move(state) == player and not self.is_over(state) else ""
        return f"The program:\n{fence(state.program)}python\n{state.program}\n{fence(state.program)}\nYour move."
