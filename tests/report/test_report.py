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
from execrl.report.charts import figures, reward_range
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
    once = subprocess.run([sys.executable, "-m", "execrl.cli", "report", str(a), f"{a}/", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)  # (a hunt's find: a run against itself, silent)
    assert once.returncode == 0 and "named more than once, drawn once" in once.stderr, once.stderr
    bad = subprocess.run([sys.executable, "-m", "execrl.cli", "report", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such directory" in bad.stderr and "Traceback" not in bad.stderr
    record = (a / "metrics.jsonl").read_bytes()  # (a hunt's find: --out a run's own file wrote the page over it)
    for target, why in ((a / "metrics.jsonl", "is a file that is not a report"), (tmp_path, "is a directory")):
        bad = subprocess.run([sys.executable, "-m", "execrl.cli", "report", str(a), "--out", str(target)],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and why in bad.stderr, bad.stderr
    assert (a / "metrics.jsonl").read_bytes() == record
    (tmp_path / "eval_out").mkdir()  # (a newcomer's find: an eval's folder was only "not a run directory")
    for name in ("summary.json", "results.jsonl"):
        (tmp_path / "eval_out" / name).write_text("{}\n")
    bad = subprocess.run([sys.executable, "-m", "execrl.cli", "report", str(tmp_path / "eval_out")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "is an execrl eval's output: its figures are in" in bad.stderr.replace("\n", " ")


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
                   "verdicts-1", "phases-0", "phases-1", "signal", "lr"):  # (a hunt's find: the console's warnings
        assert wanted in charts, sorted(charts)  # named flat groups and truncation, and no chart had them, nor lr)
    assert {t["name"].split(": ")[1] for t in charts["signal"]["figure"]["data"]} >= {"train/flat_group_frac",
                                                                                     "train/truncated_frac"}
    reward = charts["reward"]["figure"]["data"]
    names = [t["name"] for t in reward if t.get("fill") is None]
    assert [n.split(":")[0] for n in names] == ["lr_low", "lr_high"]
    assert all(n.split(": ", 1)[1].startswith("reward (mean; band: +- std within the rewards seen") for n in names)
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
    charts = sum(c["figure"] is not None for c in figures([load_run(p) for p in two_runs]))  # (not a note alone)
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


def test_markup_in_a_completion_is_text_on_the_page(two_runs, tmp_path):
    """A completion (or prompt) holding '<!--<script>' inside the page's data: the HTML parser then read the real
    '</script>' as text, the page's own script never ran, and the report was blank. Its rows and charts still draw."""
    copy = tmp_path / "run"
    shutil.copytree(two_runs[0], copy)
    last = sorted((copy / "rollouts").glob("*.jsonl"))[-1]
    rows = [json.loads(x) for x in last.read_text().splitlines()]
    rows[0]["completion"] = "print('<!--<script>')\n</script><script>document.title='owned'</script>"
    last.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    page = write_report([copy], tmp_path / "report.html")
    dom, log = open_page(page)
    body = dom[dom.index("<body"):dom.index(">", dom.index("<body"))]
    assert "data-charts-rendered" in body and f'data-rows-shown="{len(rows)}"' in body, body
    assert "owned" not in dom[:dom.index("<body")] and not console_errors(log)


def test_rows_not_trained_on_say_so_on_the_page(two_runs, tmp_path):
    """(A hunt's find) a frozen opponent's seats and dynamic sampling's dropped groups read as the policy's rows."""
    copy = tmp_path / "run"
    shutil.copytree(two_runs[0], copy)
    last = sorted((copy / "rollouts").glob("*.jsonl"))[-1]
    rows = [json.loads(x) for x in last.read_text().splitlines()]
    rows[0].update(trained=False, seat=1)
    rows[1].update(trained=False)
    last.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dom, log = open_page(write_report([copy], tmp_path / "report.html"))
    assert not console_errors(log)
    assert dom.count('title="the frozen opponent\'s seat') == 1 and dom.count('title="a group dynamic sampling') == 1


def test_a_run_named_with_a_bidi_control_shows_its_rows(two_runs, tmp_path):
    """(A review's find) a run directory whose name holds U+202E showed 0 rollouts: the run's option value was its
    name with the control shown as a code point, which named no run's rows."""
    copy = tmp_path / "bidi\u202ex"
    shutil.copytree(two_runs[0], copy)
    rows = sorted((copy / "rollouts").glob("*.jsonl"))[-1].read_text().splitlines()
    dom, log = open_page(write_report([copy], tmp_path / "report.html"))
    assert f'data-rows-shown="{len(rows)}"' in dom and not console_errors(log)


# ---- issue 40: what a first run's page shows --------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A real run as a first try makes it: two steps, one optimizer step per rollout (the ratio is 1), no KL penalty,
    no rollouts written (logger.rollouts_period 5 > 2 steps)."""
    _, d = run(tmp_path_factory.mktemp("short"), "short", "grpo.max_num_steps=2", "grpo.val_period=0",
               "policy.train_global_batch_size=16", "logger.rollouts_period=5", "loss_fn.reference_policy_kl_penalty=0")
    return d


def run_dir(path: Path, rewards: list[tuple[float, float]], rows: list[dict] | None = None, **config) -> Path:
    """A run directory as a run writes it: metrics.jsonl (mean and std of the train reward per step), config.yaml,
    and rollouts/step_000001.jsonl where `rows` are given."""
    import yaml

    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i + 1, "train/reward_mean": m, "train/reward_std": s}) + "\n"
        for i, (m, s) in enumerate(rewards)))
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    if rows is not None:
        (path / "rollouts").mkdir()
        (path / "rollouts" / "step_000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_reward_band_stays_within_the_rewards_seen(two_runs, tmp_path):
    rows = [{"problem": "p", "reward": r, "verdict": "pass" if r == 1 else "fail"} for r in (0.0, 0.0, 0.0, 1.0)]
    d = run_dir(tmp_path / "r", [(0.25, 0.43), (0.1, 0.3), (0.9, 0.3)], rows)
    (band, line), = [figures([load_run(d)])[0]["figure"]["data"]]
    assert min(band["y"]) == 0.0 and max(band["y"]) == 1.0  # mean +- std would run from -0.2 to 1.2
    assert "within the rewards seen, 0 to 1" in line["name"]
    assert band["y"][:3] == pytest.approx([0.68, 0.4, 1.0]) and band["y"][3:] == pytest.approx([0.6, 0.0, 0.0])
    for d in two_runs:  # real runs: the band within their rollouts' rewards
        r = load_run(d)
        seen = [row["reward"] for rows in r.rollouts.values() for row in rows if row["reward"] is not None]
        band = next(t for t in figures([r])[0]["figure"]["data"] if t.get("fill"))
        assert min(seen) - 1e-9 <= min(band["y"]) and max(band["y"]) <= max(seen) + 1e-9
    alone = figures([load_run(run_dir(tmp_path / "none", [(0.1, 0.3)]))])[0]["figure"]["data"]
    assert alone[1]["name"] == "reward (mean; band: +- std, no rollouts to bound it)"  # nothing to bound it: said


def test_kl_and_clip_charts_say_when_the_config_makes_them_zero(short_run, two_runs):
    charts = {c["id"]: c for c in figures([load_run(short_run)])}
    assert charts["clip"]["figure"] is None  # every clip fraction is 0 by construction: a note, no flat chart
    assert charts["clip"]["notes"] == ["train/clip_frac, train/clip_frac_low, train/clip_frac_high: not active in this "
                                       "run (one optimizer step per rollout: policy.train_global_batch_size 16 >= 4 "
                                       "prompts x 4 generations, so the ratio is 1)"]
    assert charts["kl"]["notes"] == ["train/kl: not active in this run (loss_fn.reference_policy_kl_penalty is 0: no "
                                     "KL penalty)"]
    kl_lines = [t["name"] for t in (charts["kl"]["figure"] or {"data": []})["data"]]
    assert "train/kl" not in kl_lines  # (train/sampler_kl, measured, stays)
    both = {c["id"]: c for c in figures([load_run(p) for p in two_runs])}  # 2 optimizer steps per rollout: clipping
    assert both["clip"]["figure"] is not None and both["clip"]["notes"] == []
    assert any(t["name"].endswith("train/clip_frac") for t in both["clip"]["figure"]["data"])


def test_kl_and_clip_notes_follow_the_config(tmp_path):
    from execrl.report.charts import inactive

    on = load_run(run_dir(tmp_path / "on", [(0.5, 0.1)],
                          grpo={"num_prompts_per_step": 4, "num_generations_per_prompt": 4},
                          policy={"train_global_batch_size": 8}, loss_fn={"reference_policy_kl_penalty": 0.01}))
    assert inactive(on) == {}
    off = load_run(run_dir(tmp_path / "off", [(0.5, 0.1)], loss_fn={"reference_policy_kl_penalty": 0,
                                                                    "disable_ppo_ratio": True}))
    assert set(inactive(off)) == {"train/kl", "train/clip_frac", "train/clip_frac_low", "train/clip_frac_high"}
    assert inactive(load_run(run_dir(tmp_path / "unknown", [(0.5, 0.1)]))) == {}  # no config: no claim


def test_the_header_shows_the_train_rewards_first_and_last_means(short_run, tmp_path):
    from execrl.report.page import render

    values = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.0]  # the last step alone: 0.000
    page = render([load_run(run_dir(tmp_path / "r", [(v, 0.1) for v in values]))])
    assert "train reward, mean of the first k steps -> last k" in page and "last train reward" not in page
    assert "<td>0.200 -&gt; 0.680 (k = 5)</td>" in page  # (0 + .1 + .2 + .3 + .4) / 5 -> (.7 + .8 + .9 + 1 + 0) / 5
    three = render([load_run(run_dir(tmp_path / "three", [(0.2, 0.1), (0.4, 0.1), (0.9, 0.1)]))])
    assert "<td>0.200 -&gt; 0.900 (k = 1)</td>" in three
    real = load_run(short_run)
    rewards = [m["train/reward_mean"] for m in real.metrics if "train/reward_mean" in m]
    assert len(rewards) == 2 and f"<td>{rewards[0]:.3f} -&gt; {rewards[1]:.3f} (k = 1)</td>" in render([real])


def test_a_run_without_rollouts_says_when_they_are_written(short_run, tmp_path):
    assert not (short_run / "rollouts").exists()
    dom, log = open_page(write_report([short_run], tmp_path / "report.html"))
    assert not console_errors(log), console_errors(log)
    count = dom[dom.index('<span id="count">'):dom.index("</span>", dom.index('<span id="count">'))]
    assert "0 of 0 rollouts" not in count
    assert "logger.rollouts_period = 5 steps" in count and "this run ran 2 steps" in count, count
    from execrl.report.page import no_rollouts_hint

    assert "logger.rollouts_period is 0" in no_rollouts_hint(load_run(run_dir(tmp_path / "never", [(0.5, 0.1)],
                                                                             logger={"rollouts_period": 0})))


def test_truncated_rollouts_name_the_limit_that_cut_them(two_runs, tmp_path):
    # the trainer's rows: `truncated` is the sampler's "no EOS or stop string within max_new_tokens (or the
    # context)"; a completion that ended on EOS is never marked
    for d in two_runs:
        for f in (d / "rollouts").glob("*.jsonl"):
            for row in map(json.loads, f.read_text().splitlines()):
                assert not (row["truncated"] and row["completion"].endswith("<|im_end|>")), row
    rows = [{"problem": "p1", "reward": 1.0, "verdict": "pass", "turns": 1, "truncated": True,
             "completion": "```python\nprint(1)\n```", "messages": []},
            {"problem": "p2", "reward": 1.0, "verdict": "pass", "turns": 1, "truncated": False,
             "completion": "```python\nprint(2)\n```<|im_end|>", "messages": []},
            # (a long-context hunt's find: a turn the context's end cut, and an episode whose environment answer
            # had no room, were both labelled "cut at max_new_tokens")
            {"problem": "p3", "reward": 0.0, "verdict": "no_code", "turns": 1, "truncated": True,
             "cut_by": "context", "completion": "x", "messages": []},
            {"problem": "p4", "reward": 0.0, "verdict": "fail", "turns": 1, "truncated": True, "cut_by": "answer",
             "completion": "<code>print(*range(9999))</code>", "messages": []},
            {"problem": "p5", "reward": 0.0, "verdict": "fail", "turns": 2, "truncated": True,
             "cut_by": "max_new_tokens", "completion": "x", "messages": []}]
    d = run_dir(tmp_path / "r", [(1.0, 0.0)], rows,
                policy={"max_total_sequence_length": 192, "generation": {"max_new_tokens": 64}})
    dom, log = open_page(write_report([d], tmp_path / "report.html"))
    assert not console_errors(log), console_errors(log)
    listed = dom[dom.index('<div id="rows">'):dom.index("</section>", dom.index('<div id="rows">'))]
    summaries = re.findall(r"<summary>(.*?)</summary>", listed)
    assert len(summaries) == 5 and ">truncated<" not in listed and " truncated<" not in listed
    assert "p1" in summaries[0] and "cut at max_new_tokens (64)" in summaries[0]  # (a run before cut_by)
    assert "p2" in summaries[1] and "cut at" not in summaries[1]
    assert "p3" in summaries[2] and "cut at the context (192)" in summaries[2]
    assert "p4" in summaries[3] and "ended: no room for the environment's answer (context 192)" in summaries[3]
    assert "p5" in summaries[4] and "cut at max_new_tokens (64)" in summaries[4]


def test_a_nan_metric_does_not_blank_the_page():
    """A step's NaN metric was written into the page's data as a bare NaN, which JSON.parse refuses: the page's
    script never ran (no charts, no rollouts)."""
    from execrl.report.page import _script_json

    text = _script_json({"train/entropy": [1.0, float("nan"), float("inf")], "x": "<script>"})
    assert json.loads(text) == {"train/entropy": [1.0, None, None], "x": "<script>"} and "NaN" not in text


def test_a_run_of_long_answers_keeps_the_page_within_its_budget(tmp_path):
    """Nothing bounded the rollouts' total: 20 steps x 256 rows of 12K-character answers made a 164 MiB page (minutes
    to open, 1 GB to write, at every validation). Fewer rows per step fit a byte budget; non-ASCII text is UTF-8 on
    the page (\\uXXXX took 6 bytes a character), and a lone surrogate cannot break the file."""
    from execrl.report import page

    text = "\ufffd" * 4000 + "x" * 8000
    rows = [{"prompt": "p", "completion": text, "messages": [{"role": "assistant", "content": text}], "reward": 1.0}
            for _ in range(64)]
    rows[0]["completion"] += "\ud800"
    run = run_dir(tmp_path / "long", [(0.5, 0.1)], rows)
    shown = page.shown_rollouts([load_run(run)], budget=1 << 20)
    kept = shown["long"]["1"]
    assert len(kept) == 16 and kept == load_run(run).rollouts[1][:16]  # (64 -> 32 -> 16 rows: within 1 MiB)
    out = page.write_report([run], tmp_path / "r.html")
    assert out.stat().st_size < 20 << 20 and "\\ufffd" not in out.read_text()


def test_answers_of_markup_are_measured_as_the_page_escapes_them(tmp_path):
    """A '<' is 6 bytes on the page (\\u003c) and was measured as 1: 20 steps of answers of '<' made a 41 MiB page."""
    from execrl.report import page

    rows = [{"prompt": "p", "completion": "<" * 2000, "reward": 1.0} for _ in range(64)]
    run = run_dir(tmp_path / "markup", [(0.5, 0.1)], rows)
    kept = page.shown_rollouts([load_run(run)], budget=1 << 18)["markup"]["1"]
    assert len(kept) == 16  # (64 -> 32 -> 16 rows of ~12 KB each on the page: within 256 KiB)
    assert len(page._script_json(kept).encode()) < 1 << 18


def test_a_run_resumed_after_a_stop_is_not_read_as_interrupted(tmp_path):
    """A run stopped by a signal at step 1 and resumed to its end (a record of before the marker was dropped on
    resume): the page said "(interrupted)"; a marker at the last step still says so."""
    from execrl.report import page

    run = run_dir(tmp_path / "resumed", [(0.5, 0.1), (0.6, 0.1)], [])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(['{"step": 0, "eval/pass@1": 0.25}', lines[0],
                                                  '{"step": 1, "run/interrupted": 1.0}', *lines[1:],
                                                  '{"step": 2, "eval/pass@1": 0.5}']) + "\n")
    text = page.write_report([run], tmp_path / "r.html").read_text()
    assert "<td>2</td>" in text and "<td>0.250 -&gt; 0.500</td>" in text
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "run/interrupted": 1.0}\n')
    assert "<td>2 (interrupted)</td>" in page.write_report([run], tmp_path / "r.html").read_text()


def test_a_step_of_many_rollouts_is_read_only_as_far_as_the_page_shows_it(tmp_path):
    """Every row of 20 steps' files was parsed (and every shown row encoded to size it) though the page holds at most
    MAX_ROWS_PER_STEP of a step: a step's first rows are read; a row holding U+2028 or invalid UTF-8 is one row."""
    from execrl.report.runs import MAX_ROWS_PER_STEP

    rows = [{"problem": f"p{i}", "reward": 1.0, "completion": "a\u2028b"} for i in range(MAX_ROWS_PER_STEP + 44)]
    d = run_dir(tmp_path / "many", [(1.0, 0.0)], rows)
    f = d / "rollouts" / "step_000001.jsonl"
    f.write_bytes(f.read_bytes().replace("\\u2028".encode(), "\u2028".encode()).replace(b'"p1"', b'"p\xff"', 1))
    got = load_run(d).rollouts[1]
    assert len(got) == MAX_ROWS_PER_STEP and got[1]["problem"] == "p\ufffd" and got[2]["completion"] == "a\u2028b"
    # the reward band still reads every row's reward (a rare one past the rows shown, and none from a row's text)
    rows[-1] = {**rows[-1], "reward": -0.5, "completion": 'a "reward": -9, b'}
    d = run_dir(tmp_path / "rare", [(1.0, 0.1)], rows)
    assert load_run(d).rewards_seen == (-0.5, 1.0) and reward_range(load_run(d)) == (-0.5, 1.0)


def test_an_eval_curve_over_two_validation_sets_says_so(tmp_path):
    """A resume that changed grpo.max_val_samples: the summary compared pass@1 on 16 and on 32 problems as one."""
    from execrl.report.page import _summary
    from execrl.report.runs import RunData

    metrics = [{"step": 0, "eval/pass@1": 0.25, "eval/num_problems": 16}, {"step": 1, "train/reward_mean": 0.5},
               {"step": 2, "eval/pass@1": 0.188, "eval/num_problems": 32}]
    assert "on 16 and 32 problems: not one validation set" in _summary([RunData("r", tmp_path, {}, metrics)], [])
    metrics[-1]["eval/num_problems"] = 16
    assert "not one validation set" not in _summary([RunData("r", tmp_path, {}, metrics)], [])
    # (a hunt's find) a resume onto another validation set of the same size was joined without a word
    metrics[0]["eval/problem_set"], metrics[-1]["eval/problem_set"] = 1234, 5678
    assert "on two sets of 16 problems" in _summary([RunData("r", tmp_path, {}, metrics)], [])
    metrics[-1]["eval/problem_set"] = 1234
    # (a record's find) one that changed policy.generation.val_temperature: greedy, then at 1.5, read as a collapse
    metrics[0]["eval/temperature"], metrics[-1]["eval/temperature"] = 0.0, 1.5
    assert "sampled at temperature 0 and 1.5: not one validation setting" in _summary(
        [RunData("r", tmp_path, {}, metrics)], [])


def test_the_summary_says_what_kind_of_run_it_was(tmp_path):
    """(A hunt's find) A single run's page named only its model: not LoRA, async, guided decoding or a reward model."""
    from execrl.report.page import _summary, setup_of
    from execrl.report.runs import RunData

    assert setup_of({}) == "full fine-tuning"
    config = {"policy": {"lora": {"enabled": True, "dim": 16}, "generation": {"guided_decoding": {"regex": "a+"}}},
              "grpo": {"async_grpo": {"enabled": True, "max_trajectory_age_steps": 1}, "max_rollout_turns": 3},
              "env": {"multi_turn": {"kind": "interpreter"}, "reward_model": {"enabled": True, "model_name": "rm"}}}
    said = "LoRA r=16, async (rollouts up to 1 step old), interpreter, up to 3 turns, guided decoding, reward model rm"
    assert setup_of(config) == said
    assert said in _summary([RunData("r", tmp_path, config, [{"step": 1, "train/reward_mean": 0.5}])], [])
    assert setup_of({"policy": "x", "grpo": {"async_grpo": [1]}, "env": None}) == "full fine-tuning"  # (hand-edited)


def test_a_hand_edited_or_half_written_run_directory_still_makes_its_page(two_runs, tmp_path):
    """Rows a run never writes (a metrics line without a step, a string for a number, a rollout whose messages are a
    string, a line that is not an object), a stray file among the rollouts, config sections that are not mappings:
    each was a traceback of `execrl report` or a blank page. Now each unreadable line is skipped and counted on the
    page, a field of an unexpected type is shown as text, and the charts draw. A metric key or run name holding
    markup is shown as written (it was a live link in the legend), and a right-to-left override is shown as its
    code point. A config.yaml that is not YAML is one error naming it."""
    import yaml

    copy = tmp_path / "run"
    shutil.copytree(two_runs[0], copy)
    link = '<a href="https://evil.example/">CLICK</a>'
    with (copy / "metrics.jsonl").open("a") as f:
        for row in ([1, 2], 5, {"train/reward_mean": 0.5}, {"step": "3", "train/reward_mean": 0.5},
                    {"step": 3, "eval/pass@1": None, "train/reward_mean": "0.5", f"train/reward/{link}": 0.3}):
            f.write(json.dumps(row) + "\n")
    last = sorted((copy / "rollouts").glob("*.jsonl"))[-1]
    rows = [json.loads(x) for x in last.read_text().splitlines()]
    rows[0]["messages"], rows[1]["tests"], rows[2]["parts"] = "hello", "fail", [1]
    rows[3]["completion"] = "x = 1  # \u202e\nprint(x)"
    last.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[1, 2, 3]\n" + json.dumps(rows[0])[:40])
    (copy / "rollouts" / "step_abc.jsonl").write_text("{}\n")
    config = yaml.safe_load((copy / "config.yaml").read_text())
    (copy / "config.yaml").write_text(yaml.safe_dump({**config, "loss_fn": 5, "policy": None}))
    page = write_report([copy], tmp_path / "report.html")
    html_text = page.read_text()
    assert "metrics.jsonl: 4 unreadable lines skipped" in html_text and f"{last.name}: 2 unreadable lines" in html_text
    dom, log = open_page(page, f"#step={int(last.stem.split('_')[-1])}")
    body = dom[dom.index("<body"):dom.index(">", dom.index("<body"))]
    assert not console_errors(log) and "data-browser-error" not in body, (console_errors(log), body)
    assert f'data-rows-shown="{len(rows)}"' in body and "data-charts-blank=\"0\"" in body, body
    assert 'href="https://evil.example/"' not in dom.replace('&lt;a href="https://evil.example/"&gt;', "")  # (no link)
    assert '>train/reward/&lt;a href="https://evil.example/"&gt;CLICK&lt;/a&gt;</text>' in dom  # (the legend: as written)
    assert "&lt;U+202E&gt;" in dom
    (copy / "config.yaml").write_text("policy: [unclosed")
    with pytest.raises(ValueError, match="config.yaml is not YAML"):
        write_report([copy], tmp_path / "again.html")


def test_a_hostile_run_directory_makes_a_page_and_shows_its_text_as_written(tmp_path):
    """Each was a traceback, a hang or a page of gigabytes: a line nested 100,000 deep, an integer of 5,000 digits (or
    one past a float), a reward that is no number past the rows the page reads, logger.rollouts_period a mapping, a
    FIFO as a step's file, a config.yaml of nested aliases (ten of ten: 166 MB). A model name's U+202E turned the
    summary's text around (it read as a score), and a run named toString showed a JavaScript function as its count."""
    import yaml

    from execrl.report.runs import MAX_ROWS_PER_STEP

    row = {"problem": "p", "verdict": "pass", "prompt": "q", "completion": "a", "reward": 1.0}
    a = run_dir(tmp_path / "a", [(0.5, 0.1)], [row] * MAX_ROWS_PER_STEP,
                policy={"model_name": "Qwen \u202e7.0 = 1@ssap lave\u202c"}, logger={"rollouts_period": {"a": 1}})
    with (a / "metrics.jsonl").open("a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n" + '{"step": 2, "x": ' + "9" * 5000 + "}\n")
        f.write(json.dumps({"step": 3, "eval/pass@1": 10 ** 400, "train/reward_mean": 0.5}) + "\n")
    with (a / "rollouts" / "step_000001.jsonl").open("a") as f:
        f.write('{"reward": 1.2.3}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    os.mkfifo(a / "rollouts" / "step_000002.jsonl")
    html_text = write_report([a], tmp_path / "a.html").read_text()
    assert "metrics.jsonl: 2 unreadable lines skipped" in html_text and "\u202e" not in html_text
    assert "Qwen &lt;U+202E&gt;7.0" in html_text
    b = run_dir(tmp_path / "b", [(0.5, 0.1)], policy={"model_name": "m"})
    (b / "config.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n")
    with pytest.raises(ValueError, match="alias"):
        write_report([a, b], tmp_path / "ab.html")
    named = run_dir(tmp_path / "toString", [(0.5, 0.1)], [row], policy={"model_name": "m"})
    (named / "config.yaml").write_text(yaml.safe_dump({"logger": {"rollouts_period": 1}}))
    dom, log = open_page(write_report([named], tmp_path / "t.html"))
    assert '<span id="count">1 of 1 rollouts</span>' in dom and not console_errors(log), console_errors(log)


def test_a_self_play_runs_roles_have_charts_of_their_own(tmp_path):
    """(A review's find) a self-play run's per-role numbers (train/<game>/<role>/win_rate, its return and baseline,
    its illegal moves), what the run's last lines print, were in no chart."""
    from execrl.report import runs as report_runs

    rows = [{"step": s, "train/reward_mean": 0.0, "train/tictactoe/X/win_rate": 0.1 * s,
             "train/tictactoe/O/win_rate": 0.2, "train/tictactoe/X/baseline": 0.05, "train/tictactoe/X/reward_mean": 0.3,
             "train/tictactoe/X/illegal_rate": 0.0, "train/tictactoe/X/moves_mean": 4.0} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    charts = {c["id"]: c for c in figures([report_runs.load_run(tmp_path)])}
    names = {c: sorted(t["name"] for t in charts[c]["figure"]["data"]) for c in ("roles", "role-returns", "role-moves")}
    assert names["roles"] == ["train/tictactoe/O/win_rate", "train/tictactoe/X/win_rate"], names
    assert "train/reward_mean" not in names["role-returns"] and len(names["role-returns"]) == 2
    assert len(names["role-moves"]) == 2


def test_a_field_nested_hundreds_deep_and_a_date_in_the_config_still_make_a_page(tmp_path):
    """(An attack's finds) a rollout row with an extra field nested 500 deep (1 KB; json reads it) ended `execrl
    report` in a RecursionError, and two runs whose hand-edited config.yaml differed in a date (2024-01-01) in a
    TypeError (a date is no JSON). The page keeps only the fields it reads; a date stays its text."""
    row = {"problem": "p", "verdict": "pass", "prompt": "q", "completion": "a", "reward": 1.0,
           "extra": json.loads("[" * 600 + "]" * 600), "messages": [{"role": "user", "content": [[[1]]]}]}
    a = run_dir(tmp_path / "a", [(0.5, 0.1)], [row], logger={"rollouts_period": 1}, note="2024-01-01")
    b = run_dir(tmp_path / "b", [(0.5, 0.1)], [row], logger={"rollouts_period": 1}, note="2024-02-02")
    for path in (a, b):  # (unquoted, as a hand-edited file has it)
        (path / "config.yaml").write_text((path / "config.yaml").read_text().replace("'", ""))
    page = write_report([a, b], tmp_path / "ab.html").read_text()
    assert "2024-01-01" in page and "2024-02-02" in page and "[[[1]]]" in page


def test_the_pages_highlighting_is_linear_in_a_line_of_open_strings(tmp_path):
    """A 20,000-character line of escaped quotes took the page's highlighter 262 ms a row (an open string scanned
    again from each quote): 256 such rows loaded in 48 s where ordinary code took 13 s. Here 100,000 characters, a
    complexity check with a wide margin, not a timing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    script = tmp_path / "hl.js"
    page_js = Path(__file__).parents[2] / "src/execrl/report/page.js"
    script.write_text(f"""const src = require("fs").readFileSync({json.dumps(str(page_js))}, "utf8");
const esc = (s) => String(s), KEYWORDS = new Set();
eval(src.slice(src.indexOf("function highlight"), src.indexOf("function rowsOf")));
const times = [];
for (const code of ["x = 1\\n".repeat(16666), '"' + '\\\\"'.repeat(50000), "'" + "\\\\'".repeat(50000),
                    '\"\"\"y\\n'.repeat(25000)]) {{
  const t = process.hrtime.bigint(); highlight(code); times.push(Number(process.hrtime.bigint() - t) / 1e6);
}}
console.log(JSON.stringify(times));
""")
    times = json.loads(subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60).stdout)
    assert max(times[1:]) < 10 * times[0] + 200, times  # (open strings cost about what ordinary code does; before,
    # seconds: quadratic in the line)


def test_a_resumed_runs_earlier_configs_are_named(tmp_path):
    """(A record's find) the page showed config.yaml alone: a run resumed with other validation and logging settings
    read as if every step had run them (an eval point at step 2 that val_period 3 cannot make)."""
    import yaml

    from execrl.report.runs import load_run

    d = run_dir(tmp_path / "res", [(0.1, 0.1)] * 6, grpo={"val_period": 3, "max_val_samples": 4})
    (d / "config.to_step_000003.yaml").write_text("# resumed from elsewhere\n" + yaml.safe_dump(
        {"grpo": {"val_period": 2, "max_val_samples": 4}}))
    notes = load_run(d).notes
    assert notes == ["steps up to 3 ran config.to_step_000003.yaml: grpo.val_period 2 -> 3"]


def test_a_run_named_twice_is_drawn_once(two_runs, tmp_path):
    """(A hunt's find) `execrl report RUN RUN/` overlaid the run on itself."""
    a, _ = two_runs
    pages = []
    for runs in ([str(a)], [str(a), f"{a}/"]):
        out = tmp_path / f"{len(runs)}.html"
        done = subprocess.run([sys.executable, "-m", "execrl.cli", "report", *runs, "--out", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        pages.append(out.read_text())
    assert pages[1].count(a.name) == pages[0].count(a.name) > 0


def test_two_runs_of_one_name_under_one_parents_name_keep_their_own_rows(two_runs, tmp_path):
    """(A hunt's find) exp/alice/runs/default beside exp/bob/runs/default: both were named runs/default, and the page,
    which keys curves and rollouts by the name, showed bob's rollouts under both."""
    from execrl.report.runs import unique_names

    for who, run_dir in zip(("alice", "bob"), two_runs):
        shutil.copytree(run_dir, tmp_path / who / "runs" / "default")
    runs = [tmp_path / who / "runs" / "default" for who in ("alice", "bob")]
    assert unique_names(runs) == ["alice/runs/default", "bob/runs/default"]
    assert unique_names([Path("/x/a/r1"), Path("/y/b/r1"), Path("/z/c")]) == ["a/r1", "b/r1", "c"]
    out = tmp_path / "both.html"
    done = subprocess.run([sys.executable, "-m", "execrl.cli", "report", *map(str, runs), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "alice/runs/default" in page and "bob/runs/default" in page
