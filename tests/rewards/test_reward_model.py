"""A learned reward model (env.reward_model): scores as the model's own forward gives them whatever the batching and
padding, a Bradley-Terry loop that teaches a tiny one a preference, the reward component and its breakdown, the
config's refusals, and NeMo RL's reward-model configs."""

import math

import pytest
import torch

from execrl.config import load_config
from execrl.config.checks import check_reward_model, no_effect_note, validate
from execrl.config.errors import ConfigError
from execrl.config.schema import RewardModelConfig
from execrl.extract import Extracted
from execrl.models import BYTE_VOCAB, build_tiny_model, build_tokenizer
from execrl.rewards import RewardConfig, Sample, judge, score
from execrl.rewards.bradley_terry import accuracy, bt_loss, train_pairs
from execrl.rewards.judges import load_reward_model
from execrl.rewards.reward_model import RewardModel
from execrl.sandbox import ProgramResult, TestResult, Verdict
from execrl.tasks import Problem
from tests.trainer.test_nemo_configs import NEMO


def conversation(answer: str, question: str = "Print the sum of two numbers.") -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A randomly initialised sequence-classification head over the tiny Qwen2, saved in HF format."""
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, seed=3, reward_head=True)
    directory = tmp_path_factory.mktemp("rm") / "model"
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def test_scores_are_the_models_own_whatever_the_batch_and_padding(rm_dir):
    rm = load_reward_model(RewardModelConfig(enabled=True, model_name=str(rm_dir), batch_size=3), "cpu")
    convs = [conversation("x" * n) for n in (1, 40, 7, 0, 90)]
    batched = rm(convs)
    with torch.no_grad():  # HF's forward of each conversation alone (no padding to find)
        alone = [rm.model(torch.tensor([rm.encode(c)])).logits[0, 0].item() for c in convs]
    torch.testing.assert_close(torch.tensor(batched), torch.tensor(alone), atol=1e-5, rtol=1e-5)
    assert len(set(round(s, 6) for s in batched)) == len(convs)  # (a random head tells them apart)
    # the pad token is also a real token here (the EOS, as many tokenizers set it): the score reads each
    # conversation's last token by length, not by looking for the pad token
    rm.tokenizer.pad_token = rm.tokenizer.eos_token
    torch.testing.assert_close(torch.tensor(rm(convs)), torch.tensor(alone), atol=1e-5, rtol=1e-5)



def test_a_conversation_over_the_models_length_keeps_its_question_and_is_counted(rm_dir, capsys):
    """It was read from its end alone: the judge never saw the question (the same answer to another question
    scored alike), and nothing said so. Now the prompt's first tokens (at most half) and the answer's last ones,
    a warning naming env.reward_model.max_model_len, and each sample's rm_cut (train/reward_model_truncated_frac)."""
    from execrl.rewards.learned import fill_scores

    rm = load_reward_model(RewardModelConfig(enabled=True, model_name=str(rm_dir), max_model_len=100), "cpu")
    long, other = conversation("x" * 90), conversation("x" * 90, "Print the product of two numbers.")
    ids = rm.encode(long)
    head = len(rm.encode(long[:1]))
    assert len(ids) > 100 and head < 50
    empty = rm.encode([long[0], {"role": "assistant", "content": ""}])
    header = ids[head:next(i for i, (a, b) in enumerate(zip(ids, empty)) if a != b)]  # (the answer's opening: a
    assert "assistant" in rm.tokenizer.decode(header)  # hunt's find, cut with the answer's middle)
    with torch.no_grad():
        want = rm.model(torch.tensor([ids[:head] + header + ids[-(100 - head - len(header)):]])).logits[0, 0].item()
    scores = rm([long, other, conversation("ok")])
    assert scores[0] == pytest.approx(want, abs=1e-5) and scores[0] != pytest.approx(scores[1], abs=1e-6)
    assert rm.cut == [True, True, False] and rm.truncated == 2
    assert "env.reward_model.max_model_len" in capsys.readouterr().err
    samples = [Sample(None, "", Extracted("", True, None)) for _ in range(3)]
    fill_scores(rm, list(zip([long, other, conversation("ok")], samples)))
    assert [s.rm_cut for s in samples] == [True, True, False]


