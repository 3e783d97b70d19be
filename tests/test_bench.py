"""The benchmarks' CPU smoke runs (slow tier): they run on GPUs in another session than the one that changes the
trainer, so a change that breaks one must show here first."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, timeout: int = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.name != "common.py"))
def test_bench_script_starts(script):
    """Every script imports (bench/common.py as a sibling, execrl) and parses its flags."""
    assert "usage:" in run(f"bench/{script}", "--help")


@pytest.mark.slow
def test_scale_bench_runs_on_cpu(tmp_path):
    out = tmp_path / "scale-1.json"
    run("bench/scale.py", "--arch", "tiny", "--prompts-per-gpu", "2", "--new-tokens", "16", "--warmup", "1",
        "--steps", "1", "--loss-steps", "2", "--loss-prompts", "2", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["timing"]["step_s"] > 0 and len(result["losses"]) == 2
    assert "Weak scaling" in run("bench/scale.py", "--compare", str(out), str(out))
    # the production config's shape: async, G = 16, up to 3 turns that end by themselves
    run("bench/scale.py", "--config", "configs/grpo_code_8gpu_production.yaml", "--arch", "tiny", "--ending",
        "--prompts-per-gpu", "1", "--new-tokens", "64", "--warmup", "1", "--steps", "2", "--parts", "timing",
        "--micro", "4", "--model-dir", str(tmp_path / "models"), "--out", str(out))
    timing = json.loads(out.read_text())["timing"]
    assert timing["samples"] == 16 and timing["turns_mean"] > 1.0 and timing["age_mean"] == 1.0


@pytest.mark.slow
def test_async_bench_runs_on_cpu():
    out = run("bench/async_step.py", "--arch", "tiny", "--new-tokens", "16", "--prompts", "4", "--generations", "4",
              "--steps", "3", "--workloads", "arch")
    assert "| tiny, 16 new forced | sync |" in out and "| tiny, 16 new forced | async |" in out
    assert "async saves" in out


@pytest.mark.slow
def test_reward_model_bench_runs_on_cpu():
    out = run("bench/reward_model.py", "--arch", "tiny", "--rm", "tiny", "--steps", "2", "--no-compile")
    assert "| tiny | 128 x ~400 tokens, batches of 32 |" in out
    assert "| tiny | unit tests |" in out and "| tiny | unit tests + 0.1 x reward model (tiny) |" in out


@pytest.mark.slow
def test_guided_masks_bench_runs_on_cpu(tmp_path):
    pytest.importorskip("llguidance")
    pytest.importorskip("xgrammar")
    out = run("bench/guided_masks.py", "--vocab", "2000", "--batch", "4", "--tokens", "8", "--cache", str(tmp_path))
    assert "| llguidance | default | regex |" in out and "| xgrammar | default | grammar |" in out


@pytest.mark.slow
def test_guided_rollout_bench_runs_on_cpu(tmp_path):
    out = run("bench/guided_rollout.py", "--arch", "tiny", "--slots", "4", "--new", "8", "--vocab", "500", "--cache",
              str(tmp_path), "--repeat", "1")
    assert "| free |" in out and "| masks all ones (engine alone) |" in out and "| json |" in out


@pytest.mark.slow
def test_architectures_bench_runs_on_cpu():
    out = run("bench/architectures.py", "--arch", "tiny", "--prompts", "4", "--new", "8", "--families", "gemma3",
              "olmo2")
    assert "| gemma3 | 1.0000 |" in out and "| olmo2 |" in out and "engine / generate" in out


@pytest.mark.slow
def test_compare_rollouts_bench_runs_on_cpu():
    out = run("bench/compare_rollouts.py", "--before", str(ROOT / "src"), "--arch", "tiny", "--prompts", "4", "--new",
              "8", "--rounds", "1")
    assert "| before |" in out and "| after (./src) |" in out and "failed" not in out


@pytest.mark.slow
def test_memory_bench_runs_on_cpu():
    out = run("bench/memory.py", "--runs", "tiny:full,tiny:dynamic,tiny:offload", "--new-tokens", "16", "--steps", "2",
              "--micro", "4", "--no-compile")
    assert "| tiny | full |" in out and "| tiny | dynamic |" in out
    assert "policy.cpu_offload=false" in out  # refused on a CPU, said in its row


def table_rows(out: str, first: str) -> list[list[str]]:
    """The cells of the markdown rows of `out` whose first cell is `first`."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in out.splitlines() if line.startswith("|")]
    return [r for r in rows if r[0] == first]


