"""The docs cannot rot: every shell, YAML and Python block of README.md and docs/*.md (docs/dev is not user docs) is
checked against the code, and so are their links, the flags and the config keys they name.

Fenced blocks, by language:
- bash, sh, console (its `$ ` lines), or no language when a line starts with `execrl`: each command is split as a
  shell splits it (continued lines joined, comments dropped, `&&` and `;` separate commands).
  - `execrl train ...` (also `.venv/bin/execrl`, `python -m execrl.cli`, and after torchrun inside `srun bash -c`)
    dry-runs as written: no GPU and no model needed. The slow tier runs each whose model is built in (a CPU run) for
    one short step.
  - `execrl eval`, `grade`, `report` parse with execrl's own parser (a renamed flag fails); eval's arguments are then
    checked as `execrl eval` checks them, its dataset and split against the registry; `grade` runs on its input when
    the repository has it (seconds). The slow tier runs `eval` with a built-in model.
  - `bash scripts/...` names a script that exists; the README's test command is the one CI runs (.ci/run).
  - other programs (curl, tensorboard, sbatch lines) are not checked.
- yaml: an execrl config, or a fragment of one merged onto the built-in default (a block with its own `defaults:`
  loads as it is): it loads, validates and passes every check `--dry-run` makes.
- python: it compiles and every name it imports from execrl exists; the slow tier runs it.
- text (and other languages): output, not checked.

Markers, an HTML comment on the line before a block:
  <!-- docs-test: skip (why) -->                    not checked at all (keep these rare, and say why)
  <!-- docs-test: dry-run only (why) -->            a CPU train command the slow tier does not run
  <!-- docs-test: file PATH -->                     the block is that file, verbatim
  <!-- docs-test: lines of PATH -->                 each line of the block is a line of that file
  <!-- docs-test: onto PATH -->                     a YAML fragment merged onto that config, not the default
  <!-- docs-test: after the python block above -->  a YAML fragment checked in a fresh process after running the
                                                     file's previous python block (e.g. a component it registers)
  <!-- docs-test: languages -->                     a YAML table for `execrl grade --languages`
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from execrl import cli
from execrl.config import load_config
from execrl.config.checks import validate
from execrl.config.load import BUILTIN_DEFAULT, _known
from execrl.config.nemo import IGNORED, MAPPED, REFUSED
from execrl.tasks.registry import DATASETS, dataset_key

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->$")
SECTIONS = ("policy", "grpo", "loss_fn", "data", "prompt", "reward", "env", "logger", "checkpointing", "cluster",
            "warmup")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str  # the docs-test marker before it ("" when none)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def split_markdown(path: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a markdown file (fences at the start of a line; a longer fence may hold a shorter one),
    and its other lines: the prose."""
    found, prose, lines, i = [], [], path.read_text().splitlines(), 0
    while i < len(lines):
        opening = re.match(r"^(`{3,})([\w+-]*)\s*$", lines[i])
        if not opening:
            prose.append(lines[i])
            i += 1
            continue
        fence, start = opening.group(1), i
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            i += 1
        before = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
        marker = MARKER.match(before)
        found.append(Block(path, start + 1, opening.group(2).lower(), "\n".join(lines[start + 1:i]) + "\n",
                           marker.group(1) if marker else ""))
        i += 1
    return found, prose


def blocks(path: Path) -> list[Block]:
    return split_markdown(path)[0]


def prose(path: Path) -> str:
    return "\n".join(split_markdown(path)[1])


ALL_BLOCKS = [b for path in DOCS for b in blocks(path)]


