"""An episode as token ids: the prompt, then segments that are either the model's sampled tokens
(trained on) or the environment's tokens (context only). Built token-in token-out: the sampler's ids
are kept as they came, and an environment turn is tokenized on its own (execrl.envs.chat), so the
tokens the trainer sees are exactly the tokens the model produced or was shown; nothing is
re-tokenized."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Segment:
    ids: list[int]
    sampled: bool  # True: the model's tokens (loss mask 1); False: the environment's (loss mask 0)
    logprobs: list[float] | None = None  # sampled: the sampler's logprob of each token (None: the backend gave none)
    guide: object | None = None  # sampled under guided decoding: its execrl.guided.Guide (the trainer's masks)


@dataclass
class Trajectory:
    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    truncated: bool = False  # ended by a length limit: a model turn ran out of tokens, or an environment turn
                             # did not fit in the context (it is then left out whole, never cut)

    @property
    def completion_ids(self) -> list[int]:
        """Every token after the prompt, model's and environment's, in order."""
        return [t for s in self.segments for t in s.ids]

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def loss_mask(self) -> list[int]:
        """[num completion tokens] 1 on the model's tokens, 0 on the environment's."""
        return [int(s.sampled) for s in self.segments for _ in s.ids]

    @property
    def sampled_ids(self) -> list[int]:
        """The model's tokens only, in order: exactly what the sampler produced."""
        return [t for s in self.segments if s.sampled for t in s.ids]

    @property
    def sampler_logprobs(self) -> list[float] | None:
        """[num completion tokens] the sampler's logprob at each model token, 0 at environment
        tokens."""
        if any(s.sampled and s.logprobs is None for s in self.segments):
            return None
        return [lp for s in self.segments for lp in (s.logprobs if s.sampled else [0.0] * len(s.ids))]

    @property
    def num_sampled(self) -> int:
        return sum(len(s.ids) for s in self.segments if s.sampled)

    def __len__(self) -> int:
        return len(self.prompt_ids) + sum(len(s.ids) for s in self.segments)
