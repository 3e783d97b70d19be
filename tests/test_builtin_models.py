"""The built-in tiny models: a byte-level tokenizer, or a BPE of the built-in task's text; a model directory's
loading onto a GPU."""

import pytest
import torch

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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_directory_is_read_straight_onto_the_gpu(tiny_model_dir):
    on_host, _ = load_model_and_tokenizer(str(tiny_model_dir), "cpu", "bfloat16")
    on_gpu, _ = load_model_and_tokenizer(str(tiny_model_dir), "cuda", "bfloat16")
    assert {p.device.type for p in on_gpu.parameters()} == {"cuda"} and not on_gpu.training
    host = on_host.state_dict()
    assert all(torch.equal(t.cpu(), host[k]) for k, t in on_gpu.state_dict().items())
    assert on_gpu.lm_head.weight.data_ptr() == on_gpu.model.embed_tokens.weight.data_ptr() \
        or not on_gpu.config.tie_word_embeddings  # tied weights stay one tensor


def test_a_model_that_needs_its_own_code_is_refused_in_one_line(tiny_model_dir, tmp_path):
    """A config.json whose auto_map names modeling files (InternLM2's): transformers asked "run the custom code?
    [y/N]" and the error then blamed the directory's layout."""
    import json
    import shutil

    import pytest

    from execrl.models import ModelNotFound, load_model_and_tokenizer

    custom = tmp_path / "custom"
    shutil.copytree(tiny_model_dir, custom)
    config = json.loads((custom / "config.json").read_text())
    config.update(model_type="mine2", architectures=["Mine2ForCausalLM"],
                  auto_map={"AutoConfig": "configuration_mine.Mine2Config",
                            "AutoModelForCausalLM": "modeling_mine.Mine2ForCausalLM"})
    (custom / "config.json").write_text(json.dumps(config))
    (custom / "configuration_mine.py").write_text("raise SystemExit('custom code ran')\n")
    with pytest.raises(ModelNotFound, match="needs its own Python code .*auto_map"):
        load_model_and_tokenizer(str(custom), "cpu")


def test_a_tokenizer_naming_no_eos_and_no_pad_pads_with_the_models_end_token(tmp_path):
    """A tokenizer with neither eos_token nor pad_token, its end token only in the model's generation_config: its
    pad stayed None and training died building its first batch (torch.full(..., None))."""
    from transformers import PreTrainedTokenizerFast

    from execrl.models import build_tiny_model, build_tokenizer

    tok = PreTrainedTokenizerFast(tokenizer_object=build_tokenizer([], vocab_size=259).backend_tokenizer,
                                  eos_token=None, pad_token=None)
    model = build_tiny_model(tok)
    model.generation_config.eos_token_id = [2]  # <|im_end|>
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    _, loaded = load_model_and_tokenizer(str(tmp_path), "cpu")
    assert loaded.eos_token is None and loaded.pad_token_id == 2
    model.generation_config.eos_token_id = None
    model.save_pretrained(tmp_path)
    assert load_model_and_tokenizer(str(tmp_path), "cpu")[1].pad_token_id == 0  # (no end token anywhere: 0)