def split_commands(line: str) -> list[list[str]]:
    """One shell line as its commands (split at &&, ||, ; and |), each a list of words; comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, "#"
    commands, words = [], []
    for token in lexer:
        if token and set(token) <= set(";&|"):
            commands.append(words)
            words = []
        else:
            words.append(token)
    return [c for c in [*commands, words] if c]


def shell_commands(block: Block) -> list[list[str]]:
    text = block.text
    if block.lang == "console":
        text = "\n".join(line[2:] for line in text.splitlines() if line.startswith("$ "))
    commands = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        for words in split_commands(line):
            commands.append(words)
            for word in words:  # a command inside `bash -c '...'` (a SLURM script's srun)
                if " " in word and "execrl" in word:
                    commands.extend(split_commands(word))
    return commands


def without_env(words: list[str]) -> list[str]:
    """A command without the VAR=value words before it."""
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_]\w*=", words[i]):
        i += 1
    return words[i:]


def execrl_argv(words: list[str]) -> list[str] | None:
    """The arguments of execrl in a command (None: another program): `execrl ...`, `.venv/bin/execrl ...`, or
    anything ending in `-m execrl.cli ...` (python, torchrun)."""
    words = without_env(words)
    if words and Path(words[0]).name == "execrl":
        return words[1:]
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == "execrl.cli":
            return words[i + 2:]
    return None


def is_command_block(block: Block) -> bool:
    if block.lang in ("bash", "sh", "shell", "console"):
        return True
    return block.lang == "" and any(line.startswith("execrl ") for line in block.text.splitlines())


SHELL_BLOCKS = [b for b in ALL_BLOCKS if is_command_block(b) and not b.marker.startswith("skip")]
COMMANDS = [(b, argv) for b in SHELL_BLOCKS for words in shell_commands(b) if (argv := execrl_argv(words))]
OTHER_COMMANDS = [(b, words) for b in SHELL_BLOCKS for words in shell_commands(b) if execrl_argv(words) is None]


def ids(items) -> list[str]:
    return [f"{b.where}:{' '.join(argv[:2])}" for b, argv in items]


def of(job: str) -> list[tuple[Block, list[str]]]:
    return [(b, argv) for b, argv in COMMANDS if argv and argv[0] == job]


def parse(block: Block, argv: list[str], capsys):
    """execrl's own parser on the command; a flag it does not know fails with argparse's line."""
    try:
        return cli.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{block.where}: execrl {shlex.join(argv)}: {capsys.readouterr().err.strip()}")


def test_the_docs_have_commands_and_configs():
    """The collection itself works: the README's set-up and quick start, and the guides' configs, are found."""
    assert len(of("train")) >= 20 and of("eval") and of("grade") and of("report")
    assert len([b for b in ALL_BLOCKS if b.lang == "yaml"]) >= 10
    skipped = [b.where for b in ALL_BLOCKS if b.marker.startswith("skip")]
    assert len(skipped) <= 3, f"keep skips rare: {skipped}"


@pytest.mark.parametrize("block, argv", of("train"), ids=ids(of("train")))
def test_train_commands_dry_run(block, argv, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    parse(block, argv, capsys)
    rc = cli.main([*argv, "--dry-run"])
    assert rc == 0, f"{block.where}: execrl {shlex.join(argv)} --dry-run: {capsys.readouterr().err.strip()}"


@pytest.mark.parametrize("block, argv", of("eval"), ids=ids(of("eval")))
def test_eval_commands_parse_and_name_real_datasets(block, argv, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    args = parse(block, argv, capsys)
    args.out = str(tmp_path / "out")
    cli.eval_config(args)  # execrl eval's own checks of its arguments (k, top-p, guided constraints)
    info = DATASETS[dataset_key(args.dataset)]
    assert not info.splits or args.split in info.splits, f"{block.where}: {args.dataset} has no split {args.split}"
    for path in filter(None, (args.data_path, args.completions)):
        assert not path.startswith("examples/") or (ROOT / path).is_file(), f"{block.where}: no {path}"


@pytest.mark.parametrize("block, argv", of("grade"), ids=ids(of("grade")))
def test_grade_commands_run_on_their_input(block, argv, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    args = parse(block, argv, capsys)
    if not (ROOT / args.input).is_file():
        return  # a placeholder input: parsed only
    out = tmp_path / Path(args.out).name
    rc = cli.main([*argv[:argv.index("--out") + 1], str(out), *argv[argv.index("--out") + 2:], "--quiet"])
    assert rc == 0 and out.is_file(), f"{block.where}: {capsys.readouterr().err.strip()}"


@pytest.mark.parametrize("block, argv", of("report"), ids=ids(of("report")))
def test_report_commands_parse(block, argv, capsys):
    parse(block, argv, capsys)


def test_every_execrl_command_is_a_known_job():
    jobs = {"train", "eval", "grade", "report"}
    unknown = [f"{b.where}: execrl {shlex.join(argv)}" for b, argv in COMMANDS if not argv or argv[0] not in jobs]
    assert not unknown, unknown


def test_scripts_named_exist_and_ci_runs_the_readmes_test_command():
    for block, words in OTHER_COMMANDS:
        words = without_env(words)
        if words[:1] == ["bash"] and len(words) > 1 and words[1].startswith("scripts/"):
            assert (ROOT / words[1]).is_file(), f"{block.where}: {words[1]}"
    readme = [b for b in ALL_BLOCKS if b.path.name == "README.md" and is_command_block(b)]
    tests = [line.split("#")[0].strip() for b in readme for line in b.text.splitlines() if "-m pytest" in line]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests and all(t in ci for t in tests), f"the README's test command {tests} is not what .ci/run runs"


def python(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """This interpreter on argv, with this checkout's execrl importable."""
    path = os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH"))))
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": path})


