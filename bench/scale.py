"""Multi-GPU GRPO: weak scaling of `execrl train` over 1, 2, 4 ... GPUs, and 1-GPU vs N-GPU losses on the same data.

    python bench/scale.py --out scale-1.json                                          # 1 GPU
    torchrun --standalone --nproc-per-node 2 bench/scale.py --out scale-2.json --baseline scale-1.json
    python bench/scale.py --compare scale-1.json scale-2.json                         # the tables again, no GPU
    # the 8-GPU production config (async, 3 turns of unit-test feedback, G = 16) against 4 GPUs:
    torchrun --standalone --nproc-per-node 4 bench/scale.py --config configs/grpo_code_8gpu_production.yaml \
        --arch qwen2.5-coder-7b --ending --prompts-per-gpu 4 --micro 4 --warmup 2 --steps 20 --parts timing \
        --out prod-4.json
    torchrun --standalone --nproc-per-node 8 bench/scale.py ... --out prod-8.json --baseline prod-4.json

The workload is --config, by default the seed's 2-GPU test config (configs/grpo_code_2gpu_test.yaml: G = 8,
micro-batches of 2, KL to a reference model), with the Qwen2.5-Coder-1.5B architecture by default, random-init (throughput does not depend on the weights),
on the built-in code task's prompts padded to ~128 tokens, every completion forced to --new-tokens (ignore_eos), or
with --ending, up to --new-tokens per turn (a random model whose turns end by themselves: see build_model).
Each run has two parts, in one process (compiled code is reused):
  timing  weak scaling: --prompts-per-gpu prompts x G per GPU per step, through `execrl train`'s loop (rollouts,
          grading, the FSDP2 optimizer step); the first --warmup steps (compilation) are left out of the medians.
  losses  the first --loss-steps steps on data that is the same for any number of GPUs (--loss-prompts x G fixed
          random completions and rewards per step, two optimizer steps each), through the trainer's own train_step:
          loss, grad norm, entropy and KL per step, to compare a 1-GPU and an N-GPU run (bf16: equal within rounding).
Rank 0 prints a table and writes --out (JSON); with --baseline (a 1-GPU run's JSON) also the scaling efficiency and
the loss comparison. --arch tiny runs the same code on CPU (gloo) as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import (
    ARCHS,
    DEVICE,
    NO_COMPILE,
    byte_tokenizer,
    device_name,
    free_memory,
    fresh_peak,
    padding_prompt,
    peak_gib,
    qwen2_config,
    read_metrics,
    table,
)

SEED_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "grpo_code_2gpu_test.yaml"


def say(*parts) -> None:
    from execrl.trainer import distributed as dist

    if dist.is_main():
        print("[scale]", *parts, flush=True)


def build_model(arch: str, directory: Path, ending: bool = False) -> Path:
    """The architecture with random weights (seeded: the same on every run) and a byte-level tokenizer, saved once.

    `ending`: a random model whose turns end by themselves, so that episodes take several turns (forced lengths end
    every turn truncated, which ends the episode): see end_turns. Compute is unchanged."""
    from transformers import Qwen2ForCausalLM

    from execrl.trainer import distributed as dist

    target = directory / (arch + ("-ending" if ending else ""))
    if dist.is_main() and not (target / "config.json").is_file():
        say(f"building a random-init {arch} in {target}")
        tok = byte_tokenizer()  # byte ids, a subset of the real vocabulary
        cfg = qwen2_config(arch, tok)
        torch.manual_seed(0)
        with torch.device(DEVICE):
            model = Qwen2ForCausalLM(cfg).to(torch.bfloat16 if DEVICE == "cuda" else torch.float32)
            if ending:
                say(f"EOS's embedding row scaled {end_turns(model, tok.eos_token_id):.1f}x")
        tmp = target.with_name(f".tmp-{arch}-{os.getpid()}")
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.rename(target)
        del model
        free_memory()
    dist.barrier()
    return target


@torch.no_grad()
def end_turns(model, eos: int, rate: float = 1 / 200) -> float:
    """Scale EOS's row of the LM head (and so its input embedding too, if tied) so that the random model samples EOS
    at about `rate` of the positions of random text (at T = 1); its own text differs, so the rate in generation does
    too. Returns the scale."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (8, 128), generator=torch.Generator().manual_seed(0), device="cpu")
    ids = ids.to(next(model.parameters()).device)
    logits = model(ids).logits.float().flatten(0, 1)  # [positions, vocab]
    z, rest = logits[:, eos].clone(), logits.clone()
    rest[:, eos] = float("-inf")
    rest = torch.logsumexp(rest, -1)  # [positions]
    scales = torch.logspace(0, 3, 200, device=z.device)  # [200]
    p = torch.sigmoid(scales[:, None] * z[None] - rest[None]).mean(1)  # P(EOS) per scale, mean over positions
    k = float(scales[(p - rate).abs().argmin()])
    model.get_output_embeddings().weight[eos] *= k
    return k