def test_a_model_that_is_no_bradley_terry_reward_model_is_refused(tmp_path):
    from execrl.models import ModelNotFound

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    model = build_tiny_model(tok, hidden=32, layers=1, heads=4, reward_head=True)
    model.config.num_labels = 3
    with pytest.raises(ModelNotFound, match="3 outputs"):
        RewardModel(model, tok)
    tok.chat_template = None
    with pytest.raises(ModelNotFound, match="chat_template"):
        RewardModel(build_tiny_model(tok, hidden=32, layers=1, heads=4, reward_head=True), tok)
    with pytest.raises(ModelNotFound, match="no such directory"):
        load_reward_model(RewardModelConfig(enabled=True, model_name=str(tmp_path / "nowhere")), "cpu")


def test_a_causal_lm_a_learned_table_too_short_and_a_template_that_refuses_the_runs_prompt_are_refused(tmp_path):
    """A hunt's finds: a causal LM loaded as a sequence classifier (its head random weights: the policy learned from
    noise, rc 0), max_model_len past a learned position table (an IndexError mid-run), and a template refusing the
    run's system prompt (a jinja traceback after the first step's sampling and grading): each one line at load."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from execrl.config.schema import TokenizerConfig
    from execrl.models import ModelNotFound
    from execrl.prompts import ChatTemplateError, PromptConfig

    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    build_tiny_model(tok, hidden=32, layers=1, heads=4).save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    with pytest.raises(ModelNotFound, match="Qwen2ForCausalLM .*not a sequence classifier"):
        load_reward_model(RewardModelConfig(enabled=True, model_name=str(tmp_path / "lm")), "cpu")
    gpt2 = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1,
                                                    n_head=4, num_labels=1, pad_token_id=tok.pad_token_id))
    with pytest.raises(ModelNotFound, match="max_model_len is 128, over the reward model's 64 positions"):
        RewardModel(gpt2, tok, max_len=128)
    assert RewardModel(gpt2, tok).max_len == 64
    gpt2.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    refuses = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
               "{% endif %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}")
    rm_cfg = RewardModelConfig(enabled=True, model_name=str(tmp_path / "gpt2"),
                               tokenizer=TokenizerConfig(chat_template=refuses))
    assert load_reward_model(rm_cfg, "cpu", prompt=PromptConfig()).max_len == 64
    with pytest.raises(ChatTemplateError, match="System role not supported.*env.reward_model.tokenizer.chat_template"):
        load_reward_model(rm_cfg, "cpu", prompt=PromptConfig(system_prompt="Be careful."))
    # (a hunt's find) a multi-turn run's tool turns, refused by a template that alternates user and assistant
    # (Gemma's): refused at load, naming observation_role, not at the first episode that used the tool
    alternates = ("{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                  "{% endif %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}")
    rm_cfg.tokenizer.chat_template = alternates
    assert load_reward_model(rm_cfg, "cpu", prompt=PromptConfig(), observation_role="user").max_len == 64
    with pytest.raises(ChatTemplateError, match=r"roles \['user', 'assistant', 'tool', 'assistant'\].*alternate.*"
                                                "observation_role=user"):
        load_reward_model(rm_cfg, "cpu", prompt=PromptConfig(), observation_role="tool")


def test_the_score_is_read_where_the_models_own_forward_reads_it_and_no_bos_is_added(rm_dir):
    """A hunt's finds: where the pad is the EOS and the template ends the answer with it (Mistral's, many fine-tunes'),
    the model's own forward (how it was trained) reads the token before; execrl read the EOS. And a BOS was put
    before a template that writes none (Phi-3's, OLMo's), unlike the model card's apply_chat_template."""
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    tok.chat_template = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + eos_token }}{% endfor %}"
    model = build_tiny_model(tok, hidden=32, layers=2, heads=4, seed=5, reward_head=True)
    model.config.pad_token_id = tok.eos_token_id
    rm = RewardModel(model, tok, batch_size=2, score_pad=tok.eos_token_id)
    convs = [conversation("x" * n) for n in (3, 17, 8)]
    with torch.no_grad():
        alone = [model(torch.tensor([rm.encode(c)])).logits[0, 0].item() for c in convs]
        last = [model(torch.tensor([rm.encode(c)[:-1]])).logits[0, 0].item() for c in convs]
    assert all(rm.encode(c)[-1] == tok.eos_token_id for c in convs)
    torch.testing.assert_close(torch.tensor(rm(convs)), torch.tensor(alone), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.tensor(alone), torch.tensor(last), atol=1e-5, rtol=1e-5)  # (the EOS skipped)
    tok.bos_token = "<|endoftext|>"
    assert rm.encode(convs[0]) == tok.apply_chat_template(convs[0], tokenize=True, return_dict=False)


