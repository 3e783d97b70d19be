"""Where metrics go: metrics.jsonl (always), TensorBoard (default), W&B (when enabled), and sampled
rollouts."""

from __future__ import annotations

import json
import math
import os
import secrets
from contextlib import contextmanager, suppress
from pathlib import Path

from rich.console import Console

from execrl.config import MasterConfig
from execrl.report.runs import INTERRUPTED
from execrl.writable import write_whole

SAVED = "last_checkpoint"  # beside metrics.jsonl: the step of the run's last checkpoint, and where it is


def row_line(step: int, metrics: dict) -> str:
    """A step's row as metrics.jsonl holds it."""
    return json.dumps({"step": step, **metrics})


class LogUnwritable(RuntimeError):
    """The run's log directory took no more writes (a full disk, a quota): the run stops with a checkpoint."""


class MetricsLogger:
    def __init__(self, cfg: MasterConfig, write: bool = True):
        """write=False: a logger that writes nothing (the ranks other than 0, whose metrics reach
        rank 0's summed). Nothing is opened until start()."""
        self.cfg, self.write, self.dir = cfg, write, Path(cfg.logger.log_dir)
        self.jsonl = self.tb = self.wandb = None
        self.validated: set[int] = set()  # the steps whose validation rows metrics.jsonl keeps (start())
        self.unwritten: list[dict] = []  # records a full disk refused ({"step", "metrics" or "rollouts"}): kept in
        # the checkpoint saved as the run stops, and written where it resumes (written_late)
        self.kept: set[str] = set()  # the rows start() kept (a late record written by an earlier resume among them)

    def start(self, step: int) -> int:
        """Open the sinks for a run that starts after `step` steps (0: from the beginning). The
        records of steps after it (an interrupted run's steps that are done again) are removed, so
        that the run reads as if it had never stopped: metrics.jsonl keeps its rows up to `step`
        (none for a run from the beginning), TensorBoard purges its later events, and the rollouts of later steps
        are deleted (they read as this run's in its report). Returns the number of rows removed."""
        if not self.write:
            return 0
        cfg = self.cfg
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "metrics.jsonl"
        old = path.read_text().splitlines() if path.exists() else []
        kept, markers, redone = [], 0, set()
        for n, line in enumerate(old if step > 0 else [], 1):
            try:
                row = json.loads(line)
            except ValueError:  # a write cut short (a crash, a full disk): the step it held is done again
                Console(stderr=True, soft_wrap=True).print(
                    f"{path}, line {n}: not a whole record (a write cut short): left out", style="yellow", markup=False)
                continue
            if not isinstance(row, dict):
                continue
            if row.get("step", 0) > step:
                redone.add(row["step"])
            elif set(row) == {"step", INTERRUPTED}:
                markers += 1  # (a stop's marker is not kept: the resumed run's report read "(interrupted)")
            else:
                kept.append(line)
                self.kept.add(line.strip())
                if any(str(key).startswith("eval/") for key in row):
                    self.validated.add(row.get("step"))
        write_whole(path, "".join(line + "\n" for line in kept))  # (rewritten in place, a kill then emptied it)
        for old_rollouts in (self.dir / "rollouts").glob("step_*.jsonl"):
            if old_rollouts.stem[5:].isdigit() and int(old_rollouts.stem[5:]) > step:
                old_rollouts.unlink()
        self.jsonl = open(path, "ab", buffering=0)  # (unbuffered: a write that fails leaves nothing to come later)
        if cfg.logger.tensorboard_enabled:
            from torch.utils.tensorboard import SummaryWriter

            # hides later events (a run from the beginning: all of them, else an earlier start's step 0 showed twice)
            self.tb = SummaryWriter(str(self.dir / "tensorboard"), purge_step=step + 1 if step else 0)
        if cfg.logger.wandb_enabled:
            try:
                import wandb
            except ImportError:
                raise RuntimeError("logger.wandb_enabled needs `pip install wandb` (or set "
                                   "logger.wandb_enabled=false)") from None
            w, env = cfg.logger.wandb, os.environ  # (WANDB_MODE=offline, a compute node's usual set-up, was overridden
            chosen = {"mode": w.mode, "entity": w.entity}  # by the config's default, a hunt's find)
            try:
                self.wandb = wandb.init(
                    project=w.project or env.get("WANDB_PROJECT") or "execrl", dir=str(self.dir),
                    name=w.name or env.get("WANDB_NAME") or self.dir.name, config=cfg.model_dump(mode="json"),
                    id=self._wandb_id(step), resume="allow", **{k: v for k, v in chosen.items() if v is not None})
            except Exception as e:  # noqa: BLE001 (an unset API key, an unknown entity: a traceback out of wandb)
                raise RuntimeError(f"W&B would not start the run ({type(e).__name__}: {str(e)[:300]}): check "
                                   "logger.wandb (project, entity, mode, id) and `wandb login`, or log offline with "
                                   "logger.wandb.mode=offline, or set logger.wandb_enabled=false") from None
            if redone:  # (W&B logs no step below its last: the redone steps kept the first attempt's values)
                Console(stderr=True, soft_wrap=True).print(
                    f"note: W&B keeps the values its run logged for steps {min(redone)}-{max(redone)} before this "
                    f"resume from step {step} (it logs no step below its last); metrics.jsonl and TensorBoard hold "
                    "the steps as they are done again", style="yellow", markup=False)
        return len(old) - len(kept) - markers

    def _wandb_id(self, step: int) -> str:
        """The W&B run's id: logger.wandb.id, else the one this log directory's run started with where it resumes
        (kept in wandb_id beside metrics.jsonl: without an id every resume began a W&B run of its own), else new."""
        path = self.dir / "wandb_id"
        kept = path.read_text().strip() if step > 0 and path.is_file() else ""
        run_id = self.cfg.logger.wandb.id or os.environ.get("WANDB_RUN_ID") or kept or secrets.token_hex(4)
        path.write_text(run_id + "\n")
        return run_id

    def log(self, step: int, metrics: dict) -> None:
        if self.jsonl is None:
            return
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        # (a NaN made a line JSON readers other than Python's refuse: a wrecked model's entropy, a skipped step's)
        with self._writing(self.dir / "metrics.jsonl"):
            at, row = self.jsonl.tell(), memoryview((row_line(step, clean) + "\n").encode())
            try:
                while row:
                    row = row[self.jsonl.write(row):]
            except OSError:  # (no half row: the file ends with the last whole one)
                with suppress(OSError):
                    os.ftruncate(self.jsonl.fileno(), at)
                self.unwritten.append({"step": step, "metrics": clean})
                raise
        with self._writing(self.dir / "tensorboard"):
            if self.tb is not None:
                for k, v in clean.items():
                    self.tb.add_scalar(k, v, step)
                self.tb.flush()
        if self.wandb is not None:
            try:
                self.wandb.log(clean, step=step)
            except Exception as e:  # noqa: BLE001 (its process killed, its connection lost: the run was lost with it,
                self._wandb_lost(e)  # no checkpoint, a hunt's find; metrics.jsonl and TensorBoard go on)

    def rollouts(self, step: int, rows: list[dict]) -> None:
        if self.jsonl is None:
            return
        path = self.dir / "rollouts" / f"step_{step:06d}.jsonl"
        with self._writing(path):
            try:
                path.parent.mkdir(exist_ok=True)
                write_whole(path, "".join(json.dumps(r) + "\n" for r in rows))
            except OSError:
                self.unwritten.append({"step": step, "rollouts": rows})
                raise

    def saved(self, step: int, path: Path) -> None:
        """Note that the run saved a checkpoint of `step` at `path` (SAVED): a later start over its record, with the
        checkpoints gone, is refused (setup.erases_a_run). Best effort: the checkpoint is what matters."""
        if self.jsonl is not None:
            with suppress(OSError):
                write_whole(self.dir / SAVED, f"{step} {path}\n")

    def written_late(self, records: list[dict]) -> list[int]:
        """Write the records a full disk refused before a run's checkpoint (their steps are done, and are not done
        again: a hunt's find, a step's row and samples were lost for good, the record not what ran); their steps."""
        for r in records:
            if "metrics" in r:
                if row_line(r["step"], r["metrics"]) in self.kept:  # (an earlier resume from this
                    continue  # checkpoint wrote it: a review's find, each resume added it again)
                self.log(r["step"], r["metrics"])
                if any(str(key).startswith("eval/") for key in r["metrics"]):
                    self.validated.add(r["step"])  # (not validated again: a review's find)
            else:
                self.rollouts(r["step"], r["rollouts"])
        return sorted({r["step"] for r in records})

    @contextmanager
    def _writing(self, path: Path):
        """A write to the log directory (`path` in it); a full disk (or quota, or a read-only remount) as
        LogUnwritable, one line naming the directory and the file (a hunt's find: three chained tracebacks, and the
        steps since the last checkpoint lost; the file named was metrics.jsonl where a rollouts file failed)."""
        try:
            yield
        except OSError as e:
            raise LogUnwritable(f"logger.log_dir {self.dir}: {e.strerror or e} ({e.filename or path}); "
                                "free space there or set logger.log_dir to another disk") from None

    def close(self, outcome: int = 0) -> None:
        """outcome: the run's exit code, which its W&B run records (0 finished, else failed)."""
        for part in (self.jsonl, self.tb):  # (a full disk's error was said where it happened)
            if part is not None:
                with suppress(OSError):
                    part.close()
        if self.wandb is not None:
            try:
                self.wandb.finish(exit_code=outcome)  # (a failed or stopped run read as finished in W&B)
            except Exception as e:  # noqa: BLE001
                self._wandb_lost(e)

    def _wandb_lost(self, e: Exception) -> None:
        Console(stderr=True, soft_wrap=True).print(
            f"W&B stopped taking the run's metrics ({type(e).__name__}: {str(e)[:200]}): they go on in "
            f"{self.dir / 'metrics.jsonl'} and TensorBoard; `execrl report {self.dir}` draws them, and the W&B run "
            "keeps what reached it", style="yellow", markup=False)
        self.wandb = None
        with suppress(Exception):  # (its connection's end now: at exit it printed a traceback of its own)
            import wandb

            wandb.teardown()