def config(args, model_dir: Path, log_dir: str, num_prompts: int, global_batch: int | None, steps: int,
           compile_: bool, extra: tuple[str, ...] = ()):
    """--config (the seed's 2-GPU config by default) on the built-in task's prompts, random weights, completions of
    --new-tokens per turn (forced, or at most with --ending), a context long enough for every turn the config allows
    (an environment turn of the built-in task's feedback is about 80 tokens). global_batch None: the config's
    (capped at a step's samples)."""
    from transformers import AutoTokenizer

    from execrl.config import load_config
    from execrl.trainer import distributed as dist

    turns = load_config(args.config).grpo.max_rollout_turns
    overrides = [
        f"policy.model_name={model_dir}", "data.train.dataset_name=builtin:arith-code",
        "data.train.split_validation_size=0", f"grpo.num_prompts_per_step={num_prompts}",
        f"grpo.max_num_steps={steps}",
        f"policy.max_total_sequence_length={args.prompt_tokens + turns * args.new_tokens + (turns - 1) * 160 + 32}",
        f"policy.generation.max_new_tokens={args.new_tokens}", f"policy.generation.ignore_eos={not args.ending}",
        f"prompt.system_prompt={padding_prompt(AutoTokenizer.from_pretrained(model_dir), args.prompt_tokens)}",
        "grpo.val_period=0",
        "checkpointing.enabled=false", "logger.tensorboard_enabled=false", f"logger.log_dir={log_dir}",
        "logger.rollouts_period=0", f"cluster.gpus_per_node={dist.world_size()}", "cluster.num_nodes=1",
        "offline=true",
    ]
    if global_batch is not None:
        overrides += [f"policy.train_global_batch_size={global_batch}"]
    if args.micro:
        overrides += [f"policy.train_micro_batch_size={args.micro}", f"policy.logprob_batch_size={args.micro}"]
    if not compile_:
        overrides += NO_COMPILE
    if DEVICE == "cpu":
        overrides += ["policy.device=cpu"]
    return load_config(args.config, [*overrides, *extra])


def part_timing(args, model_dir: Path) -> dict:
    """Weak scaling: `execrl train` with --prompts-per-gpu prompts per GPU; medians over the steps after --warmup."""
    from execrl.trainer import distributed as dist
    from execrl.trainer.loop import train

    world = dist.world_size()
    num_prompts = args.prompts_per_gpu * world
    log_dir = dist.from_main(tempfile.mkdtemp(prefix="execrl-scale-"))
    steps = args.warmup + args.steps
    cfg = config(args, model_dir, log_dir, num_prompts, None, steps, args.compile)
    say(f"timing: {steps} steps of {num_prompts} prompts x {cfg.grpo.num_generations_per_prompt} on {world} "
        f"process(es), {args.new_tokens} new tokens, micro-batch {cfg.policy.train_micro_batch_size}, "
        f"compiled={args.compile} (the first {args.warmup} steps compile)")
    fresh_peak()
    t = time.perf_counter()
    run = train(cfg)
    wall = time.perf_counter() - t
    peaks = dist.gather_lists([round(peak_gib(), 2)])
    rows = read_metrics(log_dir) if dist.is_main() else []
    del run
    free_memory()
    timed = [r for r in rows if r["step"] > args.warmup]
    med = {k: statistics.median(r[f"time/{k}"] for r in timed) for k in ("generate", "grade", "train")} if timed else {}
    samples = num_prompts * cfg.grpo.num_generations_per_prompt
    tokens = statistics.median(r["train/completion_len_mean"] for r in timed) * samples if timed else 0
    step_s = statistics.median(r["time/step"] for r in timed) if timed else 0.0  # async: grading overlaps
    return {"gpus": world, "prompts": num_prompts, "samples": samples, "step_s": step_s,
            **{f"{k}_s": v for k, v in med.items()},
            "tokens_per_step": tokens, "gen_tok_s": tokens / med["generate"] if timed else 0,
            "step_tok_s": tokens / step_s if timed else 0, "peak_gib_per_rank": peaks, "wall_s": wall,
            "turns_mean": statistics.median(r["train/turns_mean"] for r in timed) if timed else 0,
            "age_mean": statistics.median(r["train/trajectory_age_mean"] for r in timed) if timed else 0,
            "steps": [{"step": r["step"], "s": sum(r[f"time/{k}"] for k in ("generate", "grade", "train")),
                       "loss": r["train/loss"], "grad_norm": r["train/grad_norm"]} for r in rows]}


