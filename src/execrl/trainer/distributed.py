"""Everything distributed, in one place; without torchrun every helper is the one-process identity.

The trainer is written as if for one process. Under torchrun (`execrl train` with cluster.gpus_per_node > 1 starts
it) each rank:
  - holds an FSDP2 shard of the policy and of the reference model: `fully_shard` per decoder layer, then the root
    (embeddings, final norm and the LM head, which a tied head shares with the embeddings);
  - generates rollouts for its share of each step's prompts, whole groups only, with the full weights gathered once
    for the whole rollout phase (`FullWeights`), and grades them on its own share of the node's CPUs;
  - trains on its rows; loss normalizers (token counts) and metrics are summed over ranks first;
  - takes part in writing checkpoints, which are full, world-size-independent state dicts (rank 0 writes them), so a
    run resumes on any number of GPUs.
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def is_main() -> bool:
    return rank() == 0


def launched() -> bool:
    """Inside a torchrun-launched process (whether or not the process group is up yet)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


_meeting = None  # a gloo group for the waits of meet(), with their own time limit (made by init)
_wait_minutes = 120.0


def init(device: str = "auto", wait_minutes: float = 120.0) -> None:
    """Join torchrun's process group: NCCL on GPUs (one per rank, LOCAL_RANK), gloo on CPU. A no-op
    outside torchrun; a group joined already (by a caller) is kept. `wait_minutes`: how long `meet` waits for the
    other ranks (its gloo group is made here, where every rank is)."""
    global _meeting, _wait_minutes
    _wait_minutes = wait_minutes
    if not active():
        if not launched() or int(os.environ["WORLD_SIZE"]) == 1:
            return
        on_gpu = device != "cpu" and torch.cuda.is_available()
        if on_gpu:
            local = int(os.environ.get("LOCAL_RANK", 0))
            if local >= torch.cuda.device_count():
                raise RuntimeError(f"rank {rank()} wants GPU {local} but this node has {torch.cuda.device_count()}: "
                                   "lower cluster.gpus_per_node to the GPUs per node")
            torch.cuda.set_device(local)  # "cuda" now means this rank's GPU everywhere else
        dist.init_process_group("nccl" if on_gpu else "gloo")
        _take_my_cpus()
    if _meeting is None and world_size() > 1:
        _meeting = dist.new_group(backend="gloo", timeout=timedelta(minutes=wait_minutes))


def meet(after: str) -> None:
    """Every rank here before any goes on, on the CPU: where one rank may be far behind the others (its rollouts and
    their grading, its share of validation, rank 0 writing a checkpoint), so that the collectives after it start
    together. Waiting inside an NCCL collective instead, a rank was killed by NCCL's watchdog after 10 minutes (its
    default limit), which a rank whose grading or multi-turn episodes took that much longer than another's, or a
    checkpoint of a large model written to a slow disk, reaches (a hunt's find). Here the limit is
    cluster.rank_wait_minutes."""
    if world_size() == 1:
        return
    if _meeting is None:
        raise RuntimeError("distributed.meet before distributed.init: init makes its group, on every rank")
    try:
        dist.barrier(group=_meeting)
    except RuntimeError as e:
        if "timed out" not in str(e).lower() and "timeout" not in str(e).lower():
            raise
        raise RuntimeError(
            f"rank {rank()} waited cluster.rank_wait_minutes={_wait_minutes:g} for the other processes after "
            f"{after}, and some never came: one is stuck (its traceback, if it stopped, is above) or that much "
            "slower; raise cluster.rank_wait_minutes if so") from None


def close() -> None:
    global _meeting
    if active():
        dist.destroy_process_group()
    _meeting = None


