"""torch.compile's settings, the same for every part that compiles (the engine's steps, the trainer's
layers, the logprob kernels)."""


def compile_settings() -> None:
    """Fall back to eager code (with torch's warning) where a compiler is missing or fails, and keep
    Python floats constants (a module's scale or eps, a temperature): compiled as symbols (`dynamic=True`
    does so) they make dynamo trace, hand the graph to AOTAutograd, drop it and trace again with them
    specialized, a second trace per graph on every start, the first one never found in the compile
    cache."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.suppress_errors = True
    dynamo_config.specialize_float = True
    # one code object serves every decoder layer (its module's parameters are inputs), in a version
    # per kind of pass: rows or packed prompts (trainer/shared_prompt.py: 1 or 4 attention calls),
    # with gradients or without (scoring, the reference model): past torch's 8 the rest run eager
    raise_recompile_limit(16)


def raise_recompile_limit(at_least: int) -> None:
    """Let dynamo compile a code object in at least this many versions before it runs the rest eager
    (recompile_limit; cache_size_limit, its older name, in older torch)."""
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), at_least))
            return


def warm_compile_workers() -> None:
    """Start inductor's pool of compile processes now, while the run loads, rather than at its first
    compilation (torch's own moment): until the pool's workers have imported torch, inductor compiles
    each kernel in this process, one at a time. Where torch lacks the hook, or has its pool turned
    off (TORCH_WARM_POOL=0, one compile thread), nothing happens."""
    try:
        from torch._inductor.async_compile import maybe_warm_pool
    except ImportError:
        return
    maybe_warm_pool()
