"""What a start costs before the steps run at speed, said once after this process's first step: the
loading, and what the first step spent compiling (torch.compile's graphs: the engine's decode and
prefill steps, the trainer's decoder layers, the logprob kernels) and capturing (CUDA graphs), with
where the compile cache lives that spares a second start most of it. On a CPU nothing compiles and
nothing is said. (bench/startup.py measures a first and a second start.)"""

from __future__ import annotations

from execrl.rollout.engine import CAPTURED


def compiled_so_far() -> dict[str, float]:
    """torch.compile's work in this process so far: seconds, graphs, and inductor cache hits and
    misses (torch's own counters; zeros where a torch version lacks one)."""
    from torch._dynamo import utils

    counters = getattr(utils, "counters", {})
    return {"seconds": sum(getattr(utils, "compilation_time_metrics", {}).get("_compile.compile_inner", [])),
            "graphs": counters.get("stats", {}).get("unique_graphs", 0),
            "hits": counters.get("inductor", {}).get("fxgraph_cache_hit", 0),
            "misses": counters.get("inductor", {}).get("fxgraph_cache_miss", 0)}


def cache_dir() -> str:
    """Where inductor keeps its compiled kernels between processes (TORCHINDUCTOR_CACHE_DIR, or
    torch's default under the temporary directory)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return inductor_cache_dir()


def first_step_line(load_s: float, step_s: float, compiled: dict[str, float], captured: dict[str, float]) -> str | None:
    """The line after the first step; None where nothing was compiled or captured (a CPU)."""
    if not compiled["graphs"] and not captured["graphs"]:
        return None
    cache = f"{compiled['hits']:.0f} from the compile cache, {compiled['misses']:.0f} new, in {cache_dir()}"
    return (f"start-up: loading {load_s:.1f} s, the first step {step_s:.1f} s; this run compiled {compiled['graphs']:.0f} "
            f"graphs in {compiled['seconds']:.1f} s (the engine's decode layer, head, sampling and prefill layer, "
            f"the trainer's decoder layers, the logprob kernels under a guided mask or top-k/top-p; their code {cache}: a second start reuses it) and {captured['graphs']:.0f} "
            f"CUDA graphs captured in {captured['seconds']:.2f} s; later steps reuse them (a longer attention window or a new "
            "admission shape is captured once, in hundredths of a second)")


def captured_so_far() -> dict[str, float]:
    """The CUDA graphs the rollout engines of this process have captured, and the seconds it took."""
    return dict(CAPTURED)


def so_far() -> dict[str, dict[str, float]]:
    """This process's compiling and capturing so far (a run's own are the difference from its start)."""
    return {"compiled": compiled_so_far(), "captured": captured_so_far()}


def say(load_s: float, step_s: float, before: dict[str, dict[str, float]]) -> None:
    """After this process's first step: the start-up line for what the run did since `before`, where
    there is something to say."""
    from execrl.trainer.setup import console

    now = so_far()
    since = {part: {k: v - before[part][k] for k, v in values.items()} for part, values in now.items()}
    line = first_step_line(load_s, step_s, since["compiled"], since["captured"])
    if line is not None:
        console.print(line, markup=False, highlight=False)
