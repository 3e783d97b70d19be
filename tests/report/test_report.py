"""The run report as a person would look at it: two real (tiny) runs, their report opened in headless Chromium with
no network: no console errors, every chart drawn and not blank, the rollout filter showing only what it names; and
the report written by the runs themselves."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from execrl.report import config_differences, load_run, write_report
from execrl.report.charts import figures
from tests.trainer.test_train import run


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    common = ["grpo.max_num_steps=2", "logger.rollouts_period=1", "grpo.val_period=1"]
    _, a = run(tmp, "lr_low", *common, "policy.optimizer.kwargs.lr=1e-5")
    _, b = run(tmp, "lr_high", *common, "policy.optimizer.kwargs.lr=1e-3")
    return a, b


def test_each_run_writes_its_report_and_the_command_overlays_several(two_runs, tmp_path):
    a, b = two_runs
    assert (a / "report.html").is_file() and (b / "report.html").is_file()  # at the end of the run and each eval
    out = tmp_path / "both.html"
    done = subprocess.run([sys.executable, "-m", "execrl.cli", "report", str(a), str(b), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "<script src=" not in page and "https://" not in page.split("<script>")[0]  # nothing fetched
    assert "Config differences" in page and "policy.optimizer.kwargs.lr" in page
    bad = subprocess.run([sys.executable, "-m", "execrl.cli", "report", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no metrics.jsonl" in bad.stderr and "Traceback" not in bad.stderr


def test_a_long_runs_page_keeps_the_first_and_latest_rollouts_and_cuts_long_texts(tmp_path, monkeypatch):
    from execrl.report import runs as report_runs

    (tmp_path / "rollouts").mkdir()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train/reward_mean": 0.5}\n{"step": 2, "trai')  # (killed)
    long = "x" * 30
    for step in range(10, 100, 10):
        (tmp_path / "rollouts" / f"step_{step:06d}.jsonl").write_text(json.dumps(
            {"completion": long, "messages": [{"role": "user", "content": long}], "reward": 1.0}) + "\n")
    monkeypatch.setattr(report_runs, "MAX_ROLLOUT_STEPS", 4)
    monkeypatch.setattr(report_runs, "MAX_TEXT", 10)
    run = report_runs.load_run(tmp_path)
    assert sorted(run.rollouts) == [10, 70, 80, 90] and len(run.metrics) == 1
    row = run.rollouts[90][0]
    assert row["completion"].startswith("x" * 10 + "\n... [20 more") and row["messages"][0]["content"] == row["completion"]
    assert row["reward"] == 1.0


def test_config_differences_and_the_curves(two_runs):
    runs = [load_run(p) for p in two_runs]
    diff = dict(config_differences(runs))
    assert diff == {"policy.optimizer.kwargs.lr": [1e-5, 1e-3]}
    charts = {c["id"]: c for c in figures(runs)}
    for wanted in ("reward", "eval", "loss", "kl", "entropy", "clip", "length", "components", "tokens", "verdicts-0",
                   "verdicts-1", "phases-0", "phases-1"):
        assert wanted in charts, sorted(charts)
    reward = charts["reward"]["figure"]["data"]
    assert [t["name"] for t in reward if t.get("fill") is None] == ["lr_low: reward (mean, band: +- std)",
                                                                     "lr_high: reward (mean, band: +- std)"]
    steps = [m["step"] for m in runs[0].metrics if "train/reward_mean" in m]
    line = next(t for t in reward if t["name"].startswith("lr_low") and t.get("fill") is None)
    assert line["x"] == steps and line["y"] == [m["train/reward_mean"] for m in runs[0].metrics if "train/reward_mean" in m]
    shares = charts["verdicts-0"]["figure"]["data"]  # stacked verdict shares add up to 1 at each step
    for i in range(len(steps)):
        assert sum(t["y"][i] for t in shares) == pytest.approx(1.0)


def chromium() -> str:
    """Debian's chromium; installed here where it is missing and apt-get can (root), else the test says why not."""
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True, timeout=900)
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("headless Chromium is needed to open the report: `apt-get install chromium` (Debian's package) "
                    "failed or needs root here")
    return found


def open_page(page: Path, hash_: str = "", screenshot: Path | None = None) -> tuple[str, str]:
    """(the DOM after the page's scripts ran, Chromium's log) of the page opened offline in headless Chromium."""
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--window-size=1400,2400",
            "--proxy-server=127.0.0.1:9", "--user-data-dir=" + str(page.parent / "chromium-profile")]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run([*args, page.resolve().as_uri() + hash_], capture_output=True, text=True, timeout=180)
    return done.stdout, done.stderr


def console_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line and ("ERROR" in line or "Uncaught" in line)]


def test_the_page_in_headless_chromium(two_runs, tmp_path):
    page = write_report(list(two_runs), tmp_path / "report.html")
    dom, log = open_page(page, "#check=export")
    assert not console_errors(log), console_errors(log)
    body = dom[dom.index("<body"):dom.index(">", dom.index("<body"))]
    charts = len(figures([load_run(p) for p in two_runs]))
    assert f'data-charts-rendered="{charts}"' in body and 'data-charts-blank="0"' in body, body
    assert "data-charts-error" not in body
    export = dict(re.findall(r'data-export-(png|svg)="(\d+)"', body))  # every chart's PNG and SVG, made in the page
    assert int(export["png"]) > 5000 and int(export["svg"]) > 5000, body
    rows = [json.loads(x) for x in sorted((two_runs[0] / "rollouts").glob("*.jsonl"))[-1].read_text().splitlines()]
    for verdict in sorted({r["verdict"] for r in rows})[:2]:  # the filter, preset from the address: that verdict only
        dom, log = open_page(page, f"#run=lr_low&verdict={verdict}")
        want = sum(r["verdict"] == verdict for r in rows)
        assert f'data-rows-shown="{want}"' in dom and not console_errors(log)
        listed = dom[dom.index('<div id="rows">'):dom.index("</section>", dom.index('<div id="rows">'))]
        assert listed.count('<details class="row"') == want
        assert listed.count(f'<details class="row" data-verdict="{verdict}"') == want
    dom, _ = open_page(page, "#run=lr_low&rmin=0.5&rmax=1")
    assert f'data-rows-shown="{sum(r["reward"] is not None and 0.5 <= r["reward"] <= 1 for r in rows)}"' in dom