@pytest.mark.slow
def test_trl_step_beside_execrls_on_cpu():
    """TRL's step on the same model and prompts, and the same run's ratio (where `pip install trl` was run)."""
    pytest.importorskip("trl")
    out = run("bench/grpo_step.py", "--sections", "step", "--archs", "tiny", "--step-backends", "execrl,trl",
              "--steps", "2", "--micro", "16", "--new-tokens", "16", "--no-compile")
    rows = {r[1].split(",")[0]: r for r in table_rows(out, "tiny")}
    trl = next(r for name, r in rows.items() if name.startswith("trl "))
    assert float(trl[2]) > float(trl[3]) > 0 and trl[-1] == "1 steps"  # the step holds its generate
    assert "x faster than trl 1." in out and out.rstrip().endswith("in this run")


@pytest.mark.slow
def test_grpo_step_bench_runs_on_cpu():
    out = run("bench/grpo_step.py", "--archs", "tiny", "--prompts", "16", "--new-tokens", "16", "--steps", "2",
              "--micro", "16", "--no-compile", "--pure-bf16-too", "--activation-checkpointing", "mlp")
    assert "| tiny | execrl engine | needs a GPU |" in out  # compiled: CUDA only, said in its row
    assert "| tiny | execrl engine, not compiled |" in out and "| tiny | transformers generate |" in out
    assert "| tiny | execrl engine, 2 prompts x 8 |" in out
    assert "| tiny | greedy | 1.0000 |" in out and "| tiny | sampled, T=1 |" in out
    assert "| tiny | full fp32 log-softmax (before) |" in out and "| tiny | chunked LM head |" in out
    steps = {r[1]: r for r in table_rows(out, "tiny") if "micro-batch" in r[1]}
    assert set(steps) == {"execrl, micro-batch 16", "transformers, micro-batch 16",
                          "execrl (pure bf16), micro-batch 16"}
    assert all(float(r[2]) > 0 and r[-1].startswith("1 steps, activation checkpointing (mlp)") for r in steps.values())
    assert "engine vs trainer" in steps["execrl, micro-batch 16"][-1]


@pytest.mark.slow
def test_grpo_step_bench_sets_packed_prompts_beside_a_row_per_sample_on_cpu():
    out = run("bench/grpo_step.py", "--archs", "tiny", "--sections", "step", "--step-backends", "execrl,execrl-rows",
              "--new-tokens", "16", "--steps", "2", "--micro", "16", "--no-compile")
    steps = {r[1] for r in table_rows(out, "tiny")}
    assert steps == {"execrl, micro-batch 16", "execrl (a row per sample), micro-batch 16"}
    assert "each group's prompt forwarded once: train phase" in out


@pytest.mark.slow
def test_lora_bench_runs_on_cpu():
    out = run("bench/lora.py", "--archs", "tiny", "--steps", "2", "--prompts", "16", "--new-tokens", "16", "--micro",
              "16", "--no-compile")
    assert "| tiny | no adapters |" in out
    assert "| tiny | LoRA r=16 on every linear layer, merge mode (sync GRPO) |" in out
    assert "| tiny | LoRA r=16 on every linear layer, low-rank path (async GRPO) |" in out
    # trainable parameters: the whole tiny model, against rank 16 x (in + out) on its 2 x 7 linear layers
    assert "| tiny | full fine-tuning | 107.1K |" in out and "| tiny | LoRA r=16, all linear | 32.8K |" in out


@pytest.mark.slow
def test_precision_bench_runs_on_cpu():
    """The warm-up runs alone (a run of no GRPO steps is refused by the config: issue 45), then GRPO three ways."""
    out = run("bench/precision.py", "--hidden", "64", "--layers", "2", "--steps", "2", "--warmup-steps", "2",
              "--device", "cpu", "--set", "grpo.max_val_samples=16")
    assert "from one fp32 warm-up (2 steps)" in out
    for mode in ("fp32", "bf16 mixed", "pure bf16 (before)"):
        (row,) = table_rows(out, mode)
        assert row[3].count(" -> ") == 2  # greedy eval at steps 0, 1 and 2


