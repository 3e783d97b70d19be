"""Each sample goes to its environment (the sandbox grades it) as soon as the engine hands it in, while the rest of
the batch still generates: the same episodes, rewards and trajectories as grading after generation, with the
answers that were ready by generation's end counted."""

import threading
import time

import pytest

from execrl.config import load_config
from execrl.models import build_tiny_model, build_tokenizer
from execrl.rewards import outcome
from execrl.rollout import RolloutEngine, SamplingParams
from execrl.sandbox import Grader, Limits
from execrl.tasks import Problem, load_problems
from execrl.tasks.arith import corpus
from execrl.trainer.rollouts import Answers, EpisodeRunner, episode_means, episode_sums


class Unstreamed:
    """The same engine, as a generator that hands its completions in only when it returns."""

    def __init__(self, engine):
        self.engine, self.guides = engine, engine.guides

    def generate(self, *args, **kwargs):
        return self.engine.generate(*args, **kwargs)


class Paced:
    """The streaming engine, whose generate call returns once `ready` answers are in: the samples handed in as they
    ended are answered while it runs, however loaded the machine (the answers' wall time and the decode's are not
    raced)."""

    def __init__(self, engine, answered, ready):
        self.engine, self.guides, self.streams = engine, engine.guides, True
        self.answered, self.ready = answered, ready

    def generate(self, *args, **kwargs):
        out = self.engine.generate(*args, **kwargs)
        with self.answered:
            assert self.answered.wait_for(lambda: self.answered.count >= self.ready, timeout=120)
        return out


def test_samples_are_graded_as_they_end_and_nothing_else_changes(monkeypatch):
    program = r"```python\na, b = map\(int, input\(\)\.split\(\)\)\nprint\(a [-+*] b\)\n```"
    cfg = load_config(None, ["policy.max_total_sequence_length=256", "policy.generation.max_new_tokens=80",
                             f"policy.generation.guided_decoding={{regex: '{program}'}}"])  # real programs to run
    problems, _ = load_problems("builtin:arith-code", "train", count=3)
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, seed=0).eval()
    engine = RolloutEngine(model, tok, slots=2, max_len=256, sync_every=1)  # 12 samples, 2 at a time
    engine.streams = True  # (as on a GPU; on a CPU the engine leaves grading until generation ends)
    params, seeds = SamplingParams(1.0), [11, 12, 13]
    answered = threading.Condition()
    answered.count = 0

    def counted(self, *args, _answer=Answers._answer):
        _answer(self, *args)
        with answered:
            answered.count += 1
            answered.notify_all()

    monkeypatch.setattr(Answers, "_answer", counted)
    runs = []
    with Grader(num_workers=2, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
        for generator in (Paced(engine, answered, ready=10), Unstreamed(engine)):
            runs.append(EpisodeRunner(cfg, generator, tok, grader).run(problems, 4, params, seeds))
    streamed, after = runs
    for a, b in zip(streamed.episodes, after.episodes):
        assert a.trajectory.ids == b.trajectory.ids and a.messages == b.messages
        assert a.reward.total == b.reward.total and outcome(a.sample) == outcome(b.sample)
    assert {outcome(e.sample) for e in streamed.episodes} == {"pass", "fail"}  # the sandbox ran each program
    early = episode_means(episode_sums(streamed))["answered_while_generating_frac"]
    assert 10 / 12 <= early < 1.0  # the first ten were answered while generation ran; the last end with it


class Told:
    """The engine, noting whether each generate call was asked to hand completions in as they end."""

    def __init__(self, engine):
        self.engine, self.asked, self.streams = engine, [], engine.streams

    def generate(self, *args, **kwargs):
        self.asked.append("on_sample" in kwargs)
        return self.engine.generate(*args, **kwargs)


def test_quick_answers_wait_for_generation_to_end():
    """A math check is quick Python: run beside the decode loop it would only take the interpreter's lock from it, so
    math episodes are answered after generation; code episodes as each sample ends, on a GPU (on a CPU the sandbox
    and the decode loop share the cores: nothing is handed in early)."""
    cfg = load_config(None, ["policy.max_total_sequence_length=128", "policy.generation.max_new_tokens=8"])
    tok = build_tokenizer(corpus(), vocab_size=384)
    engine = RolloutEngine(build_tiny_model(tok, seed=0).eval(), tok, slots=4, max_len=128)
    engine.streams = True
    math = [Problem("m/1", [{"role": "user", "content": "What is 2 + 3?"}], "math", answer="5")]
    code, _ = load_problems("builtin:arith-code", "train", count=1)
    told = Told(engine)
    with Grader(num_workers=1, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
        for problems in (math, code):
            rollouts = EpisodeRunner(cfg, told, tok, grader).run(problems, 2, SamplingParams(1.0), [5])
            assert all(e.done for e in rollouts.episodes)
        on_cpu = Told(RolloutEngine(build_tiny_model(tok, seed=0).eval(), tok, slots=4, max_len=128))
        EpisodeRunner(cfg, on_cpu, tok, grader).run(code, 2, SamplingParams(1.0), [5])
    assert told.asked == [False, True] and on_cpu.asked == [False]
    waits = load_config(None, ["policy.max_total_sequence_length=128", "policy.generation.max_new_tokens=8",
                               "env.code.grading_share=0"])  # (0: code waits for generation to end too)
    told = Told(engine)
    with Grader(num_workers=1, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
        EpisodeRunner(waits, told, tok, grader).run(code, 2, SamplingParams(1.0), [5])
    assert told.asked == [False]


@pytest.mark.parametrize("share,during", [(None, 2), (0.5, 4)])
def test_while_generation_runs_a_share_of_the_threads_answer_then_all_of_them(share, during):
    """Each answer's Python work takes the interpreter's lock from the decode loop, so while generation runs at most
    env.code.grading_share of the runner's threads answer (a quarter by default); the rest start when it ends, and an
    environment's error is raised where its answer is read."""
    from execrl.envs import Environment, Step, Trajectory
    from execrl.rollout import Completion
    from execrl.tasks import Problem
    from execrl.trainer.rollouts import Episode

    class Slow(Environment):
        runs_code, lock, now, most = True, threading.Lock(), 0, []

        def step(self, text, num_tokens=0):
            with Slow.lock:
                Slow.now += 1
                Slow.most.append(Slow.now)
            time.sleep(0.05)
            with Slow.lock:
                Slow.now -= 1
            if text == "bad":
                raise ValueError("this environment failed")
            return Step([])

    cfg = load_config(None, [] if share is None else [f"env.code.grading_share={share}"])
    tok = build_tokenizer(corpus(), vocab_size=384)
    Slow.most = []
    with Grader(num_workers=8, limits=Limits(timeout_s=2.0, memory_mb=512)) as grader:
        runner = EpisodeRunner(cfg, None, tok, grader)
        episodes = [Episode(Problem("p", [], "code"), Slow(cfg), [], Trajectory([1])) for _ in range(24)]
        answers = Answers(runner, episodes)
        for i, e in enumerate(episodes):
            answers.give(e, Completion([5], "bad" if i == 23 else "ok", False))
        time.sleep(0.12)  # (a few of the 24 answered, `during` at a time)
        seen = max(Slow.most)
        pending = answers.pending()
        results = [answer.exception() or answer.result() for _, _, answer in pending]
    assert seen == during  # a quarter (or half) of 8 threads
    assert max(Slow.most) > during and sum(isinstance(r, Step) for r in results) == 23
    assert "environment Slow.step (problem p) raised ValueError: this environment failed" in str(results[23])
