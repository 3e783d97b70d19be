"""Trajectories from the real rollout engine, the real sandbox and the real Qwen2.5 / Qwen3 chat templates: the loss
mask is 1 on exactly the tokens the sampler produced, in order, with their logprobs; the environment's tokens are
the template's; the trainer's batch holds those same tokens; the context limit ends an episode cleanly.

The policy is a tiny model that learns a three-turn interpreter episode by heart here (a few seconds), so that the
engine really produces multi-turn episodes: run a cell, read its output, run another, submit."""

import pytest
import torch

from execrl.config import load_config
from execrl.prompts import build_messages
from execrl.rollout import RolloutEngine, SamplingParams
from execrl.sandbox import AssertTests
from execrl.tasks import Problem
from execrl.trainer.rollouts import EpisodeRunner, encode
from execrl.trainer.step import build_batch, token_logprobs

from .conftest import qwen_like_tokenizer

ADD = Problem("t/add", [{"role": "user", "content": "Write add(a, b)."}], "code",
              tests=AssertTests(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]))
DEF = "def add(a, b):\n    return a + b\n"
SCRIPTS = {  # template: (role of the environment's turns, the model's turns, what the sandbox prints for them)
    "qwen2_5_instruct.jinja": ("tool", ["Let me check.\n<code>\nprint(6 * 7)\n</code>",
                                        f"<code>\n{DEF}print(add(1, 2))\n</code>", f"<answer>\n{DEF}</answer>"]),
    "qwen3.jinja": ("user", ["<think>\nTry it first.\n</think>\n\n<code>\nprint(6 * 7)\n</code>",
                             f"<think>\nIt prints 42.\n</think>\n\n<code>\n{DEF}print(add(1, 2))\n</code>",
                             f"<think>\nGood.\n</think>\n\n<answer>\n{DEF}</answer>"]),
}
OUTPUTS = ["42\n", "3\n"]