def _take_my_cpus() -> None:
    """Pin this rank (and the sandbox workers it forks, which inherit it) to its contiguous share of
    the node's CPUs, so the ranks of a node grade side by side instead of competing for the same
    cores."""
    local, per_node = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    cpus = sorted(os.sched_getaffinity(0))
    share = cpus[local * len(cpus) // per_node:(local + 1) * len(cpus) // per_node] or [cpus[local % len(cpus)]]
    os.sched_setaffinity(0, share)


def sandbox_workers(per_node: int) -> int:
    """This rank's sandbox workers: its share of `per_node` (0: one per CPU core it was given)."""
    if per_node:
        return max(1, per_node // int(os.environ.get("LOCAL_WORLD_SIZE", 1) if active() else 1))
    from execrl.sandbox.cgroups import usable_cpus

    return usable_cpus(int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if active() else 1)


# ---------------------------------------------------------------------------------------------------------------------
# Sharding


def shard(model: torch.nn.Module | None, compute_dtype: torch.dtype | None = None) -> torch.nn.Module | None:
    """FSDP2: each decoder layer its own unit, then the root (embeddings, final norm, LM head). In
    place; returns it.

    At rest the weights, gradients and optimizer state are sharded. A rollout phase needs the full
    weights on every GPU anyway (the engine runs on them), so the other phases keep them gathered as
    long as they last too: a scoring pass gathers once (`full_weights`), and an optimizer step
    gathers at its first micro-batch, accumulates whole gradients and reduce-scatters them after its
    last backward (`reduce_after_backward`), instead of gathering twice and reducing once per
    micro-batch."""
    if model is None or world_size() == 1:
        return model
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    # Mixed precision (trainer/precision.py): the sharded fp32 parameters are the master weights,
    # gathered in the compute dtype for forward and backward; gradients are reduced and kept in
    # fp32. With LoRA the base is in the compute dtype already and only the (fp32) adapters are
    # trained: gathered in the compute dtype too, their gradients reduced in fp32.
    dtypes = {p.dtype for p in model.parameters()}
    trained = {p.dtype for p in model.parameters() if p.requires_grad} or dtypes  # (a frozen reference: none)
    reduce = max(trained, key=lambda d: d.itemsize)
    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=reduce) \
        if compute_dtype is not None and dtypes != {compute_dtype} else MixedPrecisionPolicy()
    for layer in model.get_decoder().layers:
        fully_shard(layer, reshard_after_forward=False, mp_policy=mp)
    # (the root must stay gathered after forward anyway: the trainer uses the LM head's weight after
    # it, step.py)
    fully_shard(model, reshard_after_forward=False, mp_policy=mp)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # FSDP averages gradients over ranks by default. Ours must be summed: each rank's loss
            # is already its share of the *global* mean (divided by the token count of the whole
            # optimizer batch, summed over ranks: trainer/step.py), so the sum is the one-process
            # gradient.
            module.set_gradient_divide_factor(1.0)
            if hasattr(module, "set_force_sum_reduction_for_comms"):  # a plain SUM (gloo has no pre-scaled sum)
                module.set_force_sum_reduction_for_comms(True)
    return model


def _fsdp_modules(model: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextmanager
def full_weights(model: torch.nn.Module):
    """Every FSDP unit gathered at once for the block (a rollout phase, a scoring pass), resharded
    after it. The rollout engine calls the layers' submodules directly, so FSDP's forward hooks,
    which would gather each layer's weights, never fire; and a scoring pass then gathers once, not
    once per micro-batch."""
    units = _fsdp_modules(model) if world_size() > 1 else []
    for handle in [u.unshard(async_op=True) for u in units]:  # all all-gathers in flight, then wait for each
        if handle is not None:
            handle.wait()
    try:
        yield
    finally:
        for u in units:
            u.reshard()


def reduce_after_backward(model: torch.nn.Module, last: bool) -> None:
    """Call before each micro-batch's backward: the gradients of an optimizer step's micro-batches
    accumulate gathered, and are reduced over ranks (and the weights resharded) only after the last
    one."""
    if world_size() > 1:
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)


class FullWeights:
    """A rollout backend that runs on the full weights, gathered once per rollout phase: all the
    generate calls of one (a call per turn; ranks may take different numbers of turns, as their
    episodes end at different turns), or each call on its own outside a phase.

    The gathered weights live in fresh memory each phase, so the engine's CUDA graphs, which
    recorded the previous phase's addresses, are dropped first (its compiled code is kept)."""

    def __init__(self, generator, model: torch.nn.Module):
        self.inner, self.model, self.gathered = generator, model, False

    @contextmanager
    def phase(self):
        if self.gathered:
            yield
            return
        with full_weights(self.model):
            if hasattr(self.inner, "reset_graphs"):
                self.inner.reset_graphs()
            self.gathered = True
            try:
                yield
            finally:
                self.gathered = False

    def generate(self, *args, **kwargs):
        with self.phase():
            return self.inner.generate(*args, **kwargs)

    @property
    def guides(self):
        return self.inner.guides

    @property
    def decoded(self) -> dict[str, int] | None:
        return getattr(self.inner, "decoded", None)

    @property
    def streams(self) -> bool:
        return getattr(self.inner, "streams", False)


def for_rollouts(generator, model: torch.nn.Module):
    return FullWeights(generator, model) if world_size() > 1 else generator


# ---------------------------------------------------------------------------------------------------------------------
# Work split and reductions


def this_rank(items: list, per_batch: int | None = None) -> list:
    """This rank's items of a list every rank holds in full. With `per_batch` (the prompts of one
    optimizer step), each batch is split into contiguous parts, rank r taking part r of every batch:
    then optimizer step k sees the same global samples on any number of ranks. Without it, one
    contiguous part. Parts differ in size by one at most (a batch smaller than the ranks leaves some
    of them none)."""
    if world_size() == 1:
        return items
    if per_batch is None:
        a, b = part(len(items))
        return items[a:b]
    assert len(items) % per_batch == 0, (len(items), per_batch)  # checked by config.plan
    a, b = part(per_batch)
    return [x for start in range(0, len(items), per_batch) for x in items[start + a:start + b]]


def part(total: int, r: int | None = None) -> tuple[int, int]:
    """[start, stop) of rank r's part (this rank's by default) of `total` items split contiguously
    over the ranks, the parts' sizes differing by one at most."""
    n, r = world_size(), rank() if r is None else r
    return r * total // n, (r + 1) * total // n


def share(total: int) -> int:
    """The size of this rank's part of `total` items (as this_rank splits them)."""
    a, b = part(total)
    return b - a


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def sum_floats(*values: float) -> list[float]:
    """Each value summed over ranks (one all-reduce, in float64)."""
    if world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=_device())
    dist.all_reduce(t)
    return t.tolist()


