"""One step's rollouts: G episodes per problem, run through their environments in batches, turn by
turn.

Episodes advance together: each turn, one generate call for every live episode (the first turn
prefills each prompt once for its G samples; later turns send each episode's whole trajectory), then
every live environment steps at once (their sandbox calls run in parallel), and finished episodes
drop out. Trajectories are token ids throughout: the sampler's tokens for the model's turns, the
chat template's tokens for the environment's turns (execrl.envs.chat), never a re-tokenized
conversation. An episode whose next environment turn would not fit in
policy.max_total_sequence_length, or whose model turn ran out of tokens, ends there, marked
truncated.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections import Counter, defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from execrl.envs import Environment, Segment, Step, Trajectory, TurnRenderer, called, make_envs
from execrl.plugins import OwnCodeFailed, guarded
from execrl.prompts import conversation_ids, opens_think, plain_stops
from execrl.rewards import OUTCOMES, Reward, Sample, outcome
from execrl.rewards import judge as score_with
from execrl.rollout import Completion, SamplingParams
from execrl.rollout.completion import text_of
from execrl.rollout.sampling import mix32, request_key
from execrl.sandbox import Grader
from execrl.tasks import Problem
from execrl.trainer import memory


@dataclass
class Episode:
    problem: Problem
    env: Environment
    messages: list[dict]  # the conversation as text, for logs (the trainer uses `trajectory`)
    trajectory: Trajectory
    sample: Sample | None = None  # when done: the graded final submission
    reward: Reward | None = None  # when done
    turns: int = 0  # model turns taken
    tool_calls: int = 0
    tool_errors: int = 0
    answered_early: int = 0  # model turns handed in early (Answers) and answered by the end of their generate call
    more: bool = False  # the last model turn goes on (Step.more): the next one's text is the rest of its message
    cut_by: str | None = None  # what cut a truncated episode, for its rollout row: "max_new_tokens", "context" (the
    # turn ended short of it at policy.max_total_sequence_length: Answers.give) or "answer" (answer_cut)

    @property
    def answer_cut(self) -> bool:
        """Ended early: the environment's answer had no room in policy.max_total_sequence_length."""
        return self.cut_by == "answer"

    @property
    def done(self) -> bool:
        return self.reward is not None

    @property
    def frozen(self) -> bool:
        """A self-play opponent's seat: never trained on, in no baseline or loss normalizer."""
        return bool(getattr(self.env, "frozen", False))

    @property
    def played(self) -> bool:
        """The policy took a turn in it: not a seat that never moved (the other seat ended the match first), nor
        the frozen opponent's."""
        return bool(self.turns) and not self.env.frozen


