"""Where each step's rollouts come from: generated, graded and scored, one step ahead when async
GRPO is on.

The engine generates with the trainer's own weights (no copy), so on one device generation and
training take turns on the GPU; what runs beside them is the CPU side: sandbox grading and reward
scoring, in a background thread. With `grpo.async_grpo.enabled`, each step of the loop is

    1. generate the *next* step's rollouts with the current weights (version k); a thread starts grading them
    2. wait for *this* step's rollouts: graded while the GPU trained on the last step and generated (1)
    3. train on them (the loop): sampled by version k-1, so one step old

and grading costs the step only what (1) and training leave uncovered. In a multi-turn episode the
environments' answers to earlier turns are needed for the next turn, so they run within (1); the
answers to the last turn (the final grading) run in the thread. Sync GRPO is the same code with
nothing generated ahead: generate, grade (waited for at once), train.

Every batch carries its version (the training step whose weights sampled it); one older than
`grpo.async_grpo.max_trajectory_age_steps` steps when its turn comes is dropped, counted, and its
prompts are generated again with the current weights. Ahead by one step, a batch is never older than
that bound (which async requires to be >= 1); the check keeps the bound a guarantee rather than a
property of the schedule. Off-policy batches are corrected in the loss with the sampler's logprobs
(see execrl.algo.loss).

With `grpo.use_dynamic_sampling` (DAPO; sync GRPO only), a step's batch holds only groups whose
rewards differ: after a round of `batch_multiplier` x num_prompts_per_step prompts is generated and
graded, flat groups are set aside (kept for the step's metrics, not trained on), and further rounds
are generated with the same weights until every process holds its share of num_prompts_per_step
informative groups (informative groups beyond it are set aside too), for at most
`dynamic_sampling_max_gen_batches` + 1 rounds (NeMo RL's count). Each process fills its own share
from its own part of each round, so all processes run the same number of rounds.

Checkpoints store the data position of the oldest batch not yet trained on. After a resume the
prompts that were in flight are drawn again and generated with the restored weights: no prompt is
skipped or repeated, and a resumed run is reproducible, but it is not bit-identical to an
uninterrupted async run (its first batch is on-policy).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from execrl.algo.advantages import flat_groups
from execrl.config import BatchPlan, MasterConfig
from execrl.tasks import Problem
from execrl.trainer import distributed as dist
from execrl.trainer.data import ProblemSampler
from execrl.trainer.flat import deciding_parts
from execrl.trainer.rollouts import Episode, EpisodeRunner, Rollouts, prompt_seeds, sampling


class DynamicSamplingExhausted(RuntimeError):
    """Dynamic sampling generated its last allowed round and the batch still lacks groups whose
    rewards differ."""


@dataclass(frozen=True)
class DynamicSampling:
    round_prompts: int  # prompts drawn per generation round
    max_rounds: int
    groups: int  # informative groups this process trains on per step
    deciding: dict[str, float] | None = None  # the components whose values tell a group informative (flat.
    # deciding_parts: all but those that shape the reward, a length penalty; None: the reward before shaping)


@dataclass
class InFlight:
    problems: list[Problem]
    position: dict  # the sampler's state before these problems were drawn
    version: int  # the training step whose weights sampled them
    step: int  # the training step they were drawn for (keys their sampling draws)
    rollouts: Rollouts
    graded: Future  # -> seconds spent grading and scoring


class RolloutPipeline:
    """A queue of batches in flight (generated, being graded), `lookahead` of them kept beyond the
    one trained next."""

    def __init__(self, generate: Callable[[list[Problem], int, int], Rollouts], grade: Callable[[Rollouts], None],
                 sampler: ProblemSampler, num_prompts: int, lookahead: int, max_age: int,
                 dynamic: DynamicSampling | None = None):
        self.generate, self.grade, self.sampler, self.num_prompts = generate, grade, sampler, num_prompts
        self.lookahead, self.max_age, self.dynamic = lookahead, max_age, dynamic
        self.draw = dynamic.round_prompts if dynamic else num_prompts  # prompts drawn per batch generated
        self.queue: deque[InFlight] = deque()
        self.training: InFlight | None = None  # the batch handed out last (trained at its step)
        self.launching: tuple[int, dict] | None = None  # (step, position) of batches being generated, not yet queued
        self.grading = ThreadPoolExecutor(1, thread_name_prefix="execrl-grading")

    def next(self, version: int, times: dict[str, float], more: bool = True) -> tuple[Rollouts, dict[str, float]]:
        """The graded, scored rollouts to train on with the weights of `version`, and their metrics;
        sets this step's `generate`, `grade`, `grade_wait` and `grade_overlapped` seconds in
        `times`. `more`: another step follows (so its rollouts may be generated ahead)."""
        times["generate"] = times["generated_tokens"] = 0.0  # (this call's: with async GRPO, the next step's batch)
        stale = []
        while self.queue and version - self.queue[0].version > self.max_age:
            stale.append(self.queue.popleft())
            stale[-1].graded.cancel()  # a grading already under way finishes; its result is not used
        if stale:  # (until all of them are back in the queue, a checkpoint starts at the first)
            self.launching = (stale[0].step, stale[0].position)
            self.queue.extendleft(reversed([self._launch(s.problems, s.position, version, s.step, times)
                                            for s in stale]))
        while not self.queue or (more and len(self.queue) <= self.lookahead):
            position, step = self.sampler.state_dict(), version + len(self.queue)
            self.launching = (step, position)  # before the sampler moves on
            self.queue.append(self._launch(self.sampler.next(self.draw), position, version, step, times))
        self.launching = None
        head = self.training = self.queue.popleft()
        t = time.perf_counter()
        in_thread = head.graded.result()  # the environments' answers to the last model turn
        times["grade_wait"] = time.perf_counter() - t
        times["grade"] = head.rollouts.times["grade"]  # ... and to earlier turns (multi-turn), in the loop's thread
        if "reward_model" in head.rollouts.times:  # (the reward model's reading, after grading)
            times["reward_model"] = head.rollouts.times["reward_model"]
        times["grade_overlapped"] = max(in_thread - times["grade_wait"], 0.0)
        assert version - head.version <= self.max_age
        info = {"trajectory_age_mean": float(version - head.version),
                "dropped_stale": float(sum(len(s.rollouts.samples) for s in stale) * dist.world_size())}
        if self.dynamic is None:
            return head.rollouts, info
        rollouts, filled = self._fill(head, version, times)
        times.update({k: rollouts.times[k] for k in ("grade", "reward_model") if k in rollouts.times})
        return rollouts, info | filled

    def _fill(self, head: InFlight, version: int, times: dict) -> tuple[Rollouts, dict[str, float]]:
        """Dynamic sampling: this process's share of informative groups, from as many rounds as
        every process needs (the first round is `head`); the rest of what was generated is in the
        result's `dropped`."""
        want, rounds = self.dynamic.groups, [head.rollouts]
        kept, dropped = informative(head.rollouts, self.dynamic.deciding)

        def short() -> bool:  # any process still short: all generate another round
            dist.meet("grading its round of dynamic sampling")  # (some ranks' grading may take minutes longer)
            return dist.sum_floats(float(len(kept) < want))[0] > 0

        while short():
            if len(rounds) == self.dynamic.max_rounds:  # (dynamic_sampling_max_gen_batches + 1, as NeMo RL counts)
                have = dist.sum_floats(float(min(len(kept), want)))[0]
                raise DynamicSamplingExhausted(
                    f"dynamic sampling: {len(rounds)} rounds of {self.draw} prompts gave {have:.0f} of the "
                    f"{self.num_prompts} groups with differing rewards a step needs"
                    + (f" (their {', '.join(self.dynamic.deciding)}: a length penalty alone does not tell a group's "
                       "answers apart, as NeMo RL's reward shaping does not)" if self.dynamic.deciding else "") +
                    " (most groups get the same reward "
                    "for every answer: the problems are too easy or too hard for the model). Raise "
                    "grpo.dynamic_sampling_max_gen_batches or grpo.batch_multiplier, or check the rewards, or set "
                    "grpo.use_dynamic_sampling=false")
            more = self._launch(self.sampler.next(self.draw), head.position, version, head.step, times,
                                first=len(rounds) * self.draw)
            more.graded.result()
            rounds.append(more.rollouts)
            k, d = informative(more.rollouts, self.dynamic.deciding)
            kept, dropped = kept + k, dropped + d
        episodes = [e for group in kept[:want] for e in group]
        dropped += [e for group in kept[want:] for e in group]
        together = Rollouts(episodes, head.rollouts.group_size, dropped=dropped, max_turns=head.rollouts.max_turns,
                            times={k: sum(r.times.get(k, 0.0) for r in rounds) for k in head.rollouts.times},
                            decoded={k: sum(r.decoded[k] for r in rounds) for k in head.rollouts.decoded})
        num_kept, num_groups = dist.sum_floats(len(kept), sum(len(r.episodes) for r in rounds) / together.group_size)
        return together, {"dynamic_sampling_rounds": float(len(rounds)),
                          "dynamic_sampling_informative_frac": num_kept / max(num_groups, 1),
                          "dynamic_sampling_surplus_groups": num_kept - self.num_prompts}

    def _launch(self, problems: list[Problem], position: dict, version: int, step: int, times: dict,
                first: int = 0) -> InFlight:
        """`first`: the index of problems[0] among the prompts drawn for `step` (it keys their
        sampling draws)."""
        rollouts = self.generate(problems, step, first)  # up to the last model turn (earlier turns' envs included)
        times["generate"] += rollouts.times["generate"]
        times["generated_tokens"] += rollouts.decoded["sampled"]  # (the last turn's are not in the trajectories yet)
        return InFlight(problems, position, version, step, rollouts, self.grading.submit(self._grade, rollouts))

    def _grade(self, rollouts: Rollouts) -> float:
        t = time.perf_counter()
        self.grade(rollouts)
        return time.perf_counter() - t

    def data_position(self, step: int) -> dict:
        """The sampler state to checkpoint at `step` (steps done): that of the oldest batch not yet
        trained on, the one being trained included (a checkpoint on Ctrl-C in the middle of a step);
        batches in flight are redone."""
        batches = [(b.step, b.position) for b in (self.training, *self.queue) if b is not None]
        if self.launching:  # Ctrl-C while a batch was being generated
            batches.append(self.launching)
        pending = [(s, p) for s, p in batches if s >= step]  # the earliest: the later ones were drawn after it
        return dict(min(pending, key=lambda sp: sp[0])[1]) if pending else self.sampler.state_dict()

    def close(self) -> None:
        for batch in self.queue:
            batch.graded.cancel()
        self.grading.shutdown(wait=True, cancel_futures=True)


