"""Turn a Problem into the text a model continues: system prompt, format instruction, chat
template."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from execrl.control_tokens import control_pattern, templated_ids
from execrl.extract import ANSWER_FORMATS, CODE_STYLES, PLAIN_TURN_END
from execrl.tasks import Problem

_CODE_WHERE = {"fence": "in a single ```python code block", "tags": "inside <code></code> tags",
               "auto": "in a single ```python code block", "plain": "as plain code, with nothing else"}
_FORMAT = {
    "code": "{what}",
    "reasoning": "Reason step by step inside <reasoning></reasoning>, then give {lower} inside <answer></answer>.",
    "think": "Think step by step inside <think></think>, then give {lower}.",
}


class PromptConfig(BaseModel):
    """How problems are posed."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    system_prompt: str | None = Field(None, description="system message put before every prompt (none if null)")
    answer_format: str = Field("code", description="code | reasoning (<reasoning>/<answer>) | think (<think> first)")
    code_style: str = Field("fence", description="where code goes: fence (```python), tags (<code>), auto (either), "
                            "plain (either, else the whole answer)")
    add_instructions: bool = Field(True, description="append a one-line format instruction to each prompt")
    template: str | None = Field(None, description="a format string whose {} is replaced by the problem's text "
                                 "(NeMo RL's prompt_file; {{ }} for literal braces), used instead of the format "
                                 "instruction (null: none)")

    def model_post_init(self, _) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        if self.code_style not in CODE_STYLES:
            raise ValueError(f"code_style must be one of {CODE_STYLES}, got {self.code_style!r}")
        if self.template is not None:
            marker = "execrlPROBLEMprobe"  # (letters: the same under !r, !s and any format spec that keeps text)
            try:
                posed = self.template.format(marker)
            except (IndexError, KeyError, ValueError) as e:  # {x}, {} {}, a lone brace
                raise ValueError(f"template: {type(e).__name__} {e} formatting it with the problem's text: one {{}} "
                                 "where the problem goes, {{ and }} for literal braces") from None
            if marker not in posed:
                raise ValueError("template has no {} placeholder, so the problem's text would be dropped from every "
                                 "prompt: put {} where the problem goes (NeMo RL's prompt files do)")


def instruction(kind: str, cfg: PromptConfig) -> str:
    what = (f"Write your solution {_CODE_WHERE[cfg.code_style]}." if kind == "code"
            else "Put your final answer within \\boxed{}.")
    lower = (f"your solution {_CODE_WHERE[cfg.code_style]}" if kind == "code" else "your final answer within \\boxed{}")
    return _FORMAT[cfg.answer_format].format(what=what, lower=lower)


def build_messages(problem: Problem, cfg: PromptConfig, how: str | None = None) -> list[dict]:
    """The problem's messages with the format instruction (`how`, or the answer format's own) and
    system prompt. `how`: an environment's own instructions (the interpreter's: how to run code and submit), added
    to a problem that brings its own instructions too (which say nothing of the environment)."""
    messages = [dict(m) for m in problem.messages]
    edit = cfg.template is not None or (cfg.add_instructions and (
        how is not None or not problem.metadata.get("own_instructions")))
    last = next((m for m in reversed(messages) if m["role"] == "user"), None)
    if edit and last is None:
        raise ValueError(f"problem {problem.id}: its messages have no user message (roles "
                         f"{[m['role'] for m in messages]}) to hold the prompt's instruction")
    if cfg.template is not None:  # as NeMo RL's processors apply a prompt file: the whole instruction
        last["content"] = cfg.template.format(last["content"])
    elif edit:
        last["content"] = f"{last['content'].rstrip()}\n\n{how or instruction(problem.kind, cfg)}"
    if cfg.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": cfg.system_prompt})
    return messages


TEMPLATE_KWARGS = "execrl_chat_template_kwargs"  # a tokenizer attribute: policy.tokenizer.chat_template_kwargs, and
# the key that keeps them in a saved tokenizer's tokenizer_config.json


def set_template_kwargs(tokenizer, kwargs: dict | None) -> None:
    """The chat template's kwargs (e.g. {enable_thinking: false}) for every prompt the tokenizer renders, and in its
    tokenizer_config.json when saved (save_pretrained writes init_kwargs): a checkpoint's prompts in execrl eval are
    then those its run trained and validated on, not Qwen3's thinking prompts (load_pretrained reads them back)."""
    setattr(tokenizer, TEMPLATE_KWARGS, kwargs)
    tokenizer.init_kwargs.pop(TEMPLATE_KWARGS, None)
    if kwargs:
        tokenizer.init_kwargs[TEMPLATE_KWARGS] = dict(kwargs)


