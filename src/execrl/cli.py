"""The `execrl` command: one subcommand per job."""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from pathlib import Path

from execrl import __version__

MIN_TIMEOUT_S = 0.01  # sandbox.grader.MIN_TIMEOUT_S (not imported: the command line starts without the sandbox)


def path(text: str) -> str:
    """A path argument, `~` expanded (the shell leaves `--out=~/x` as it is)."""
    return os.path.expanduser(text)


def _shown(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def number(kind: type, low: float, inclusive: bool = True, high: float | None = None):
    """An argparse type: a `kind` number >= low (> low when not inclusive; <= high where given), refused with the
    flag's name otherwise."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if value < low or (value == low and not inclusive) or value != value:
            raise argparse.ArgumentTypeError(f"must be {'>=' if inclusive else '>'} {_shown(low)}, got {text}")
        if high is not None and value > high:  # (--timeout inf overflowed the sandbox's timer)
            raise argparse.ArgumentTypeError(f"must be <= {_shown(high)}, got {text}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The `execrl` command line: one subparser per job (the docs test checks each documented
    command against it)."""
    parser = argparse.ArgumentParser(prog="execrl", description="RL for code and math LMs with verifiable rewards")
    parser.add_argument("--version", action="version", version=f"execrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="GRPO training (no config: the built-in CPU default)",
                       description="GRPO training. Re-running the same command resumes from the last checkpoint in "
                                   "checkpointing.checkpoint_dir (a new directory starts afresh).")
    t.add_argument("config", nargs="?", default=None, help="YAML config (defaults: inheritance, ${a.b} references)")
    t.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. grpo.max_num_steps=10")
    t.add_argument("--dry-run", action="store_true", help="print the resolved config and the batch arithmetic")

    g = sub.add_parser("grade", help="run programs from a JSONL file against their tests in the sandbox")
    g.add_argument("input", type=path, help="JSONL rows: {id, code, language?, tests, timeout_s?, memory_mb?}; "
                   "- reads them from standard input")
    g.add_argument("--out", required=True, type=path, help="where to write one result row per input row (JSONL)")
    g.add_argument("--timeout", type=number(float, MIN_TIMEOUT_S, high=3600), default=None,
                   help="seconds of CPU per test (default 2)")
    g.add_argument("--memory-mb", type=number(int, 16), default=None, help="memory limit per program (default 1024)")
    g.add_argument("--workers", type=number(int, 0), default=0,
                   help="sandbox workers (0, the default: one per CPU this process may use)")
    g.add_argument("--languages", default=None, type=path, help="YAML file adding languages: {name: {file, run, compile?}}")
    g.add_argument("--quiet", action="store_true", help="no progress bar")

    e = sub.add_parser("eval", help="evaluate a model (or a file of completions) on a dataset: pass@k")
    e.add_argument("--model", help="hub id or local HF-format directory (e.g. a checkpoint of ours: its policy/, a "
                   "LoRA run's adapter included)")
    e.add_argument("--completions", type=path, help="JSONL of completions made elsewhere: {problem_id, completion}; no model")
    e.add_argument("--dataset", default="mbpp", help="(default mbpp) gsm8k | mbpp | nemotron_code | leetcode | "
                   "humaneval | jsonl | builtin:arith-code | NeMo RL's dataset names | path/to/file.py:function or module:function (your "
                   "loader) (docs/getting-started.md#datasets)")
    e.add_argument("--split", default="test", help="dataset split (default test)")
    e.add_argument("--data-path", default=None, type=path, help="file or directory of the dataset (default: found locally)")
    e.add_argument("--limit", type=number(int, 1), default=None, help="only the first N problems (default: all)")
    e.add_argument("--samples", type=number(int, 1), default=1, help="completions per problem (n of pass@k; default 1)")
    e.add_argument("--max-tests", type=number(int, 0), default=0,
                   help="grade at most this many tests per problem (default 0: all)")
    e.add_argument("--k", default="1", help="comma-separated k values, e.g. 1,5,10")
    e.add_argument("--temperature", type=number(float, 0), default=None,
                   help="sampling temperature, 0 = greedy (default: 0 for 1 sample, else 0.8)")
    e.add_argument("--top-p", type=number(float, 0, inclusive=False), default=1.0,
                   help="nucleus sampling threshold, in (0, 1] (default 1: off)")
    e.add_argument("--max-new-tokens", type=number(int, 1), default=512, help="tokens per completion at most (default 512)")
    e.add_argument("--stop-token-ids", default=None, metavar="IDS",
                   help="token ids that end a completion besides the model's EOS ids, comma-separated, as "
                        "policy.generation.stop_token_ids (e.g. the chat template's end of turn; default: none, and a "
                        "checkpoint of ours ends where its run did)")
    e.add_argument("--stop-string", action="append", dest="stop_strings", default=None, metavar="TEXT",
                   help="text that ends a completion (repeat the flag for several), as policy.generation.stop_strings "
                        "(default: a checkpoint of ours stops at its run's; --stop-string '' for none)")
    e.add_argument("--batch-size", type=number(int, 1), default=None,
                   help="sequences generated at once (default: on a GPU with the execrl engine, as many as half the "
                        "free memory holds the KV cache of, 16 to 512; otherwise 16)")
    e.add_argument("--backend", default="execrl", choices=["execrl", "transformers"],
                   help="generation: the execrl engine (default) or transformers' generate")
    e.add_argument("--answer-format", default=None, choices=["code", "reasoning", "think"],
                   help="code | reasoning | think (default: a checkpoint of ours: its run's prompt.answer_format, "
                        "else code)")
    e.add_argument("--code-style", default=None, choices=["fence", "tags", "auto", "plain"],
                   help="fence (```python) | tags (<code>) | auto (either) | plain (either, else the whole completion) "
                        "(default: a checkpoint of ours: its run's prompt.code_style, else fence)")
    e.add_argument("--system-prompt", default=None, help="system prompt (default: a checkpoint of ours: its run's "
                   "prompt.system_prompt, else none; '' for none)")
    e.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                   help="passed to the chat template, as policy.tokenizer.chat_template_kwargs, e.g. "
                        "'{\"enable_thinking\": false}' (default: those a checkpoint of ours was trained with, else none)")
    e.add_argument("--math-verify-impl", default=None, choices=["hf_math_verify", "dapo_math_verify"],
                   help="how math answers are checked, as env.math.math_verify_impl (default: the dataset's own: "
                        "dapo_math_verify for the DAPO sets, whose prompts ask for an 'Answer:' line, else hf_math_verify)")
    e.add_argument("--timeout", type=number(float, MIN_TIMEOUT_S, high=3600), default=5.0,
                   help="sandbox CPU seconds per test (default 5)")
    e.add_argument("--workers", type=number(int, 0), default=0,
                   help="sandbox workers (0, the default: one per CPU this process may use)")
    e.add_argument("--grading-share", type=number(float, 0), default=0.5,
                   help="share of the sandbox workers grading code while sampling runs, on a GPU (default 0.5; 0: "
                        "grade after sampling)")
    e.add_argument("--seed", type=number(int, -2**31, high=2**31 - 1), default=0, help="sampling seed (default 0)")
    e.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the dataset's loader, as data.*.options in a training config (repeatable), "
                        "e.g. prompt_tests=all: MBPP's prompt shows all three tests, as published MBPP figures do")
    e.add_argument("--max-prompt-tokens", type=number(int, 1), default=2048,
                   help="problems whose prompt is longer are dropped, with a count (default 2048)")
    e.add_argument("--data-seed", type=number(int, -2**31, high=2**31 - 1), default=None,
                   help="a generated dataset's seed (builtin:*): a training run's grpo.seed poses the problems its "
                        "eval scored (the built-in default's: 1)")
    e.add_argument("--reward-model", default=None, help="also report this reward model's mean score (a Bradley-Terry "
                   "sequence-classification model: hub id or HF directory; builtin:arith-judge)")
    e.add_argument("--reward-model-batch-size", type=number(int, 1), default=8,
                   help="conversations the reward model reads at once (default 8)")
    e.add_argument("--reward-model-tokenizer", default=None, help="the reward model's tokenizer, where not its own "
                   "(env.reward_model.tokenizer.name; default: the run's that saved --model, if it was rewarded by "
                   "the same reward model)")
    e.add_argument("--reward-model-chat-template", default=None, help="the reward model's chat template: a Jinja "
                   "template, or a .jinja file (env.reward_model.tokenizer.chat_template; default: as above)")
    e.add_argument("--reward-model-max-len", type=number(int, 2), default=None, help="tokens the reward model reads "
                   "at most (env.reward_model.max_model_len; default: as above, else its max_position_embeddings)")
    guided = e.add_mutually_exclusive_group()
    guided.add_argument("--guided-regex", default=None, help="guided decoding: every completion matches this regex "
                        "(a jsonl row's own guided_decoding field takes its place for that row)")
    guided.add_argument("--guided-json", default=None, help="guided decoding: every completion is a JSON value of this "
                        "schema (a file, or the schema's JSON text)")
    guided.add_argument("--guided-grammar", default=None, help="guided decoding: every completion is a sentence of "
                        "this Lark grammar (a file, or the grammar's text; start rule `start`)")
    e.add_argument("--out", default=None, type=path, help="directory for results.jsonl and summary.json (default "
                   "results/eval/MODEL_DATASET-SPLIT, MODEL the model's or the completions file's path)")

    r = sub.add_parser("report", help="one self-contained HTML page of runs: curves overlaid, config differences, "
                       "a rollout browser (opens offline)")
    r.add_argument("runs", nargs="+", type=path, help="run directories (logger.log_dir: metrics.jsonl, config.yaml, rollouts/)")
    r.add_argument("--out", default=None, type=path, help="the HTML file (default: RUN_DIR/report.html for one run, else "
                   "report.html here)")

    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments as `main` reads them; a bad flag exits with argparse's one-line error."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "train" and all(("=" in a or a.startswith("~")) and not a.startswith("-") for a in rest):
        args.overrides += rest  # key=value overrides after a flag (`execrl train cfg.yaml --dry-run a.b=1`)
    elif args.command == "train" and any("." in a.split("=")[0] for a in rest):  # (Hydra's and argparse's habits:
        # `--a.b=1`, `a.b 1`)
        dashed = next((a for a in rest if a.startswith("--") and "." in a.split("=")[0]), None)
        example = (dashed.lstrip("-") if "=" in dashed else f"{dashed.lstrip('-')}=VALUE") if dashed else \
            "grpo.max_num_steps=200"
        parser.error(f"unrecognized arguments: {' '.join(rest)}: a config key is set as one key=value argument, "
                     f"without dashes, e.g. {example}")
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    first = getattr(args, "config", None) if args.command == "train" else None
    deletion = bool(first) and first.startswith("~") and "/" not in first and not first.endswith((".yaml", ".yml"))
    if first and (deletion or "=" in first and not _a_file(first)):  # `execrl train key=value ...` (`~key`: a key
        args.overrides, args.config = [first, *args.overrides], None  # deleted, not a file under a home directory):
        # the default; a config file whose path holds `=` is the config
    return args


