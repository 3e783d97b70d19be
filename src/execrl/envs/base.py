"""The environment contract: `reset(problem) -> messages`, then `step(assistant_text) -> Step` until
`done`.

An episode is a conversation. The environment poses the problem (`reset`), reads each of the model's
turns (`step`) and answers with messages of its own (an interpreter's output, failing tests) until
it is done, when it says what the episode earned. Environments deal in text only: the token ids the
model is trained on are built by the episode runner (execrl.trainer.rollouts) from the sampler's
tokens and the chat template, never by re-tokenizing this conversation.

A new environment subclasses `Environment`, writes `reset` and `step` (and `finish`, where an
episode can be cut short), overrides the hooks it needs, and is registered by name (`register` in
execrl.envs) or named by import path in `env.multi_turn.kind` (`my_envs:MyEnv`,
`path/to/file.py:MyEnv`). examples/second_chance_env.py is one.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

from execrl.extract import fenced_blocks
from execrl.plugins import OwnCodeFailed, guarded
from execrl.rewards import Reward, Sample, grade_samples, score
from execrl.tasks import Problem


@dataclass
class Step:
    """What the environment says after one model turn: (observation, reward, done, info) of the
    usual protocol."""

    observation: list[dict] = field(default_factory=list)  # messages it adds (role, content); empty when done
    done: bool = False
    reward: Reward | None = None  # when done: the episode's reward (invalid when the sandbox failed)
    sample: Sample | None = None  # when done: the graded final submission (code, verdict)
    tool_call: bool = False  # this turn ran the model's code (an interpreter cell, the public tests)
    tool_error: bool = False  # ... and it failed: an exception, a timeout, a failed test
    more: bool = False  # the model's turn goes on (it stopped at a fence that opens a code block): the next
    # generation continues it from its tokens, and `step` then gets the rest of its text


class Environment:
    """One episode's environment (a fresh one per episode). The runner calls `reset` once, then,
    while the episode is not done and it is `ready`, hands it `observe()`'s news, samples the
    model's turn (stopping at `stop_strings`, under `constraint`) and passes it to `step`; `finish`
    when the context or the turns run out."""

    stop_strings: list[str] = []  # generation stops after any of these (e.g. a closing </code>): the turn is over
    whole_answers = False  # True: an episode without room for a whole answer (max_new_tokens) ends as it stands
    frozen = False  # True: the frozen opponent's generator plays it (self-play); never trained on, in no baseline
    # True: `step` runs programs in the sandbox, so on a GPU the runner hands it each model turn as soon as that
    # turn is generated (in a thread, while the rest of the batch generates). False: a quick step runs after
    # generation, where its Python work does not share the interpreter's lock with the decode loop's
    runs_code = False

    thinking = False  # True: the chat template's generation prompt opens a <think> block (DeepSeek-R1's distills'),
    # so each model turn starts inside it; set by the trainer's runner (prompts.opens_think)

    token_budget: int | None = None  # the limit of the model turn being answered where the context's end cut it (its
    # length), set by the trainer's runner before each step; None: policy.generation.max_new_tokens

    def __init__(self, cfg, grader=None):
        self.cfg, self.grader = cfg, grader

    @property
    def turn_limit(self) -> int:
        """The last model turn's token limit (Sample.max_tokens, which overlong_penalty reads): max_new_tokens, but a
        turn cut where the context ended is at its limit, as one cut at max_new_tokens (it read as short of it, and
        went unpenalized; a whole answer is never measured against the room its prompt left)."""
        return self.token_budget or self.cfg.policy.generation.max_new_tokens

    def reset(self, problem: Problem) -> list[dict]:
        """Start an episode: the messages that pose the problem."""
        raise NotImplementedError

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        """The model's turn (its text, and how many tokens it took) -> the environment's answer."""
        raise NotImplementedError

    def finish(self) -> Step:
        """The episode was cut short (the context or the turns ran out): score what the model
        submitted so far."""
        raise NotImplementedError(f"{type(self).__name__} cannot score an episode cut short: write its finish()")

    def out_of_room(self) -> Step:
        """The context cannot hold what comes next and another answer: as finish(), unless the
        environment charges someone for it (a game: the seat that ran out loses)."""
        return self.finish()

    # -- hooks, with the behaviour of an episode that is the model's alone

    @property
    def ready(self) -> bool:
        """Whether the model is to move now (a game: this seat's turn). An episode never ready waits
        for others."""
        return True

    def observe(self) -> list[dict]:
        """Messages since the model last moved that `step` did not return (a game: the opponent's
        move)."""
        return []

    @property
    def role(self) -> tuple[str, str] | None:
        """(game, role) of a self-play seat, whose baseline its advantage uses (grpo.advantage rae);
        else None."""
        return None

    @property
    def constraint(self) -> tuple[str, str] | None:
        """Guided decoding of the next model turn, as (kind, value) (e.g. ("regex", ...)), or
        None."""
        return None

    def _new_episode(self) -> None:
        """A code environment's count of the episode's turns and generations, and its last turn."""
        self.turns = 0  # model turns: the messages the environment answered or scored (Sample.turns, turns_mean)
        self.retried = 0  # of them, turns the sandbox failed to run (no fault of the model's: no turn it is charged)
        self.generations = 0  # generations (grpo.max_rollout_turns): a turn continued after an opening fence is two
        self.partial, self.partial_tokens = "", 0  # a turn so far, where it stopped at a fence that opened a block
        self.last_text, self.last_tokens = "", 0  # the last whole turn, and its tokens (overlong_penalty reads them)

    def _turn_text(self, text: str, style: str, num_tokens: int) -> str | None:
        """A code environment's model turn counted (self.turns, self.last_text, self.last_tokens), joined to the
        part of it before a fence that opened a block (self.partial): one turn, of both parts' tokens; None where
        this part stops at such a fence with generations left: the turn goes on (Step.more)."""
        if not self.partial:
            self.turns += 1
        text, tokens, self.partial, self.partial_tokens = self.partial + text, self.partial_tokens + num_tokens, "", 0
        self.generations, self.last_text, self.last_tokens = self.generations + 1, text, tokens
        if ((opens_block(text, style) or names_a_tag(text, self.thinking) or self._stopped_inside(text))
                and self.generations < self.cfg.grpo.max_rollout_turns):
            self.partial, self.partial_tokens = text, tokens
            return None
        return text

    def _stopped_inside(self, text: str) -> bool:
        """The turn stopped at a stop string that ends nothing here (one in a cell's code): it goes on."""
        return False

    def metrics(self, sample: Sample, reward: Reward, turns: int) -> list[tuple[str, float]]:
        """The environment's own metrics of its finished episode, (name, value) each: each is logged
        as the mean over the episodes that report it (`turns`: the model turns the episode took)."""
        return []


def final_step(sample: Sample, grader, reward_cfg) -> Step:
    """The episode's end: the sample's code graded against all of the problem's tests, then
    scored."""
    grade_samples([sample], grader)
    return Step(done=True, reward=score(sample, reward_cfg), sample=sample)


# stop strings by code style (plain: the turn's whole text is its code, so it ends where the sample does). A fence
# line with no language (```) closes a block or opens one: where it opened one, the turn goes on (opens_block)
CELL_ENDS = {"tags": ["</code>"], "fence": ["\n```\n"], "auto": ["</code>", "\n```\n"], "plain": []}


NAMED_TAG = re.compile(r"<(\w+)></\1>\s*$")  # "... give it inside <answer></answer>": a tag named, nothing in it
CLOSER = re.compile(r"(?:</\w+>|```)\s*$")  # what a turn's stop strings end it at (a cut turn ends anywhere)


def names_a_tag(text: str, thinking: bool = False) -> bool:
    """The turn stopped at a closing tag that closes nothing (a tag pair named in prose, "inside <code></code>"), or
    inside an open <think> block (a thinking model's plan; `thinking`: the turn began inside one, which the chat
    template opened): no cell and no answer, and the turn goes on (a hunt's find: a thinking model's "I must end with
    <answer></answer>" ended every episode there, reward 0)."""
    inside = text.rfind("<think>") > text.rfind("</think>") or thinking and "</think>" not in text
    return bool(NAMED_TAG.search(text)) or bool(CLOSER.search(text)) and inside


def opens_block(text: str, style: str) -> bool:
    """The turn stopped at a fence that opens a code block (a bare ``` line after its prose), not at one that
    closes it: its code is still to come."""
    if style not in ("fence", "auto") or not text.endswith("```\n"):
        return False
    blocks = fenced_blocks(text)
    return bool(blocks) and not blocks[-1][2] and not blocks[-1][1]


def truncate(text: str, max_chars: int) -> str:
    """At most max_chars characters of text and as many UTF-8 bytes (a bound on its tokens: 500 emoji were ~2,000
    tokens and filled a 1K context), with a visible marker where it was cut."""
    kept = _head(text, max_chars)
    if len(kept) == len(text):
        return text
    return f"{kept}\n... [truncated {len(text) - len(kept)} chars]"


def head_and_tail(text: str, max_chars: int) -> str:
    """At most max_chars characters and UTF-8 bytes of text, as truncate's: its first two thirds and its last third,
    with a visible marker between them (a program's result, printed last, stays)."""
    if utf8_size(text) <= max_chars:
        return text
    head = _head(text, max_chars * 2 // 3)
    tail = tail_of(text, max_chars - utf8_size(head))
    return f"{head}\n... [truncated {len(text) - len(head) - len(tail)} chars]\n{tail}"


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _head(text: str, size: int) -> str:
    return text[:size].encode("utf-8", "surrogatepass")[:size].decode("utf-8", "ignore")


def tail_of(text: str, size: int) -> str:
    """The last `size` characters and UTF-8 bytes of text."""
    return text[-size:].encode("utf-8", "surrogatepass")[-size:].decode("utf-8", "ignore") if size > 0 else ""


ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")  # CSI, OSC (to its
# line's end at most: one left open hid the rest of the output), 2-char


def terminal_text(text: str) -> str:
    """What a terminal shows of a program's output: its escape sequences (colours, cursor moves) dropped, and of each
    line its last part after a carriage return that is not empty (a progress bar's last state; "\\r\\n" ends a
    line): the bar's thousands of states filled the output's budget, and the result printed after them was cut."""
    if "\x1b" in text:
        text = ESCAPES.sub("", text)
    if "\r" not in text:
        return text
    return "\n".join(next((p for p in reversed(line.split("\r")) if p), "") if "\r" in line else line
                     for line in text.split("\n"))


END = ("Step(done=True, reward=Reward(total, parts), sample=Sample(problem, completion, Extracted(answer, format_ok)))"
       " (execrl.envs.Step, execrl.rewards.Reward and Sample, execrl.extract.Extracted; Reward(None): an episode no "
       "reward can be given, left out of the step)")


def messages_checked(messages, where: str) -> list[dict]:
    """Chat messages an environment gave (reset's, a Step's observation, observe's), checked: a list of
    {'role': str, 'content': str}. A string, or a message without its text, failed later in the chat template or the
    tokenizer, far from the environment that made it (a hunt's find)."""
    if isinstance(messages, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                          and isinstance(m.get("content"), str) for m in messages):
        return messages
    shown = " ".join(repr(messages).split())[:120]
    raise OwnCodeFailed(f"{where} gave {type(messages).__name__} {shown}: chat messages are a list of "
                        "{'role': 'user', 'content': 'text'} (a role and a string each); fix the environment")


def step_checked(step, where: str) -> Step:
    """A Step an environment returned (`where`: its class and method), checked before the episode runner reads it:
    an episode's end with no reward ended in an AttributeError far from it, a NaN reward made the step's loss NaN (the
    run then blamed the learning rate), and a reward on a turn that goes on was dropped without a word (hunts'
    finds)."""
    if not isinstance(step, Step):
        raise OwnCodeFailed(f"{where} returned {type(step).__name__}, not a Step: return Step(observation=[...]) for "
                            f"a turn the episode goes on after, {END} for its end")
    messages_checked(step.observation, f"{where}'s Step.observation")
    if not step.done:
        if step.reward is not None:
            raise OwnCodeFailed(f"{where} returned a reward with done=False: the episode's reward is read at its end "
                                f"only, {END}; fold a turn's own reward into it")
        return step
    if not isinstance(step.reward, Reward):
        got = "no reward" if step.reward is None else f"reward={type(step.reward).__name__} {step.reward!r:.60}"
        raise OwnCodeFailed(f"{where} ended the episode with {got}: return {END}")
    values = [("total", step.reward.total)] if step.reward.total is not None else []
    values += [(f"parts[{k!r}]", v) for k, v in (step.reward.parts or {}).items()]
    for name, v in values:
        if not isinstance(v, numbers.Real) or not math.isfinite(v):  # (numpy's floats are Real)
            raise OwnCodeFailed(f"{where} ended the episode with Reward.{name} = {v!r:.60}: a reward is a finite "
                                "number (Reward(None): an episode no reward can be given); fix the environment")
    if not isinstance(step.sample, Sample):
        got = "no sample" if step.sample is None else f"sample={type(step.sample).__name__}"
        raise OwnCodeFailed(f"{where} ended the episode with {got} (the record of its answer: the rollouts file "
                            f"and the verdicts read it): return {END}")
    return step


def called(env: Environment, method: str, problem: Problem, *args):
    """env.method(*args) for the episode runner: what it raises named with the environment, the method and the
    problem (plugins.own_code); what it returns checked (reset's and observe's messages, a Step)."""
    where = f"environment {type(env).__name__}.{method} (problem {problem.id})"
    with guarded(type(env), where, ": fix the environment"):
        out = getattr(env, method)(*args)
    return messages_checked(out, where) if method in ("reset", "observe") else step_checked(out, where)
