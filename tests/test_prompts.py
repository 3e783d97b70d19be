"""Prompts as the model reads them: the tokens counted against --max-prompt-tokens, a base model's BOS, templates
that refuse a conversation."""

import subprocess
import sys

import pytest

from execrl.prompts import PromptConfig, build_messages, drop_long_prompts, prompt_ids, render
from execrl.tasks import Problem


def bos_tokenizer(template: str | None = None):
    """A byte-level tokenizer (built here) that adds <s> in front of what it encodes, as Llama's, Mistral's and
    Gemma's do; `template`: its chat template (none: a base model's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([], trainers.BpeTrainer(vocab_size=259, special_tokens=["<unk>", "<s>", "</s>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                    show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   chat_template=template)


PROBLEM = Problem("p/1", [{"role": "user", "content": "Add two numbers."}], "code", tests=None)


def test_the_prompt_limit_counts_the_tokens_generation_encodes():
    """drop_long_prompts counted with the tokenizer's special tokens (a BOS more than generation encodes): a prompt
    that fits exactly was dropped."""
    tok = bos_tokenizer("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    (ids,) = prompt_ids([render(build_messages(PROBLEM, PromptConfig()), tok)], tok)  # (as generated)
    assert ids.count(tok.bos_token_id) == 1
    kept, dropped = drop_long_prompts([PROBLEM], tok, PromptConfig(), len(ids))
    assert (kept, dropped) == ([PROBLEM], 0)
    assert drop_long_prompts([PROBLEM], tok, PromptConfig(), len(ids) - 1)[1] == 1


def llama_tokenizer():
    """transformers' Llama tokenizer (a sentencepiece-style Metaspace that prepends its space to the first word
    only), adding a BOS, with no chat template: a base model's."""
    from transformers import LlamaTokenizer

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in ["\u2581", *sorted(set("User:Addtwonumbers.\nAssistant"))]:
        vocab.setdefault(c, len(vocab))
    merges = [("\u2581", "U"), ("\u2581U", "s"), ("\u2581Us", "e"), ("\u2581Use", "r"), ("U", "s"), ("Us", "e"),
              ("Use", "r")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)


@pytest.mark.parametrize("make", [bos_tokenizer, llama_tokenizer])
def test_a_base_model_reads_its_prompt_after_its_bos(make):
    """A tokenizer without a chat template got the 'User: ...' transcript encoded without special tokens: a Llama,
    Mistral or Gemma base model read its prompt with no BOS, as it never was trained to (train and eval alike). The
    BOS's text before the transcript fixed that but a Llama tokenizer then read 'User' without its word's space."""
    from execrl.trainer.rollouts import encode

    tok = make()
    messages = build_messages(PROBLEM, PromptConfig())
    text = render(messages, tok)
    assert text.startswith("User: Add two numbers.")
    ids = encode(messages, tok)
    assert ids == prompt_ids([text], tok)[0] == tok(text)["input_ids"]  # (the tokenizer's own, with its BOS)
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    from execrl.models import build_tokenizer

    plain = build_tokenizer([], vocab_size=259)  # (no BOS: nothing added)
    plain.chat_template = None
    assert render(build_messages(PROBLEM, PromptConfig()), plain).startswith("User: Add two numbers.")


GEMMA2 = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
          "{% endif %}{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{{ '<s>' + m['role'] + '\\n' + m['content'] + '</s>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<s>model\\n' }}{% endif %}")  # (Gemma 2's refusals, on <s> and </s>)


