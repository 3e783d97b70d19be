"""The dataset registry: each loader registers its name, folder, splits and which splits are for
evaluation only."""

from __future__ import annotations

import difflib
import gzip
import hashlib
import importlib.util
import inspect
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from execrl.plugins import PluginError, is_import_path, load_object, own_code
from execrl.sandbox.spec import expects_nothing, num_tests, truncate_tests, unpassable
from execrl.tasks.problem import DatasetError, Problem, RowReport, err
from execrl.tasks.shown import ALL_SHOWN, distinct, unshown


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    load: Callable  # (path: Path | None, split: str, **options) -> list[Problem], filling a RowReport
    data_dir: str | None  # folder name under a data directory (None: generated, no files)
    hub_id: str | None
    splits: tuple[str, ...]
    eval_only: tuple[str, ...]  # splits that must never be trained on
    default_split: str | None = None  # read when none is named (None: train)
    kind: str | None = None  # the kind of every problem (code, math, game, puzzle); None: read from the rows
    own: bool = False  # a researcher's loader, named by import path: it reads a path if given one, else makes its own
    holds_out: bool = True  # reads split_validation_size (NeMo RL's DAPOMath17K, DeepScaler, GSM8K... do not)
    default_held_out: float = 0.0  # its share held out where split_validation_size is unset (OpenMathInstruct-2: 0.05)

    @property
    def generated(self) -> bool:
        """Made by its loader (seeded), not read from files."""
        return self.data_dir is None and not self.own


DATASETS: dict[str, DatasetInfo] = {}


def register(name: str, data_dir: str | None, splits: tuple[str, ...], eval_only: tuple[str, ...] = (),
             hub_id: str | None = None, default_split: str | None = None, kind: str | None = None,
             holds_out: bool = True, default_held_out: float = 0.0):
    """`holds_out`, `default_held_out`: as NeMo RL's class of the same name reads split_validation_size (its
    constructor's parameter and default; a class without the parameter ignores the key, with a warning)."""
    def wrap(fn):
        DATASETS[name] = DatasetInfo(name, fn, data_dir, hub_id, splits, eval_only, default_split, kind,
                                     holds_out=holds_out, default_held_out=default_held_out)
        return fn
    return wrap


def own_dataset(spec: str) -> DatasetInfo:
    """A researcher's loader named by import path (registered under it): fn(split, **options) ->
    list[Problem], given the options it takes of seed (grpo.seed), path (data.*.path) and
    data.*.options."""
    fn = load_object(spec, "dataset_name")
    if not callable(fn):
        raise DatasetError(f"dataset_name={spec!r}: not a function fn(split, **options) -> list[Problem]")
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())

    def load(path, split, report, hub_id=None, seed=None, **options):
        unknown = [k for k in options if k not in params and not takes_all]  # data.*.options: each must be taken
        if unknown:
            raise DatasetError(f"{spec}: it takes no option(s) {unknown} (its parameters: {list(params)})")
        if path is not None:
            if "path" not in params and not takes_all:
                raise DatasetError(f"{spec}: a path was given, but it takes no `path` parameter")
            options["path"] = str(path)
        if seed is not None and ("seed" in params or takes_all):
            options["seed"] = seed
        with own_code(f"dataset loader {spec} (split {split})", ": fix the loader"):
            problems = fn(split, **options)
        if not isinstance(problems, list) or not all(isinstance(p, Problem) for p in problems):
            got = type(problems).__name__ if not isinstance(problems, list) else \
                f"a list holding {type(next(p for p in problems if not isinstance(p, Problem))).__name__}"
            raise DatasetError(f"{spec}: it must return a list of execrl.tasks.Problem, got {got}")
        for p in problems:
            if why := unposable(p):
                raise DatasetError(f"{spec}: problem {str(p.id)[:80]!r} {why}")
        return problems

    info = DatasetInfo(spec, load, None, None, (), (), own=True)
    DATASETS[spec] = info
    return info


