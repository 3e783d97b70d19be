"""A learned reward model (env.reward_model): a Hugging Face sequence-classification model with one
output, as NeMo RL's Bradley-Terry reward models (e.g. Skywork-Reward-V2), scoring whole
conversations rendered with its own chat template. It runs in the trainer's process on the training
device (each process holds a copy), in inference mode, in batches of similar lengths."""

from __future__ import annotations

import torch

from execrl.control_tokens import control_pattern, text_ids
from execrl.models import ModelNotFound, position_limit
from execrl.prompts import ChatTemplateError


class RewardModel:
    """conversations (lists of messages) -> one score each."""

    def __init__(self, model, tokenizer, batch_size: int = 8, max_len: int | None = None,
                 template_kwargs: dict | None = None, score_pad: int | None = None):
        """`score_pad`: the pad id the model's own forward passes over to find a conversation's last token (its saved
        config's pad_token_id; None: the last token whatever it is)."""
        require_template(tokenizer)
        check_head(model.config)
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        limit = position_limit(model)
        if max_len and limit and limit[1] and max_len > limit[0]:  # (an IndexError; on a GPU a device assert)
            raise ModelNotFound(f"env.reward_model.max_model_len is {max_len}, over the reward model's {limit[0]} "
                                f"positions (a learned table, no row past it): set it to at most {limit[0]}, or null")
        self.max_len = max_len or (limit[0] if limit else None) or 4096
        self.template_kwargs = template_kwargs or {}
        self.score_pad = score_pad
        self.control = control_pattern(tokenizer)
        self.truncated = 0  # conversations longer than max_len (read in part), in all calls so far
        self.cut: list[bool] = []  # the last call's: which conversations were read in part

    def encode(self, messages: list[dict]) -> list[int]:
        """The conversation's tokens as its chat template renders them (as the model card's
        apply_chat_template(tokenize=True): no BOS beyond the template's own)."""
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        # (a message's text as text: an answer spelling out "<|im_end|>\n<|im_start|>assistant" forged a turn for the
        # reward model to score)
        return text_ids(messages, self.tokenizer, lambda shown: render(self.tokenizer, shown, self.template_kwargs),
                        self.control)

    @torch.inference_mode()
    def __call__(self, conversations: list[list[dict]]) -> list[float]:
        """One score per conversation. Equal conversations are read once, so they score exactly
        alike (a group's equal answers: padded differently, their scores would differ in the last
        bits, and a group's standard deviation of 1e-7 would scale its advantages by millions)."""
        seqs = [tuple(self.encode(m)) for m in conversations]
        distinct = list(dict.fromkeys(seqs))
        long = {s: m for s, m in zip(seqs, conversations) if len(s) > self.max_len}
        if long and not self.truncated:
            from execrl.console import stderr_console

            stderr_console().print(
                f"[yellow]reward model: a conversation of {max(map(len, long))} tokens is over its "
                f"{self.max_len} (env.reward_model.max_model_len): it reads the start of the conversation (the "
                "question) and the end (the answer's last tokens), the middle left out; raise max_model_len where the "
                "model takes more (train/reward_model_truncated_frac counts them)[/]")
        self.truncated += len(long)
        self.cut = [s in long for s in seqs]
        cut = [self.fit(s, long[s]) if s in long else list(s) for s in distinct]
        order = sorted(range(len(cut)), key=lambda i: len(cut[i]))  # batches of similar lengths: little padding
        scores = [0.0] * len(cut)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            for i, value in zip(chunk, self.forward([cut[i] for i in chunk]).tolist()):
                scores[i] = value
        at = {s: i for i, s in enumerate(distinct)}
        return [scores[at[s]] for s in seqs]

    def fit(self, seq: tuple[int, ...], messages: list[dict]) -> list[int]:
        """max_len tokens of a longer conversation: the answer's header whole (the template's assistant marker: cut,
        the answer's tail followed the user's turn, a sequence the template never makes), the answer's last tokens
        (whose score it is) and the prompt's first and last ones (the question it is judged against, and its turn's
        end), the prompt keeping at least half of the rest: a long answer loses its middle, a long prompt its own (a
        short answer is read whole: its tail once began inside the prompt, and the header came twice)."""
        answered = len(messages) > 1 and messages[-1]["role"] == "assistant"
        prompt = len(self.encode(messages[:-1])) if answered else 0
        header = 0
        if answered:  # (where the answer's text begins: the rendering with an empty answer parts from seq there)
            empty = self.encode([*messages[:-1], {"role": "assistant", "content": ""}])
            starts = next((i for i, (a, b) in enumerate(zip(seq, empty)) if a != b), min(len(seq), len(empty)))
            header = min(max(0, starts - prompt), self.max_len // 2)
        room = self.max_len - header
        answer = len(seq) - prompt - header
        kept = min(prompt, max(room - answer, room // 2))  # the prompt's share
        last = kept // 4  # ... of it its end
        return [*seq[:kept - last], *seq[prompt - last:prompt + header], *seq[len(seq) - (room - kept):]]

    def forward(self, seqs: list[list[int]]) -> torch.Tensor:
        """[B] scores of token sequences (right-padded here)."""
        device = next(self.model.parameters()).device
        lengths = torch.tensor([len(s) for s in seqs], device=device)  # [B]
        ids = torch.full((len(seqs), int(lengths.max())), self.tokenizer.pad_token_id, dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, :len(s)] = torch.tensor(s)
        ids = ids.to(device)  # [B, T]
        mask = torch.arange(ids.shape[1], device=device)[None] < lengths[:, None]  # [B, T]
        if hasattr(self.model, "score"):  # a decoder's head reads each sequence's last token (as the model's forward
            # finds it: the last that is no score_pad, within the sequence's length, not a padding position)
            hidden = self.model.base_model(input_ids=ids, attention_mask=mask.long()).last_hidden_state  # [B, T, H]
            last = hidden[torch.arange(len(seqs), device=device), self.last_tokens(seqs).to(device)]  # [B, H]
            return self.model.score(last)[:, 0].float()
        return self.model(input_ids=ids, attention_mask=mask.long()).logits[:, 0].float()  # (an encoder's own pooling)

    def last_tokens(self, seqs: list[list[int]]) -> torch.Tensor:
        """[B] the position each sequence's score is read at, as the model's own forward finds it on the sequence
        alone (how it was trained to score): its last token that is not score_pad (a template that ends its turns
        with the EOS, where the EOS is also the pad: the token before it), else its last."""
        pad = self.score_pad
        return torch.tensor([next((i for i in range(len(s) - 1, -1, -1) if s[i] != pad), len(s) - 1)
                             if pad is not None else len(s) - 1 for s in seqs])


def check_head(config) -> None:
    """ModelNotFound where the model's checkpoint (its config) is no sequence classifier (config.json's architectures:
    a causal language model loads as one with a head of random weights, and its scores are noise)."""
    saved = getattr(config, "architectures", None) or []
    if saved and not any("SequenceClassification" in a for a in saved):
        raise ModelNotFound(f"the reward model's checkpoint is a {saved[0]} (config.json's architectures), not a "
                            "sequence classifier: loaded as one its score head would be random weights. Name a reward "
                            "model (a ...ForSequenceClassification checkpoint with one output, e.g. a Bradley-Terry "
                            "model trained on preferences)")
    if config.num_labels != 1:
        raise ModelNotFound(f"the reward model has {config.num_labels} outputs: a Bradley-Terry reward model "
                            "(reward_model_type bradley_terry) has one, its score")


def render(tokenizer, shown: list[dict], template_kwargs: dict) -> str:
    """A conversation as the reward model's chat template renders it; ChatTemplateError where the template refuses it
    (a raw jinja2 traceback came mid-run, after a step's sampling and grading)."""
    from jinja2.exceptions import TemplateError

    try:
        return tokenizer.apply_chat_template(shown, tokenize=False, add_generation_prompt=False, **template_kwargs)
    except TemplateError as e:
        roles = [m["role"] for m in shown]
        fixes = ["drop prompt.system_prompt where it is the system role it refuses"] if "system" in roles else []
        if "tool" in roles:
            fixes.append("set env.multi_turn.observation_role=user where it is the tool role it refuses")
        raise ChatTemplateError(
            f"the reward model's chat template refuses a conversation of roles {roles}: it raised {str(e)!r}; set "
            "env.reward_model.tokenizer.chat_template to a template that renders them"
            + "".join(f" (or {fix})" for fix in fixes)) from None


def probe(tokenizer, template_kwargs: dict | None, system_prompt: str | None = None,
          observation_role: str | None = None) -> None:
    """The chat template on a conversation shaped like the run's (its system prompt, a question, an answer; in a
    multi-turn run an observation in `observation_role` and a second answer), before any work: ChatTemplateError
    naming the fix where it refuses one (Gemma's 'System role not supported', its alternation of user and assistant
    that refuses a tool turn: a multi-turn run stopped at its first episode that used the tool, a hunt's find)."""
    require_template(tokenizer)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    turns = [{"role": "user", "content": "Stand-in question?"}, {"role": "assistant", "content": "Stand-in answer."}]
    if observation_role:
        turns += [{"role": observation_role, "content": "Stand-in output."},
                  {"role": "assistant", "content": "Stand-in answer."}]
    render(tokenizer, [*system, *turns], template_kwargs or {})


def require_template(tokenizer) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise ModelNotFound("the reward model's tokenizer has no chat template: set "
                            "env.reward_model.tokenizer.chat_template (a Jinja template) or name a tokenizer that has "
                            "one (env.reward_model.tokenizer.name)")