def test_a_template_that_refuses_the_conversation_is_one_error_naming_the_fix():
    """Gemma 2's template raises on a system message: a raw jinja2 traceback in train and eval (eval's after the
    sandbox had started). Now a ValueError naming the template's message, the roles and the fix, and the set-up
    check (template_notes) raises it on a prompt shaped like the run's, system prompt included."""
    from execrl.prompts import template_notes

    tok = bos_tokenizer(GEMMA2)
    with pytest.raises(ValueError, match="System role not supported") as e:
        render(build_messages(PROBLEM, PromptConfig(system_prompt="Be brief.")), tok)
    assert "['system', 'user']" in str(e.value) and "--system-prompt" in str(e.value)
    with pytest.raises(ValueError, match="roles must alternate") as e:
        render([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "tool",
                                                                                       "content": "c"}], tok)
    assert "observation_role=user" in str(e.value) and "system prompt" not in str(e.value)
    with pytest.raises(ValueError, match="System role not supported"):
        template_notes(tok, "Be brief.")
    assert template_notes(tok) == []


def test_a_template_that_drops_the_system_message_is_an_error_where_a_system_prompt_is_set():
    """(A newcomer's find) a template that renders only user turns dropped prompt.system_prompt from every prompt,
    while config.yaml recorded it."""
    from execrl.prompts import template_notes

    tok = bos_tokenizer("{% for m in messages %}{% if m['role'] == 'user' %}<u>{{ m['content'] }}</u>{% endif %}"
                        "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
    with pytest.raises(ValueError, match="drops the system message, so prompt.system_prompt would reach no prompt"):
        template_notes(tok, "Be brief.")
    assert template_notes(tok) == []


QWEN3_LIKE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
             "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
R1_LIKE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
           "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}")


def test_the_think_format_under_a_template_that_closes_or_opens_the_think_block():
    """Qwen3's template with enable_thinking false writes '<think>\n\n</think>' in its generation prompt: under
    prompt.answer_format=think an answer without a </think> of its own scores 0, and every answer did without a
    word; now a warning at set-up. DeepSeek-R1's distills' template opens the block ('<think>\n'): an answer that
    closes it is in the format (format_ok was always False: a hunt's find)."""
    from execrl.extract import extract
    from execrl.prompts import opens_think, set_template_kwargs, template_notes

    tok = bos_tokenizer(QWEN3_LIKE)
    assert template_notes(tok, None, "think") == []
    set_template_kwargs(tok, {"enable_thinking": False})
    assert template_notes(tok, None, "code") == []
    (warned,) = template_notes(tok, None, "think")
    assert warned.startswith("warning: the chat template's generation prompt closes a think block")
    assert template_notes(bos_tokenizer(R1_LIKE), None, "think") == []
    assert opens_think(bos_tokenizer(R1_LIKE)) and not opens_think(tok) and not opens_think(bos_tokenizer(QWEN3_LIKE))
    opened = extract("add them\n</think>\n\\boxed{3}", "think", want_code=False, thinking=True)
    assert opened.answer == "\\boxed{3}" and opened.format_ok
    assert not extract("add them\n</think>\n\\boxed{3}", "think", want_code=False).format_ok  # (no <think> asked)
    assert not extract("<think>a</think> 3", "think", want_code=False, thinking=True).format_ok
    assert not extract("<think>a</think> b <think>c</think> 3", "think", want_code=False).format_ok
    assert not extract("a <think>b</think> 3", "think", want_code=False).format_ok


def test_eval_with_a_system_prompt_the_template_refuses_stops_in_one_line_before_the_sandbox(tmp_path):
    from execrl.models import build_tiny_model

    tok = bos_tokenizer(GEMMA2)
    build_tiny_model(tok).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "eval", "--model", tmp_path / "m", "--dataset",
                           "builtin:arith-code", "--split", "validation", "--limit", "1", "--system-prompt", "x",
                           "--out", tmp_path / "o", "--workers", "1"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: the chat template refuses a conversation of roles ['system', 'user']: it raised 'System role not " \
           "supported'" in proc.stderr.replace("\n", " ")
    assert "sandbox" not in proc.stderr.split("error:")[0]  # (before the sandbox's start-up)