def unposable(p: Problem) -> str | None:
    """Why a loader of one's own's problem cannot be posed or graded (None: it can). A hunt's find: a code problem
    without tests trained on reward 0 (no_code) and a math problem without an answer on "wrong", without a word; a
    kind of another spelling, an int answer or messages of no chat were tracebacks mid-step."""
    from execrl.tasks.problem import KINDS, chat_messages

    if p.kind not in KINDS:
        return f"has kind {p.kind!r}: a Problem's kind is one of {', '.join(KINDS)}"
    if not isinstance(p.messages, list) or chat_messages(p.messages) is None:
        return ("has messages that are no chat: give a list of {\"role\": ..., \"content\": \"text\"} messages with "
                "a user message among them (execrl.tasks.problem.chat_messages makes one of a string)")
    if p.kind == "code" and p.tests is None:
        return "is a code problem without tests: give it tests (execrl.sandbox's StdioTests, AssertTests, ...)"
    if p.kind == "math" and not (isinstance(p.answer, str) and p.answer.strip()):
        return f"is a math problem whose answer is {p.answer!r}: give its reference answer as a string (answer=\"72\")"
    return None


def find_path(info: DatasetInfo, path: str | None) -> Path | None:
    if path:
        p = Path(path).expanduser()
        if not p.exists():
            raise DatasetError(f"{info.name}: {p} does not exist" + ("" if p.is_absolute() else
                                                                      f" (a relative path is read from {Path.cwd()})"))
        return p
    if info.generated or info.own or not info.data_dir:  # (data_dir "": files of the user's own, named by path)
        return None
    return next((c for c in copies(info) if c.exists()), None)


def copies(info: DatasetInfo) -> list[Path]:
    """Where a dataset's local copy is looked for: $EXECRL_DATA_DIR/<folder> (~ expanded, as a path option's), then
    ../shared/data/<folder> beside the checkout. A set EXECRL_DATA_DIR that is no folder is refused: a copy beside
    the checkout was read in its place, the path printed the only sign."""
    given = os.environ.get("EXECRL_DATA_DIR")
    candidates = []
    if given:
        root = Path(given).expanduser()
        if not root.is_dir():
            raise DatasetError(f"EXECRL_DATA_DIR={given}: no such folder ({root}); set it to the folder that holds "
                               f"the datasets' folders ({info.data_dir}/ among them), or unset it")
        candidates.append(root / info.data_dir)
    return candidates + [Path(__file__).resolve().parents[3].parent / "shared" / "data" / info.data_dir]


def local_source(info: DatasetInfo, path: str | None) -> Path | None:
    """Where a dataset is read from on this machine (None: generated, its own loader's choice, or the hub), refusing
    a path that does not exist and a file dataset with neither a copy nor a hub id."""
    local = find_path(info, path)
    if local is None and info.data_dir == "":
        raise DatasetError(f"{info.name} reads a file of your own: name it (execrl train: data.train.path=...; "
                           "execrl eval: --data-path ...)")
    if local is None and info.hub_id is None and not info.generated and not info.own:
        looked = " or ".join(str(c) for c in copies(info))
        raise DatasetError(f"{info.name}: no local copy in {looked}; put its files there (docs/getting-started.md's "
                           "Datasets says where to get them), set EXECRL_DATA_DIR to a folder holding "
                           "{info.data_dir}/, or pass its path (execrl train: data.train.path=...; execrl eval: "
                           "--data-path ...)".replace(
                               "{info.data_dir}", info.data_dir))
    return local


def origin(info: DatasetInfo, local: Path | None, path: str | None, advice: bool = True) -> str:
    """Where a dataset's problems come from, in words ("generated", "from ..."); `advice`: with how to read another
    file instead."""
    if info.generated:
        return "generated"
    if local is None and info.hub_id and advice and importlib.util.find_spec("datasets") is None:
        return (f"from the hub ({info.hub_id}), which needs Hugging Face's datasets (pip install -e '.[hub]'), not "
                f"installed here, and a network; or a copy in {info.data_dir}/ (docs/getting-started.md's Datasets)")
    if local is None:
        return f"from the hub ({info.hub_id})" if info.hub_id else f"from its loader {info.name}"
    instead = " (a file named by path or EXECRL_DATA_DIR reads instead)" if advice else ""
    copy = f", the local copy of {info.hub_id}{instead}" if info.hub_id and not path else ""
    return f"from {local}{copy}"