@pytest.mark.slow
def test_profile_engine_bench_runs_on_cpu():
    out = run("bench/profile_engine.py", "--arch", "tiny", "--slots", "4", "--rows", "5", "--variants",
              "eager,compiled,prefill,sampling,breakdown,admission", "--refill-mean", "4")
    assert "tiny eager, 4 slots, window 384: " in out and "CPU time in torch ops (their own) per decode step" in out
    assert "tiny prefill of 4 x 128 tokens: " in out
    assert "tiny compiled: needs a GPU" in out and "sampling: needs a GPU" in out
    assert "breakdown, 4 slots: generate " in out
    assert "admission, 4 slots: " in out and len(table_rows(out, "16 x 97")) == 1
    assert len(table_rows(out, "log-normal, refilled")[0]) == 4
    out = run("bench/profile_engine.py", "--arch", "tiny", "--slots", "4", "--rows", "3", "--cache", "256", "--positions",
              "130,250", "--at", "200", "--variants", "positions,eager")
    assert "| 130 | 256 | " in out and "| 250 | 256 | " in out and "us per position" in out
    assert "tiny eager, 4 slots, window 256, position 200: " in out


@pytest.mark.slow
def test_sandbox_bench_runs_on_cpu():
    out = run("bench/sandbox.py", "--tests", "20", "--workers", "2")
    assert "naive: python3 file per test, 2 threads" in out and "naive, interpreter binary, 2 threads" in out
    assert "execrl, 1 test(s)/program, sampling" in out and "execrl, 10 test(s)/program, sampling" in out


@pytest.mark.slow
def test_train_smoke_bench_runs_on_cpu():
    out = run("bench/train_smoke.py", "--arch", "tiny", "--steps", "2", "--prompts", "2", "--generations", "4")
    assert "tiny on cpu" in out and "2 x 4 samples/step" in out
    steps = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [s[0] for s in steps] == ["1", "2"] and all(float(s[4]) > 0 for s in steps)  # generated tok/s


@pytest.mark.slow
def test_lengths_bench_runs_on_cpu():
    out = run("bench/lengths.py", "--arch", "tiny", "--mean", "8", "--max", "24", "--samples", "32", "--slots", "8")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| a GRPO step", "| refilled"))]
    assert [r[1].strip() for r in rows] == ["8", "8", "32", "32"]  # each batch as the engine runs it, then every row
    for r in rows:
        assert float(r[3].replace(",", "")) > 0 and 0 < float(r[6].strip(" %")) <= 100
        assert float(r[8].split("(")[0]) > 0  # ms per decode step
        assert 0 < float(r[12].split("=")[1]) < 1  # each group's prompt once: fewer layer tokens than rows
    assert "ms per decode step to 24 tokens, all 8 slots live" in out
    tails = [line.split(":") for line in out.splitlines() if line.startswith("  ") and "positions" in line
             or line.startswith("  unsplit:")]
    assert [t[0].strip() for t in tails] == ["unsplit", "1024 positions", "512 positions (the default)",
                                             "256 positions", "runs of 512 positions, on the busy slots' rows only "
                                             "(the default"]
    assert all(float(t[-1]) > 0 for t in tails)


@pytest.mark.slow
def test_few_live_bench_runs_on_cpu():
    out = run("bench/few_live.py", "--arch", "tiny", "--new", "24", "--cases", "8:2,4:4")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [("8", "2"), ("4", "4")]
    assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in rows)  # ms per decode step, unsplit and split


@pytest.mark.slow
def test_shared_prompts_bench_runs_on_cpu():
    out = run("bench/shared_prompts.py", "--arch", "tiny", "--prompt-lengths", "16,48", "--new", "8", "--prompts", "2",
              "--group", "4")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r[0].strip() for r in rows] == ["16", "48"]
    assert all(float(r[1].split()[0].replace(",", "")) > 0 and r[3].strip().endswith("x") for r in rows)