def _a_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except (RuntimeError, OSError):  # (`~user` of no user, a home directory not known)
        return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "train":
        return run_train(args)
    if args.command == "grade":
        from execrl.grade import run_grade

        return run_grade(args)
    if args.command == "eval":
        return run_eval(args)
    if args.command == "report":
        return run_report(args)
    return 2


def _not_a_report(out: Path) -> str | None:
    """Why the report cannot be written to `out`: a directory, or a file that is not an earlier report (None: it can)."""
    if out.is_dir():
        return "is a directory"
    if out.exists():
        with open(out, "rb") as f:
            head = f.read(64).lstrip().lower()
        if not head.startswith((b"<!doctype html", b"<html")):
            return "is a file that is not a report, which the page would replace"
    return None


def run_report(args) -> int:
    from collections import Counter

    from rich.console import Console

    from execrl.console import escape
    from execrl.report import write_report

    named = Counter(Path(r).resolve() for r in args.runs)
    runs = list({Path(r).resolve(): r for r in args.runs}.values())  # (a run named twice: drawn once)
    if twice := [str(r) for r in runs if named[Path(r).resolve()] > 1]:
        Console(stderr=True, soft_wrap=True).print(f"note: {escape(', '.join(twice))} named more than once, drawn once")
    out = args.out or (Path(runs[0]) / "report.html" if len(runs) == 1 else Path("report.html"))
    if why := _not_a_report(Path(out)):  # (a hunt's find: --out run/metrics.jsonl wrote the page over the run's record)
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] --out {escape(str(out))} {why}: name an .html file")
        return 2
    try:
        written = write_report(runs, out)
    except (FileNotFoundError, OSError, ValueError) as e:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(str(e))}")
        return 2
    print(f"report: {written} ({written.stat().st_size / 2**20:.1f} MiB; open it in a browser, no network needed)")
    return 0