def fixed_rollouts(step: int, num_prompts: int, group: int, prompts: list[list[int]], new_tokens: int, per_batch: int,
                   env):
    """This rank's share of a step's global batch of fixed random completions (lengths new/4..new) and rewards:
    generated whole on every rank from (step) alone, so it is the same data on any number of GPUs; `env` the
    episodes' environment (the trainer reads its role)."""
    from execrl.envs import Segment, Trajectory
    from execrl.rewards import Reward
    from execrl.trainer import distributed as dist
    from execrl.trainer.rollouts import Episode, Rollouts

    g = torch.Generator().manual_seed(1000 + step)
    groups = []
    for i in range(num_prompts):
        lengths = torch.randint(new_tokens // 4, new_tokens + 1, (group,), generator=g).tolist()
        completions = [torch.randint(3, 259, (n,), generator=g).tolist() for n in lengths]
        rewards = (torch.randint(0, 5, (group,), generator=g) / 4).tolist()
        groups.append([Episode(None, env, [], Trajectory(prompts[i % len(prompts)], [Segment(ids, True)],
                                                          len(ids) == new_tokens), reward=Reward(r), turns=1)
                       for ids, r in zip(completions, rewards)])
    return Rollouts([e for episodes in dist.this_rank(groups, per_batch) for e in episodes], group)


def part_losses(args, model_dir: Path) -> list[dict]:
    """The trainer's train_step on fixed data: --loss-prompts x G per step (two optimizer steps), any world size."""
    from execrl.config import load_config
    from execrl.envs import make_env
    from execrl.trainer import distributed as dist
    from execrl.trainer.loop import train_step
    from execrl.trainer.rollouts import encode
    from execrl.trainer.setup import build_run

    group = load_config(args.config).grpo.num_generations_per_prompt
    samples = args.loss_prompts * group
    cfg = config(args, model_dir, dist.from_main(tempfile.mkdtemp(prefix="execrl-scale-")), args.loss_prompts,
                 samples // 2, args.loss_steps, compile_=False, extra=(f"policy.optimizer.kwargs.lr={args.loss_lr}",))
    say(f"losses: {args.loss_steps} steps of {args.loss_prompts} x {group} fixed samples (2 optimizer steps each) "
        f"on {dist.world_size()} process(es)")
    run = build_run(cfg)
    env = make_env(cfg, None)
    prompts = [encode(env.reset(p), run.tokenizer) for p in run.sampler.problems[:args.loss_prompts]]
    out = []
    try:
        for step in range(1, args.loss_steps + 1):
            rollouts = fixed_rollouts(step, args.loss_prompts, group, prompts, args.new_tokens,
                                      run.plan.prompts_per_optimizer_step, env)
            stats = train_step(run, rollouts)
            run.step = step
            out.append({"step": step, **{k: stats[k] for k in ("loss", "grad_norm", "entropy", "kl", "clip_frac")}})
            say(f"  step {step}: " + "  ".join(f"{k} {v:.6g}" for k, v in out[-1].items() if k != "step"))
    finally:
        run.close()
    return out


def report(results: list[dict]) -> None:
    """Tables from one or more runs' JSON; the first is the baseline (1 GPU) for efficiency and loss differences."""
    base = results[0]
    rows = []
    for r in results:
        t = r.get("timing")
        if not t:
            continue
        eff = base["timing"]["step_s"] / t["step_s"] if t["step_s"] and base.get("timing") else float("nan")
        rows.append([t["gpus"], f"{t['prompts']} x {t['samples'] // t['prompts']}", f"{t['step_s']:.2f}",
                     f"{t['generate_s']:.2f}", f"{t['grade_s']:.2f}", f"{t['train_s']:.2f}", f"{t['gen_tok_s']:,.0f}",
                     f"{t['step_tok_s']:,.0f}", f"{t['step_tok_s'] / t['gpus']:,.0f}", f"{eff:.1%}",
                     "/".join(f"{p:.1f}" for p in t["peak_gib_per_rank"]), f"{t.get('turns_mean', 1):.2f}",
                     f"{t.get('age_mean', 0):.0f}"])
    for r in results:
        if r.get("timing"):
            print(f"{r['gpus']} GPU(s), rank 0, per step: " + "  ".join(
                f"{x['step']}: {x['s']:.2f} s loss {x['loss']:.4g}" for x in r["timing"]["steps"]))
    if rows:
        table(f"Weak scaling ({base.get('device', '?')}, {base.get('arch', '?')}, {base.get('new_tokens', '?')} new "
              "tokens; medians after warm-up)",
              ["GPUs", "prompts x G", "step s", "generate s", "grade s", "train s", "gen tok/s", "step tok/s",
               "step tok/s per GPU", "efficiency vs first", "peak GiB per rank", "turns", "age"], rows)
    losses = [r for r in results if r.get("losses")]
    if len(losses) >= 2:
        keys = ("loss", "grad_norm", "entropy", "kl")
        rows = []
        for i, first in enumerate(losses[0]["losses"]):
            for other in losses[1:]:
                if i >= len(other["losses"]):
                    continue
                o = other["losses"][i]
                rows.append([first["step"], f"{losses[0]['gpus']} vs {other['gpus']}",
                             *(f"{first[k]:.5g} / {o[k]:.5g} ({abs(o[k] - first[k]) / max(abs(first[k]), 1e-12):.1e})"
                               for k in keys)])
        table("Same data on different numbers of GPUs: value / value (relative difference)", ["step", "GPUs",
              *keys], rows)
    elif losses:
        table(f"Losses on the fixed data ({losses[0]['gpus']} GPU(s))", ["step", "loss", "grad_norm", "entropy", "kl"],
              [[x["step"], *(f"{x[k]:.6g}" for k in ("loss", "grad_norm", "entropy", "kl"))]
               for x in losses[0]["losses"]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(SEED_CONFIG), help="the run's config (default: the seed's 2-GPU test "
                                                                "config; configs/grpo_code_8gpu_production.yaml: "
                                                                "async, 3 turns)")
    ap.add_argument("--arch", default="qwen2.5-coder-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--prompts-per-gpu", type=int, default=8, help="timing: prompts per GPU per step (x the config's "
                                                                   "generations per prompt)")
    ap.add_argument("--new-tokens", type=int, default=256,
                    help="tokens generated per turn (forced; at most, with --ending)")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="prompt length, about")
    ap.add_argument("--warmup", type=int, default=2, help="timing: first steps left out (compilation)")
    ap.add_argument("--steps", type=int, default=3, help="timing: steps measured after the warm-up")
    ap.add_argument("--micro", type=int, default=None, help="micro-batch size for training and scoring (default: "
                                                            "--config's)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="timing: eager training and engine")
    ap.add_argument("--ending", action="store_true", help="turns end by themselves (EOS), not forced to --new-tokens "
                                                          "(multi-turn configs: episodes then take several turns)")
    ap.add_argument("--loss-steps", type=int, default=3, help="losses: steps on fixed data (0: skip the part)")
    ap.add_argument("--loss-prompts", type=int, default=16, help="losses: global prompts per step (x G samples)")
    ap.add_argument("--loss-lr", type=float, default=1e-4, help="losses: learning rate (large enough that later "
                                                                "steps show the earlier updates)")
    ap.add_argument("--parts", default="timing,losses", help="which parts to run")
    ap.add_argument("--model-dir", default=os.path.join(tempfile.gettempdir(), "execrl-scale-models"),
                    help="where the random-init model is saved (and found by later runs)")
    ap.add_argument("--out", default=None, help="JSON of this run (default: scale-<N>gpu.json)")
    ap.add_argument("--baseline", default=None, help="a 1-GPU run's JSON: print efficiency and loss differences")
    ap.add_argument("--compare", nargs="+", default=None, metavar="JSON", help="only print the tables of these runs")
    args = ap.parse_args()
    if args.compare:
        report([json.loads(Path(p).read_text()) for p in args.compare])
        return

    from execrl.trainer import distributed as dist

    dist.init("auto")
    device = device_name()
    if args.arch != "tiny" and DEVICE == "cpu":
        sys.exit("this architecture needs GPUs: use --arch tiny on a CPU")
    say(f"{dist.world_size()} x {device}, torch {torch.__version__}, "
        f"transformers {__import__('transformers').__version__}")
    model_dir = build_model(args.arch, Path(args.model_dir), ending=args.ending)
    parts = args.parts.split(",")
    result = {"arch": args.arch, "device": device, "gpus": dist.world_size(), "new_tokens": args.new_tokens,
              "torch": torch.__version__}
    if "timing" in parts and args.steps > 0:
        result["timing"] = part_timing(args, model_dir)
        say(f"timing done: {result['timing']['step_s']:.2f} s/step")
    if "losses" in parts and args.loss_steps > 0:
        result["losses"] = part_losses(args, model_dir)
    if dist.is_main():
        out = Path(args.out or f"scale-{dist.world_size()}gpu.json")
        out.write_text(json.dumps(result, indent=1))
        say(f"wrote {out}")
        found = args.baseline and Path(args.baseline).is_file()
        baseline = [json.loads(Path(args.baseline).read_text())] if found else []
        report(baseline + [result])
    dist.close()


if __name__ == "__main__":
    main()
