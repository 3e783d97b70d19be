"""`execrl report`: one self-contained HTML page per set of runs (curves overlaid, their config
differences, a rollout browser), which opens offline. Written at the end of every run and at each
evaluation, into the run directory."""

from execrl.report.page import write_report
from execrl.report.runs import RunData, config_differences, load_run

__all__ = ["RunData", "config_differences", "load_run", "write_report"]