def run_train(args) -> int:
    from rich.console import Console

    from execrl.config import ConfigError, load_config, to_yaml
    from execrl.console import escape, other_rank, says_notes
    from execrl.tasks.problem import err as problem_err

    err = Console(stderr=True, soft_wrap=True)
    problem_err.quiet = other_rank()  # (rank 0 says the data's lines)
    from execrl.config.checks import (
        async_note,
        check_model,
        correctness_note,
        data_sources,
        differences_note,
        missing_package,
        no_effect_note,
        sampling_note,
        schedule_note,
        validate,
        validation_overlap_note,
    )

    try:
        cfg = load_config(args.config, args.overrides)
        batch_plan = validate(cfg)  # every check, before torchrun starts N processes that would each stop on it
    except (ConfigError, ValueError) as e:
        err.print(f"[red]config error:[/] {escape(str(e))}")
        return 2
    launch = multi_gpu_launch(cfg, args)
    missing = missing_package(cfg)
    quiet = not says_notes()  # (the batch plan's notes: in --dry-run's batch arithmetic)
    for note in (no_effect_note(cfg), differences_note(cfg), validation_overlap_note(cfg), schedule_note(cfg, batch_plan),
                 sampling_note(cfg), correctness_note(cfg), async_note(cfg),
                 missing and args.dry_run and f"note: {missing} (the run refuses it)",
                 *(() if args.dry_run else (f"note: {n}" for n in batch_plan.notes))):
        if note and not quiet:
            err.print(escape(note))
    if args.dry_run:
        print(to_yaml(cfg))
        print("# batch arithmetic")
        print(batch_plan.describe(cfg))
        print("# data")
        print("\n".join(data_sources(cfg)), flush=True)
        from execrl.trainer.setup import data_counts, resume_plan

        try:
            print("\n".join(data_counts(cfg)))
        except (ConfigError, ValueError) as e:  # (DatasetError is a ValueError)
            err.print(f"[red]data error:[/] {escape(str(e))}")
            return 2
        where, refused = resume_plan(cfg)
        print(f"# start\n{where}", flush=True)
        if refused:
            err.print(f"[red]error:[/] {escape(refused)}")
            return 2
        if cfg.policy.device != "cpu":
            from execrl.trainer.memory_plan import gpu_memory, shape_of, summary

            print("# memory (an estimate, before anything loads)")
            lines = summary(cfg, shape_of(cfg), gpu_memory())
            print("\n".join(lines or ["the model's config.json is not on this machine: no memory plan (it needs the "
                                      "model's shapes)"]))
        if launch:
            print(f"# launched as\n{launch}")
        return 0
    if missing:
        err.print(f"[red]error:[/] {escape(missing)}")
        return 2
    try:
        check_model(cfg)  # before loading anything, and before torchrun starts a process per GPU
    except ConfigError as e:
        err.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    if launch:  # this process starts torchrun, whose processes run this same command
        from execrl.trainer.distributed import launch_command

        if cfg.cluster.num_nodes > 1:
            print(launch)
            return 0
        print(f"launching: {launch}", file=sys.stderr, flush=True)  # unwrapped: one line to copy
        return run_torchrun(launch_command(cfg.cluster.gpus_per_node, 1, train_argv(args)))
    from execrl.models import ModelNotFound
    from execrl.tasks import DatasetError
    from execrl.trainer import distributed
    from execrl.trainer.loop import train

    try:
        train(cfg)
    except (ModelNotFound, DatasetError, ValueError, NotImplementedError, RuntimeError) as e:
        err.print(f"[red]error:[/] {escape(str(e))}" + (f" (rank {distributed.rank()})" if distributed.world_size() > 1 else ""))
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        distributed.close()
    return 0