def config(template: str, *overrides):
    role = SCRIPTS[template][0]
    return load_config(None, ["env.multi_turn.kind=interpreter", "grpo.max_rollout_turns=4", "prompt.code_style=tags",
                              "prompt.add_instructions=false", f"env.multi_turn.observation_role={role}",
                              "policy.max_total_sequence_length=1024", "policy.generation.max_new_tokens=120",
                              *overrides])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small run several times faster on one thread (and the machine is shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def policy(one_thread):
    """A 2-layer Qwen2 that has learned both scripted episodes (loss on the model's turns only)."""
    from execrl.envs import TurnRenderer
    from execrl.models import build_tiny_model

    rows, tokenizers = [], {}
    for template, (role, turns) in SCRIPTS.items():
        tok = tokenizers[template] = qwen_like_tokenizer(template)
        ids = encode(build_messages(ADD, load_config(None, ["prompt.add_instructions=false"]).prompt), tok)
        labels = [-100] * len(ids)
        for i, turn in enumerate(turns):
            sampled = tok(turn, add_special_tokens=False)["input_ids"]
            ids, labels = ids + sampled, labels + sampled
            if i < len(OUTPUTS):
                shown = TurnRenderer(tok).env_turn([{"role": role, "content": OUTPUTS[i]}], sampled[-1])
                ids, labels = ids + shown, labels + [-100] * len(shown)
        rows.append((ids, labels))
    model = build_tiny_model(tokenizers["qwen3.jinja"], hidden=64, layers=2, heads=4, seed=0)
    width = max(len(ids) for ids, _ in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    for i, (a, b) in enumerate(rows):
        ids[i, :len(a)], labels[i, :len(b)] = torch.tensor(a), torch.tensor(b)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(150):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1
    return model.eval(), tokenizers


class Recording:
    """The real engine, remembering what it was asked and what it sampled."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def generate(self, prompts, num_samples, *args, **kwargs):
        outs = self.engine.generate(prompts, num_samples, *args, **kwargs)
        self.calls.append([(p, c) for p, group in zip(prompts, outs) for c in group])
        return outs


def episodes(policy, grader, template, problems, group, temperature, *overrides):
    model, tokenizers = policy
    tok, cfg = tokenizers[template], config(template, *overrides)
    engine = Recording(RolloutEngine(model, tok, slots=8, max_len=cfg.policy.max_total_sequence_length))
    torch.manual_seed(0)
    gen = cfg.policy.generation
    params = SamplingParams(temperature, gen.top_p, gen.top_k)
    return EpisodeRunner(cfg, engine, tok, grader).run(problems, group, params), \
        engine, tok, cfg


@pytest.mark.parametrize("template", list(SCRIPTS))
def test_the_trainer_sees_exactly_the_sampled_tokens_and_the_template_tokens(policy, grader, template):
    rollouts, engine, tok, cfg = episodes(policy, grader, template, [ADD, ADD], 4, 0.8)
    role, thinking_seen = SCRIPTS[template][0], False
    assert any(e.turns == 3 and e.tool_calls == 2 and e.reward.total == 1.0 for e in rollouts.episodes)
    for e in rollouts.episodes:
        t = e.trajectory
        assert [s.sampled for s in t.segments] == [True, False] * (e.turns - 1) + [True]
        assert len(t.loss_mask) == len(t.completion_ids) and sum(t.loss_mask) == t.num_sampled
        # each model turn is exactly what the engine sampled for this episode's context at that turn
        context = list(t.prompt_ids)
        for k, segment in enumerate(t.segments):
            if segment.sampled:
                asked = [(p, c) for p, c in engine.calls[len([s for s in t.segments[:k] if s.sampled])] if p == context]
                assert any(c.ids == segment.ids and c.logprobs == segment.logprobs for _, c in asked)
            context += segment.ids
        turns = e.messages[len(e.messages) - len(t.segments):]  # the conversation after the prompt, by segment
        for k, segment in enumerate(t.segments):  # the environment's tokens: the template's turn, closed once
            if not segment.sampled:
                closed = t.segments[k - 1].ids[-1] == tok.eos_token_id
                shown = turns[k]["content"]
                opened = "<|im_start|>user\n" + (f"<tool_response>\n{shown}\n</tool_response>" if role == "tool"
                                                 else shown)
                assert tok.decode(segment.ids) == ("\n" if closed else "<|im_end|>\n") + opened + \
                    "<|im_end|>\n<|im_start|>assistant\n"
        rendered = tok.apply_chat_template(e.messages, tokenize=False)
        decoded = tok.decode(t.ids)
        if template == "qwen2_5_instruct.jinja":  # this template re-renders the conversation token for token
            assert rendered in (decoded + "\n", decoded + "<|im_end|>\n")
        elif e.turns >= 2 and "</think>" in turns[0]["content"]:
            reasoning = turns[0]["content"].split("</think>")[0]
            assert reasoning in decoded and reasoning not in rendered  # re-rendering would drop what was sampled
            thinking_seen = True
    assert template != "qwen3.jinja" or thinking_seen


@pytest.mark.parametrize("template", list(SCRIPTS))
def test_the_batch_holds_the_sampled_tokens_and_their_logprobs_at_the_mask(policy, grader, template):
    rollouts, _, tok, _ = episodes(policy, grader, template, [ADD], 4, 1.0)
    batch = build_batch(rollouts, torch.zeros(4), tok.pad_token_id, overlong_filtering=False)
    for i, t in enumerate(rollouts.trajectories):
        assert batch.input_ids[i, :len(t)].tolist() == t.ids and batch.attention_mask[i].sum() == len(t)
        at = batch.loss_mask[i] > 0  # position j predicts token j + 1
        assert batch.input_ids[i, 1:][at].tolist() == t.sampled_ids
        sampled_logprobs = [lp for s in t.segments if s.sampled for lp in s.logprobs]
        assert batch.sampler_logprobs[i][at].tolist() == pytest.approx(sampled_logprobs)
        assert (batch.sampler_logprobs[i][~at] == 0).all()
    logp, _, _ = token_logprobs(policy[0], batch.input_ids, batch.attention_mask, batch.loss_mask > 0, 1.0)
    torch.testing.assert_close(logp, batch.sampler_logprobs, atol=2e-4, rtol=1e-4)  # the trainer scores them


def test_the_context_limit_ends_an_episode_before_an_environment_turn_that_does_not_fit(policy, grader):
    template = "qwen2_5_instruct.jinja"
    tok = policy[1][template]
    prompt = encode([{"role": "user", "content": ADD.messages[0]["content"]}], tok)
    first = tok(SCRIPTS[template][1][0], add_special_tokens=False)["input_ids"]
    limit = len(prompt) + len(first) + 20  # the model's first turn fits, the interpreter's answer does not
    rollouts, *_ = episodes(policy, grader, template, [ADD], 2, 0.0, f"policy.max_total_sequence_length={limit}")
    for e in rollouts.episodes:
        t = e.trajectory
        assert t.truncated and e.turns == 1 and len(t.segments) == 1 and t.segments[0].ids == first
        assert e.tool_calls == 1 and e.reward.total == 0.0  # graded as it stood: the cell printed 42, no add()
        assert len(t) < limit
    batch = build_batch(rollouts, torch.zeros(2), tok.pad_token_id, overlong_filtering=True)
    assert batch.loss_mask.sum() == 0  # overlong filtering leaves truncated episodes out of the loss


def test_a_model_turn_cut_by_the_context_ends_the_episode_truncated(policy, grader):
    template = "qwen3.jinja"
    tok = policy[1][template]
    limit = len(encode([{"role": "user", "content": ADD.messages[0]["content"]}], tok)) + 6
    rollouts, *_ = episodes(policy, grader, template, [ADD], 2, 0.0, f"policy.max_total_sequence_length={limit}")
    for e in rollouts.episodes:
        assert e.trajectory.truncated and e.turns == 1 and e.trajectory.num_sampled == 6 and len(e.trajectory) == limit
        assert e.sample.extracted.code is None and e.reward.total == 0.0


def test_a_sample_the_sandbox_failed_on_has_no_loss_tokens(policy, grader):
    """infra_error samples get advantage 0 and are out of every normalizer (token count and sequence count)."""
    rollouts, _, tok, _ = episodes(policy, grader, "qwen2_5_instruct.jinja", [ADD], 4, 1.0)
    rollouts.rewards[1].total = None  # as the sandbox failing on it leaves it
    batch = build_batch(rollouts, torch.zeros(4), tok.pad_token_id, overlong_filtering=False)
    assert batch.loss_mask[1].sum() == 0
    assert all(batch.loss_mask[i].sum() > 0 for i in (0, 2, 3))
