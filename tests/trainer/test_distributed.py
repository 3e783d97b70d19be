"""Multi-GPU training's code path on CPU: `execrl train cluster.gpus_per_node=2` launches torchrun with two gloo
processes (FSDP2 shards, rank shares of prompts, sums over ranks, full checkpoints), and its run must equal the
one-process run of the same config: the same samples (sampling noise is keyed by prompt, not by rank or batch), the
same rewards, and losses, gradient norms and final weights equal up to float summation order. A checkpoint written by
two processes resumes in one, and the other way round."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import execrl
from execrl.config import load_config
from execrl.trainer.loop import train

# 4 prompts x 4 samples per step, 2 optimizer steps per rollout (so ranks take a part of each optimizer batch),
# micro-batches of 2 (gradient accumulation), a KL term (a sharded reference model), and validation split over ranks;
# the byte-level model (its random samples, and its 80-step warm-up, are what these runs were built on)
BASE = ["policy.model_name=builtin:tiny-coder", "policy.device=cpu", "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
        "policy.train_global_batch_size=8", "policy.train_micro_batch_size=2", "policy.logprob_batch_size=4",
        "policy.generation_batch_size=16", "grpo.val_at_start=false", "grpo.max_val_samples=8",
        "loss_fn.reference_policy_kl_penalty=0.01", "logger.tensorboard_enabled=false", "logger.rollouts_period=1",
        "env.code.num_workers=2", "checkpointing.save_period=1"]
# no warm-up: a reward that a random model's samples vary in (their length), so every step has a gradient
FAST = [*BASE, "warmup.sft_steps=0", "grpo.max_num_steps=2", "grpo.val_period=2",
        "reward.components=[{name: overlong_penalty, buffer_tokens: 56}]"]
# the built-in task's real reward from the sandbox, after the supervised warm-up
REAL = [*BASE, "warmup.sft_steps=80", "grpo.max_num_steps=3", "grpo.val_period=3"]

SAMPLED = ("train/reward_mean", "train/completion_len_mean", "train/truncated_frac", "eval/pass@1", "eval/num_problems")
LEARNED = ("train/loss", "train/kl", "train/entropy", "train/grad_norm", "train/clip_frac", "train/valid_frac")
# relative tolerances of the learned figures: float summation order (per micro-batch, per rank; one process's rows
# padded to other widths than two's). The entropy and the gradient's norm move most with the logits' last bits:
# measured on the built-in task, entropy 9e-5 apart at step 1 (the same weights: the loss 1e-7) and the gradient's
# norm 2.8e-4 at step 3 (after Adam's steps, which amplify float noise); the KL to the reference, a small difference
# of two logprobs, 3.4e-4 at step 2 (0.029951 against 0.029941)
REL = dict.fromkeys(LEARNED, 1e-4) | {"train/entropy": 1e-3, "train/grad_norm": 1e-3, "train/kl": 1e-3}


def one_process(directory: Path, overrides: list[str]) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as torchrun gives each of its processes: the CI machine's cores are few and shared
    try:
        train(load_config(None, [*overrides, f"logger.log_dir={directory}",
                                 f"checkpointing.checkpoint_dir={directory}/ckpt"]))
    finally:
        torch.set_num_threads(threads)
    return directory


def two_processes(directory: Path, overrides: list[str]) -> Path:
    """Through the command line, which starts torchrun itself."""
    src = str(Path(execrl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "execrl.cli", "train", *overrides, f"logger.log_dir={directory}",
                           f"checkpointing.checkpoint_dir={directory}/ckpt", "cluster.gpus_per_node=2"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "launching: " in done.stderr and "--nproc-per-node 2" in done.stderr
    return directory


def metrics(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]


def weights(d: Path, step: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(d / "ckpt" / f"step_{step:06d}" / "policy" / "model.safetensors")


def initial_weights() -> dict[str, torch.Tensor]:
    from execrl.models import load_model_and_tokenizer

    cfg = load_config(None, BASE)
    model, _ = load_model_and_tokenizer(cfg.policy.model_name, "cpu", "float32", seed=cfg.grpo.seed)
    return model.state_dict()


def assert_same_metrics(a: Path, b: Path) -> None:
    """Two runs' metrics.jsonl, row by row: the same steps, the same sampled figures (exact but for rounding) and
    the same learned ones up to float summation order."""
    rows_a, rows_b = metrics(a), metrics(b)
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b]
    for ra, rb in zip(rows_a, rows_b):
        for k in SAMPLED:
            assert (k in ra) == (k in rb), (ra["step"], k)
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], rel=1e-12), (ra["step"], k)
        for k in LEARNED:
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], rel=REL[k], abs=1e-6), (ra["step"], k)


def assert_same_run(a: Path, b: Path, steps: int, first: int = 1) -> None:
    def by_step(d):
        return {(r["step"], "eval/pass@1" in r): r for r in metrics(d) if r["step"] >= first}

    rows_a, rows_b = by_step(a), by_step(b)
    assert rows_a.keys() == rows_b.keys()
    for key, ra in rows_a.items():
        rb = rows_b[key]
        for k in SAMPLED:  # the same samples, graded the same (means of sums over ranks: exact but for rounding)
            assert (k in ra) == (k in rb), (key, k)
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], rel=1e-12), (key, k)
        assert {k for k in ra if "verdict/" in k} == {k for k in rb if "verdict/" in k}
        for k in LEARNED:  # the same numbers but for float summation order (per micro-batch, per rank)
            if k in ra:
                assert rb[k] == pytest.approx(ra[k], rel=REL[k], abs=1e-6), (ra["step"], k)
    for step in range(first, steps + 1):
        assert (a / "rollouts" / f"step_{step:06d}.jsonl").read_text() == \
               (b / "rollouts" / f"step_{step:06d}.jsonl").read_text()
    wa, wb, w0 = weights(a, steps), weights(b, steps), initial_weights()
    assert sorted(wa) == sorted(wb)  # the same HF checkpoint (a tied head saved once)
    apart = sum(((wa[k] - wb[k]) ** 2).sum() for k in wa) ** 0.5
    moved = sum(((wa[k] - w0[k]) ** 2).sum() for k in wa) ** 0.5
    assert moved > 0.01 and apart / moved < 1e-3, (float(apart), float(moved))  # Adam amplifies float noise a little


def test_dry_run_prints_the_torchrun_command(capsys):
    from execrl.cli import main

    assert main(["train", str(Path(__file__).parents[2] / "configs/grpo_code_2gpu_test.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-m torch.distributed.run --nproc-per-node 2 --standalone -m execrl.cli train" in out
    assert main(["train", "cluster.gpus_per_node=8", "cluster.num_nodes=2", "grpo.num_prompts_per_step=16",
                 "policy.train_global_batch_size=128", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--nnodes 2 --node-rank NODE_RANK --rdzv-backend c10d --rdzv-endpoint HOST:PORT" in out


def test_a_launch_stopped_by_sigterm_exits_130_as_one_process_does():
    """The launcher passes SIGTERM on to torchrun, which exits 1 after its processes stopped cleanly (a scheduler read
    a requeue's stop as a crash: a hunt's find); a stopped launch exits 130, one not stopped with its own status.
    Here the launched command exits 1 on SIGTERM, as torchrun's agent does."""
    import signal
    import threading
    import time

    from execrl.cli import run_torchrun

    agent = [sys.executable, "-c", "import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))\ntime.sleep(60)"]
    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=lambda: (time.sleep(1.0), os.kill(os.getpid(), signal.SIGTERM)), daemon=True).start()
    assert run_torchrun(agent) == 130
    assert run_torchrun([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    # Ctrl-C: the terminal sends it to torchrun too, which stops and exits 1 (here: on its own, 2 s later). Python's
    # Ctrl-C handler, which a background job's SIGINT lacks (its shell ignores it, and Python keeps that: this test
    # failed in a CI run started with `&`)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=lambda: (time.sleep(1.0), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
        assert run_torchrun([sys.executable, "-c", "import time; time.sleep(3); raise SystemExit(1)"]) == 130
    finally:
        signal.signal(signal.SIGINT, interrupt)
    assert signal.getsignal(signal.SIGTERM) == before  # (the launcher's handler is put back)


def test_groups_that_do_not_split_evenly_over_the_gpus_are_shared_unevenly():
    from execrl.config import plan

    batch = plan(load_config(None, ["cluster.gpus_per_node=8", "cluster.num_nodes=4", "grpo.num_prompts_per_step=64",
                                    "grpo.num_generations_per_prompt=32", "policy.train_global_batch_size=512"]))
    assert batch.per_gpu_batch == 32 and batch.optimizer_steps_per_rollout == 4  # 16 groups a step over 32 GPUs
    assert any("16 GPU(s) train on 0 group(s) and 16 on 1" in n for n in batch.notes)


def test_more_gpus_than_groups_train_as_one_process(tmp_path):
    """2 optimizer steps of one group each over 2 processes: one trains on each group, the other idles in step (as
    FSDP needs); the run equals the one-process run."""
    overrides = [*FAST, "grpo.num_prompts_per_step=2", "policy.train_global_batch_size=4"]
    assert_same_run(one_process(tmp_path / "one", overrides), two_processes(tmp_path / "two", overrides), steps=2)


def test_a_process_count_that_does_not_match_the_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="execrl train CONFIG"):
        train(load_config(None, [*FAST, "cluster.gpus_per_node=2", f"logger.log_dir={tmp_path}"]))


def test_two_gloo_processes_equal_one_and_resume_across_world_sizes(tmp_path):
    one = one_process(tmp_path / "one", FAST)
    two = two_processes(tmp_path / "two", FAST)
    assert_same_run(one, two, steps=2)
    exported = json.loads((two / "ckpt" / "step_000002" / "policy" / "config.json").read_text())
    assert exported["architectures"] == ["Qwen2ForCausalLM"]  # not FSDP's wrapper class: vLLM reads this
    # resume from step 1: two processes' checkpoint in one process, and one's in two
    for name, source, run in (("two_then_one", two, one_process), ("one_then_two", one, two_processes)):
        (tmp_path / name / "ckpt").mkdir(parents=True)
        shutil.copytree(source / "ckpt" / "step_000001", tmp_path / name / "ckpt" / "step_000001")
        resumed = run(tmp_path / name, FAST)
        assert [r["step"] for r in metrics(resumed)] == [2, 2]  # only step 2 and its evaluation ran
        assert_same_run(one, resumed, steps=2, first=2)


def test_async_multi_turn_on_two_gloo_processes_equals_one(tmp_path):
    """Episodes of two turns (the unit-test environment answers a random model's first turn, which holds no code),
    generated one step ahead and corrected with the sampler's logprobs: the same run on two processes as on one."""
    overrides = [*FAST, "grpo.max_num_steps=3", "grpo.val_period=3", "grpo.async_grpo.enabled=true",
                 "grpo.max_rollout_turns=2", "env.multi_turn.kind=unit_tests", "env.multi_turn.observation_role=user",
                 "policy.generation.max_new_tokens=32", "policy.max_total_sequence_length=320",
                 "reward.components=[{name: overlong_penalty, buffer_tokens: 24}]",  # (below the 32 tokens)
                 "grpo.max_val_samples=1"]  # one validation problem: a rank without any still joins the gathering
    one = one_process(tmp_path / "one", overrides)
    two = two_processes(tmp_path / "two", overrides)
    assert_same_run(one, two, steps=3)
    rows = [r for r in metrics(two) if "train/loss" in r]
    assert [r["train/trajectory_age_mean"] for r in rows] == [0.0, 1.0, 1.0]
    assert all(r["train/turns_mean"] > 1.0 and r["train/is_weight"] > 0 for r in rows)
    for k in ("train/turns_mean", "train/tool_calls_mean", "train/logprob_mismatch", "train/is_weight"):
        # (the mismatch of a step that trains on fresh samples is float noise, about 1e-7: absolute tolerance)
        assert [r[k] for r in rows] == pytest.approx([r[k] for r in metrics(one) if "train/loss" in r], rel=1e-4,
                                                     abs=1e-5)


def test_episode_metrics_of_two_processes_add_up_to_those_of_their_episodes_together():
    """Each process logs sums and counts, added over processes: a verdict that one process never saw must still count
    that process's episodes in its denominator (else 8 passes on one and 8 failures on the other read 1.0 and 1.0)."""
    from execrl.envs import Environment, Trajectory
    from execrl.extract import Extracted
    from execrl.rewards import Reward, Sample
    from execrl.sandbox import ProgramResult, StdioTests, TestResult, Verdict
    from execrl.tasks import Problem
    from execrl.trainer.rollouts import Episode, Rollouts, episode_means, episode_sums

    problem = Problem("p", [{"role": "user", "content": "x"}], "code", tests=StdioTests(["1\n"], ["1\n"]))
    math = Problem("m", [{"role": "user", "content": "x"}], "math", answer="72")

    def episodes(verdict: Verdict, reward: float, turns: int, n: int) -> Rollouts:
        result = ProgramResult(verdict, [TestResult(verdict)])
        return Rollouts([Episode(problem, Environment(None), [], Trajectory([1]),
                                 Sample(problem, "", Extracted("", True, "c"), result),
                                 Reward(reward), turns) for _ in range(n)], 1)

    def summed(ranks: list[Rollouts], kinds=None) -> dict[str, float]:
        out: dict[str, float] = {}
        for d in (episode_sums(r, kinds) for r in ranks):  # as dist.sum_dicts adds them
            for k, v in d.items():
                out[k] = out.get(k, 0.0) + v
        return episode_means(out)

    ranks = [episodes(Verdict.PASS, 1.0, 1, 8), episodes(Verdict.FAIL, 0.0, 2, 8)]
    together = episode_means(episode_sums(Rollouts(ranks[0].episodes + ranks[1].episodes, 1)))
    assert summed(ranks) == together
    assert together["verdict/pass"] == together["verdict/fail"] == 0.5 and together["verdict/timeout"] == 0.0
    assert together["reward_mean"] == 0.5 and together["turns_mean"] == 1.5
    assert together["reward_by_turns/1"] == 1.0 and together["reward_by_turns/2"] == 0.0
    # a dataset of both kinds, one process holding only code problems, the other only math: the dataset's kinds
    right = Rollouts([Episode(math, Environment(None), [], Trajectory([1]),
                              Sample(math, "72", Extracted("72", True)), Reward(1.0), 1)
                      for _ in range(8)], 1)
    mixed = summed([ranks[0], right], {"code", "math"})
    assert mixed["verdict/pass"] == mixed["verdict/correct"] == 0.5 and mixed["verdict/wrong"] == 0.0


@pytest.mark.slow
def test_two_gloo_processes_equal_one_on_the_builtin_task(tmp_path):
    one = one_process(tmp_path / "one", REAL)
    two = two_processes(tmp_path / "two", REAL)
    assert_same_run(one, two, steps=3)
    assert max(r.get("train/reward_mean", 0) for r in metrics(one)) > 0.1  # a real learning signal


@pytest.mark.gpu
def test_engine_graphs_follow_weights_that_moved_after_reset_graphs():
    """What a sharded model's rollout phase does to the engine: the gathered weights land in new memory (with new
    values after an optimizer step); after reset_graphs the CUDA-graph engine samples what an eager one does."""
    from execrl.models import build_tiny_model, build_tokenizer
    from execrl.rollout import RolloutEngine, SamplingParams
    from execrl.tasks.arith import corpus

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=0).cuda().eval()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ["Read two integers.", "def f(x):"]]
    greedy = SamplingParams(temperature=0.0)
    graphed = RolloutEngine(model, tok, slots=4, max_len=128, cuda_graphs=True)
    before = graphed.generate(prompts, 2, 32, greedy)
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # new memory, new values (the old storage is freed and may be reused)
            p.data = torch.randn(p.shape, generator=g, device="cuda") * 0.15
    graphed.reset_graphs()
    after = graphed.generate(prompts, 2, 32, greedy)
    eager = RolloutEngine(model, tok, slots=4, max_len=128, cuda_graphs=False).generate(prompts, 2, 32, greedy)
    assert [c.ids for grp in after for c in grp] == [c.ids for grp in eager for c in grp]
    assert [c.ids for grp in after for c in grp] != [c.ids for grp in before for c in grp]