def run_torchrun(cmd: list[str]) -> int:
    """torchrun's exit status, SIGTERM passed on to it (a review's find: a `kill` of this process, or a container's
    stop, left torchrun and its processes training unwatched), waiting for its processes' last step and checkpoint
    through a first Ctrl-C (the terminal sent it to them too); a second one stops waiting. torchrun's own wait
    between passing SIGTERM on and killing them is TORCH_ELASTIC_SHUTDOWN_TIMEOUT (here 300 s unless set). A run
    stopped so (SIGTERM or Ctrl-C) exits 130, as one process does (torchrun itself exits 1 on the signal, with a
    traceback of its own, whatever its processes did: a scheduler read a clean stop as a crash, a hunt's find)."""
    import signal
    import subprocess

    from execrl.console import NOTES_SAID

    proc = subprocess.Popen(cmd, env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "300", **os.environ, NOTES_SAID: "1"})
    stopped = []

    def stop(signum, frame):
        stopped.append(signum)
        proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        try:
            status = proc.wait()
        except KeyboardInterrupt:  # (the terminal sent it to torchrun too: a stop, as SIGTERM's)
            stopped.append(signal.SIGINT)
            status = proc.wait()
        return 130 if stopped and status != 0 else status
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def train_argv(args) -> list[str]:
    """`train` and its arguments as given (less --dry-run): what each torchrun process runs."""
    return ["train", *([args.config] if args.config else []), *args.overrides]


