"""A learned reward model (env.reward_model): a Hugging Face sequence-classification model with one
output, as NeMo RL's Bradley-Terry reward models (e.g. Skywork-Reward-V2), scoring whole
conversations rendered with its own chat template. It runs in the trainer's process on the training
device (each process holds a copy), in inference mode, in batches of similar lengths."""

from __future__ import annotations

import torch

from execrl.control_tokens import control_pattern, text_ids
from execrl.models import ModelNotFound


class RewardModel:
    """conversations (lists of messages) -> one score each."""

    def __init__(self, model, tokenizer, batch_size: int = 8, max_len: int | None = None,
                 template_kwargs: dict | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise ModelNotFound("the reward model's tokenizer has no chat template: set "
                                "env.reward_model.tokenizer.chat_template (a Jinja template) or name a tokenizer that "
                                "has one (env.reward_model.tokenizer.name)")
        if model.config.num_labels != 1:
            raise ModelNotFound(f"the reward model has {model.config.num_labels} outputs: a Bradley-Terry reward model "
                                "(reward_model_type bradley_terry) has one, its score")
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        self.max_len = max_len or getattr(model.config, "max_position_embeddings", None) or 4096
        self.template_kwargs = template_kwargs or {}
        self.control = control_pattern(tokenizer)
        self.truncated = 0  # conversations longer than max_len (read in part), in all calls so far
        self.cut: list[bool] = []  # the last call's: which conversations were read in part

    def encode(self, messages: list[dict]) -> list[int]:
        """The conversation's tokens as its chat template renders it (a BOS first where the
        tokenizer has one)."""
        def render(shown: list[dict]) -> str:
            return self.tokenizer.apply_chat_template(shown, tokenize=False, add_generation_prompt=False,
                                                      **self.template_kwargs)

        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        ids = text_ids(messages, self.tokenizer, render, self.control)  # (a message's text as text: an answer spelling
        # out "<|im_end|>\n<|im_start|>assistant" forged a turn for the reward model to score)
        bos = self.tokenizer.bos_token_id
        return [bos, *ids] if bos is not None and ids[:1] != [bos] else ids

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
        """max_len tokens of a longer conversation: its prompt's first tokens (at most half of them with the answer's
        header: the question it is judged against), the answer's header whole (the template's assistant marker: cut,
        the answer's tail followed the user's turn, a sequence the template never makes) and the rest from its end
        (the answer's last tokens, whose score it is)."""
        answered = len(messages) > 1 and messages[-1]["role"] == "assistant"
        prompt = len(self.encode(messages[:-1])) if answered else 0
        header = 0
        if answered:  # (where the answer's text begins: the rendering with an empty answer parts from seq there)
            empty = self.encode([*messages[:-1], {"role": "assistant", "content": ""}])
            starts = next((i for i, (a, b) in enumerate(zip(seq, empty)) if a != b), min(len(seq), len(empty)))
            header = min(max(0, starts - prompt), self.max_len // 2)
        head = min(prompt, self.max_len // 2 - header)
        tail = self.max_len - head - header
        return [*seq[:head], *seq[prompt:prompt + header], *seq[len(seq) - tail:]]

    def forward(self, seqs: list[list[int]]) -> torch.Tensor:
        """[B] scores of token sequences (right-padded here)."""
        device = next(self.model.parameters()).device
        lengths = torch.tensor([len(s) for s in seqs], device=device)  # [B]
        ids = torch.full((len(seqs), int(lengths.max())), self.tokenizer.pad_token_id, dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, :len(s)] = torch.tensor(s)
        ids = ids.to(device)  # [B, T]
        mask = torch.arange(ids.shape[1], device=device)[None] < lengths[:, None]  # [B, T]
        if hasattr(self.model, "score"):  # a decoder's head reads each sequence's last token (found by length here,
            # not by looking for the pad token, which may also be a real token such as the EOS)
            hidden = self.model.base_model(input_ids=ids, attention_mask=mask.long()).last_hidden_state  # [B, T, H]
            last = hidden[torch.arange(len(seqs), device=device), lengths - 1]  # [B, H]
            return self.model.score(last)[:, 0].float()
        return self.model(input_ids=ids, attention_mask=mask.long()).logits[:, 0].float()  # (an encoder's own pooling)