@pytest.mark.slow
def test_streamed_grading_bench_runs_on_cpu():
    out = run("bench/streamed_grading.py", "--arch", "tiny", "--prompts", "4", "--group", "2", "--mean", "8", "--max",
              "24", "--rounds", "1", "--slow-every", "4")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| graded")]
    assert [r[0].strip() for r in rows] == ["graded as each sample ends (default)", "graded after generation"]
    assert all(float(r[1]) >= float(r[2]) > 0 for r in rows) and rows[1][4].strip() == "0%"
    assert "the last step's verdicts: {'pass': 6, 'timeout': 2}" in out  # MBPP's reference programs, every 4th looping


@pytest.mark.slow
def test_stop_strings_bench_runs_on_cpu():
    out = run("bench/stop_strings.py", "--arch", "tiny", "--slots", "8", "--new", "48", "--lengths", "16,64")
    host = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| 16 |", "| 64 |"))]
    assert len(host) == 2 and all(float(r[1]) > 0 and float(r[2]) > 0 for r in host)
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| no stop", "| stop string"))]
    assert len(rows) == 3 and all(float(r[1].replace(",", "")) > 0 for r in rows)


@pytest.mark.slow
def test_startup_bench_runs_on_cpu():
    out = run("bench/startup.py", "--arch", "tiny", "--new-tokens", "16")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| 0: ", "| first |", "| second |"))]
    assert [r[0].strip() for r in rows] == ["0: tiny model (writes the bytecode)", "first", "second"]
    assert all(float(r[2]) >= float(r[3]) + float(r[4]) > 0 for r in rows)  # to step 1 >= import + build


@pytest.mark.slow
def test_logprob_mismatch_bench_runs_on_cpu():
    out = run("bench/logprob_mismatch.py", "--archs", "tiny", "--prompts", "4", "--new", "16")
    for pair in ("engine vs trainer (bf16)", "engine vs fp32", "trainer (bf16) vs fp32"):
        assert f"| tiny | {pair} |" in out


@pytest.mark.slow
def test_decode_attention_bench_runs_on_cpu():
    out = run("bench/decode_attention.py", "--arch", "tiny", "--slots", "4", "--windows", "1024,2048")
    assert "reference GB/s" in out and out.count("\n| 4 |") == 2
    mixed = run("bench/decode_attention.py", "--arch", "tiny", "--slots", "8", "--windows", "1024", "--mixed", "200")
    assert "a log-normal completion (mean 200)" in mixed and mixed.count("\n| 8 | 1024 |") == 1


@pytest.mark.slow
def test_kernel_choices_bench_runs_on_cpu():
    out = run("bench/kernel_choices.py", "--archs", "tiny", "--rows", "4,8", "--lengths", "2x32,1x64")
    # q/k/v, o, gate/up, down, head; and the down projection with its add, as one GEMM and in parts
    assert out.count("\n| tiny | 4 |") == 6 and out.count("\n| tiny | 8 |") == 6
    assert "| tiny | 4 | 64 x 128 |" in out and "x) |" in out
    assert "| tiny | 2 x 32 | 4/2 x 16 |" in out and "| tiny | 1 x 64 |" in out


@pytest.mark.slow
def test_fused_decode_bench_runs_on_cpu():
    out = run("bench/fused_decode.py", "--archs", "tiny", "--rows", "4", "--sections", "gemm,chain,tma,mlp,flow")
    # four projections twice (gemm, tma), the chain's, the MLP block's and the dataflow MLP's engine rows and kernels'
    assert out.count("\n| tiny | 4 |") == 14
    assert "| tiny | 4 | the engine's (gate/up, silu x up, down's parts) |" in out
    assert "| tiny | 4 | o | 64 x 64 (0.0 MB) |" in out  # (tma's)
    assert "| tiny | 4 | the engine's (compiled: cuBLAS, inductor's kernels) |" in out
    assert "| tiny | 4 | gate/up, silu x up | 256 x 64 |" in out and "| tiny | 4 | the engine's five kernels |" in out


@pytest.mark.slow
def test_wave_gated_bench_runs_on_cpu():
    out = run("bench/wave_gated.py", "--archs", "tiny", "--rows", "4")
    assert "| tiny | 4 | 256 x 64 |" in out and "needs a Hopper GPU (Gluon) |" in out  # (the kernel table's row)
    assert "| tiny |  | needs a Hopper GPU (Gluon)" in out  # (the engine table's)