def multi_gpu_launch(cfg, args) -> str | None:
    """The torchrun command that runs this training on cluster.gpus_per_node processes per node (on
    each node, filling in NODE_RANK and HOST:PORT, for num_nodes > 1); None for one process or when
    already inside torchrun."""
    from execrl.trainer.distributed import launch_command, launched, show

    c = cfg.cluster
    if c.gpus_per_node * c.num_nodes == 1 or launched():
        return None
    text = show(launch_command(c.gpus_per_node, c.num_nodes, train_argv(args)))
    if c.num_nodes > 1:
        text = (f"# on each of the {c.num_nodes} nodes, with NODE_RANK = 0..{c.num_nodes - 1} and HOST:PORT = a "
                f"reachable address of node 0 and a free port there (the checkpoint directory must be shared):\n{text}")
    return text


def data_options(args) -> dict:
    """--data-option KEY=VALUE pairs, each value read as YAML (true, 3, all), each a key the loader takes."""
    import yaml

    from execrl.config.checks import loader_options
    from execrl.tasks import DATASETS, DatasetError, dataset_key

    options = {}
    for pair in args.data_option:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--data-option {pair!r}: write KEY=VALUE, e.g. --data-option prompt_tests=all")
        if key.strip() == "seed":
            raise ValueError("--data-option seed: a generated dataset's seed is --data-seed")
        options[key.strip()] = yaml.safe_load(value)
    try:
        info = DATASETS[dataset_key(args.dataset)] if options and args.dataset else None
    except DatasetError:
        info = None  # (the dataset's own error comes when it loads)
    takes = loader_options(info) if info is not None and not info.own else None
    unknown = sorted(set(options) - set(takes)) if takes is not None else []
    if unknown:
        raise ValueError(f"--data-option {', '.join(unknown)}: {args.dataset} takes no such option (it takes "
                         f"{', '.join(takes) or 'none'})")
    return options


def eval_constraint(args) -> tuple[str, object] | None:
    """execrl eval's --guided-* flag as (kind, value): a file's contents where the value names a
    file."""
    import json

    kind, value = next(((k, v) for k, v in (("regex", args.guided_regex), ("json_schema", args.guided_json),
                                            ("grammar", args.guided_grammar)) if v is not None), (None, None))
    if kind is None:
        return None
    if kind != "regex" and os.path.isfile(value):  # (Path.is_file raised on an inline schema over 255 bytes)
        value = Path(value).read_text()
    if kind == "json_schema":
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"--guided-json: neither a file nor a JSON schema ({e})") from None
    from execrl.guided.grammar import ConstraintError, grammar_text

    try:  # (checked here, before the model loads: llguidance compiles it without a tokenizer)
        grammar_text(kind, value)
    except ConstraintError as e:
        raise ValueError(f"--guided-{kind.split('_')[0]}: {e}") from None
    return kind, value