def test_dynamic_sampling_on_two_gloo_processes(tmp_path):
    """Each process fills its share of informative groups from its part of every round (of 2 prompts: one each); all
    run the same rounds, until both have their 2 groups."""
    overrides = [*FAST, "grpo.use_dynamic_sampling=true", "grpo.use_leave_one_out_baseline=false",
                 "grpo.batch_multiplier=0.5", "grpo.val_period=0"]
    two = two_processes(tmp_path / "two", overrides)
    rows = metrics(two)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["train/dynamic_sampling_rounds"] >= 2 and r["train/valid_frac"] == 1.0 for r in rows)
    assert all(0 < r["train/dynamic_sampling_informative_frac"] <= 1 for r in rows)
    for step in (1, 2):  # every trained group is informative (its rewards differ), 4 of them in all
        groups = {}
        rows = list(map(json.loads, (two / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()))
        for row in (r for r in rows if r.get("trained", True)):  # (the groups left out follow, marked)
            groups.setdefault(row["problem"], []).append(row["reward"])
        assert all(r.get("trained") is False for r in rows[16:])
        assert sum(len(r) for r in groups.values()) == 16 and all(len(set(r)) > 1 for r in groups.values())


def test_a_mixture_of_experts_on_two_gloo_processes_equals_one(tmp_path):
    """Qwen3-MoE (tiny, random): FSDP2 shards its experts' 3-D weights like any other parameter; two processes train
    as one does (the same samples, losses and final weights up to summation order)."""
    from ..rollout.test_architectures import save_family

    save_family("qwen3-moe", tmp_path / "moe")
    overrides = [*FAST, f"policy.model_name={tmp_path / 'moe'}", "policy.generation.max_new_tokens=16",
                 "reward.components=[{name: overlong_penalty, buffer_tokens: 14}]"]
    one = one_process(tmp_path / "one", overrides)
    two = two_processes(tmp_path / "two", overrides)
    assert_same_metrics(one, two)
    wa, wb = weights(one, 2), weights(two, 2)
    experts = [k for k in wa if "experts" in k]
    assert experts and sorted(wa) == sorted(wb)
    from safetensors.torch import load_file

    w0 = load_file(tmp_path / "moe" / "model.safetensors")
    assert any(not torch.equal(wa[k], w0[k]) for k in experts)  # the experts trained
    for k in experts:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4)


