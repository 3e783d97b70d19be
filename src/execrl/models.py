"""Loading a policy (a hub id or a local directory, e.g. a checkpoint of ours) and building tiny
ones locally.

Nothing is downloaded when HF_HUB_OFFLINE=1 (or `offline=True`): a model that is not a local
directory or already cached then fails with one message naming the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch


def looks_like_path(name: str) -> bool:
    """Whether a model name can only be a directory (a hub id is `name` or `org/name`)."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1


class ModelNotFound(RuntimeError):
    """The model id or directory cannot be loaded; the message says what to do."""


def inside_hint(directory: Path) -> str:
    """What to pass instead of a directory that holds a model below it: an execrl checkpoint's
    policy/, or the latest step of a checkpoint directory."""
    if (directory / "policy" / "config.json").is_file() or (directory / "policy" / "adapter_config.json").is_file():
        return f"it is an execrl checkpoint: pass its model, {directory / 'policy'}"
    steps = sorted(p for p in directory.glob("step_*/policy") if p.is_dir())
    if steps:
        return f"it holds execrl checkpoints: pass one's model, e.g. the latest, {steps[-1]}"
    runs = sorted(p for p in directory.glob("checkpoints/step_*/policy") if p.is_dir())
    if runs:
        return f"it is an execrl run directory: pass a checkpoint's model, e.g. the latest, {runs[-1]}"
    return "pass an HF-format directory"


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(device: torch.device, dtype: str = "auto") -> torch.dtype:
    if dtype != "auto":
        return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
                "fp32": torch.float32, "float32": torch.float32}[dtype]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


TINY_CODER = "builtin:tiny-coder"  # built here: a 2-layer Qwen2 with a byte-level tokenizer
TINY_CODER_BPE = "builtin:tiny-coder-bpe"  # the same model with a small BPE tokenizer of the built-in task's text (the
# built-in default's)
TINY_CODERS = (TINY_CODER, TINY_CODER_BPE)
BYTE_VOCAB = 259  # 256 bytes + 3 special tokens: a BPE tokenizer of this size learns no merges
TASK_VOCAB = 384  # the BPE tokenizer's size: every word of the built-in task's prompts and programs is one token
SAVED_PROMPT = "execrl_prompt"  # a generation config's key: the run's prompt section (execrl eval poses problems so)
STOP_STRINGS = "execrl_stop_strings"  # a generation config's key: the texts a run's answers ended at (eval stops there)


