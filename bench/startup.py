"""Start-up: how long `execrl train` takes from a fresh process to the end of its first step, and where it goes, for
a first start (empty compile caches) and a second start of the same config on the same machine (caches kept).

    python bench/startup.py --arch qwen2.5-0.5b
    python bench/startup.py --arch tiny --new-tokens 16   # a smoke run on a CPU
Each start is its own process (`--child`), as a user's second `execrl train` is; both share one fresh
TORCHINDUCTOR_CACHE_DIR, and Python's bytecode cache (as an installed package has it; an image that sets
PYTHONDONTWRITEBYTECODE would compile every module's source in every process). Before them a start of the tiny
model, with compile caches of its own, writes the bytecode of every module a start imports, as a first `execrl`
command after installing does (`pip install` writes it, `uv pip install` does not): the first start is then the
first of this config, its compile caches empty (`--fresh-install`: no such start, the first one writes the bytecode
too). `--profile` adds where the build's seconds go, torch.compile's seconds per phase, the recompiles' reasons and
the costliest imports; `--profile-start` runs the last start under cProfile, build and step 1 (`--starts 3`: the
second start's figures unprofiled, the third's profile says where such a start's host seconds go).
Columns: the interpreter to the end of step 1 (`to step 1`), importing execrl and transformers, building the run
(model, optimizer, engine, sandbox), step 1's generate and train, the seconds torch.compile spent (dynamo and
inductor, over the whole start), its inductor cache hits/misses, and the CUDA graphs captured.
"""

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


def child(args) -> None:
    from common import read_metrics, step_overrides

    from execrl.config import load_config
    from execrl.trainer import loop, startup
    imported = time.perf_counter() - T0
    import torch

    built = {}
    build_run = loop.build_run
    if args.late_pool:  # inductor's compile workers started at the first compilation (torch's moment), not early
        from execrl.trainer import setup
        setup.warm_compile_workers = lambda: None

    def timed_build(cfg):
        t = time.perf_counter()
        try:
            return build_run(cfg)
        finally:
            built["s"] = time.perf_counter() - t

    if args.profile_start:  # where the whole start goes (build and step 1), host side: by cumulative and own time
        loop.train = profiled(loop.train, ("cumulative", 70), ("tottime", 40))
    if args.profile and not args.profile_start:  # where the build's seconds go (one profiler at a time)
        loop.build_run = profiled(timed_build, ("cumulative", 45))
    else:
        loop.build_run = timed_build
    overrides = step_overrides(Path(args.model), 1, args.micro, args.system, Path(args.log_dir), args.new_tokens)
    loop.train(load_config(None, overrides))
    to_first = time.perf_counter() - T0
    if args.profile:  # dynamo's seconds per compiled function and phase
        from torch._dynamo.utils import compile_times
        print(compile_times(repr="str", aggregate=True))
    first = read_metrics(args.log_dir)[0]
    done = startup.so_far()  # (what the run's own start-up line reports)
    print("STARTUP " + json.dumps({
        "to_first_step": to_first, "import": imported, "build": built["s"], "generate": first["time/generate"],
        "train": first["time/train"], **done["compiled"], "captures": done["captured"]["graphs"],
        "capture_s": done["captured"]["seconds"], "torch": torch.__version__}))


def profiled(fn, *prints: tuple[str, int]):
    """fn under cProfile: each call's costliest functions printed after it, (sort key, how many) for each of
    `prints`."""
    import cProfile
    import pstats

    def run(*args):
        prof = cProfile.Profile()
        try:
            return prof.runcall(fn, *args)
        finally:
            stats = pstats.Stats(prof, stream=sys.stdout)
            for key, n in prints:
                stats.sort_stats(key).print_stats(n)

    return run