# ---- YAML


YAML_BLOCKS = [b for b in ALL_BLOCKS if b.lang in ("yaml", "yml") and not b.marker.startswith("skip")]


def config_file(block: Block, directory: Path) -> Path:
    """The block as a config file: a fragment merged onto the built-in default (or its marker's config)."""
    tree = yaml.safe_load(block.text)
    assert isinstance(tree, dict), f"{block.where}: not a mapping of config sections"
    onto = block.marker.removeprefix("onto ").strip() if block.marker.startswith("onto ") else None
    base = str(ROOT / onto) if onto else str(BUILTIN_DEFAULT)
    text = block.text if "defaults" in tree else f"defaults: {base}\n{block.text}"
    path = directory / f"{block.path.stem}_{block.line}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.where for b in YAML_BLOCKS])
def test_yaml_blocks_are_valid_configs(block, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    if block.marker.startswith("file "):
        path = ROOT / block.marker.removeprefix("file ").strip()
        assert block.text == path.read_text(), f"{block.where}: differs from {path.relative_to(ROOT)}"
        validate(load_config(str(path)))
    elif block.marker == "languages":
        from execrl.sandbox import LANGUAGES, load_languages

        before = dict(LANGUAGES)
        (tmp_path / "languages.yaml").write_text(block.text)
        try:
            load_languages(str(tmp_path / "languages.yaml"))
        finally:
            LANGUAGES.clear()
            LANGUAGES.update(before)
    elif block.marker.startswith("after the python block"):
        code = [b for b in ALL_BLOCKS if b.path == block.path and b.lang == "python" and b.line < block.line][-1]
        script = (f"{code.text}\nfrom execrl.config import load_config\nfrom execrl.config.checks import validate\n"
                  f"validate(load_config({str(config_file(block, tmp_path))!r}))\n")
        proc = python(["-c", script], ROOT, timeout=120)
        assert proc.returncode == 0, f"{block.where}: {proc.stderr.strip()[-800:]}"
    else:
        validate(load_config(str(config_file(block, tmp_path))))


# ---- Python, JSON


PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang == "python" and not b.marker.startswith("skip")]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.where for b in PYTHON_BLOCKS])
def test_python_blocks_compile_and_import_what_exists(block):
    tree = compile(block.text, block.where, "exec", ast.PyCF_ONLY_AST)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("execrl"):
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{block.where}: {node.module} has no {missing}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("execrl"):
                    importlib.import_module(alias.name)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.marker.startswith("lines of ")],
                         ids=lambda b: b.where)
def test_blocks_quoting_a_file_quote_it(block):
    lines = set((ROOT / block.marker.removeprefix("lines of ").strip()).read_text().splitlines())
    assert all(line in lines for line in block.text.splitlines() if line.strip()), block.where


# ---- links, flags and keys in the prose


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen, out = {}, set()
    for line in prose(path).splitlines():
        if re.match(r"^#{1,6} ", line):
            s = slug(line.lstrip("#"))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(path):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(path)):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"


def execrl_flags() -> set[str]:
    parser = cli.build_parser()
    jobs = next(a for a in parser._actions if a.choices and "train" in a.choices).choices.values()
    return {flag for p in [parser, *jobs] for a in p._actions for flag in a.option_strings}