def load_problems(name: str, split: str = "train", path: str | None = None, max_tests: int = 0, train: bool = False,
                  **options) -> tuple[list[Problem], RowReport]:
    """Problems of one split, each test once; `max_tests` > 0 keeps at most that many tests per code problem (the
    first ones); `train`: graded on the tests their prompts do not show (tasks/shown.py), a row that shows them all
    left out."""
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}: known are {sorted(DATASETS)} (or 'jsonl' with a field mapping)")
    info = DATASETS[name]
    if info.splits and split not in info.splits:
        raise DatasetError(f"{name} has no split {split!r}: use one of {list(info.splits)}")
    label = f"{name}/{split}"  # (a file of one's own has no split, but is the run's training or validation file:
    if info.data_dir == "":  # a validation file was "jsonl/train"; then "jsonl" for both, which of two files had no
        label = f"{name} {path}" if path else name  # usable row unsaid: a hunt's find)
    report = RowReport(label)
    local = local_source(info, path)
    problems = info.load(local, split, report=report, hub_id=info.hub_id, **options)
    for p in problems:
        p.metadata.setdefault("dataset", name)
        p.metadata.setdefault("split", split)
        if p.tests is not None:
            p.tests = distinct(p.tests)
    if train:
        graded = [unshown(p) for p in problems]
        for p, kept in zip(problems, graded):
            if kept is None:
                report.skip(p.id, ALL_SHOWN)
        problems = [p for p in graded if p is not None]
    for p in problems:
        if max_tests and p.tests is not None:
            p.tests = truncate_tests(p.tests, max_tests)
    unfit = {id(p): why for p in problems if p.tests is not None and (why := expects_nothing(p.tests) or
                                                                       unpassable(p.tests))}  # (of the tests kept)
    for p in problems:
        if id(p) in unfit:
            report.skip(p.id, f"unusable tests ({unfit[id(p)]})")
    problems = [p for p in problems if id(p) not in unfit]
    report.print()
    if not problems:
        raise DatasetError(f"{label}: no usable problems (skipped {report.skipped})")
    if not info.generated:  # (never silent about which file a name read: a hub id's local copy may be a sample)
        err.print(f"{label}: {len(problems)} problems {origin(info, local, path)}")
    many = [num_tests(p.tests) for p in problems if p.tests is not None and num_tests(p.tests) > MANY_TESTS]
    if many:  # (a row of 100,000 tests holds a rollout's grading for minutes, every sample of it)
        err.print(f"[yellow]{label}: {len(many)} problem(s) hold over {MANY_TESTS:,} tests (the most: "
                  f"{max(many):,}): every sample runs them all; cap them with max_tests (execrl train: "
                  "data.train.max_tests=N; execrl eval: --max-tests N)[/]")
    return problems, report


MANY_TESTS = 1000  # tests of one problem past which loading says so (Nemotron's coding rows: up to ~100)


