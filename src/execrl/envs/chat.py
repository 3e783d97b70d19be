"""Environment turns as token ids, through the tokenizer's chat template, without re-tokenizing the conversation.

Re-rendering a whole conversation and tokenizing it again is how multi-turn trainers ship masking bugs: the text
of a model turn can tokenize differently from the tokens that were sampled, and templates of thinking models drop
the <think> part of earlier turns, so the trainer would score tokens the model never produced. Here only the
*delta* an environment turn adds is rendered and tokenized: the template renders a stand-in conversation, an
assistant message, the environment's messages and the next generation prompt; what follows the assistant message's
content is the environment's turn (whatever the template writes between the generation prompt and a past answer's
content, such as the empty think block of Qwen3 not thinking, came before the sampled tokens). It starts with
whatever closes the assistant message (e.g. `<|im_end|>\\n`), since generation stopped at a stop string rather than
at the end-of-turn token; when the model did end its turn with that token, the part it already produced is left out.
"""

from __future__ import annotations

import os
import secrets

from execrl.control_tokens import MID, SEGMENT, control_pattern, special_ids, takes_space, text_ids
from execrl.prompts import ChatTemplateError, TemplateRaised, apply_template
from execrl.sandbox.inside.protocol import valid_text

_STANDINS = (("Stand-in question?", "Stand-in answer."), ("Another question", "another answer"))


class TurnRenderer:
    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("multi-turn environments render their turns with the tokenizer's chat template, "
                                    "and this tokenizer has none: set policy.tokenizer.chat_template")
        self.tokenizer = tokenizer
        self.rendered_roles: set = set()  # roles whose messages the template was seen to render (check_role)
        self.control = control_pattern(tokenizer)

    def check_role(self, role: str) -> None:
        """Raises ChatTemplateError where the template drops (or never renders the content of) a message of `role`:
        the environment's turns would reach the record but never the model (ChatML templates that skip `tool`)."""
        if role in self.rendered_roles:
            return
        probe = "execrlprobe" + secrets.token_hex(6)  # (letters and digits: kept by templates that quote or escape)
        self.rendered_roles.add(role)  # (before the probe: delta_text asks this again)
        try:
            text, raised = self.delta_text([{"role": role, "content": probe}]), ""
        except TemplateRaised as e:  # (Mistral's "Only user and assistant roles are supported!" on a tool message)
            text, raised = "", f" (it raises {e.said!r} on them)"
        if probe not in text:
            self.rendered_roles.discard(role)
            raise ChatTemplateError(f"the chat template drops the content of messages of role {role!r}{raised}, so "
                                    "the environment's turns would never reach the model: set "
                                    f"env.multi_turn.observation_role to a role it renders "
                                    f"({' or '.join(r for r in ('tool', 'user') if r != role)}), or "
                                    "policy.tokenizer.chat_template to one that renders this role")

    def system_moves(self, observation_role: str) -> bool:
        """Whether the template writes a conversation's system prompt after its first answer (Mistral v0.3's and
        Nemo's put it in the last user message): an episode's later turns are appended to its tokens, not re-rendered,
        so the system prompt stays where its first prompt had it."""
        probe = "execrlsystem" + secrets.token_hex(6)
        (question, answer), (observation, _) = _STANDINS
        try:
            text = self._render([{"role": "system", "content": probe}, {"role": "user", "content": question},
                                 {"role": "assistant", "content": answer},
                                 {"role": observation_role, "content": observation}], True)
        except (TemplateRaised, ChatTemplateError):
            return False
        return text.find(probe) > text.find(answer) >= 0

    def delta_text(self, messages: list[dict]) -> str:
        """The text the chat template adds after an assistant message's content for `messages` and
        the next generation prompt; the same whatever came before (checked on two stand-in
        conversations)."""
        for m in messages:
            self.check_role(m.get("role"))
        deltas = set()
        for question, answer in _STANDINS:
            asked = [{"role": "user", "content": question}]
            prompt = self._render(asked, True)
            full = self._render([*asked, {"role": "assistant", "content": answer}, *messages], True)
            # the answer's content where the rendering leaves the prompt: a generation prompt the template does not
            # write before past answers (Qwen3's empty think block when not thinking, DeepSeek-R1's '<think>\n',
            # Mistral's ' ' before an answer) came before the sampled tokens and is no part of the delta
            shared = len(os.path.commonprefix([prompt, full]))
            at = full.find(answer, shared)
            if at < 0 or question not in full[:at]:
                raise ChatTemplateError(
                    "the chat template does not render an assistant message's content as it is after the "
                    f"conversation before it, so environment turns cannot be appended token by token (got "
                    f"{full[:200]!r}); set policy.tokenizer.chat_template to one that does (e.g. a ChatML template)")
            if full[shared:at].strip():  # (Command-R7B's <|START_RESPONSE|>, gpt-oss's <|channel|>final<|message|>:
                # the model writes it, and its closing, which the template writes too, would close the turn twice)
                raise ChatTemplateError(
                    f"the chat template writes {full[shared:at]!r} before a past answer's content, after where its "
                    "generation prompt ends: the model writes that itself, and the closing the template writes after "
                    "the content would follow the model's own, so environment turns cannot be appended token by "
                    "token; set policy.tokenizer.chat_template to one whose generation prompt ends where an answer's "
                    "content begins")
            deltas.add(full[at + len(answer):])
        if len(deltas) != 1:
            raise ChatTemplateError("the chat template renders an environment turn differently depending on the "
                                    "conversation before it; set policy.tokenizer.chat_template to one that does not")
        return deltas.pop()

    def env_turn(self, messages: list[dict], last_sampled: int | None) -> list[int]:
        """Token ids of the environment's turn, to follow the model's turn that ended with token
        `last_sampled`. A message whose text holds a special token's (a program that prints
        '<|im_end|>\n<|im_start|>assistant'...) is tokenized as plain text: the template's own
        markers are the only control tokens in the turn, never a forged end of turn."""
        # (an environment's text with a lone surrogate: "?", not a crash)
        shown = [{**m, "content": valid_text(m["content"])} if isinstance(m.get("content"), str) else m
                 for m in messages]
        special = last_sampled in special_ids(self.tokenizer)
        # (the token as the template writes it: a sentencepiece decoder reads DeepSeek's '<｜end▁of▁sentence｜>' back
        # without its '▁'s, and the turn after it closed the answer a second time)
        closer = self.tokenizer.convert_ids_to_tokens(last_sampled) if special else ""
        absorbs = special and takes_space(self.tokenizer, last_sampled, "rstrip")  # (Phi-3's <|end|> takes the '\n')

        def render(ms: list[dict]) -> str:  # the model closed its turn itself (<|im_end|>): the text after it; the
            text = self.delta_text(ms)  # whitespace a template writes before it ('\n<|EOT|>') is the model's to write
            at = text.find(closer) if closer else -1
            text = text[at + len(closer):] if at >= 0 and not text[:at].strip() else text
            return text.lstrip() if absorbs else text

        # (it continues the conversation: after the model's control token, or inside its text)
        return text_ids(shown, self.tokenizer, render, self.control, SEGMENT if special else MID)

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return apply_template(self.tokenizer, messages, generation_prompt)