def test_a_template_that_does_not_parse_is_named_as_such():
    """Any jinja2 error was reported as the template refusing the conversation, with advice to drop the system
    prompt, where the template's own text did not parse."""
    from execrl.prompts import ChatTemplateError, TemplateRaised, apply_template

    tok = bos_tokenizer("{% for m in messages %}{{ m['content'] }{% endfor %}")
    with pytest.raises(ChatTemplateError, match="the chat template is not valid Jinja") as e:
        apply_template(tok, [{"role": "user", "content": "q"}])
    assert not isinstance(e.value, TemplateRaised)


def test_a_tokenizer_without_a_chat_template_is_said():
    """An instruct model's tokenizer saved without its template would train and evaluate on plain 'User:' prompts;
    the run says so at start."""
    from execrl.prompts import template_notes

    (note,) = template_notes(llama_tokenizer())
    assert note.startswith("note: the tokenizer has no chat template: prompts are plain 'User: ...'")
    assert "policy.tokenizer.chat_template" in note


def test_a_developer_message_is_a_system_one_and_a_role_the_template_drops_is_refused():
    """(A hunt's find) NeMo-Gym's rows (the Responses API) may hold their instructions in a "developer" message,
    which Qwen's and Llama's templates render nothing of: the instructions reached no prompt, without a word. A
    developer message is now a system one; a row with another role the template writes nothing of is refused, with
    the fix, where the prompts are measured (train and eval)."""
    from execrl.tasks.problem import chat_messages

    messages = chat_messages([{"role": "Developer", "content": "Write a ```python block."},
                              {"role": "user", "content": "Add two numbers."}])
    assert [m["role"] for m in messages] == ["system", "user"]
    known = ("{% for m in messages %}{% if m['role'] in ['system', 'user'] %}<{{ m['role'] }}>{{ m['content'] }}"
             "{% endif %}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
    tok = bos_tokenizer(known)
    problem = Problem("p/2", messages, "code", tests=None)
    assert "Write a ```python block." in render(build_messages(problem, PromptConfig()), tok)
    assert drop_long_prompts([problem], tok, PromptConfig(), 10_000) == ([problem], 0)
    odd = Problem("p/3", chat_messages([{"role": "critic", "content": "Be terse."},
                                        {"role": "user", "content": "Add."}]), "code", tests=None)
    with pytest.raises(ValueError, match="renders nothing of a message of role 'critic' \\(problem p/3 has one\\)"):
        drop_long_prompts([problem, odd], tok, PromptConfig(), 10_000)
    assert drop_long_prompts([odd], bos_tokenizer(), PromptConfig(), 10_000)[1] == 0  # (no template: 'Critic: ...')
    # a row's own system message under a template that drops system messages (the first Phi-3's): refused too
    user_only = ("{% for m in messages %}{% if m['role'] == 'user' %}<u>{{ m['content'] }}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}<a>{% endif %}")
    with pytest.raises(ValueError, match="role 'system' \\(problem p/2 has one\\).*in the first user message"):
        drop_long_prompts([problem], bos_tokenizer(user_only), PromptConfig(), 10_000)
    plain = Problem("p/4", chat_messages([{"role": "user", "content": "Add."}]), "code", tests=None)
    assert drop_long_prompts([plain], bos_tokenizer(user_only), PromptConfig(), 10_000)[1] == 0


def test_the_tokenizers_identity_is_its_templates_and_not_todays():
    """A resume compares the tokenizer's identity (a template edited in place changed every later prompt, without a
    word); a review's find: Llama 3.2's template writes today's date, and a resume on another day was refused."""
    from execrl.models import build_tokenizer
    from execrl.prompts import tokenizer_identity

    tok = build_tokenizer(["Write a function."], vocab_size=300)
    tok.chat_template = ("{{ 'Today ' + strftime_now('%H:%M:%S %f') }}{% for m in messages %}{{ m['role'] + ': ' + "
                         "m['content'] + '\\n' }}{% endfor %}")
    first = tokenizer_identity(tok)
    import time

    time.sleep(0.01)
    assert tokenizer_identity(tok) == first
    tok.chat_template = tok.chat_template.replace("': '", "'> '")
    assert tokenizer_identity(tok) != first