def saved_template_kwargs(tokenizer) -> None:
    """The kwargs a saved tokenizer was saved with (set_template_kwargs), in use again."""
    set_template_kwargs(tokenizer, (getattr(tokenizer, "init_kwargs", None) or {}).get(TEMPLATE_KWARGS))


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot render the run's conversations (or be split into per-turn deltas); the
    message says what to do."""


class TemplateRaised(ChatTemplateError):
    """The chat template itself refused a conversation (its raise_exception): Gemma 2's 'System role not
    supported', Mistral's 'Conversation roles must alternate'. `said`: the template's message."""

    def __init__(self, said: str, roles: list):
        super().__init__(refusal(said, roles))
        self.said = said


def apply_template(tokenizer, messages: list[dict], generation_prompt: bool = True) -> str:
    """The chat template's text, with the run's chat_template_kwargs (e.g. enable_thinking) when it
    set them; TemplateRaised, one line naming the fix, where the template refuses the conversation."""
    from jinja2.exceptions import TemplateError, TemplateSyntaxError

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                             **getattr(tokenizer, TEMPLATE_KWARGS, None) or {})
    except TemplateSyntaxError as e:  # (the template's own text: no conversation would render)
        raise ChatTemplateError(f"the chat template is not valid Jinja ({e.message}, line {e.lineno}): set "
                                "policy.tokenizer.chat_template to one that is") from None
    except TemplateError as e:  # (a raw jinja2 traceback, in eval after the sandbox had started)
        raise TemplateRaised(str(e), [m.get("role") for m in messages]) from None


def refusal(said: str, roles: list) -> str:
    """What to do about a chat template that raised `said` on a conversation of `roles`."""
    fixes = ["drop the system message (prompt.system_prompt or execrl eval's --system-prompt where set; else the "
             "dataset's rows hold it: fold it into their first user message)"] if "system" in roles else []
    if any(r not in ("system", "user", "assistant") for r in roles) or any(
            a == b != "assistant" for a, b in zip(roles, roles[1:])):  # (an environment's turn after the user's)
        fixes.append("set env.multi_turn.observation_role=user")
    fixes.append("(training) set policy.tokenizer.chat_template to a template that renders them")
    return (f"the chat template refuses a conversation of roles {roles}: it raised {said!r}; " + ", or ".join(fixes))


def template_notes(tokenizer, system_prompt: str | None = None, answer_format: str = "code") -> list[str]:
    """Checks of a tokenizer's chat template on a prompt shaped like the run's (a user message, after the system
    prompt where one is set), before the sandbox starts: raises ChatTemplateError where the template refuses it
    (Gemma 2's 'System role not supported') and ValueError where it drops the message's content (every prompt would
    be the same text) or the system prompt; a warning where its generation prompt closes a think block that
    `answer_format` think needs the answer to close; a note where chat_template_kwargs change nothing in it (a
    misspelt name: {enable_thinkng: false} left a Qwen3's thinking on); a note where it has none (a base model's
    tokenizer, or an instruct model's saved without its template), so that the prompts' plain format is not a
    surprise."""
    if not getattr(tokenizer, "chat_template", None):
        return ["note: the tokenizer has no chat template: prompts are plain 'User: ...' / 'Assistant:' text (a base "
                "model's format), and answers end at a next '\\nUser:' line unless stop strings are set "
                "(policy.generation.stop_strings; execrl eval: --stop-string); for an instruct model's format save its "
                "tokenizer with its template (training: or set policy.tokenizer.chat_template)"]
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    apply_template(tokenizer, [*system, {"role": "user", "content": "Stand-in question?"}])
    probe = [{"role": "user", "content": "execrlprobe7f3a"}]
    text = apply_template(tokenizer, probe)
    if probe[0]["content"] not in text:
        raise ValueError("the chat template (policy.tokenizer.chat_template, or the model's own) does not render a "
                         f"message's content (a user message came out as {text[:120]!r}), so every prompt would be the "
                         "same text: set policy.tokenizer.chat_template to one that renders it")
    if system_prompt and "execrlsystem5c1d" not in apply_template(
            tokenizer, [{"role": "system", "content": "execrlsystem5c1d"}, *probe]):
        raise ValueError("the chat template (policy.tokenizer.chat_template, or the model's own) drops the system "
                         "message, so prompt.system_prompt would reach no prompt: set policy.tokenizer.chat_template "
                         "to one that renders it, or put the text in prompt.template (execrl eval: drop "
                         "--system-prompt)")
    notes = [note] if (note := unprompted(tokenizer, probe, text)) else []
    if answer_format == "think" and "</think>" in (opening := generation_prompt(tokenizer, probe)):
        notes.append(f"warning: the chat template's generation prompt closes a think block ({opening!r}: Qwen3's with "
                     "enable_thinking false), and prompt.answer_format=think grades what follows an answer's own "
                     "</think>: an answer that writes none scores 0. Set prompt.answer_format to code or reasoning "
                     "(execrl eval: --answer-format), or turn thinking on (policy.tokenizer.chat_template_kwargs; "
                     "execrl eval: --chat-template-kwargs)")
    kwargs = getattr(tokenizer, TEMPLATE_KWARGS, None) or {}
    unread = sorted(k for k in kwargs if k not in str(tokenizer.chat_template))  # (a name it reads, set to its default,
    if unread and tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True) == text:  # is fine)
        notes.append(f"note: policy.tokenizer.chat_template_kwargs {unread} are names this chat template never "
                     "reads: they change nothing (a misspelling?)")
    return notes


