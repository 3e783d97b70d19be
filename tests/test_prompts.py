"""Prompts as the model reads them: the tokens counted against --max-prompt-tokens, a base model's BOS, templates
that refuse a conversation."""

from execrl.prompts import PromptConfig, build_messages, drop_long_prompts, render
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
    ids = tok(render(build_messages(PROBLEM, PromptConfig()), tok), add_special_tokens=False)["input_ids"]  # (as generated)
    assert ids.count(tok.bos_token_id) == 1
    kept, dropped = drop_long_prompts([PROBLEM], tok, PromptConfig(), len(ids))
    assert (kept, dropped) == ([PROBLEM], 0)
    assert drop_long_prompts([PROBLEM], tok, PromptConfig(), len(ids) - 1)[1] == 1


def test_a_base_model_reads_its_prompt_after_its_bos():
    """A tokenizer without a chat template got the 'User: ...' transcript encoded without special tokens: a Llama,
    Mistral or Gemma base model read its prompt with no BOS, as it never was trained to (train and eval alike)."""
    tok = bos_tokenizer()
    ids = tok(render(build_messages(PROBLEM, PromptConfig()), tok), add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    assert ids == tok(render(build_messages(PROBLEM, PromptConfig()), tok)[len("<s>"):])["input_ids"]  # as it adds it
    from execrl.models import build_tokenizer

    plain = build_tokenizer([], vocab_size=259)  # (no BOS: nothing added)
    plain.chat_template = None
    assert render(build_messages(PROBLEM, PromptConfig()), plain).startswith("User: Add two numbers.")