def test_a_long_prompt_with_a_short_answer_keeps_the_answer_whole_and_one_header(rm_dir):
    """A hunt's find: the tail kept was max_len - head - header tokens of the whole sequence, which began inside the
    prompt where the answer was short: the assistant header came twice, the second after the question's end."""
    rm = load_reward_model(RewardModelConfig(enabled=True, model_name=str(rm_dir), max_model_len=60), "cpu")
    conv = conversation("ANSWER", "Q" * 150 + " _QUESTION")
    kept = rm.tokenizer.decode(rm.fit(tuple(rm.encode(conv)), conv))
    assert len(rm.fit(tuple(rm.encode(conv)), conv)) == 60
    assert kept.count("assistant") == 1 and kept.startswith("<|im_start|>user\nQQ")
    assert kept.endswith("QUESTION<|im_end|>\n<|im_start|>assistant\nANSWER<|im_end|>\n")  # (the prompt's end)


def test_bradley_terry_loss_by_hand():
    # -log sigmoid(2 - 0) = log(1 + e^-2); equal scores: log 2
    assert bt_loss(torch.tensor([2.0]), torch.tensor([0.0])).item() == pytest.approx(math.log(1 + math.exp(-2)))
    assert bt_loss(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0])).item() == pytest.approx(math.log(2))


def test_a_few_bradley_terry_steps_teach_a_tiny_reward_model_a_preference():
    """Synthetic preference: a program in a ```python fence over the same program in a ~~~ one (the same length, so
    nothing else tells them apart); held-out pairs ranked after 40 steps, not before."""
    import random

    rng = random.Random(0)

    def pair():
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        question, code = f"Print {a} plus {b}.", f"python\nprint({a} + {b})\n"
        return conversation(f"```{code}```", question), conversation(f"~~~{code}~~~", question)

    pairs = [pair() for _ in range(300)]
    tok = build_tokenizer([], vocab_size=BYTE_VOCAB)
    rm = RewardModel(build_tiny_model(tok, hidden=32, layers=2, heads=4, seed=0, reward_head=True), tok)
    train, held_out = pairs[:250], pairs[250:]
    before = accuracy(rm, held_out)
    loss = train_pairs(rm, train, steps=40, lr=3e-3, batch_size=16)
    assert accuracy(rm, held_out) >= 0.95 and loss < 0.3 and before < 0.9
    assert not rm.model.training


def sample(passed: int, of: int = 4) -> Sample:
    problem = Problem("p", [{"role": "user", "content": "q"}], "code")
    tests = [TestResult(Verdict.PASS if i < passed else Verdict.FAIL) for i in range(of)]
    return Sample(problem, "answer", Extracted(code="print(1)", answer=None, format_ok=True),
                  result=ProgramResult(Verdict.PASS if passed == of else Verdict.FAIL, tests))


def test_the_reward_waits_for_the_reward_model_then_has_its_score_in_the_breakdown(rm_dir):
    """Tests gate correctness, the reward model adds to it: reward = pass fraction + 0.5 x score."""
    cfg = RewardConfig(components=[{"name": "test_pass_fraction"}, {"name": "reward_model", "weight": 0.5}])
    samples = [sample(4), sample(1)]
    pending = score(samples[0], cfg)
    assert pending.pending and not pending.valid
    rm = load_reward_model(RewardModelConfig(enabled=True, model_name=str(rm_dir)), "cpu")
    convs = [conversation("right"), conversation("wrong")]
    rewards = judge(rm, list(zip(convs, samples)), cfg)
    scores = rm(convs)
    for r, s, passed in zip(rewards, scores, (1.0, 0.25)):
        assert not r.pending and r.parts == {"test_pass_fraction": passed, "reward_model": pytest.approx(s)}
        assert r.total == pytest.approx(passed + 0.5 * s)
    broken = sample(0)
    broken.result = ProgramResult(Verdict.INFRA_ERROR, [])
    assert not judge(rm, [(convs[0], broken)], cfg)[0].valid and broken.rm_score is None  # not read, stays invalid