def largest(value: float) -> float:
    """The largest of the ranks' values (a count, or a float: float64 holds either)."""
    if world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return type(value)(t.item())


def sum_dicts(values: dict[str, float]) -> dict[str, float]:
    """Per-key sums over ranks, for dicts whose keys may differ between ranks (a missing key counts
    0)."""
    if world_size() == 1:
        return dict(values)
    everyone: list = [None] * world_size()
    dist.all_gather_object(everyone, values)
    out: dict[str, float] = {}
    for d in everyone:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def gather_lists(items: list, per_batch: int | None = None, unit: int = 1) -> list:
    """Every rank's list, back in the order of the full list that `this_rank(full, per_batch)` split
    (on every rank), each of whose items became `unit` items here (a prompt's group of samples)."""
    if world_size() == 1:
        return items
    everyone: list = [None] * world_size()
    dist.all_gather_object(everyone, items)
    if per_batch is None:
        return [x for theirs in everyone for x in theirs]
    sizes = [(b - a) * unit for a, b in (part(per_batch, r) for r in range(world_size()))]  # each rank's, per batch
    batches = sum(map(len, everyone)) // (per_batch * unit)
    return [x for k in range(batches) for mine, size in zip(everyone, sizes) for x in mine[k * size:(k + 1) * size]]


def from_main(value):
    """Rank 0's value, on every rank."""
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def total_norm(norm: torch.Tensor) -> float:
    """A gradient norm as a float: clip_grad_norm_ over sharded (DTensor) gradients returns one
    already reduced over ranks, as a DTensor."""
    return (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).item()


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoint state: full, keyed by parameter name, the same on any number of ranks


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trained_only: bool = False,
               ) -> tuple[dict, dict]:
    """(model state, optimizer state), full and on the CPU: on rank 0 (every rank must call it; the
    others get {}). `trained_only`: the trainable parameters alone (LoRA: the adapters, not the
    frozen base)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=world_size() > 1, ignore_frozen_params=trained_only)
    weights = get_model_state_dict(model, options=options)
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):  # a tied head: one tensor, as in the model,
        if id(param) in first and name in weights and first[id(param)] in weights:  # so that HF saves it once
            weights[name] = weights[first[id(param)]]
        first.setdefault(id(param), name)
    return weights, get_optimizer_state_dict(model, optimizer, options=options) if optimizer is not None else {}


def load_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, weights: dict,
                    optim_state: dict | None, part: str = "all") -> None:
    """Load full state dicts (read by rank 0 only; the others pass {}) into a model sharded over any
    number of ranks. A tied LM head may be absent from `weights` (HF checkpoints leave it out).
    `part`: which parameters `weights` holds: all, or (LoRA) only the trainable ones (the adapters)
    or only the frozen ones (the base)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=world_size() > 1, strict=False)
    missing, unexpected = set_model_state_dict(model, weights, options=options)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    elsewhere = {"all": set(), "trainable": {n for n, _ in model.named_parameters()} - trainable,
                 "frozen": trainable}[part]  # the parameters `weights` is not meant to hold
    mismatch = unexpected or [k for k in missing if not k.endswith("lm_head.weight") and k not in elsewhere]
    if from_main(bool(mismatch) and is_main()):  # every rank stops, not only the one that can tell
        raise RuntimeError(f"the checkpoint does not match the model: missing {missing}, unexpected {unexpected}")
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, optim_state or {}, options=options)


# ---------------------------------------------------------------------------------------------------------------------
# Launching


def launch_command(num_gpus: int, num_nodes: int, argv: list[str]) -> list[str]:
    """The torchrun command line that runs `execrl <argv>` on num_gpus processes per node."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(num_gpus)]
    if num_nodes > 1:
        cmd += ["--nnodes", str(num_nodes), "--node-rank", "NODE_RANK", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "HOST:PORT", "--rdzv-id", "execrl"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", "execrl.cli", *argv]


def show(cmd: list[str]) -> str:
    return shlex.join(cmd)