def build_pipeline(cfg: MasterConfig, plan: BatchPlan, episodes: EpisodeRunner,
                   sampler: ProblemSampler) -> RolloutPipeline:
    """Rollouts of the configured shape; ahead by one step with async GRPO
    (config.checks.validate(cfg) first). Every rank draws the same prompts and runs its share of
    them (whole groups, the same share of each optimizer batch)."""
    grpo, a = cfg.grpo, cfg.grpo.async_grpo
    dynamic = None
    if grpo.use_dynamic_sampling:
        dynamic = DynamicSampling(plan.prompts_per_round, grpo.dynamic_sampling_max_gen_batches + 1,
                                  plan.optimizer_steps_per_rollout * dist.share(plan.prompts_per_optimizer_step),
                                  deciding_parts(cfg.reward))

    def generate(problems: list[Problem], step: int, first: int) -> Rollouts:
        seeds = prompt_seeds(grpo.seed, step, len(problems), first)  # by the prompt's place among the step's prompts
        split = None if dynamic else plan.prompts_per_optimizer_step  # (dynamic sampling: each process fills its share from its part)
        problems, seeds = dist.this_rank(problems, split), dist.this_rank(seeds, split)
        return episodes.start(problems, plan.group_size, sampling(cfg), seeds)

    return RolloutPipeline(generate, episodes.finish, sampler, grpo.num_prompts_per_step, lookahead=1 if a.enabled else 0,
                           max_age=a.max_trajectory_age_steps if a.enabled else 0, dynamic=dynamic)


def informative(rollouts: Rollouts, deciding: dict[str, float] | None = None
                ) -> tuple[list[list[Episode]], list[Episode]]:
    """(the groups whose valid rewards differ, each a list of its G episodes; the episodes of the
    other groups). Decided on the rewards before shaping, as NeMo RL's (an overlong penalty alone
    does not make a group informative), and where `deciding` names the components other than those that shape the
    reward (flat.deciding_parts), on those: a group of answers all wrong is left out whether the length penalty is
    grpo.reward_shaping or a component (a hunt's find: as a component it made such groups informative, and the run
    trained on length alone)."""
    size = rollouts.group_size
    flat = flat_groups(*rollouts.reward_table(unshaped=True))  # (and where the parts differ, but reward.scaling
    if deciding is not None:  # clamps them alike: no advantage either)
        flat |= flat_groups(*rollouts.reward_table(parts=deciding))
    flat = flat.tolist()
    groups = [rollouts.episodes[i * size:(i + 1) * size] for i in range(len(flat))]
    return [x for x, f in zip(groups, flat) if not f], [e for x, f in zip(groups, flat) if f for e in x]