def slowest_imports(stderr: str, n: int) -> list[str]:
    """The n imports of a start with the largest cumulative time, from PYTHONPROFILEIMPORTTIME's lines."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (c.strip() for c in line[len("import time:"):].split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    return [f"{us:>10,} {name}" for us, name in sorted(rows, reverse=True)[:n]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--profile", action="store_true", help="print each start's build profile, torch.compile's "
                    "seconds per function and the recompiles' reasons")
    ap.add_argument("--profile-start", action="store_true", help="the last start under cProfile, build and step 1 "
                    "(host side: where a second start's seconds go), its 70 costliest calls and 40 costliest bodies")
    ap.add_argument("--fresh-install", action="store_true", help="no start of the tiny model before: the first start "
                    "writes Python's bytecode too, as on a machine where nothing has run since `uv pip install`")
    ap.add_argument("--late-pool", action="store_true", help="start inductor's compile workers at the first "
                    "compilation, as torch does, not while the run loads (the comparison for that choice)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--log-dir", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    from common import ARCHS, device_name, save_arch
    if args.arch not in ARCHS:
        raise SystemExit(f"--arch {args.arch}: one of {sorted(ARCHS)}")
    work = Path(tempfile.mkdtemp())
    system = save_arch(args.arch, work)
    # Python's bytecode kept as an installed package has it (an image that sets PYTHONDONTWRITEBYTECODE compiles
    # every module's source in every process), in work/ as the compile caches are
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPYCACHEPREFIX=str(work / "bytecode"),
               **({"TORCH_LOGS": "recompiles", "PYTHONPROFILEIMPORTTIME": "1"} if args.profile else {}))

    def start(name: str, model: Path, log_dir: Path, system: str, caches: Path, profile_start: bool = False):
        cmd = [sys.executable, __file__, "--child", "--model", str(model), "--log-dir", str(log_dir), "--system",
               system, "--new-tokens", str(args.new_tokens), "--micro", str(args.micro),
               *(["--profile"] if args.profile else []), *(["--late-pool"] if args.late_pool else []),
               *(["--profile-start"] if profile_start else [])]
        t = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**env, "TORCHINDUCTOR_CACHE_DIR": str(
            caches / "inductor-cache"), "TRITON_CACHE_DIR": str(caches / "triton-cache")})
        wall = time.perf_counter() - t
        line = [x for x in done.stdout.splitlines() if x.startswith("STARTUP ")]
        if done.returncode or not line:
            raise SystemExit(f"start {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        said = [x for x in done.stderr.splitlines() if x.startswith("start-up:")]  # the run's own line
        print(f"start {name}: {said[0] if said else '(no start-up line: nothing compiled)'}")
        if profile_start or args.profile:
            print(done.stdout[:done.stdout.index("STARTUP ")])
        if args.profile:
            print("\n".join(x for x in done.stderr.splitlines() if "ecompil" in x or "triggered by" in x))
            print("the 20 costliest imports (cumulative us, `python -X importtime`):")
            print("\n".join(slowest_imports(done.stderr, 20)))
        return name, wall, json.loads(line[0][len("STARTUP "):])

    rows = []
    if not args.fresh_install:  # the bytecode written by a start of another model, with its own compile caches
        tiny = work / "bytecode-start"
        rows.append(start("0: tiny model (writes the bytecode)", tiny / "model", tiny / "run", save_arch("tiny", tiny),
                          tiny))
    for i in range(args.starts):
        rows.append(start(("first", "second")[i] if i < 2 else str(i + 1), work / "model", work / f"run{i}", system,
                          work, args.profile_start and i == args.starts - 1))
    print(f"\n{args.arch} on {device_name()}, torch {rows[0][2]['torch']}, 16 x 8 samples of ~128 + {args.new_tokens} "
          "tokens, one step per start")
    print("| start | process s | to step 1 s | import s | build s | generate s | train s | compile s | graphs | "
          "cache hit/miss | CUDA graphs (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, wall, r in rows:
        print(f"| {i} | {wall:.1f} | {r['to_first_step']:.1f} | {r['import']:.1f} | {r['build']:.1f} | "
              f"{r['generate']:.1f} | {r['train']:.1f} | {r['seconds']:.1f} | {r['graphs']} | "
              f"{r['hits']}/{r['misses']} | {r['captures']} ({r['capture_s']:.1f}) |")


if __name__ == "__main__":
    main()
