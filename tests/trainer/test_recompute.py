"""Activation checkpointing by scope (trainer/recompute.py): the same gradients as without it, less kept for the
backward, and with `mlp` the down projection not run again."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from execrl.config.errors import ConfigError
from execrl.trainer import recompute

HIDDEN, INTERMEDIATE = 32, 96


def model(scope: str | None) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                                     num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2))
    if scope:
        recompute.enable(m, scope)
    return m.train()


class Products(TorchDispatchMode):
    """The output widths of the matrix products run."""

    def __init__(self):
        super().__init__()
        self.widths = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in recompute._GEMMS:
            self.widths.append(out.shape[-1])
        return out


def run(scope: str | None):
    """Each parameter's gradient, the bytes kept for the backward, and the products the backward ran."""
    m = model(scope)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    kept = []

    def pack(t):
        kept.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = m(tokens, labels=tokens).loss
    backward = Products()
    with backward:
        loss.backward()
    return {n: p.grad for n, p in m.named_parameters()}, sum(kept), backward.widths


def same_gradients(grads: dict, want: dict, close: bool = False) -> None:
    assert grads.keys() == want.keys()
    for name, g in grads.items():
        if close:
            torch.testing.assert_close(g, want[name], rtol=1e-4, atol=1e-5, msg=name)
        else:
            assert torch.equal(g, want[name]), name


def mlp_against_none(build, tokens: torch.Tensor) -> tuple[dict, dict]:
    """The parameters' gradients of one loss (tokens as labels), with `mlp` checkpointing and without: `build(scope)`
    makes the model, `scope` enabled."""
    grads = {}
    for scope in ("mlp", None):
        m = build(scope)
        m(input_ids=tokens, labels=tokens).loss.backward()
        grads[scope] = {n: p.grad.float() for n, p in m.named_parameters() if p.grad is not None}
    return grads["mlp"], grads[None]


def test_each_scope_gives_the_gradients_without_checkpointing_and_keeps_less():
    plain, plain_kept, plain_products = run(None)
    (layer, layer_kept, layer_products), (mlp, mlp_kept, mlp_products) = run("layer"), run("mlp")
    same_gradients(layer, plain)
    same_gradients(mlp, plain)
    assert layer_kept < mlp_kept < plain_kept
    # `mlp` runs gate and up again in the backward (one product of each width 96 per layer), not the down projection
    # (width 32) nor attention's projections; `layer` runs every projection again
    assert mlp_products.count(INTERMEDIATE) == plain_products.count(INTERMEDIATE) + 2 * 3
    assert mlp_products.count(HIDDEN) == plain_products.count(HIDDEN)
    assert layer_products.count(HIDDEN) > plain_products.count(HIDDEN)


def test_no_recompute_where_no_gradient_is_taken():
    m = model("mlp")
    with torch.no_grad():
        out = m(torch.zeros(1, 4, dtype=torch.long)).logits
    assert out.shape == (1, 4, 64)


def test_a_layer_without_an_mlp_module_is_refused_with_the_setting_that_works():
    m = model(None)
    del m.model.layers[1].mlp
    with pytest.raises(ConfigError, match="decoder layer 1 .* policy.activation_checkpointing_scope=layer"):
        recompute.enable(m, "mlp")


def test_mlp_scope_with_lora_adapters_gives_their_gradients_without_checkpointing():
    from peft import LoraConfig, get_peft_model

    def build(scope):
        m = get_peft_model(model(None), LoraConfig(r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj",
                                                                                      "down_proj", "q_proj"],
                                                   init_lora_weights=False))
        if scope:
            recompute.enable(m.get_base_model(), scope)
        return m

    grads, want = mlp_against_none(build, torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1)))
    assert len(want) == 3 * 4 * 2  # (the adapters' A and B: the base is frozen)
    same_gradients(grads, want)


def moe():
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    torch.manual_seed(0)
    return Qwen2MoeForCausalLM(Qwen2MoeConfig(
        vocab_size=64, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, moe_intermediate_size=48,
        shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2)).train()


def test_mlp_scope_on_a_mixture_of_experts_gives_its_gradients_without_checkpointing():
    def build(scope):
        m = moe()
        if scope:
            recompute.enable(m, scope)
        return m

    same_gradients(*mlp_against_none(build, torch.randint(0, 64, (2, 12),
                                                          generator=torch.Generator().manual_seed(1))))


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen2", "qwen2_moe"])
def test_mlp_scope_under_torch_compile_on_a_gpu(family):
    """The trainer compiles each layer on a GPU (trainer/policy.py: compile_layers): the selective checkpoint's
    policy goes through torch.compile, a mixture of experts' MLP (its routing and experts) included."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")

    def build(scope):
        m = (model(None) if family == "qwen2" else moe()).cuda()
        if scope:
            recompute.enable(m, scope)
        for layer in m.get_decoder().layers:
            layer.compile(dynamic=True)
        return m

    tokens = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(1)).cuda()
    same_gradients(*mlp_against_none(build, tokens), close=True)