def dataset_key(name: str) -> str:
    """The registered loader of a dataset name or hub id (e.g.
    nvidia/Nemotron-RL-coding-competitive_coding)."""
    if name in DATASETS:
        return name
    if is_import_path(name):
        try:
            return own_dataset(name).name
        except PluginError as e:
            raise DatasetError(str(e)) from None
    for key, info in DATASETS.items():
        if info.hub_id and info.hub_id.lower() == name.lower():
            return key
    close = difflib.get_close_matches(name, DATASETS, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise DatasetError(f"dataset_name {name!r}{hint}: not a known dataset or its hub id; known: {sorted(DATASETS)}")


# Files that are (or hold) evaluation splits, by size and sha256 (../shared/data/SOURCES.md), whatever the name they
# are read under: the dataset whose loader splits their rows (none: every loader reads them whole), what they are
EVALUATION_FILES = {
    (749_738, "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"):
        (None, "GSM8K's test split (its training split: train.jsonl)"),
    (563_743, "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f"):
        ("mbpp", "MBPP with its test split (task_ids 11-510)"),
    (300_253, "7fec016546acaee11dbe14f9f0bb670e59f41919f7b522a59fba34871da78551"):
        ("mbpp", "sanitized MBPP with its test split (task_ids 11-510)"),
    (1_434_552, "097504bb82d25c51d6b762e2412df08b73aed116ba7c59050050cff6b11be42a"): (None, "the LeetCode contests"),
}


def evaluation_file(path) -> tuple[str | None, str] | None:
    """What `path` is, where it is one of EVALUATION_FILES, gzipped or not (read_rows reads the rows inside a gzip:
    its raw bytes hid GSM8K's test.jsonl.gz); read only where its (decompressed) size is one of theirs."""
    sizes = {known for known, _ in EVALUATION_FILES}
    try:
        path = Path(path).expanduser()
        with path.open("rb") as f:
            if f.read(2) == b"\x1f\x8b":  # (as read_rows tells a gzip: by its bytes, whatever the name)
                f.seek(0)
                with gzip.open(f) as inside:
                    data = inside.read(max(sizes) + 1)  # (bounded: a larger file is none of them)
            elif path.stat().st_size in sizes:
                data = path.read_bytes()
            else:
                return None
        if len(data) not in sizes:
            return None
        return EVALUATION_FILES.get((len(data), hashlib.sha256(data).hexdigest()))
    except (OSError, EOFError, zlib.error):  # (a gzip that cannot be read: read_rows names it)
        return None


def name_words(path) -> list[str]:
    """A file name's words, lowercase (livecodebench_v5_validation.jsonl: ..., "validation", "jsonl"): the splits
    a file's name carries."""
    return re.split(r"[-_.]", Path(path).name.lower())


def check_trainable(name: str, split: str, path=None) -> None:
    """A training split is no evaluation one; nor is the file `path` names, where it is the dataset's file of an
    evaluation split (gsm8k's test.jsonl named by data.train.path, which its loader reads whatever the split), or
    a known evaluation file by its bytes (GSM8K's test.jsonl as dataset_name: jsonl or ResponseDataset)."""
    known = evaluation_file(path) if path is not None else None
    if known is not None and known[0] != name and not (known[0] and is_import_path(name)):  # (a loader of one's
        # own chooses its rows of a file holding several splits)
        reader = f"; dataset_name: {known[0]} reads its training split" if known[0] else ""
        raise DatasetError(f"{path} is {known[1]}, an evaluation set: never train on it{reader}")
    info = DATASETS.get(name)
    if info is None:
        return
    usable = [s for s in info.splits or ("train",) if s not in info.eval_only and "*" not in info.eval_only] or \
        "another dataset"  # (a loader of any split name, nemotron_code: its train split)
    if split in info.eval_only or "*" in info.eval_only:
        raise DatasetError(f"{name}/{split} is an evaluation split: never train on it (use one of {usable})")
    named = [w for w in name_words(path) if w in info.eval_only] if path is not None and \
        Path(path).suffix else []  # (test.jsonl, gsm8k_test.jsonl, the hub's test-00000-of-00001.parquet)
    if named:
        raise DatasetError(f"{path} is named as a {named[0]} split's file, and {name} reads it whatever the split: "
                           f"never train on an evaluation split (use one of {usable}; a file of your own: a name "
                           f"without '{named[0]}', or dataset_name: jsonl)")


def hub_rows(hub_id: str, split: str, config: str | None = None) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"no local copy, and loading {hub_id} from the hub needs Hugging Face's datasets (pip "
                           "install -e '.[hub]') and a network; or pass the path of a local copy (docs/"
                           "getting-started.md's Datasets says where to get one)") from None
    try:
        return list(datasets.load_dataset(hub_id, config, split=split))
    except Exception as e:  # noqa: BLE001 - offline, unknown id, ...: one clear message
        raise DatasetError(f"could not load {hub_id} ({split}) from the hub: {e}; pass a local path instead") from None
