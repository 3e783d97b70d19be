"""A dataset of your own: a function that returns problems. Name it in the config by import path:

    execrl train data.train.dataset_name=examples/own_dataset.py:load

`load(split, **options)` gets the split (data.train.split, data.validation.split), and where it takes them: `seed`
(grpo.seed), `path` (data.train.path) and each of data.train.options. It returns execrl.tasks.Problem objects: the
messages that pose the problem, its kind (code or math) and, for code, its tests.
"""

import random

from execrl.sandbox import StdioTests
from execrl.tasks import Problem

WORDS = ["apple", "river", "stone", "cloud", "lemon", "tiger", "piano", "mango", "zebra", "quilt"]


def load(split, seed=0, count=512):
    """Reverse the words of a line: `count` problems of four stdin/stdout tests each."""
    rng = random.Random(f"{split}-{seed}")
    problems = []
    for i in range(count):
        lines = [" ".join(rng.sample(WORDS, rng.randint(2, 4))) for _ in range(4)]
        prompt = "Read a line of words from standard input and print the words in reverse order."
        tests = StdioTests([line + "\n" for line in lines], [" ".join(line.split()[::-1]) + "\n" for line in lines])
        problems.append(Problem(f"reverse/{split}/{i}", [{"role": "user", "content": prompt}], "code", tests=tests))
    return problems