@pytest.mark.slow
def test_trainer_parts_bench_runs_on_cpu():
    out = run("bench/trainer_parts.py", "--arch", "tiny", "--rows", "8", "--prompt", "16", "--new", "32")
    for part in ("logprobs forward + backward, right-padded rows", "chunked LM head, forward + backward",
                 "bf16 copy from the fp32 master", "a training pass, 8 samples in groups of 8, micro-batches of 8"):
        assert f"| {part} |" in out


@pytest.mark.slow
def test_profile_train_bench_runs_on_cpu():
    out = run("bench/profile_train.py", "--arch", "tiny", "--micro", "16", "--new", "16", "--steps", "2", "--top", "5")
    assert "train phase 1, profiled:" in out and "top host ops by their total time" in out and "train phase 2:" in out
    out = run("bench/profile_train.py", "--arch", "tiny", "--micro", "16", "--new", "16", "--steps", "3", "--whole")
    assert "step 2, whole iteration profiled:" in out and "| engine decode | " in out and "| optimize | 1 | " in out
    assert "the host's innermost op (main thread) while the GPU idled" in out and "innermost execrl" not in out
    out = run("bench/profile_train.py", "--arch", "tiny", "--micro", "16", "--new", "16", "--steps", "3", "--whole",
              "--stacks")
    assert "the innermost execrl function (main thread) while the GPU idled" in out and "| trainer/step.py(" in out
    out = run("bench/profile_train.py", "--arch", "tiny", "--micro", "16", "--new", "16", "--steps", "3", "--syncs")
    assert "step 2: 0 host syncs (torch's sync debug mode), by where execrl asked" in out  # (a CPU: none to count)


@pytest.mark.slow
def test_step_timeline_bench_runs_on_cpu():
    out = run("bench/step_timeline.py", "--arch", "tiny", "--steps", "3", "--new", "16", "--micro", "16")
    assert "tiny: the step's parts by the host (a CPU: no GPU to idle), ms, medians over 1 steps" in out
    assert "| the last harvest -> the first forward | " in out and "| build_batch | " in out
    assert "| the first forward is launched at | " in out


@pytest.mark.slow
def test_overlap_bench_runs_on_cpu():
    out = run("bench/overlap.py", "--arch", "tiny", "--new", "16", "--micro", "16", "--rows", "16", "--matmul-size",
              "256", "--matmuls", "20", "--repeat", "1")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| - |", "| 0 |"))]
    assert [r[1].strip().split(",")[0].split(":")[0] for r in rows] == [
        "matmuls alone", "generate alone", "in turn (sum)", "at once", "at once", "generate alone", "train alone",
        "in turn (sum)", "at once", "at once"]
    assert all(float(r[2]) > 0 for r in rows)


@pytest.mark.slow
def test_slots_bench_runs_on_cpu():
    out = run("bench/slots.py", "--arch", "tiny", "--prompts", "4", "--generations", "4", "--new", "8", "--slots",
              "4,16")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| 4 |", "| 16 |"))]
    assert [int(r[0]) for r in rows] == [4, 16] and rows[0][3].strip() == "1.00x" and float(rows[1][2].replace(",", "")) > 0


@pytest.mark.slow
def test_eval_batch_bench_runs_on_cpu():
    out = run("bench/eval_batch.py", "--arch", "tiny", "--problems", "6", "--new", "8")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| 16 |", "| auto |"))]
    assert [(r[0].strip(), int(r[1])) for r in rows] == [("16", 6), ("auto", 6)]  # 6 problems: 6 at once either way
    assert rows[0][5].strip() == "1.00x" and float(rows[1][4].replace(",", "")) > 0


@pytest.mark.slow
def test_eval_grading_bench_runs_on_cpu():
    out = run("bench/eval_grading.py", "--arch", "tiny", "--problems", "4", "--samples", "2", "--new", "8", "--rounds",
              "1", "--shares", "0.5,0", "--workers", "2")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| 0.5 |", "| 0 (after"))]
    assert [r[0].strip() for r in rows] == ["0.5", "0 (after sampling)"] and rows[1][2].strip() == "1.00x"
    assert all(float(r[1]) > 0 for r in rows) and "verdicts {'pass': 8}" in out  # MBPP's reference programs