def kv_shape(config) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a model's config (its text_config where it has one):
    what one token's keys and values take in each layer's cache; the largest over the layers where a config holds
    them per layer (Gemma 4's full-attention layers' global_head_dim: reading its head_dim raised, a hunt's find)."""
    c = getattr(config, "text_config", None) or config
    layers = getattr(c, "per_layer_config", None)
    shapes = [_kv_dims(layer, c) for layer in layers] if layers is not None else [_kv_dims(c, c)]
    return c.num_hidden_layers, max(h for h, _ in shapes), max(d for _, d in shapes)


def _kv_dims(layer, c) -> tuple[int, int]:
    heads = getattr(layer, "num_attention_heads", None) or c.num_attention_heads
    return (getattr(layer, "num_key_value_heads", None) or heads,
            getattr(layer, "head_dim", None) or c.hidden_size // heads)


def tiny_tokenizer(name: str):
    """The tokenizer of a built-in model: one token per byte (builtin:tiny-coder), or a BPE of
    TASK_VOCAB tokens trained on the built-in task's text (builtin:tiny-coder-bpe), in which, as in
    a real model's tokenizer, each word of the task is one token ("maximum", "minimum"): a 2-layer
    model reading bytes must tell "maximum" from "minimum" by their second and third bytes, which
    it learns slowly and unevenly across seeds. Deterministic: the same tokenizer on every machine."""
    if name == TINY_CODER_BPE:
        from execrl.tasks.arith import corpus

        return build_tokenizer(corpus(), vocab_size=TASK_VOCAB)
    return build_tokenizer([], vocab_size=BYTE_VOCAB)


def parameters_to(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`model` with its floating parameters in `dtype` and its buffers as they are, as from_pretrained loads a model
    in a dtype (Module.to(dtype) rounds the rotary frequencies too: another model at long positions)."""
    for p in model.parameters():
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    return model


def load_model_and_tokenizer(name: str, device: str = "auto", dtype: str = "auto", offline: bool | None = None,
                             tokenizer: str | None = None, seed: int = 0, config_overrides: dict | None = None):
    """(model, tokenizer) in eval mode on the device; `name` is a hub id, a directory in HF format,
    or a built-in tiny model (TINY_CODERS: built here, seeded); `config_overrides` replace values of the model's HF
    config.json."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no per-shard bars in training logs
    if name in TINY_CODERS:
        tok = tiny_tokenizer(name)
        dev = pick_device(device)
        model = build_tiny_model(tok, hidden=128, layers=2, heads=4, seed=seed).to(dev)
        return parameters_to(model, pick_dtype(dev, dtype)), tok
    from transformers import AutoModelForCausalLM

    offline = offline if offline is not None else os.environ.get("HF_HUB_OFFLINE") == "1"
    local = Path(name).expanduser()
    if (local / "adapter_config.json").is_file():  # a LoRA adapter (a LoRA run's checkpoint): on its base, merged
        return _load_adapter(local, device, dtype, offline, tokenizer)
    return load_pretrained(AutoModelForCausalLM, name, device, dtype, offline, tokenizer, config_overrides)


def load_tokenizer(name: str, offline: bool | None = None):
    """The tokenizer load_model_and_tokenizer gives `name`, without the weights (execrl eval checks its chat template
    before the sandbox starts and the model loads); None where it cannot be read (loading the model then says why)."""
    if name in TINY_CODERS:
        return tiny_tokenizer(name)
    offline = offline if offline is not None else os.environ.get("HF_HUB_OFFLINE") == "1"
    local = Path(name).expanduser()
    if (local / "adapter_config.json").is_file() and not (local / "tokenizer_config.json").is_file():
        base = adapter_base(local)  # (a LoRA adapter saved without its tokenizer: its base's)
        return load_tokenizer(base, offline) if base else None
    try:
        return read_tokenizer(local if local.exists() else name, offline)
    except Exception:  # (any: the model's load names the fix)
        return None


def read_tokenizer(source: Path | str, offline: bool):
    """The tokenizer of a directory or hub id, with the chat_template_kwargs it was saved with in use again (a
    checkpoint's run's: its prompts as trained); OSError for a directory that holds none of a tokenizer's files."""
    from transformers import AutoTokenizer

    from execrl.prompts import saved_template_kwargs

    if isinstance(source, Path) and source.is_dir() and not any((source / f).is_file() for f in TOKENIZER_FILES):
        raise OSError(f"none of {', '.join(TOKENIZER_FILES)} there")  # (transformers would make a tokenizer of one token)
    # (trust_remote_code=False: transformers' question "run the custom code? [y/N]" is never asked, a run waiting)
    tok = AutoTokenizer.from_pretrained(str(source), local_files_only=offline, trust_remote_code=False)
    saved_template_kwargs(tok)
    return tok


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model")  # (a directory with none of them holds no tokenizer)


def local_config(name: str):
    """A model's config as this machine has it (its directory, or the hub cache), without overrides; None where it
    has none."""
    from transformers import AutoConfig

    local = Path(name).expanduser()  # (a model under ~ is a directory, as loading reads it)
    try:
        return AutoConfig.from_pretrained(str(local) if local.exists() else name, local_files_only=True)
    except (OSError, ValueError):
        return None


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
SAMPLES, SAMPLE_BYTES = 16, 4096  # per weight file: what weights_identity reads of it


def weights_identity(name: str) -> str | None:
    """An identity of a model's weight files as this machine has them (its directory, or the hub cache's snapshot):
    each file's name and size, and SAMPLES reads of SAMPLE_BYTES spread over it, hashed: milliseconds for gigabytes;
    weights trained further or replaced change it, a copy keeps it. None for a built-in model, or one this machine
    has no weight files of."""
    import hashlib

    if name.startswith("builtin:"):
        return None
    directory = Path(name).expanduser()
    if not directory.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(name, "config.json")
        except (ValueError, OSError, ImportError):  # (a name that is no repository id: the load says so)
            return None
        if not isinstance(found, str):
            return None
        directory = Path(found).parent
    files = sorted({f for pattern in WEIGHT_FILES for f in directory.glob(pattern) if f.is_file()})
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        digest.update(f"{f.name}:{size}".encode())
        with f.open("rb") as handle:
            for i in range(SAMPLES):
                handle.seek(max(0, size - SAMPLE_BYTES) * i // max(SAMPLES - 1, 1))
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()[:32]


def with_overrides(config, overrides: dict, key: str = "policy.hf_config_overrides") -> dict:
    """`overrides` checked against a model's config and ready for from_pretrained: each one a field of the config
    (ValueError naming the key otherwise: transformers passed an unknown one to the model's constructor, a
    TypeError), and a dict field's override merged into its value ({rope_parameters: {rope_theta: ...}} keeps the
    rope_type beside it, which transformers needs)."""
    out = {}
    for name, value in overrides.items():
        if not hasattr(config, name):
            moved = " (transformers 5 keeps the rope's settings in rope_parameters: {rope_parameters: {rope_theta: " \
                    "...}})" if name in ("rope_theta", "rope_scaling") and hasattr(config, "rope_parameters") else ""
            raise ValueError(f"{key}.{name}: {config.model_type}'s config has no field {name}{moved}")
        old = getattr(config, name)
        out[name] = merged(old, value, f"{key}.{name}") if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def merged(old: dict, value: dict, key: str) -> dict:
    """A dict field's override merged into its value, a level at a time. A value of one dict per layer type (Gemma
    3's rope_parameters: {full_attention: {...}, sliding_attention: {...}}) takes only overrides of its types: a
    rope_theta beside them is a key transformers never reads (ValueError naming the nested form)."""
    per_type = bool(old) and all(isinstance(v, dict) for v in old.values())
    out = dict(old)
    for name, v in value.items():
        if per_type and name not in old:
            kinds = ", ".join(f"{t}: {{{name}: ...}}" for t in old)
            raise ValueError(f"{key} holds one setting per layer type ({', '.join(old)}): {name} beside them is read "
                             f"by nothing; override it per type: {{{kinds}}}")
        out[name] = merged(old[name], v, f"{key}.{name}") if isinstance(old.get(name), dict) and isinstance(v, dict) \
            else v
    return out


def load_pretrained(auto_class, name: str, device: str = "auto", dtype: str = "auto", offline: bool | None = None,
                    tokenizer: str | None = None, config_overrides: dict | None = None,
                    key: str = "policy.tokenizer.name"):
    """(model, tokenizer) of a hub id or HF directory, as `auto_class` (e.g. AutoModelForCausalLM)
    loads it, in eval mode on the device; one error naming the fix where it cannot be loaded (`key`: the setting
    that names a tokenizer of its own: a reward model's is env.reward_model.tokenizer.name)."""
    offline = offline if offline is not None else os.environ.get("HF_HUB_OFFLINE") == "1"
    local = Path(name).expanduser()
    if not local.exists() and looks_like_path(name):
        raise ModelNotFound(f"cannot load model {name!r}: no such directory (a hub id looks like org/name)")
    if local.exists() and not (local / "config.json").is_file():
        raise ModelNotFound(f"{local} is not a model directory (no config.json); {inside_hint(local)}")
    dev = pick_device(device)
    own = Path(tokenizer).expanduser() if tokenizer else local  # (a tokenizer directory under ~ too)
    part = "tokenizer"
    try:
        tok = read_tokenizer(own if own.exists() else tokenizer or name, offline)
        part = "weights"
        # weights read straight onto the GPU, not loaded on the host and then copied (one copy of the model fewer)
        placed = {"device_map": torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
                  } if dev.type == "cuda" else {}
        if config_overrides:
            from transformers import AutoConfig

            config_overrides = with_overrides(AutoConfig.from_pretrained(
                str(local) if local.exists() else name, local_files_only=offline, trust_remote_code=False),
                config_overrides)
        model = auto_class.from_pretrained(str(local) if local.exists() else name, dtype=pick_dtype(dev, dtype),
                                           local_files_only=offline, trust_remote_code=False, **placed,
                                           **config_overrides or {})
        recorded_stops(model, local if local.exists() else _cached(name, "generation_config.json"))
    except (OSError, ValueError) as e:  # transformers versions differ in which one a bad id raises
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "hf_config_overrides" in why:
            raise ModelNotFound(why) from None
        if "Unrecognized configuration class" in why:  # (T5's config under AutoModelForCausalLM)
            raise ModelNotFound(f"model {name!r} is not one {auto_class.__name__} loads ({why}): execrl trains and "
                                "evaluates decoder-only language models (an encoder-decoder such as T5 is not one); "
                                "name a causal language model's directory or hub id") from None
        if "custom code" in str(e) or "trust_remote_code" in str(e):
            raise ModelNotFound(f"model {name!r} needs its own Python code (its config.json's auto_map names modeling "
                                "files), which execrl does not run: use a version of it in a transformers architecture "
                                "(most families have one: a converted checkpoint, or the family's model_type)") from None
        if (own if part == "tokenizer" else local).exists():  # a directory here: its files, not the network
            raise ModelNotFound(
                f"cannot load the {part} of model {name!r} from {own if part == 'tokenizer' else local} ({why}). A "
                "model directory holds config.json, the weights (model.safetensors, or its shards and their index) "
                "and the tokenizer's files (tokenizer.json, tokenizer_config.json), as save_pretrained writes them; "
                f"a tokenizer kept elsewhere is named by {key} in execrl train (execrl eval reads the "
                "directory's own: copy the tokenizer's files into it)") from None
        where = "it is not in the local cache and offline mode is on" if offline else "it could not be downloaded"
        if part == "tokenizer" and tokenizer and tokenizer != name:  # (a NeMo RL recipe's tokenizer name beside
            raise ModelNotFound(  # another model: the model was blamed)
                f"cannot load the tokenizer {tokenizer!r} ({key}), which is not model {name!r}'s own: "
                f"{where} ({why}). Set {key}=null for the model's own tokenizer, or name a local "
                "tokenizer directory") from None
        raise ModelNotFound(f"cannot load model {name!r}: {where} ({why}). Pass a local directory "
                            "with config.json and weights, or run online once to cache it.") from None
    rows = model.get_input_embeddings().num_embeddings
    if len(tok) > rows:  # (its last ids would index past the embeddings: an IndexError, on a GPU a device assert)
        fix = (f"set {key} to null for the model's own, or to a tokenizer of the model's family" if tokenizer else
               "its tokenizer's files are not its weights' (save "
               "both from one model)")
        raise ModelNotFound(f"the tokenizer of model {name!r}{f' ({tokenizer})' if tokenizer else ''} has {len(tok)} "
                            f"tokens and the model's embeddings {rows} rows: {fix}")
    if tok.pad_token is None:
        set_pad(tok, model)
    return model.to(dev).eval(), tok


def position_limit(model) -> tuple[int, bool] | None:
    """(the positions the model was made for, whether they are a learned table) from its config (n_positions, else
    max_position_embeddings); None where it names none. A learned table (GPT-2's wpe, OPT's embed_positions) has no
    row past its length: a longer sequence indexes past it (a device assert on a GPU)."""
    config = getattr(model, "config", None)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return None
    inputs = model.get_input_embeddings()
    learned = any(isinstance(m, torch.nn.Embedding) and m is not inputs and ("pos" in name.rsplit(".", 1)[-1] or
                  name.rsplit(".", 1)[-1] == "wpe") for name, m in model.named_modules()) or any(
        "pos" in name.rsplit(".", 1)[-1] and b.is_floating_point() and b.dim() >= 1 and b.shape[0] == limit
        for name, b in model.named_buffers())
    # (a table kept as a buffer, CTRL's sinusoidal pos_encoding, has no row past it either: a hunt's find)
    return limit, learned


def set_pad(tok, model) -> None:
    """A pad token for a tokenizer without one (batches are padded with it): its EOS, else the first of the model's
    end ids (generation_config.eos_token_id: a tokenizer may name no EOS at all), else id 0. Which one never matters:
    padding is masked by the sequences' lengths. (A checkpoint saves it as the tokenizer's pad_token: an end token,
    already special, as most fine-tunes ship; a reload here picks the same.)"""
    from execrl.rollout.completion import eos_ids

    if tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    else:
        tok.pad_token_id = next(iter(eos_ids(model, tok)), 0)  # (None: build_batch's torch.full crashed at step 1)


def adapter_base(directory: Path) -> str | None:
    """An adapter's base model (adapter_config.json's base_model_name_or_path); where that is a run's own base/ (or
    a directory no longer there) and the adapter is a checkpoint's (CHECKPOINT_DIR/step_N/policy), the base/ the run
    saved beside its checkpoints (a run directory moved or copied: the path it wrote is the old one)."""
    base = json.loads((Path(directory) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    from execrl.lora import OWN_BASE

    own = (Path(directory) / OWN_BASE).is_file()  # (the run made its base)
    if base and looks_like_path(base) and (own or not Path(base).expanduser().is_dir()):
        above = Path(directory).resolve().parents  # (a run's own base is the one beside its checkpoints, wherever
        if len(above) > 1 and (above[1] / "base" / "config.json").is_file():  # the run directory went: a copy's
            return str(above[1] / "base")  # adapter merged onto the base another run then saved at the old path,
    return base  # silently, a hunt's find)


def _load_adapter(directory: Path, device: str, dtype: str, offline: bool, tokenizer: str | None):
    """A peft LoRA adapter directory: its base model (base_model_name_or_path) with the adapter
    merged in."""
    base = adapter_base(directory)
    if not base:
        raise ModelNotFound(f"{directory}/adapter_config.json names no base_model_name_or_path: load the base model "
                            "and the adapter yourself (peft.PeftModel.from_pretrained)")
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelNotFound(f"{directory} is a LoRA adapter: loading it needs peft (pip install peft)") from None
    has_tokenizer = (directory / "tokenizer_config.json").is_file()
    from execrl.lora import BASE_IDENTITY, BASE_OVERRIDES, as_named

    identity = directory / BASE_IDENTITY  # (the base's weight files as the adapter's run started)
    if identity.is_file() and (now := weights_identity(base)) is not None and now != identity.read_text().strip():
        raise ModelNotFound(f"{directory} adapts {base}, whose weight files differ from those it trained on (trained "
                            "further or replaced in place): merged onto them it is another model. Restore the base, "
                            "or load the run's merged export (policy.lora.save_merged: true)")
    overrides = directory / BASE_OVERRIDES  # (the run's policy.hf_config_overrides: its base's config as it trained)
    try:
        model, tok = load_model_and_tokenizer(base, device, dtype, offline,
                                              tokenizer or (str(directory) if has_tokenizer else None),
                                              config_overrides=json.loads(overrides.read_text()) if overrides.is_file()
                                              else None)
    except ModelNotFound as e:  # (the error named only the base's path, which the user never gave: a hunt's find)
        gone = base.startswith(("/", ".", "~")) and not Path(base).expanduser().exists()
        raise ModelNotFound(f"{directory} is a LoRA adapter of the base model {base} (adapter_config.json's "
                            f"base_model_name_or_path), which could not be loaded: {e}" + (
                                ". Put the base back there, or load the run's merged export (policy.lora.save_merged: "
                                "true)" if gone else "")) from None
    with as_named():  # (as the adapter was made: peft's transformers-4 conversion moved an MoE model's MLP ones)
        merged = PeftModel.from_pretrained(model, str(directory)).merge_and_unload()  # (peft froze the base: trainable
    if (directory / "generation_config.json").is_file():  # (the run's: its stop_token_ids among the EOS ids)
        from transformers import GenerationConfig

        merged.generation_config = GenerationConfig.from_pretrained(str(directory))
        recorded_stops(merged, directory)
    return merged.requires_grad_(True).eval(), tok  # again, as any model loaded: a full fine-tune of it was idle)


def _cached(name: str, filename: str) -> Path | None:
    """The folder of a hub model's file as this machine's cache holds it (after from_pretrained: no download)."""
    try:
        from transformers.utils import cached_file

        found = cached_file(name, filename, local_files_only=True, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except Exception:  # (no cache, a gated repo: nothing recorded there to read)
        return None
    return Path(found).parent if found else None


def recorded_stops(model, directory: Path | None) -> None:
    """The stop strings a run recorded in a checkpoint's generation_config.json (trainer/policy.record_ends), onto
    the loaded model's generation config (transformers drops a key of its own); a local directory or a hub model's
    cached files (a review's find: a checkpoint pushed to the hub lost them)."""
    stops = _stops_in(directory)
    if getattr(model, "generation_config", None) is not None and stops is not None:
        setattr(model.generation_config, STOP_STRINGS, stops)


def saved_stops(name: str) -> list[str]:
    """The stop strings recorded with model `name` (a local directory, or a hub model's cached files), read before
    it loads: what recorded_stops puts on it."""
    local = Path(name).expanduser()
    return _stops_in(local if local.exists() else _cached(name, "generation_config.json")) or []


def saved_prompt(name: str) -> dict | None:
    """The prompt section a run recorded with model `name`, a local directory (its generation_config.json:
    trainer/policy.py), where the run's trainer_state.pt is not beside it (a policy/ folder copied out of a run). Not
    a hub model's: read before it downloads, it would apply only once cached (a review's find)."""
    try:
        prompt = json.loads((Path(name).expanduser() / "generation_config.json").read_text()).get(SAVED_PROMPT)
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    return prompt if isinstance(prompt, dict) else None


def _stops_in(directory: Path | None) -> list[str] | None:
    if directory is None:
        return None
    try:
        stops = json.loads((Path(directory) / "generation_config.json").read_text()).get(STOP_STRINGS)
    except (OSError, ValueError, AttributeError):
        return None
    return [s for s in stops if isinstance(s, str) and s] if isinstance(stops, list) else None


CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tokenizer(corpus: list[str], vocab_size: int = 384):
    """A small byte-level BPE tokenizer with a ChatML template, trained here on `corpus` (no
    download). With vocab_size BYTE_VOCAB it learns no merges, whatever the corpus: one token per
    byte."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, chat_template=CHAT_TEMPLATE)


def build_tiny_model(tokenizer, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
                     reward_head: bool = False):
    """A randomly initialised 2-layer Qwen2 (the real architecture, tiny) matching the tokenizer;
    `reward_head`: a sequence-classification model with one output (a Bradley-Terry reward model's
    shape) instead of the LM head."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                      max_position_embeddings=2048, tie_word_embeddings=not reward_head, num_labels=1,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    return Qwen2ForSequenceClassification(cfg) if reward_head else Qwen2ForCausalLM(cfg)


def save_tiny(directory: str | Path, corpus: list[str], vocab_size: int = 384, **model_kwargs) -> Path:
    """Build a tiny tokenizer + model and save both in HF format (loadable by from_pretrained)."""
    directory = Path(directory)
    tok = build_tokenizer(corpus, vocab_size)
    model = build_tiny_model(tok, **model_kwargs)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


DROPOUTS = ("attention_dropout", "hidden_dropout", "dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop",
            "hidden_dropout_prob", "attention_probs_dropout_prob", "summary_first_dropout", "activation_dropout",
            "classifier_dropout", "embedding_dropout", "residual_dropout", "ffn_dropout",
            "attn_dropout",  # GPT-BigCode's attention keeps its rate as a float attribute of this name
            # train-mode noise on the routers' inputs (Mixtral's and MiniMax's module attribute, from their config's
            # router_jitter_noise; PhiMoE's input_jitter_noise): the engine samples without it. (PhiMoE's own
            # router_jitter_noise is its sparsemixer's threshold in eval mode too: part of the model, kept.)
            "jitter_noise", "input_jitter_noise",
            "layerdrop")  # (OPT's, XGLM's, BioGPT's: whole layers skipped at random in train mode, a hunt's find)
SAMPLED_IN_TRAINING = ("PhimoeTopKRouter",)  # modules that draw at random in train mode (PhiMoE's sparsemixer)


def train_mode(model: torch.nn.Module) -> None:
    """model.train() for the loss, but for modules whose train mode samples (PhiMoE's router draws its experts at
    random: the trainer scored tokens 1 nat off the engine's, which chose them by top-k)."""
    model.train()
    for module in model.modules():
        if type(module).__name__ in SAMPLED_IN_TRAINING:
            module.eval()


def no_dropout(model: torch.nn.Module) -> list[str]:
    """Every dropout of the model off (its nn.Dropout modules, the rates its layers read from the config, and the
    config's, which checkpoints keep): a policy trained in train mode scored its tokens through the model's own
    dropout (GPT-2's 0.1: train/logprob_mismatch 4-6 nats, where the engine samples without it). Returns the
    config keys that were above 0. (LoRA's dropout, policy.lora.dropout, is added after: an explicit choice.)"""
    configs = [model.config, *(getattr(model.config, k) for k in ("text_config", "decoder") if
                               hasattr(getattr(model.config, k, None), "to_dict"))]
    dropped = sorted({k for c in configs for k in DROPOUTS if isinstance(getattr(c, k, None), float) and getattr(c, k) > 0})
    for c in configs:
        for k in DROPOUTS:
            if isinstance(getattr(c, k, None), float):
                setattr(c, k, 0.0)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for k in DROPOUTS:
            if isinstance(getattr(module, k, None), float):
                setattr(module, k, 0.0)
    return dropped