@dataclass
class Rollouts:
    episodes: list[Episode]  # [num_samples]: each problem's G episodes contiguous
    group_size: int
    times: dict[str, float] = field(default_factory=dict)  # seconds spent generating and in the environments
    max_turns: int = 1  # grpo.max_rollout_turns they ran under (multi-turn: answer_cut_frac is logged)
    # model turns not yet answered: (episode, its completion, the environment's answer to come)
    pending: list[tuple[Episode, Completion, Future]] = field(default_factory=list)
    dropped: list[Episode] = field(default_factory=list)  # generated for the step, not trained on (dynamic sampling)
    # the engine's decode steps for these rollouts: tokens they sampled, and steps x slots (RolloutEngine.decoded);
    # "sampled": the tokens of every completion the generators returned (any backend, an opponent's too)
    decoded: dict[str, int] = field(default_factory=lambda: {"tokens": 0, "slot_steps": 0, "sampled": 0})

    @property
    def generated(self) -> list[Episode]:
        """Every episode generated for the step: those trained on, then those dropped."""
        return self.episodes + self.dropped

    @property
    def trajectories(self) -> list[Trajectory]:
        return [e.trajectory for e in self.episodes]

    @property
    def samples(self) -> list[Sample]:
        return [e.sample for e in self.episodes]

    @property
    def rewards(self) -> list[Reward]:
        return [e.reward for e in self.episodes]

    def reward_table(self, unshaped: bool = False, parts: dict[str, float] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rewards, valid), each [num_groups, G]: a sample the sandbox failed on is invalid, its
        reward 0. unshaped: the rewards before the components added after the scaling (NeMo RL's
        reward shaping); `parts` (component -> weight): the weighted sum of those components instead."""
        def value(r: Reward) -> float:  # (parts an environment's reward does not hold, a game's: the reward before
            if parts is not None and all(name in r.parts for name in parts):  # shaping)
                return sum(w * r.parts[name] for name, w in parts.items())
            return r.unshaped if unshaped or parts is not None else r.total

        rewards = torch.tensor([value(r) if r.valid else 0.0 for r in self.rewards], dtype=torch.float32)
        valid = torch.tensor([r.valid for r in self.rewards], dtype=torch.bool)  # (typed: a rank may hold none)
        return rewards.view(-1, self.group_size), valid.view(-1, self.group_size)


def encode(messages: list[dict], tokenizer) -> list[int]:
    """The conversation's token ids as the model sees it (its chat template; a message's text as text)."""
    return conversation_ids([messages], tokenizer)[0]


def prompt_seeds(seed: int, step: int, num_prompts: int, first: int = 0) -> list[int]:
    """Sampling seeds of a step's prompts by their index in the step's global batch: the same
    samples whichever process generates them."""
    base = mix32(mix32(seed) ^ mix32(step + 0x51ED27))
    return [mix32(base ^ mix32(first + i)) for i in range(num_prompts)]


def sampling(cfg, validation: bool = False) -> SamplingParams:
    """How rollouts sample: policy.generation's temperature, top_p, top_k (validation: its val_*
    ones)."""
    gen = cfg.policy.generation
    if validation:
        return SamplingParams(gen.val_temperature, gen.val_top_p, gen.val_top_k)
    return SamplingParams(gen.temperature, gen.top_p, gen.top_k, gen.ignore_eos)  # greedy ignores top-p/top-k


class Answers:
    """A turn's model turns handed to their environments (env.step, in the runner's threads) each
    as soon as it is generated, where the generator `streams` (generate's on_sample; on a GPU) and
    an environment `runs_code`: the sandbox grades the first samples while the rest still generate,
    at most env.code.grading_share of the runner's threads at once (a quarter by default: each answer's
    Python work takes the interpreter's lock from the decode loop), all of them once generation ends.
    Otherwise they are all handed in at the generator's end (a quick step, e.g. a math check, would
    only slow the decode loop). bench/README.md, "Grading while generation runs", has the figures.
    Only the answers run early: the episodes take them (`advance`) in the runner's `finish`, in
    order."""

    def __init__(self, runner: EpisodeRunner, live: list[Episode], decoded: dict[str, int] | None = None):
        """`decoded`: the engine's decode counts of these turns are added into it (Rollouts.decoded)."""
        self.runner, self.live = runner, live
        self.decoded = {"tokens": 0, "slot_steps": 0, "sampled": 0} if decoded is None else decoded
        self.room = runner.cfg.policy.max_total_sequence_length
        self.given: dict[int, tuple[Completion, Future]] = {}  # id(episode) -> (its completion, the answer)
        self.waiting: deque[tuple[Episode, Completion, Future]] = deque()  # handed in, not started
        self.running, self.lock = 0, threading.Lock()
        self.early: list[Episode] = []  # handed in while generation ran
        self.most: int | None = max(1, runner.threads_while_generating)  # None: no limit

    def generate(self, generator, episode_of, *args, **kwargs) -> None:
        """generator.generate(*args, **kwargs), each completion handed in as it ends where the
        generator streams, the rest at its end; `episode_of(i, j)`: the episode of request (prompt
        i, sample j)."""
        if self.runner.threads_while_generating and getattr(generator, "streams", False) and \
                any(e.env.runs_code for e in self.live):
            kwargs["on_sample"] = lambda i, j, c: self.give(episode_of(i, j), c, early=True)
        before = dict(getattr(generator, "decoded", None) or {})
        for i, group in enumerate(generator.generate(*args, **kwargs)):
            for j, c in enumerate(group):
                if id(e := episode_of(i, j)) not in self.given:  # (not handed in as it ended)
                    self.give(e, c)
        for k, n in (getattr(generator, "decoded", None) or {}).items():  # (the execrl engine's counts)
            self.decoded[k] += n - before[k]

    def give(self, e: Episode, c: Completion, early: bool = False) -> None:
        """`early`: handed in while generation runs."""
        with self.lock:
            self.decoded["sampled"] += len(c.ids)
        c = fit(c, self.room - len(e.trajectory), self.runner.tokenizer)
        turn = getattr(e.env, "partial_tokens", 0) + len(c.ids)  # (with a continued turn's earlier parts)
        cut_by_context = c.truncated and turn < self.runner.cfg.policy.generation.max_new_tokens
        e.env.token_budget = turn if cut_by_context else None  # (a turn the context's end cut is at its limit)
        e.cut_by = ("context" if cut_by_context else "max_new_tokens") if c.truncated else None
        self.given[id(e)] = (c, Future())
        if early:
            self.early.append(e)
        with self.lock:
            self.waiting.append((e, c, self.given[id(e)][1]))
        self._start()

    def pending(self) -> list[tuple[Episode, Completion, Future]]:
        """Every live episode's (episode, completion, answer), once generation is done (the
        answers still waiting start); an episode handed in early whose answer is already in counts
        it (`answered_early`)."""
        for e in self.early:
            e.answered_early += self.given[id(e)][1].done()
        with self.lock:
            self.most = None
        self._start()
        return [(e, *self.given[id(e)]) for e in self.live]

    def _start(self) -> None:
        with self.lock:
            ready = []
            while self.waiting and (self.most is None or self.running < self.most):
                ready.append(self.waiting.popleft())
                self.running += 1
        for e, c, answer in ready:
            self.runner.pool.submit(self._answer, e, c, answer)

    def _answer(self, e: Episode, c: Completion, answer: Future) -> None:
        try:
            answer.set_result(called(e.env, "step", e.problem, c.text, len(c.ids)))
        except BaseException as error:  # (raised where the answer is read: finish)
            answer.set_exception(error)
        finally:
            with self.lock:
                self.running -= 1
            self._start()


