"""Where metrics go: metrics.jsonl (always), TensorBoard (default), W&B (when enabled), and sampled rollouts."""

from __future__ import annotations

import json
from pathlib import Path

from execrl.config import MasterConfig


class MetricsLogger:
    def __init__(self, cfg: MasterConfig, write: bool = True):
        """write=False: a logger that writes nothing (the ranks other than 0, whose metrics reach rank 0's summed)."""
        self.dir = Path(cfg.logger.log_dir)
        self.jsonl = self.tb = self.wandb = None
        if not write:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = open(self.dir / "metrics.jsonl", "a")
        if cfg.logger.tensorboard_enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.dir / "tensorboard"))
        if cfg.logger.wandb_enabled:
            try:
                import wandb
            except ImportError:
                raise RuntimeError("logger.wandb_enabled needs `pip install wandb` (or set logger.wandb_enabled=false)") from None
            w = cfg.logger.wandb
            self.wandb = wandb.init(project=w.project, name=w.name or self.dir.name, mode=w.mode, dir=str(self.dir),
                                    config=cfg.model_dump(mode="json"), resume="allow")

    def log(self, step: int, metrics: dict) -> None:
        if self.jsonl is None:
            return
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        if self.tb is not None:
            for k, v in clean.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(clean, step=step)

    def rollouts(self, step: int, rows: list[dict]) -> None:
        if self.jsonl is None:
            return
        path = self.dir / "rollouts" / f"step_{step:06d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def close(self) -> None:
        if self.jsonl is not None:
            self.jsonl.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