def _within(path, folder) -> bool:
    """Whether `path` is `folder` or inside it (as resolved)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def eval_config(args):
    """execrl eval's arguments as an EvalConfig, checked before any work (ValueError naming the
    flag); --out is made."""
    from execrl.eval.run import EvalConfig
    from execrl.writable import same_file, unwritable

    if args.out is not None and not args.out.strip():  # (it wrote into the working directory)
        raise ValueError("--out is empty: name the directory for results.jsonl and summary.json (left out: "
                         "results/eval/<model>_<dataset>-<split>)")
    if args.out is None:  # one directory per model (or completions file) and dataset: a later eval keeps this one's
        def name(text: str) -> str:  # (a path's slashes, a builtin's colon: one directory name, a portable one)
            return re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip("/"))[-80:].strip("-.")
        source = name(str(args.model or args.completions or ""))
        args.out = str(Path("results/eval") / f"{source or 'eval'}_{name(args.dataset or '') or 'own'}-{args.split}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file: it names the directory for results.jsonl and summary.json")
    written = [Path(args.out) / name for name in ("results.jsonl", "summary.json")]
    for flag, given in (("--completions", args.completions), ("--data-path", args.data_path)):
        if given and (any(same_file(given, w) for w in written) or (Path(given).is_dir() and _within(args.out, given))):
            raise ValueError(f"--out {args.out} would write eval's results.jsonl and summary.json over or into "
                             f"{flag} {given}: name another --out")
    if why := unwritable(args.out):
        raise ValueError(f"--out {args.out}: {why}: name a directory you can write")
    if args.top_p > 1:
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.data_seed is not None:
        from execrl.tasks import DATASETS, DatasetError, dataset_key

        try:
            generated = bool(args.dataset) and DATASETS[dataset_key(args.dataset)].generated
        except DatasetError:
            generated = True  # (the dataset's own error comes when it loads)
        if not generated:
            raise ValueError(f"--data-seed seeds a generated dataset (builtin:*); {args.dataset or 'no dataset'} is "
                             "read as it is: drop --data-seed")
    if args.completions:  # (each was ignored, and the summary recorded a system prompt no prompt was posed with)
        generating = [flag for flag, given in (
            ("--system-prompt", args.system_prompt is not None), ("--max-new-tokens", args.max_new_tokens != 512),
            ("--max-prompt-tokens", args.max_prompt_tokens != 2048), ("--batch-size", args.batch_size is not None),
            ("--backend", args.backend != "execrl"), ("--stop-token-ids", args.stop_token_ids is not None),
            ("--grading-share", args.grading_share != 0.5), ("--guided-regex", args.guided_regex is not None),
            ("--guided-json", args.guided_json is not None), ("--guided-grammar", args.guided_grammar is not None))
            if given]
        if generating:
            raise ValueError(f"{generating[0]} sets how a --model generates; --completions were made elsewhere: drop it")
    if args.backend == "transformers" and any(g is not None for g in (args.guided_regex, args.guided_json,
                                                                        args.guided_grammar)):  # ('' is a regex)
        raise ValueError("--guided-* needs the execrl engine (it masks tokens in its sampling step): drop --backend "
                         "transformers")
    if args.chat_template_kwargs is not None and args.completions:
        raise ValueError("--chat-template-kwargs shapes the prompts a --model is sampled on; --completions were made "
                         "elsewhere: drop it")
    sampling = [flag for flag, given in (("--temperature", args.temperature is not None),
                                         ("--top-p", args.top_p != 1.0), ("--seed", args.seed != 0),
                                         ("--stop-string", args.stop_strings is not None)) if given]
    if sampling and args.completions:  # (they were ignored, and the summary did not record them)
        raise ValueError(f"{sampling[0]} sets how a --model is sampled; --completions were made elsewhere: drop it")
    if args.grading_share > 1:
        raise ValueError(f"--grading-share is a share of the sandbox's workers, in [0, 1]; got {args.grading_share}")
    try:
        ks = tuple(sorted({int(k) for k in args.k.split(",") if k.strip()}))
    except ValueError:
        raise ValueError(f"--k takes whole numbers separated by commas, e.g. 1,5,10; got {args.k!r}") from None
    # (with --completions each problem has the file's samples: pass@k leaves out those with fewer than k, and says so)
    if not ks or min(ks) < 1 or (max(ks) > args.samples and not args.completions):
        raise ValueError(f"--k values must be between 1 and --samples ({args.samples}), got {args.k!r}")
    try:
        stops = [int(t) for t in (args.stop_token_ids or "").split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--stop-token-ids takes token ids separated by commas, e.g. 32007 or 32000,32007; got "
                         f"{args.stop_token_ids!r}") from None
    if min(stops, default=0) < 0:
        raise ValueError(f"--stop-token-ids are token ids, 0 or more; got {args.stop_token_ids!r}")
    temperature = args.temperature if args.temperature is not None else (0.0 if args.samples == 1 else 0.8)
    if temperature == 0 and args.samples > 1 and not args.completions:
        raise ValueError(f"--samples {args.samples} at --temperature 0 (greedy) are {args.samples} copies of one "
                         "answer, and pass@k over them is pass@1: set --temperature above 0 (e.g. 0.8, the default "
                         "with --samples), or --samples 1")
    trained_on(args)
    return EvalConfig(dataset=args.dataset, split=args.split, data_path=args.data_path, limit=args.limit,
                      max_tests=args.max_tests, samples=args.samples, ks=ks, temperature=temperature, top_p=args.top_p,
                      max_new_tokens=args.max_new_tokens, stop_token_ids=stops or None, batch_size=args.batch_size,
                      stop_strings=None if args.stop_strings is None else [t for t in args.stop_strings if t],
                      backend=args.backend,
                      seed=args.seed, data_seed=args.data_seed, data_options=data_options(args),
                      max_prompt_tokens=args.max_prompt_tokens,
                      out=args.out, workers=args.workers, timeout_s=args.timeout, grading_share=args.grading_share,
                      reward_model=args.reward_model,
                      reward_model_batch_size=args.reward_model_batch_size,
                      reward_model_settings=judge_settings(args), guided=eval_constraint(args),
                      math_verify_impl=args.math_verify_impl,
                      prompt=eval_prompt(args),
                      trained_multi_turn=trained_multi_turn(args.model),
                      chat_template_kwargs=template_kwargs(args.chat_template_kwargs))


def judge_settings(args) -> dict:
    """--reward-model's settings as env.reward_model's keys (tokenizer, max_model_len, precision): the flags given, and
    for those not given, the training run's that saved --model where it was rewarded by the same reward model (its
    eval/reward_model_mean read it so), with a line naming them."""
    if not args.reward_model:
        if args.reward_model_tokenizer or args.reward_model_chat_template or args.reward_model_max_len:
            raise ValueError("--reward-model-tokenizer, --reward-model-chat-template and --reward-model-max-len set "
                             "how --reward-model reads: name the reward model (--reward-model NAME)")
        return {}
    from execrl.config.reward_model import ARITH_JUDGE, OWN_TOKENIZER
    from execrl.config.schema import TokenizerConfig

    if args.reward_model == ARITH_JUDGE and args.reward_model_tokenizer not in (None, ARITH_JUDGE):
        raise ValueError(f"--reward-model-tokenizer is given, but {OWN_TOKENIZER}: drop the flag")
    ran = ((run_config(args.model) or {}).get("env") or {}).get("reward_model") or {}
    named = [str(Path(n).expanduser().resolve()) if Path(n).expanduser().exists() else n
             for n in (ran.get("model_name") or "", args.reward_model)]
    ran = ran if ran.get("enabled") and named[0] == named[1] else {}
    saved = {k: v for k, v in (ran.get("tokenizer") or {}).items() if k in TokenizerConfig.model_fields and v}
    given = {k: v for k, v in (("name", args.reward_model_tokenizer),
                               ("chat_template", args.reward_model_chat_template)) if v is not None}
    try:
        tokenizer = TokenizerConfig(**saved | given)
    except ValueError as e:  # (pydantic's: a chat template that is neither a template nor a .jinja file)
        raise ValueError(f"--reward-model-chat-template: {e.errors()[0]['msg'] if hasattr(e, 'errors') else e}"
                         ) from None
    taken = [f"tokenizer.{k}" for k in saved if k not in given]
    settings = {"tokenizer": tokenizer.model_dump(exclude_defaults=True)} if saved or given else {}
    if max_len := args.reward_model_max_len or ran.get("max_model_len"):
        settings["max_model_len"] = max_len
        taken += [] if args.reward_model_max_len else ["max_model_len"]
    if ran.get("precision", "auto") != "auto":
        settings["precision"] = ran["precision"]
        taken.append("precision")
    if taken:
        print(f"reward model: read as the run that saved {args.model} read it: its env.reward_model's "
              f"{', '.join(taken)} (a flag given wins)", file=sys.stderr)
    return settings


def eval_prompt(args):
    """execrl eval's PromptConfig: the flags given, and for those not given, the prompt settings of the training run
    that saved --model where it is a checkpoint of ours (its prompts were posed so: a tags-trained model scored 0.25
    under eval's defaults and 1.00 under its own), with a line naming them; else the defaults."""
    from execrl.prompts import PromptConfig

    given = {"answer_format": args.answer_format, "code_style": args.code_style, "system_prompt": args.system_prompt}
    ran = {k: v for k, v in (run_prompt(args.model) or {}).items() if k in PromptConfig.model_fields}
    taken = {k: v for k, v in ran.items() if given.get(k) is None and v != PromptConfig.model_fields[k].default}
    if taken:
        shown = ", ".join(f"{k}={v!r}" if k in ("answer_format", "code_style") else k for k, v in taken.items())
        print(f"prompts: as the run that saved {args.model} posed them: {shown} (a flag given wins)", file=sys.stderr)
    prompt = ran | {k: v for k, v in given.items() if v is not None}
    if prompt.get("system_prompt") == "":
        prompt["system_prompt"] = None
    return PromptConfig(**prompt)


def run_prompt(model: str | None) -> dict | None:
    """The prompt section of the config of the training run that saved `model` (its trainer_state.pt beside it, else
    what the run recorded in the model's generation_config.json: a policy/ folder copied out of its run posed
    problems with eval's defaults, a hunt's find), else None."""
    if (config := run_config(model)) is not None:
        return config.get("prompt")
    if model is None:
        return None
    from execrl.models import saved_prompt

    return saved_prompt(model)


@functools.cache
def run_config(model: str | None) -> dict | None:
    """The config of the training run that saved `model` (a checkpoint's policy directory, beside its
    trainer_state.pt), else None."""
    checkpoint_dir = Path(model).expanduser().parent if model else None
    if checkpoint_dir is None or not (checkpoint_dir / "trainer_state.pt").is_file():
        return None
    from execrl.trainer.checkpoint import trainer_state

    try:
        saved = trainer_state(checkpoint_dir, map_location="cpu")
    except Exception:  # noqa: BLE001 - not a checkpoint of ours after all: eval's defaults
        return None
    config = saved.get("config") if isinstance(saved, dict) else None
    return config if isinstance(config, dict) else None


def trained_on(args) -> bool:
    """Whether the run that saved --model trained on the split eval is asked for, said in a warning (a hunt's find:
    eval on the training split scored without a word)."""
    config = run_config(args.model) or {}
    trains = ((config.get("data") or {}).get("train")) or []
    from execrl.tasks.problem import DatasetError
    from execrl.tasks.registry import DATASETS, dataset_key

    def key(name):
        try:
            return dataset_key(name)
        except (DatasetError, ValueError):
            return name

    for train in trains if isinstance(trains, list) else [trains]:
        if not isinstance(train, dict) or key(train.get("dataset_name")) != key(args.dataset):
            continue
        info, path = DATASETS.get(key(args.dataset)), train.get("path")
        split = train.get("split") or (info.default_split if info and info.default_split else "train")
        if path or args.data_path:  # (a file's loader reads the file whatever the split: the file is the split)
            same = bool(path and args.data_path) and Path(path).expanduser().resolve() == \
                Path(args.data_path).expanduser().resolve()
            where = f"{args.data_path}"
        else:
            same, where = split == args.split, f"{args.dataset}/{split}"
        if same:
            print(f"warning: the run that saved {args.model} trained on {where}: its score there is what it learned "
                  "of its training problems, not how it does on new ones; evaluate on held-out problems",
                  file=sys.stderr)
            return True
    return False


def trained_multi_turn(model: str | None) -> dict | None:
    """How the run that saved `model` posed its episodes where they were multi-turn ({kind, max_rollout_turns}),
    with a line saying eval samples one answer per problem; None for a single-turn run or another model."""
    config = run_config(model) or {}
    kind = ((config.get("env") or {}).get("multi_turn") or {}).get("kind", "single_turn")
    turns = (config.get("grpo") or {}).get("max_rollout_turns", 1)
    if kind == "single_turn" and turns == 1:
        return None
    print(f"note: {model} was trained on multi-turn episodes (env.multi_turn.kind={kind}, grpo.max_rollout_turns="
          f"{turns}); execrl eval samples one answer per problem and grades it (single-turn): its pass@k is not the "
          "run's multi-turn eval/pass@1 (that is the run's validation, grpo.val_period)", file=sys.stderr)
    return {"kind": kind, "max_rollout_turns": turns}


def template_kwargs(text: str | None) -> dict | None:
    """--chat-template-kwargs as a dict (None where not given)."""
    import json

    if text is None:
        return None
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as e:
        kwargs = e
    if not isinstance(kwargs, dict):
        raise ValueError(f"--chat-template-kwargs takes a JSON object, e.g. '{{\"enable_thinking\": false}}'; got "
                         f"{text!r}")
    return kwargs


def run_eval(args) -> int:
    import signal

    from rich.console import Console

    from execrl.console import escape
    from execrl.eval.run import evaluate
    from execrl.models import ModelNotFound
    from execrl.sandbox import SandboxFailing, SandboxUnusable, TestSpecError
    from execrl.tasks import DatasetError

    def stop(signum, frame):  # SIGTERM (a scheduler's stop, `kill`, `timeout`) as Ctrl-C: sampled completions kept
        raise KeyboardInterrupt  # (it ended the process at once, without a word: a hunt's find)

    import threading

    main = threading.current_thread() is threading.main_thread()  # (signal.signal works there only)
    before = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        evaluate(eval_config(args), model_name=args.model, completions=args.completions)
    except (ValueError, DatasetError, ModelNotFound, TestSpecError, SandboxUnusable, SandboxFailing) as e:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(str(e))}")
        return 2
    except KeyboardInterrupt:  # (a traceback, as for a crash; sampled completions, if any, were kept and named)
        Console(stderr=True, soft_wrap=True).print("[yellow]interrupted:[/] no results written")
        return 130
    finally:
        if main:
            signal.signal(signal.SIGTERM, before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
