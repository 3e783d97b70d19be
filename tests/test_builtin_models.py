"""The built-in tiny models: a byte-level tokenizer, or a BPE of the built-in task's text."""

from execrl.models import TASK_VOCAB, TINY_CODER, TINY_CODER_BPE, load_model_and_tokenizer


def test_the_bpe_tiny_coder_reads_each_task_word_as_one_token_and_trains(tmp_path):
    model, tok = load_model_and_tokenizer(TINY_CODER_BPE, "cpu", seed=1)
    assert len(tok) == TASK_VOCAB == model.config.vocab_size
    for word in ("maximum", "minimum", "product", "difference"):
        assert len(tok(" " + word, add_special_tokens=False)["input_ids"]) == 1, word
    _, again = load_model_and_tokenizer(TINY_CODER_BPE, "cpu", seed=1)
    assert tok.get_vocab() == again.get_vocab()  # trained on the same text: the same tokenizer every time
    _, byte_tok = load_model_and_tokenizer(TINY_CODER, "cpu")
    assert len(byte_tok(" maximum", add_special_tokens=False)["input_ids"]) == 8
    from .trainer.test_train import run

    done, d = run(tmp_path, "bpe", f"policy.model_name={TINY_CODER_BPE}", "grpo.max_num_steps=1",
                  "checkpointing.enabled=false")
    assert done.step == 1 and (d / "metrics.jsonl").exists()