def test_config_nemo_env_name_and_the_refusals():
    rm = ["env.reward_model.enabled=true", "env.reward_model.model_name=org/rm"]
    for given in ([*rm, "data.default.env_name=reward_model"], rm):  # (enabled alone: as NeMo RL's run_grpo_rm.py)
        cfg = load_config(None, given)
        validate(cfg)
        assert [(c.name, c.weight) for c in cfg.reward.components] == [("reward_model", 1.0)]
        assert cfg.data.default.env_name == "reward_model"
    both = load_config(None, [*rm, "reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.1}]"])
    validate(both)
    assert [(c.name, c.weight) for c in both.reward.components] == [("test_pass_fraction", 1.0), ("reward_model", 0.1)]
    unread = load_config(None, rm)
    unread.data.default.env_name, unread.reward.components = "auto", unread.reward.components[:0]
    with pytest.raises(ConfigError, match="no reward component reads it"):
        check_reward_model(unread)
    for overrides, says in (
            (["reward.components=[{name: reward_model}]"], "env.reward_model is off"),
            (["env.reward_model.enabled=true", "reward.components=[{name: reward_model}]"], "model_name is not set"),
            ([*rm, "reward.components=[{name: reward_model}]", "env.reward_model.reward_model_cfg.enabled=false"],
             "reward_model_cfg.enabled=false"),
            ([*rm, "data.default.env_name=reward_model", "reward.components=[{name: all_tests_pass}]"],
             "no reward_model component"),
            # (reward_model_cpu.yaml's own components: it read "names reward_model twice", the user naming it once)
            ([*rm, "data.default.env_name=reward_model",
              "reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.2}]"],
             r"turns reward.components' test_pass_fraction into a reward_model component .* score alone set "
             r"\"reward.components=\[\{name: reward_model\}\]\" too")):
        with pytest.raises(ConfigError, match=says):
            validate(load_config(None, overrides))
    with pytest.raises(Exception, match="bradley_terry"):
        load_config(None, [*rm, "env.reward_model.reward_model_cfg.reward_model_type=pairwise"])


def test_nemo_rl_reward_model_config_reads_as_its_script_ran_it():
    """NeMo RL's grpo_rm_1B.yaml (run by its run_grpo_rm.py, which sends every task to the reward model): the
    reward model's score is the reward; its own GPUs and sharding are named as having no effect here."""
    cfg = load_config(str(NEMO / "eraC_b26cfeb/examples/configs/grpo_rm_1B.yaml"))
    validate(cfg)
    rm = cfg.env.reward_model
    assert rm.enabled and rm.model_name == "Skywork/Skywork-Reward-V2-Qwen3-0.6B" and rm.precision == "bfloat16"
    assert rm.max_model_len == 2048 and rm.batch_size == cfg.policy.train_micro_batch_size
    assert [c.name for c in cfg.reward.components] == ["reward_model"] and cfg.data.default.env_name == "reward_model"
    note = no_effect_note(cfg)
    assert "data.default.env_name -> data.default.env_name=reward_model" in note
    assert "env.reward_model.resources (the reward model runs on the training GPUs" in note
    with pytest.raises(ConfigError, match="checkpoint_path"):
        load_config(str(NEMO / "eraC_b26cfeb/examples/configs/grpo_rm_1B.yaml"),
                    ["env.reward_model.checkpoint_path=/ckpt/rm"])
    off = load_config(str(NEMO / "eraC_b26cfeb/examples/configs/grpo_rm_1B.yaml"), ["env.reward_model.enabled=false",
                                                                                     "data.default.env_name=math"])
    with pytest.raises(ConfigError, match="is set but the reward model is off"):  # (its model_name would do nothing)
        validate(off)
    assert no_effect_note(load_config(None, [])) is None  # (the schema's own defaults of the section say nothing)


def test_the_component_maps_and_gates_the_score():
    """sigmoid: the score mapped into (0, 1); only_correct: 0 for an answer the tests reject."""
    right, wrong = sample(4), sample(1)
    right.rm_score = wrong.rm_score = 2.0
    cfg = RewardConfig(components=[{"name": "reward_model", "transform": "sigmoid", "only_correct": True}])
    assert score(right, cfg).total == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert score(wrong, cfg).total == 0.0
    raw = RewardConfig(components=[{"name": "reward_model"}])
    assert score(wrong, raw).total == 2.0
    rm = ["env.reward_model.enabled=true", "env.reward_model.model_name=org/rm"]
    with pytest.raises(ConfigError, match="transform='tanh'"):
        validate(load_config(None, [*rm, "reward.components=[{name: reward_model, transform: tanh}]"]))
    with pytest.raises(ConfigError, match="self-play (games|matches)"):  # (the outcome's refusal: check_outcome_rewards)
        validate(load_config(None, [*rm, "reward.components=[{name: reward_model}]", "env.multi_turn.kind=game",
                                    "data.train.dataset_name=selfplay:tictactoe", "grpo.max_rollout_turns=9",
                                    "grpo.num_generations_per_prompt=2"]))