def opens_think(tokenizer) -> bool:
    """Whether the chat template's generation prompt leaves a <think> block open (DeepSeek-R1's distills' '<think>\n',
    QwQ's, Qwen3 Thinking-2507's): the model's turn starts inside it, with no <think> of its own."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    try:
        opening = generation_prompt(tokenizer, [{"role": "user", "content": "Stand-in question?"}])
    except ChatTemplateError:
        return False
    return opening.rfind("<think>") > opening.rfind("</think>")


def generation_prompt(tokenizer, messages: list[dict]) -> str:
    """What the chat template writes after `messages` where add_generation_prompt is set (the assistant's header,
    and a think block's opening or closing where it writes one)."""
    return apply_template(tokenizer, messages).removeprefix(apply_template(tokenizer, messages, False))


def unprompted(tokenizer, probe: list[dict], prompt: str) -> str | None:
    """A warning where the template ignores add_generation_prompt and writes a header before an answer: every
    prompt ends with the user's turn, and the model is sampled continuing it."""
    answer = "execrlanswer9b2e"
    try:
        full = apply_template(tokenizer, [*probe, {"role": "assistant", "content": answer}], False)
        alike = apply_template(tokenizer, probe, False) == prompt
    except ChatTemplateError:
        return None
    header = full[len(prompt):full.find(answer)] if full.startswith(prompt) and answer in full else ""
    if not alike or not header.strip():
        return None
    return (f"warning: the chat template writes {header!r} before an answer and leaves it out of the prompt "
            "(it ignores add_generation_prompt): every prompt ends with the user's turn, and the model is sampled "
            "and trained continuing it. Set policy.tokenizer.chat_template to one that ends the prompt with the "
            "assistant's header when add_generation_prompt is set")


def plain_stops(stops: list[str] | None, tokenizer) -> list[str] | None:
    """The stop strings of a run or an eval: the user's (`stops`, where set), else, with no chat template (the plain
    transcript, render), PLAIN_TURN_END: a base model's answer ran on into made-up 'User: ...' turns to the length
    limit, every one (a hunt's find: 20 of 20, and trained on)."""
    if stops is not None or getattr(tokenizer, "chat_template", None):
        return stops
    return [PLAIN_TURN_END]


def render(messages: list[dict], tokenizer) -> str:
    """The tokenizer's chat template when it has one; otherwise a plain 'Role: text' transcript."""
    if getattr(tokenizer, "chat_template", None):
        return apply_template(tokenizer, messages)
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(turns) + "\n\nAssistant:"


def check_roles(problems: list[Problem], tokenizer) -> None:
    """Refuse, naming the fix, data whose messages have a role other than user and assistant that the chat template
    renders nothing of (Qwen's templates skip a "tool" message before any call, Llama's an unknown role, the first
    Phi-3's and others any system message): its text, a row's instructions, would reach no prompt, without a word
    (a hunt's find for a row's system message, where prompt.system_prompt was refused already)."""
    roles = sorted({m["role"] for p in problems for m in p.messages} - {"user", "assistant"})
    if not roles or not getattr(tokenizer, "chat_template", None):  # (the plain transcript writes every role)
        return
    for role in roles:
        try:
            text, raised = apply_template(tokenizer, [{"role": role, "content": "execrlrole9b2e"},
                                                      {"role": "user", "content": "Stand-in question?"}]), ""
        except TemplateRaised as e:
            text, raised = "", f" (it raised {e.said!r})"
        if "execrlrole9b2e" not in text:
            first = next(p.id for p in problems if any(m["role"] == role for m in p.messages))
            fix = ("Put that text in the first user message in the data" if role == "system" else
                   "Give those messages a role the template writes (system or user) in the data")
            raise ValueError(f"the chat template renders nothing of a message of role {role!r}{raised} (problem "
                             f"{first} has one): its text would reach no prompt. {fix}, or set "
                             "policy.tokenizer.chat_template to a template that renders them")


CHAT_MARKUP = re.compile(r"<\|im_start\|>|<\|start_header_id\|>|<\|eot_id\|>|\[INST\]|<start_of_turn>|"
                         r"<\|(?:user|assistant|system)\|>|<\uff5cUser\uff5c>|<\uff5cAssistant\uff5c>")
# (ChatML, Llama 2 and 3, Gemma, Phi-3, DeepSeek)


def templated(problems: list[Problem]) -> str | None:
    """A warning where prompts already hold a chat template's markup (a dataset saved rendered): the template is
    applied again around them and the markup read as text (a hunt's find: no word was said)."""
    held = [(p.id, found) for p in problems if (found := _markup(p))]
    if not held:
        return None
    (first, found), *_ = held
    return (f"warning: {len(held)} of {len(problems)} prompts (problem {first} the first) already hold a chat "
            f"template's markup ({found!r}): the model's template is applied around them again and the markup read "
            "as text. Give the questions unrendered, as text or messages")


def _markup(problem: Problem) -> str | None:
    """The first chat markup in a problem's prompt (its messages but the assistant's)."""
    return next((hit.group() for m in problem.messages
                 if m["role"] != "assistant" and (hit := CHAT_MARKUP.search(m["content"]))), None)


def drop_long_prompts(problems: list[Problem], tokenizer, cfg: PromptConfig, max_prompt_tokens: int):
    """Problems whose rendered prompt fits, and how many were dropped (long prompts are the classic
    OOM)."""
    check_roles(problems, tokenizer)
    ids = conversation_ids([build_messages(p, cfg) for p in problems], tokenizer)
    kept = [p for p, n in zip(problems, map(len, ids)) if n <= max_prompt_tokens]
    return kept, len(problems) - len(kept)


def prompt_ids(texts: list[str], tokenizer) -> list[list[int]]:
    """Rendered prompts' token ids, as generation and training read them: no special tokens added (a chat template
    writes its own BOS; counting with them was one token long on a BOS tokenizer), but for render's plain transcript
    the BOS id the tokenizer puts first (a Llama, Mistral or Gemma base model reads every sequence after it; as an id,
    not its text before the transcript's, which a sentencepiece tokenizer would encode without the first word's
    space)."""
    if not texts:
        return []
    first = _first_ids(tokenizer)
    return [[*first, *i] for i in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _first_ids(tokenizer) -> list[int]:
    """What prompt_ids puts before a rendered prompt's tokens: the BOS id for a plain transcript, where the tokenizer
    starts its sequences with one; nothing after a chat template."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if getattr(tokenizer, "chat_template", None) or bos is None or tokenizer("x")["input_ids"][:1] != [bos]:
        return []
    return [bos]


def conversation_ids(conversations: list[list[dict]], tokenizer) -> list[list[int]]:
    """Each conversation's token ids as the model reads it (render, then prompt_ids), in one batch, each message's
    text as text: a control token's string in a dataset's prompt or an earlier turn (<|im_start|>system) is never
    the token (control_tokens)."""
    control = control_pattern(tokenizer)
    own = [templated_ids(m, tokenizer, lambda shown: render(shown, tokenizer), control) for m in conversations]
    whole = iter(prompt_ids([render(m, tokenizer) for m, ids in zip(conversations, own) if ids is None], tokenizer))
    return [next(whole) if ids is None else [*_first_ids(tokenizer), *ids] for ids in own]


IDENTITY_PROBE = ("You are a careful programmer.\nWrite f(x) = x² + 1 in Python; print f(12).\n"
                  "```python\nprint(12 ** 2 + 1)\n```")


def tokenizer_identity(tokenizer) -> str:
    """What a run's prompts read as, in a few bytes: the chat template's text, a probe text's token ids, the
    vocabulary's size and its special tokens. A resume compares it: a chat template edited in place (a hub snapshot's
    update keeps the weights and the name) rendered every later step's prompts otherwise, without a word (a hunt's
    find). The template's text, not a conversation it renders: Llama 3.2's writes today's date."""
    import hashlib
    import json

    seen = [getattr(tokenizer, "chat_template", None), tokenizer(IDENTITY_PROBE)["input_ids"], len(tokenizer),
            tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id,
            sorted(tokenizer.all_special_tokens)]
    return hashlib.sha256(json.dumps(seen, default=str).encode()).hexdigest()[:16]