MEETING = """
import datetime, functools, sys, time
import torch.distributed as tdist
tdist.init_process_group = functools.partial(tdist.init_process_group, timeout=datetime.timedelta(seconds=2))
from execrl.trainer import distributed as dist  # (its collectives now give up after 2 s, as NCCL's after 10 minutes)
dist.init("cpu", wait_minutes=float(sys.argv[1]))
if dist.rank() == 1:
    time.sleep(float(sys.argv[2]))  # (this rank's rollouts took longer)
try:
    if sys.argv[3] == "meet":
        dist.meet("its rollouts")
    print("summed", dist.sum_floats(1.0)[0], flush=True)
except RuntimeError as e:
    print("error:", e, flush=True)
"""


def meeting(tmp_path: Path, wait_minutes: float, behind_s: float, meet: bool) -> list[str]:
    """Rank 0's and rank 1's last lines, from two gloo processes whose collectives time out after 2 s, rank 1
    reaching the collective `behind_s` late, with `dist.meet` before it or not."""
    src = str(Path(execrl.__file__).resolve().parents[1])
    script = tmp_path / "meeting.py"
    script.write_text(MEETING)
    env = {**os.environ, "PYTHONPATH": src, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(29400 + os.getpid() % 500)}
    args = [sys.executable, str(script), str(wait_minutes), str(behind_s), "meet" if meet else "-"]
    ranks = [subprocess.Popen(args, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    return [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in ranks]


def test_ranks_meet_on_the_cpu_where_one_may_be_far_behind_the_others(tmp_path):
    """A rank whose rollouts end minutes after another's: the other waited in the next collective, which NCCL's
    watchdog ends after 10 minutes (a hunt's find). `dist.meet` waits on a gloo group of its own, with
    cluster.rank_wait_minutes as its limit, and the collective after it starts with every rank there. Here the
    collectives give up after 2 s and rank 1 is 4 s behind."""
    assert meeting(tmp_path, 1.0, 4.0, meet=True) == ["summed 2.0", "summed 2.0"]
    assert meeting(tmp_path, 1.0, 4.0, meet=False)[0].startswith("error:")  # (what it saves rank 0 from)
    late = meeting(tmp_path, 0.03, 6.0, meet=True)[0]  # (1.8 s: the limit, named)
    assert late.startswith("error: rank 0 waited cluster.rank_wait_minutes=0.03 for the other processes after its "
                           "rollouts") and "raise cluster.rank_wait_minutes" in late, late


def test_processes_that_load_other_problems_are_refused(tmp_path):
    """(A hunt's find) Each process loads the problems itself: a loader of one's own that shuffled without the seed
    it is given gave each process another list, and each trained its share of batches no other process saw, without
    a word. Every process now compares its list with rank 0's and the run stops, naming the fix."""
    loader = tmp_path / "unseeded.py"
    examples = str(Path(execrl.__file__).parents[2] / "examples")
    loader.write_text(f"import os, random, sys\nsys.path.insert(0, {examples!r})"
                      "\nfrom own_dataset import load as seeded\n\n\ndef load(split, count=16):\n"
                      "    problems = seeded(split, count=count)\n    random.Random(os.getpid()).shuffle(problems)\n"
                      "    return problems\n")
    src = str(Path(execrl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "execrl.cli", "train", *FAST, f"data.train.dataset_name={loader}:load",
                           "data.train.split_validation_size=4", "grpo.max_num_steps=1", f"logger.log_dir={tmp_path}/r",
                           f"checkpointing.checkpoint_dir={tmp_path}/r/ckpt", "cluster.gpus_per_node=2"],
                          env=env, capture_output=True, text=True, timeout=600)
    said = " ".join(done.stderr.split())
    assert done.returncode != 0 and "processes loaded other training or validation problems than rank 0" in said, \
        said[-3000:]
    assert "draw with the seed it is passed" in said and "(rank 0)" in said and "(rank 1)" in said