@dataclass
class EpisodeRunner:
    """Runs episodes through their environments: what every call needs, held once. `opponent`: the
    generator of self-play's frozen seats (execrl.trainer.opponent); `judge`: the reward model
    (execrl.rewards.reward_model), where the reward reads one."""

    cfg: object  # MasterConfig
    generator: object
    tokenizer: object
    grader: Grader
    opponent: object = None
    judge: object = None
    _renderer: TurnRenderer | None = field(default=None, init=False, repr=False)
    _thinking: bool | None = field(default=None, init=False, repr=False)
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)

    @property
    def renderer(self) -> TurnRenderer:
        """Environment turns as token ids (made on first use: a single-turn task never needs a chat
        template)."""
        if self._renderer is None:
            self._renderer = TurnRenderer(self.tokenizer)
        return self._renderer

    @property
    def thinking(self) -> bool:
        """Whether the chat template opens a <think> block in its generation prompt (prompts.opens_think; found
        once): each environment's turns start inside it."""
        if self._thinking is None:
            self._thinking = opens_think(self.tokenizer)
        return self._thinking

    def run(self, problems: list[Problem], group_size: int, params: SamplingParams,
            seeds: list[int] | None = None) -> Rollouts:
        """Each problem's `group_size` episodes, run to their end and scored."""
        rollouts = self.start(problems, group_size, params, seeds)
        self.finish(rollouts)
        return rollouts

    def start(self, problems: list[Problem], group_size: int, params: SamplingParams,
              seeds: list[int] | None = None) -> Rollouts:
        """Episodes run up to their last model turn: the environments' answers to it (for a
        single-turn task, all of the grading) are left in `pending` for `finish`, which may run in
        another thread (async GRPO). `seeds`: one per problem (see prompt_seeds); a later turn of
        sample j is keyed by (seed, j, turn)."""
        cfg, tokenizer, generator = self.cfg, self.tokenizer, self.generator
        gen, turns = cfg.policy.generation, cfg.grpo.max_rollout_turns
        episodes, prompts = [], []
        for problem in problems:
            envs = make_envs(cfg, self.grader, problem, group_size, frozen=self.opponent is not None)
            for env in envs:
                env.thinking = self.thinking
            messages = [called(env, "reset", problem, problem) for env in envs]
            prompts.append(encode(messages[0], tokenizer))  # the G episodes of a problem share their prompt
            episodes += [Episode(problem, env, m, Trajectory(encode(m, tokenizer) if m != messages[0] else prompts[-1]))
                         for env, m in zip(envs, messages)]
        # (a rank may have no problems, e.g. of a small validation set: it still joins the weights'
        # gathering below)
        stop = (plain_stops(gen.stop_strings, tokenizer) or []) + (episodes[0].env.stop_strings if episodes else []) \
            or None
        rollouts = Rollouts(episodes, group_size, {"generate": 0.0, "grade": 0.0}, max_turns=turns)
        with generator.phase() if hasattr(generator, "phase") else nullcontext():  # a sharded model: gathered once
            for turn in range(turns):
                live = [e for e in episodes if not e.done and e.env.ready]
                if not live:
                    break
                # what changed since each episode last looked (a game: the opponent's move); an
                # episode without room left for it and a model token (a game's seat: a whole answer)
                # ends as it stands
                room = {id(e): cfg.policy.max_total_sequence_length - (
                    gen.max_new_tokens if e.env.whole_answers else 1) for e in live}
                full = [e for e in live if not take_news(e, called(e.env, "observe", e.problem), self, room[id(e)])]
                for e in full:
                    e.trajectory.truncated, e.cut_by = True, "answer"
                    end(e, called(e.env, "out_of_room", e.problem))
                live = [e for e in live if not e.done]
                if not live:
                    continue
                start, answers = time.perf_counter(), Answers(self, live, rollouts.decoded)
                if turn == 0 and len(live) == len(episodes) and all(  # each prompt prefilled once for its G samples
                        e.trajectory.prompt_ids is prompts[i // group_size] for i, e in enumerate(episodes)):
                    guides = [guide_for(episodes[i * group_size], generator, gen) for i in range(len(prompts))]
                    answers.generate(generator, lambda i, j: episodes[i * group_size + j], prompts, group_size,
                                     gen.max_new_tokens, params, seeds=seeds, **stops(stop, guides, cfg),
                                     **constrained(guides))
                else:
                    self._next_turns(live, episodes, turn, group_size, params, stop, seeds, answers)
                rollouts.times["generate"] += time.perf_counter() - start
                rollouts.pending = answers.pending()
                if turn < turns - 1:
                    self.finish(rollouts, last=False)
        return rollouts

    def _next_turns(self, live: list[Episode], episodes: list[Episode], turn: int, group_size: int,
                    params: SamplingParams, stop, seeds, answers: Answers) -> None:
        """A later turn: each live episode's whole trajectory sent to the generator that plays
        it."""
        gen = self.cfg.policy.generation
        key = {id(e): mix32(request_key(seeds[i // group_size], i % group_size) ^ mix32(turn))
               for i, e in enumerate(episodes)} if seeds is not None else None
        for player, eps in players(live, self.generator, self.opponent):
            # the rest of a turn cut at an opening fence: what is left of the turn's max_new_tokens (two generations
            # of a full budget each made a turn of up to twice it, which overlong_penalty then read as overlong)
            budgets = [max(1, gen.max_new_tokens - getattr(e.env, "partial_tokens", 0)) if e.more else
                       gen.max_new_tokens for e in eps]
            guides = [guide_for(e, player, gen) for e in eps]
            answers.generate(player, lambda i, j, eps=eps: eps[i], [e.trajectory.ids for e in eps], 1,
                             budgets if len(set(budgets)) > 1 else budgets[0], params,
                             seeds=None if key is None else [key[id(e)] for e in eps], **stops(stop, guides, self.cfg),
                             **constrained(guides))

    @property
    def threads(self) -> int:
        return max(1, self.grader.pool.num_workers)

    @property
    def threads_while_generating(self) -> int:
        """The threads that may answer model turns while generation runs (Answers): env.code.grading_share of them,
        at least one; 0 where the share is 0 (every answer after generation)."""
        return self.grader.share(self.cfg.env.code.grading_share)

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The threads the environments answer in (their sandbox calls then run in parallel)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="execrl-env")
        return self._pool

    def close(self) -> None:
        """Its threads' queued environment steps cancelled (a run that stops on an error, a reward component's among
        them, exited only once they had run: after the grader closed, never)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def finish(self, rollouts: Rollouts, last: bool = True) -> None:
        """The environments answer the pending model turns (each turn's sandbox calls in parallel);
        episodes that must end early are scored as they stand, and with `last`, so is every episode
        still open. Episodes that ended with their reward waiting for the reward model (`judge`) are
        then scored together."""
        start = time.perf_counter()
        steps = [answer.result() for _, _, answer in rollouts.pending]
        cut = [e for (e, c, _), s in zip(rollouts.pending, steps)
               if not advance(e, c, s, self, self.cfg.policy.max_total_sequence_length, last)]
        if last:  # environments that do not count turns end with the budget
            cut = [e for e in rollouts.episodes if not e.done]
        # (a game's answer cut at max_new_tokens is out of room too: as a draw, a losing seat padded its answer into
        for e, s in zip(cut, self.pool.map(lambda e: called(e.env, "out_of_room" if e.answer_cut or (  # one)
                e.env.whole_answers and e.trajectory.truncated) else "finish", e.problem), cut)):
            end(e, s)
        rollouts.pending = []
        rollouts.times["grade"] += time.perf_counter() - start
        waiting = [e for e in rollouts.episodes if e.done and e.reward.pending]
        if waiting:
            if self.judge is None:
                raise RuntimeError("the reward reads a reward model (component reward_model) but none was given")
            start = time.perf_counter()
            with memory.phase("the reward model", self.cfg):
                scored = score_with(self.judge, [(e.messages, e.sample) for e in waiting], self.cfg.reward)
            for e, reward in zip(waiting, scored):
                e.reward = reward
            rollouts.times["reward_model"] = rollouts.times.get("reward_model", 0.0) + time.perf_counter() - start


def guide_for(e: Episode, generator, gen):
    """The constraint of the episode's next model turn (guided decoding), compiled for the
    generator: the environment's for this turn where it sets one (`constraint`: (kind, value)), else
    its problem's (a dataset row's guided_decoding, on every turn), else policy.generation's for the
    turn (guided_decoding_per_turn, else guided_decoding), else None."""
    constraint = e.env.constraint or e.problem.metadata.get("guided_decoding")
    if constraint is None:
        per_turn = gen.guided_decoding_per_turn
        turn = e.turns - 1 if getattr(e, "more", False) else e.turns  # (the rest of a turn: that turn's, begun)
        chosen = per_turn[min(turn, len(per_turn) - 1)] if per_turn else gen.guided_decoding
        constraint = None if chosen is None else chosen.constraint
    return None if constraint is None else generator.guides.get(*constraint)


def stops(stop: list[str] | None, guides: list, cfg) -> dict:
    """generate's stop-string arguments for a call: where a request is held to a constraint and a turn is a whole
    answer (not the interpreter's, whose cells run where they close), the user's own only for it (guided_stops where
    the call also has free requests): the environment's cell ends cut a constrained turn at a bare ``` opening its
    block, and its rest, a new generation, started the constraint again (the turn no longer kept to it); the
    constraint shapes the turn and ends it (the plain transcript's '\\nUser:' too: prompts.plain_stops)."""
    held = [g is not None for g in guides]
    if cfg.env.multi_turn.kind == "interpreter" or not any(held):
        return {"stop_strings": stop}
    own = cfg.policy.generation.stop_strings or None
    return {"stop_strings": own} if all(held) else {"stop_strings": stop, "guided_stops": own or []}


def constrained(guides: list) -> dict:
    """generate's `guides` argument where any request is constrained (a generator without guided
    decoding is then never asked for it)."""
    return {"guides": guides} if any(g is not None for g in guides) else {}


def players(live: list[Episode], generator, opponent) -> list[tuple[object, list[Episode]]]:
    """(generator, its episodes) for a turn: the policy's, and the frozen opponent's seats (not
    trained on)."""
    theirs = [e for e in live if e.env.frozen]  # (only where an opponent is given: make_envs)
    mine = [e for e in live if not e.env.frozen]
    return [(g, eps) for g, eps in ((generator, mine), (opponent, theirs)) if eps]


def take_news(e: Episode, news: list[dict], runner: EpisodeRunner, room: int) -> bool:
    """Messages for an episode before its next turn: its prompt, if it has not had a turn yet; else
    an environment turn after its last one. False (and nothing added): the trajectory would then be
    longer than `room`."""
    if e.turns == 0 and news:
        e.messages = news
        e.trajectory = Trajectory(encode(news, runner.tokenizer))
    elif news:
        last = e.trajectory.segments[-1].ids if e.trajectory.segments else []
        ids = runner.renderer.env_turn(news, last[-1] if last else None)
        if len(e.trajectory) + len(ids) > room:
            return False
        e.messages += news
        e.trajectory.segments.append(Segment(ids, False))
    return len(e.trajectory) <= room


def fit(c: Completion, room: int, tokenizer) -> Completion:
    """The completion cut to the room left in the context (the engine stops there itself;
    transformers may not)."""
    if len(c.ids) <= room:
        return c
    ids = c.ids[:room]
    return Completion(ids, text_of(tokenizer, ids), True,
                      None if c.logprobs is None else c.logprobs[:room], c.guide)


def advance(e: Episode, c: Completion, step: Step, runner: EpisodeRunner, max_len: int, last: bool = False) -> bool:
    """Add a model turn and the environment's answer to the episode. False: the episode must end
    early (a model turn ran out of tokens, or the environment's turn does not fit): the environment
    then scores it as it stands. `last`: the turns are spent, so no model turn reads an answer: none is added
    (it took sequence length for nothing, and one that did not fit marked an uncut episode truncated)."""
    e.turns += not e.more  # (the rest of a turn cut at an opening fence is the same turn: one generation more)
    e.tool_calls += step.tool_call
    e.tool_errors += step.tool_error
    if e.more:  # the rest of a turn that stopped at a fence opening a code block: one message
        e.messages[-1] = {"role": "assistant", "content": e.messages[-1]["content"] + c.text}
    else:
        e.messages.append({"role": "assistant", "content": c.text})
    e.more = step.more
    trained = not e.env.frozen  # (a frozen opponent's turns: context, never trained on)
    e.trajectory.segments.append(Segment(c.ids, trained, c.logprobs if trained else None,
                                         c.guide if trained else None))
    e.trajectory.truncated = c.truncated
    if step.done:
        end(e, step)
        return True
    if c.truncated or last:
        return False
    if not step.observation:  # nothing to say yet (a game: the opponent is to move)
        return True
    env_ids = runner.renderer.env_turn(step.observation, c.ids[-1] if c.ids else None)
    if len(e.trajectory) + len(env_ids) >= max_len:  # no room for it and a model token after it: never cut it
        e.trajectory.truncated, e.cut_by = True, "answer"
        return False
    e.trajectory.segments.append(Segment(env_ids, False))
    e.messages += step.observation
    return True


def end(e: Episode, step: Step) -> None:
    e.sample, e.reward = step.sample, step.reward


# names an environment's metrics() may not take: they would replace the trainer's own in the record (a hunt's find:
# an environment's reward_mean of 42 was train/reward_mean, the rewards all 0); the step's own (train/loss, ...) too
BUILT_IN_PREFIXES = ("reward/", "reward_by_turns/", "verdict/", "reward_model_")
OWN_METRICS = {"reward_std", "reward_sq_mean", "loss", "entropy", "kl", "clip_frac", "clip_frac_high", "clip_frac_low",
               "grad_norm", "skipped_steps", "logprob_mismatch", "sampler_kl", "is_weight", "is_truncated_frac", "lr",
               "valid_frac", "flat_group_frac", "adv_abs_max", "trajectory_age_mean", "dropped_stale"}


def episode_sums(rollouts: Rollouts, kinds: set[str] | None = None) -> dict[str, float]:
    """Each per-episode metric's sum over the episodes generated (key k) and the number of episodes
    it is over (key k#n), so that several processes' dicts add up (a missing key counting 0) to
    those of all their episodes: see episode_means. Over the episodes the policy played
    (Episode.played: in self-play neither a seat that never moved nor the frozen opponent's):
    rewards over the valid ones (the sandbox answered), the rest over all; turns, tool calls and
    errors per episode, the mean reward of the episodes that took n turns, the environment's own
    metrics (a game's by game and role), the reward model's raw score (whatever its component makes
    of it); and, over the policy's seats, moved or not, the fraction of each verdict of the `kinds`
    of task (default: those of these episodes; pass the dataset's when processes may hold
    different ones)."""
    seats = [e for e in rollouts.generated if not e.env.frozen]  # (the policy's: the verdicts' denominator)
    eps = [e for e in seats if e.played]
    valid = [e for e in eps if e.reward.valid]
    sums = {"reward_mean": (sum(e.reward.total for e in valid), len(valid)),
            "reward_sq_mean": (sum(e.reward.total ** 2 for e in valid), len(valid)),  # (for the std: log_step)
            "completion_len_mean": (sum(e.trajectory.num_sampled for e in eps), len(eps)),  # the model's tokens
            "truncated_frac": (sum(e.trajectory.truncated for e in eps), len(eps)),
            "turns_mean": (sum(e.turns for e in eps), len(eps)),
            "tool_calls_mean": (sum(e.tool_calls for e in eps), len(eps)),
            "tool_errors_mean": (sum(e.tool_errors for e in eps), len(eps)),
            # environment answers (grading) done while generation still ran, per model turn
            "answered_while_generating_frac": (sum(e.answered_early for e in eps), sum(e.turns for e in eps))}
    if rollouts.max_turns > 1:  # episodes ended early because the environment's answer did not fit: never read
        sums["answer_cut_frac"] = (sum(e.answer_cut for e in eps), len(eps))
    parts = defaultdict(lambda: (0.0, 0))
    for e in valid:
        judged = [("reward_model_score", e.sample.rm_score), ("reward_model_truncated_frac", float(e.sample.rm_cut))] \
            if e.sample.rm_score is not None else []
        own = own_metrics(e, sums)
        for name, value in [*(("reward/" + k, v) for k, v in e.reward.parts.items()),
                            (f"reward_by_turns/{e.turns}", e.reward.total), *own, *judged]:
            parts[name] = (parts[name][0] + value, parts[name][1] + 1)
    # every outcome of the kinds of task, seen or not: then each process's count of episodes enters
    # every fraction's denominator (and the curves have no gaps)
    counts = Counter(outcome(e.sample) for e in seats)
    for verdict in {o for kind in kinds or {e.problem.kind for e in seats} for o in OUTCOMES[kind]}:
        parts[f"verdict/{verdict}"] = (counts[verdict], len(seats))
    pairs = sums | dict(sorted(parts.items()))
    return {k: s for k, (s, _) in pairs.items()} | {f"{k}#n": float(n) for k, (_, n) in pairs.items()}


def own_metrics(e: Episode, built_in: dict) -> list[tuple[str, float]]:
    """An environment's metrics of its finished episode (Environment.metrics), checked: (name, finite number) pairs,
    under names of their own (a hunt's find: an environment's reward_mean of 42 was train/reward_mean, the rewards
    all 0; a NaN one was the curve's NaN with no word of whose)."""
    where = f"environment {type(e.env).__name__}.metrics (problem {e.problem.id})"
    with guarded(type(e.env), where, ": fix the environment"):
        own = list(e.env.metrics(e.sample, e.reward, e.turns))
    for pair in own:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], numbers.Real) and math.isfinite(pair[1])):
            raise OwnCodeFailed(f"{where} returned {' '.join(repr(pair).split())[:80]}: each metric is a pair "
                                "(name, finite number); fix the environment")
        if pair[0] in built_in or pair[0] in OWN_METRICS or pair[0].startswith(BUILT_IN_PREFIXES):
            raise OwnCodeFailed(f"{where} returned {pair[0]!r}, a name of execrl's own metrics (train/{pair[0]}), "
                                "which it would replace in the record: give it another name")
    return [(name, float(value)) for name, value in own]


def episode_means(sums: dict[str, float]) -> dict[str, float]:
    """The metrics' means from episode_sums (of one process's episodes, or summed over
    processes)."""
    return {k: v / max(sums[f"{k}#n"], 1) for k, v in sums.items() if not k.endswith("#n")}


def rollout_rows(episodes: list[Episode], tokenizer) -> list[dict]:
    """One row per episode: the whole conversation, the exact text the trainer saw after the prompt,
    the verdict of each test, and for a truncated one the limit that cut it (`cut_by`). A self-play seat the frozen
    opponent played is marked `"trained": false` with its `"seat"` (a hunt's find: its rows read as the policy's, and
    their mean was not train/reward_mean)."""
    return [{"problem": e.problem.id, "prompt": tokenizer.decode(e.trajectory.prompt_ids),
             "completion": tokenizer.decode(e.trajectory.completion_ids), "messages": e.messages,
             "code": e.sample.extracted.code, "verdict": outcome(e.sample), "reward": e.reward.total,
             "parts": e.reward.parts, "turns": e.turns, "tool_calls": e.tool_calls, "tool_errors": e.tool_errors,
             "truncated": e.trajectory.truncated,
             **({"cut_by": e.cut_by} if e.trajectory.truncated else {}),
             "tests": [t.verdict.value for t in e.sample.result.tests] if e.sample.result is not None else [],
             **({"trained": False, "seat": getattr(e.env, "seat", None)} if e.env.frozen else {})}
            for e in episodes]