OTHER_FLAGS = {"--config", "--cpus-per-task"}  # bench/scale.py's and SLURM's, named alone in the prose


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_flags_named_in_the_prose_exist(path):
    """Each flag in an inline span that is one (`--samples`) or an execrl command (`execrl eval --k 1,5`) exists."""
    known = execrl_flags() | OTHER_FLAGS
    spans = [s for s in re.findall(r"`([^`\n]+)`", prose(path)) if s.startswith(("--", "execrl "))]
    named = {flag for span in spans for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", span)}
    assert named <= known, f"{path.relative_to(ROOT)}: no such flag {sorted(named - known)}"


def nemo_key(key: str) -> bool:
    """A NeMo RL key execrl reads: mapped, ignored or refused (a section covers the keys under it)."""
    return any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in (*MAPPED, *IGNORED, *REFUSED))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_config_keys_named_in_the_prose_exist(path):
    """Each `section.key` (or `section.key=value`, `section.key: value`) in the prose is a key of the schema or a NeMo
    RL key execrl reads; shorthands (`a/b`, `{a, b}`, `*`) are left alone."""
    unknown = []
    for span in re.findall(r"`([^`\n]+)`", prose(path)):
        key = re.split(r"=|: ", span, maxsplit=1)[0].removeprefix("++")
        if not re.fullmatch(rf"(?:{'|'.join(SECTIONS)})(?:\.\w+)+", key):
            continue
        if not (_known(key) or nemo_key(key)):
            unknown.append(key)
    assert not unknown, f"{path.relative_to(ROOT)}: no such config key {unknown}"


# ---- the slow tier: CPU commands run

SLOW_S = 900  # a slow check at most: the reward-model config trains its judge first (minutes on 2 busy cores)


def short_run(argv: list[str], tmp_path: Path) -> list[str] | None:
    """The overrides that make a documented train command one short step in tmp_path, or None when it is not a CPU
    command (a hub model: dry-run only)."""
    args = cli.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    if not cfg.policy.model_name.startswith("builtin:"):
        return None
    group = cfg.grpo.num_generations_per_prompt
    return ["grpo.max_num_steps=1", "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
            "grpo.num_prompts_per_step=2", f"policy.train_global_batch_size={2 * group}",
            # a short warm-up, except where dynamic sampling needs the groups whose rewards differ that it makes
            *(["warmup.sft_steps=2"] if cfg.warmup.sft_steps and not cfg.grpo.use_dynamic_sampling else []),
            f"logger.log_dir={tmp_path / 'run'}", f"checkpointing.checkpoint_dir={tmp_path / 'ck'}"]


def execrl(argv: list[str]) -> subprocess.CompletedProcess:
    return python(["-m", "execrl.cli", *argv], ROOT, timeout=SLOW_S - 60)


@pytest.mark.slow
@pytest.mark.timeout(SLOW_S)
@pytest.mark.parametrize("block, argv", of("train"), ids=ids(of("train")))
def test_cpu_train_commands_run_a_step(block, argv, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    overrides = short_run([a for a in argv if a != "--dry-run"], tmp_path)
    if overrides is None or "--dry-run" in argv or block.marker.startswith("dry-run only"):
        pytest.skip("not a CPU run: checked by its dry-run")
    proc = execrl([a for a in argv if a != "--dry-run"] + overrides)
    assert proc.returncode == 0, f"{block.where}: {proc.stderr.strip()[-1500:]}"
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.slow
@pytest.mark.timeout(SLOW_S)
@pytest.mark.parametrize("block, argv", of("eval"), ids=ids(of("eval")))
def test_eval_commands_with_a_builtin_model_run(block, argv, tmp_path, capsys):
    args = parse(block, argv, capsys)
    if not (args.model or "").startswith("builtin:"):
        pytest.skip("a hub model or a run's checkpoint: checked by parsing")
    i = argv.index("--out") if "--out" in argv else len(argv)
    proc = execrl([*argv[:i], *argv[i + 2:], "--out", str(tmp_path / "out")])
    assert proc.returncode == 0 and (tmp_path / "out" / "summary.json").is_file(), proc.stderr.strip()[-1500:]


@pytest.mark.slow
@pytest.mark.timeout(SLOW_S)
@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.where for b in PYTHON_BLOCKS])
def test_python_blocks_run(block, tmp_path):
    proc = python(["-c", block.text], tmp_path, timeout=SLOW_S - 60)
    assert proc.returncode == 0, f"{block.where}: {proc.stderr.strip()[-1500:]}"
