"""A policy whose config has dropout (GPT-2's 0.1, a fine-tune's attention_dropout) trains with it off: the engine
samples without dropout, and the trainer, in train mode, scored each token through it (train/logprob_mismatch 4-6
nats, the importance weights 0.4)."""

import re

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from execrl.config import load_config
from execrl.models import build_tokenizer
from execrl.trainer.policy import load_weights


def test_dropout_in_the_models_config_is_off_in_training(tmp_path, capsys):
    tok = build_tokenizer(["def add(a, b):\n    return a + b\n"] * 4, 300)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                       resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    loaded, _ = load_weights(load_config(None, [f"policy.model_name={tmp_path / 'm'}", "policy.device=cpu"]),
                             torch.float32)
    assert "policy: dropout off (attn_pdrop, embd_pdrop, resid_pdrop" in capsys.readouterr().err
    ids = torch.randint(0, len(tok), (2, 24))
    with torch.no_grad():
        scored = [loaded.train()(ids).logits for _ in range(2)]
        sampled = loaded.eval()(ids).logits
    assert torch.equal(scored[0], scored[1]) and torch.allclose(scored[0], sampled, atol=1e-6)
    assert loaded.config.resid_pdrop == 0.0  # (and its checkpoints say so)


def test_the_loss_pass_of_families_with_train_mode_noise_is_the_engines_distribution():
    """GPT-BigCode keeps its attention's rate in an attribute (attn_dropout) the config's zero did not reach; PhiMoE's
    router draws its experts at random in train mode, and Mixtral's jitters its input: the trainer scored tokens up
    to 1 nat off what the engine sampled from, and off its own scores of a call before."""
    import transformers

    from execrl.models import no_dropout, train_mode

    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    configs = [transformers.GPTBigCodeConfig(vocab_size=64, n_embd=32, n_layer=2, n_head=4, attn_pdrop=0.1,
                                             resid_pdrop=0.1, embd_pdrop=0.1),
               transformers.PhimoeConfig(num_local_experts=4, input_jitter_noise=0.1, **small),
               transformers.MixtralConfig(num_local_experts=4, router_jitter_noise=0.1, **small)]
    for config in configs:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
        ids = torch.randint(3, 64, (2, 16))
        with torch.no_grad():
            sampled = model.eval()(ids).logits  # the model as it is (PhiMoE's router_jitter_noise is part of it)
            no_dropout(model)
            torch.testing.assert_close(model.eval()(ids).logits, sampled, msg=config.model_type)
            train_mode(model)
            scored = [model(ids).logits for _ in range(2)]
        assert model.training
        torch.testing.assert_close(scored[0], sampled, msg=config.model_type)
        torch.testing.assert_close(scored[1], sampled, msg=config.model_type)


def test_layerdrop_is_off_a_sinusoidal_position_buffer_is_a_table_and_a_recurrent_model_is_refused_by_name():
    """(A model-family hunt's finds) OPT's layerdrop (XGLM's, BioGPT's) skipped whole layers at random in train mode
    while the start-up said dropout was off (train/logprob_mismatch 1.98 at step 1); CTRL's positions, a sinusoidal
    buffer, read as rotary: a warning, then an IndexError mid-rollout past them; a Mamba (no attention heads) was a
    traceback where the engine's refusal names the transformers backend."""
    from transformers import CTRLConfig, CTRLLMHeadModel, MambaConfig, MambaForCausalLM, OPTConfig, OPTForCausalLM

    from execrl.models import no_dropout, position_limit
    from execrl.rollout.engine import make_decoder
    from execrl.rollout.models import UnsupportedModel

    opt = OPTForCausalLM(OPTConfig(vocab_size=100, hidden_size=32, ffn_dim=48, num_hidden_layers=2,
                                   num_attention_heads=4, word_embed_proj_dim=32, layerdrop=0.5)).train()
    assert "layerdrop" in no_dropout(opt) and opt.model.decoder.layerdrop == 0.0 and opt.config.layerdrop == 0.0
    ids = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        assert torch.equal(opt(ids).logits, opt(ids).logits)  # (no layer skipped at random)
    ctrl = CTRLLMHeadModel(CTRLConfig(vocab_size=100, n_embd=32, dff=48, n_layer=2, n_head=4, n_positions=64))
    assert position_limit(ctrl) == (64, True)
    mamba = MambaForCausalLM(MambaConfig(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         state_size=8))
    with pytest.raises(UnsupportedModel, match="backend=transformers"):
        make_decoder(mamba, 2, 16, False)


def test_a_stop_string_of_a_special_tokens_text_is_refused_at_load(tiny_model_dir):
    """(A hunt's find) policy.generation.stop_strings=["<end_of_turn>"], a special token's text, never ended an answer
    in the engine (completions are read without special tokens): refused where the tokenizer loads, naming
    stop_token_ids with the token's id."""
    from transformers import AutoTokenizer

    from execrl.config import ConfigError

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    cfg = load_config(None, [f"policy.model_name={tiny_model_dir}", "policy.device=cpu",
                             "policy.generation.stop_strings=['<|im_start|>']"])
    with pytest.raises(ConfigError, match=re.escape(f"stop_token_ids=[{start}], and drop the stop string")):
        load_weights(cfg, torch.float32)
    # the EOS's own text (Qwen's "<|im_end|>" as a stop string) ends an answer anyway: let be
    load_weights(load_config(None, [f"policy.model_name={tiny_model_dir}", "policy.device=cpu",
                                    f"policy.generation.stop_strings=['{tok.eos_token}']"]), torch.float32)
