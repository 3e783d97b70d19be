"""`execrl eval` end to end: a tiny local model on MBPP and GSM8K, and files of completions made elsewhere."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import shared_data


def run(*args):
    return subprocess.run([sys.executable, "-m", "execrl.cli", "eval", *map(str, args)], capture_output=True,
                          text=True, timeout=600)


def passk(n, c, k):
    return 1 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("dataset", ["mbpp", "gsm8k"])
def test_eval_a_local_model_directory(tiny_model_dir, tmp_path, dataset):
    shared_data(dataset)
    out = tmp_path / "out"
    proc = run("--model", tiny_model_dir, "--dataset", dataset, "--split", "test", "--limit", 3, "--samples", 4,
               "--k", "1,2", "--max-new-tokens", 24, "--out", out, "--workers", 2)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary["problems"] == 3 and summary["samples"] == 12 and len(rows) == 3
    assert all(len(r["completions"]) == 4 for r in rows)
    good = "pass" if dataset == "mbpp" else "correct"
    for k in (1, 2):  # the reported numbers follow from the outcomes of the completions it produced
        expected = sum(passk(4, r["outcomes"].count(good), k) for r in rows) / 3
        assert summary[f"pass@{k}"] == pytest.approx(expected)
    assert "pass@1" in proc.stdout


def test_eval_completions_from_a_file(tmp_path):
    rows = [json.loads(line) for line in shared_data("mbpp", "mbpp.jsonl").read_text().splitlines()]
    ref = {r["task_id"]: "```python\n" + r["code"] + "\n```" for r in rows}
    wrong = "```python\ndef remove_Occ(s, ch):\n    return s\n```"
    completions = [
        ("mbpp/11", ref[11]), ("mbpp/11", ref[11]),  # 2 of 2
        ("mbpp/12", ref[12]), ("mbpp/12", "```python\ndef sort_matrix(m):\n    return m\n```"),  # 1 of 2
        ("mbpp/13", wrong), ("mbpp/13", "no code at all"),  # 0 of 2
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps({"problem_id": p, "completion": c}) for p, c in completions))
    out = tmp_path / "out"
    proc = run("--completions", path, "--dataset", "mbpp", "--split", "test", "--samples", 2, "--k", "1,2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass@1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert summary["pass@2"] == pytest.approx((1 + 1 + 0) / 3)
    assert summary["outcomes"] == {"pass": 3, "fail": 1, "runtime_error": 1, "no_code": 1}  # 13 names no such function


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_while_grading_ends_at_once_with_a_line_not_a_traceback(tmp_path, stop):
    """Ctrl-C in `execrl eval`'s grading waited for every queued program to run to its limit (here 8 x 30 s on 2
    workers: two minutes), then printed a traceback. Now it stops the sandboxes, says so, and exits 130. SIGTERM (a
    scheduler's stop) ended the process at once without a word (and sampled completions with it): it is Ctrl-C."""
    import signal
    import threading
    import time

    shared_data("mbpp", "mbpp.jsonl")
    slow = "```python\nimport time\ntime.sleep(60)\n```"
    path = tmp_path / "slow.jsonl"
    path.write_text("".join(json.dumps({"problem_id": f"mbpp/{i}", "completion": slow}) + "\n" for i in range(11, 15)
                            for _ in range(2)))
    script = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # (as a terminal's)
              "from execrl.cli import main; sys.argv = ['execrl', *sys.argv[1:]]; sys.exit(main())")
    proc = subprocess.Popen([sys.executable, "-c", script, "eval", "--completions", str(path), "--dataset", "mbpp",
                             "--split", "test", "--samples", "2", "--k", "1", "--workers", "2", "--timeout", "30",
                             "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(line.startswith("sandbox:") for line in lines) and time.monotonic() < deadline:
        time.sleep(0.2)  # (the sandboxes started: grading begins)
    time.sleep(3)  # (two programs running, six queued)
    start = time.monotonic()
    proc.send_signal(getattr(signal, stop))
    proc.wait(timeout=120)
    reader.join(10)
    err = "".join(lines)
    assert proc.returncode == 130 and time.monotonic() - start < 20, err
    assert "interrupted: no results written" in err and "Traceback" not in err


def test_bare_code_completions_get_a_warning_and_plain_grades_them(tmp_path):
    """A completions file of bare code (a base model's, MBPP's own solutions): the default code style finds no code in
    any, and says so with the fix; --code-style plain grades each whole completion. The table's title says how many
    samples each problem had, not --samples."""
    rows = [json.loads(line) for line in shared_data("mbpp", "mbpp.jsonl").read_text().splitlines()]
    code = {r["task_id"]: r["code"] for r in rows}
    path = tmp_path / "bare.jsonl"
    # (with their token counts, of a model sampled elsewhere under its own limit: --max-new-tokens, eval's own,
    # counted them as cut and hid the hint)
    path.write_text("\n".join(json.dumps({"problem_id": f"mbpp/{i}", "completion": code[i], "num_tokens": 700})
                              for i in (11, 12, 12)))
    proc = run("--completions", path, "--dataset", "mbpp", "--split", "test", "--samples", 2, "--k", "1,2",
               "--out", tmp_path / "fence")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "fence" / "summary.json").read_text())
    assert summary["outcomes"] == {"no_code": 3} and "samples_cut_at_max_new_tokens" not in summary
    assert "3 of 3 samples hold no code" in proc.stderr and "--code-style plain" in proc.stderr
    assert "cut at --max-new-tokens" not in proc.stderr
    assert "2 problems x 1-2 samples" in proc.stdout and "1 problems with fewer than 2 valid samples" in proc.stdout
    proc = run("--completions", path, "--dataset", "mbpp", "--split", "test", "--samples", 2, "--k", "1,2",
               "--code-style", "plain", "--out", tmp_path / "plain")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["outcomes"] == {"pass": 3}
    assert "hold no code" not in proc.stderr


def test_eval_completions_that_carry_their_own_tests_and_answers(tmp_path):
    rows = [{"id": "a", "completion": "```python\nprint(int(input()) + 1)\n```", "tests": {"inputs": ["1\n"], "outputs": ["2\n"]}},
            {"id": "b", "completion": r"so \boxed{7}", "answer": "7"},
            {"id": "c", "completion": r"so \boxed{8}", "answer": "7"}]
    path = tmp_path / "own.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    proc = run("--completions", path, "--dataset", "", "--out", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert "repeats its first" not in proc.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["pass@1"] == pytest.approx(2 / 3)
    assert summary["dataset"] == summary["split"] == ""  # (no split was read: it recorded --split's default, test)
    twice = tmp_path / "twice.jsonl"  # (a file joined to itself: each completion counted twice, without a word)
    twice.write_text(path.read_text() + "\n" + path.read_text())
    proc = run("--completions", twice, "--dataset", "", "--out", tmp_path / "o5")
    assert proc.returncode == 0 and "its second half repeats its first, row for row" in " ".join(proc.stderr.split())
    # an answer of null is none (it was a math problem whose reference is the text "None"); a language spelled
    # Python or C++ is the sandbox's python and cpp (such rows were refused)
    path.write_text(json.dumps({"id": "n", "completion": r"\boxed{None}", "answer": None}))
    proc = run("--completions", path, "--dataset", "", "--out", tmp_path / "o2")
    assert proc.returncode == 2 and "no tests or answer of its own" in proc.stderr
    for answer, said in (("", "is empty"), (True, "is a bool"), ([1, 2], "is a list")):  # (a hunt's find: "" scored
        path.write_text(json.dumps({"id": "x", "completion": r"\boxed{1}", "answer": answer}))  # 0 unsaid, true and
        proc = run("--completions", path, "--dataset", "", "--out", tmp_path / "o2")  # [1, 2] as Python writes them)
        assert proc.returncode == 2 and f"row 1: its 'answer' {answer!r} {said}" in proc.stderr, proc.stderr
    path.write_text(json.dumps({**rows[0], "language": "Python", "answer": None}))  # (a code row's unused answer
    proc = run("--completions", path, "--dataset", "", "--out", tmp_path / "o3")  # is not checked: a review's find)
    assert proc.returncode == 0 and json.loads((tmp_path / "o3" / "summary.json").read_text())["pass@1"] == 1.0
    # (a hunt's finds) --limit keeps the first problems of the file's own too (all were graded, limit recorded);
    # a file with nothing to grade is an error (it printed a table of 0 problems and exited 0); programs the sandbox
    # failed on, past half of them, are written and counted with a warning (eval stopped and wrote nothing)
    path.write_text("\n".join(json.dumps(r) for r in rows))
    proc = run("--completions", path, "--dataset", "", "--limit", 2, "--out", tmp_path / "o4")
    summary = json.loads((tmp_path / "o4" / "summary.json").read_text())
    assert proc.returncode == 0 and summary["problems"] == 2 and summary["pass@1"] == 1.0, proc.stderr
    assert "left out 1 completions of problems past --limit" in proc.stderr
    proc = run("--completions", path, "--dataset", "", "--temperature", 0.7, "--out", tmp_path / "o7")
    assert proc.returncode == 2 and "--temperature sets how a --model is sampled" in proc.stderr
    for flags in (["--system-prompt", "hello"], ["--max-new-tokens", 5], ["--guided-regex", "abc"],
                  ["--backend", "transformers", "--guided-regex", "abc"]):  # (a hunt's find: each ignored)
        proc = run("--completions", path, "--dataset", "", *flags, "--out", tmp_path / "o7")
        assert proc.returncode == 2 and f"{flags[0]} sets how a --model generates" in proc.stderr, proc.stderr
    # (a hunt's find) --out over its own input: results.jsonl replaced the completions, and the next run failed
    (tmp_path / "o8").mkdir()
    (tmp_path / "o8" / "results.jsonl").write_text(path.read_text())
    proc = run("--completions", tmp_path / "o8" / "results.jsonl", "--dataset", "", "--out", tmp_path / "o8")
    assert proc.returncode == 2 and "would write eval's results.jsonl" in proc.stderr, proc.stderr
    assert (tmp_path / "o8" / "results.jsonl").read_text() == path.read_text()
    proc = run("--completions", path, "--dataset", "", "--data-path", tmp_path, "--out", tmp_path / "o9")
    assert proc.returncode == 2 and "into --data-path" in proc.stderr and not (tmp_path / "o9").exists()
    (tmp_path / "empty.jsonl").write_text("")
    proc = run("--completions", tmp_path / "empty.jsonl", "--dataset", "", "--out", tmp_path / "o5")
    assert proc.returncode == 2 and "nothing to evaluate" in proc.stderr
    missing = {"id": "m", "completion": "```python\ndef f():\n    return 1\n```",
               "tests": {"asserts": ["assert winreg.QueryValue(f())"]}}
    path.write_text("\n".join(json.dumps({**missing, "id": f"m{i}"}) for i in range(2)) + "\n" + json.dumps(rows[0]))
    proc = run("--completions", path, "--dataset", "", "--out", tmp_path / "o6")
    summary = json.loads((tmp_path / "o6" / "summary.json").read_text())
    assert proc.returncode == 0 and summary["pass@1"] == 1.0 and "2 of 3 programs graded" in proc.stderr, proc.stderr
    # (a hunt's find) a C++ row with assert tests stopped the eval mid-grading, the rows graded before it lost
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**missing, "id": "cpp", "language": "cpp"}))
    proc = run("--completions", path, "--dataset", "", "--out", tmp_path / "o8")
    assert proc.returncode == 2 and "row 2: AssertTests need Python; cpp programs take stdin/stdout tests" in \
        " ".join(proc.stderr.split()), proc.stderr


def test_completions_mixing_the_datasets_problems_and_their_own_are_refused(tmp_path):
    """Two MBPP completions and a row with tests of its own were "3 of the 500 problems of mbpp/test" and one pass@1
    over the three, recorded as MBPP's. A multi-turn dataset's problems (a puzzle) were each "no_code", pass@1 0."""
    shared_data("mbpp")
    rows = [{"problem_id": "mbpp/11", "completion": "x"}, {"completion": "def f(x):\n    return 2",
                                                          "tests": {"asserts": ["assert f(1) == 2"]}}]
    (tmp_path / "mix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run("--completions", tmp_path / "mix.jsonl", "--dataset", "mbpp", "--split", "test", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "1 of its problems carry their own tests" in proc.stderr, proc.stderr
    (tmp_path / "p.jsonl").write_text(json.dumps({"problem_id": "sliding_puzzle/validation/0", "completion": "up"}))
    proc = run("--completions", tmp_path / "p.jsonl", "--dataset", "sliding_puzzle", "--split", "validation",
               "--out", tmp_path / "p")
    assert proc.returncode == 2 and "holds puzzle problems, played over turns" in proc.stderr, proc.stderr


def test_eval_errors_are_one_clear_line(tmp_path):
    (tmp_path / "one.jsonl").write_text(json.dumps({"prompt": "1+1?", "answer": "2"}))
    proc = run("--model", tmp_path / "nowhere", "--dataset", "jsonl", "--data-path", tmp_path / "one.jsonl",
               "--out", tmp_path / "o")
    assert proc.returncode == 2 and "no such directory" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "c.jsonl").write_text(json.dumps({"problem_id": "mbpp/99999", "completion": "x"}))
    proc = run("--model", "builtin:tiny-coder", "--samples", 1, "--k", "5", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "--k values" in proc.stderr
    proc = run("--model", "builtin:tiny-coder", "--grading-share", "2", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "--grading-share is a share of the sandbox's workers, in [0, 1]" in proc.stderr
    proc = run("--completions", tmp_path / "c.jsonl", "--grading-share", "0.3", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "--grading-share sets how a --model generates" in proc.stderr


def test_completions_for_unknown_problems_are_one_clear_line(tmp_path):
    shared_data("mbpp")
    (tmp_path / "c.jsonl").write_text(json.dumps({"problem_id": "mbpp/99999", "completion": "x"}))
    proc = run("--completions", tmp_path / "c.jsonl", "--dataset", "mbpp", "--split", "test", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "not in the dataset" in proc.stderr and "Traceback" not in proc.stderr
    # MBPP's own field (task_id) read as problem id '' "not in the dataset"
    (tmp_path / "t.jsonl").write_text(json.dumps({"task_id": 11, "completion": "x"}))
    proc = run("--completions", tmp_path / "t.jsonl", "--dataset", "mbpp", "--split", "test", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "row 1 has no \"problem_id\" (it has 'task_id'" in proc.stderr, proc.stderr


def test_eval_scores_the_built_in_task_like_any_registered_dataset(tmp_path):
    from execrl.tasks import load_problems

    problems, _ = load_problems("builtin:arith-code", "validation", count=3)
    completions = [(problems[0].id, problems[0].metadata["wrong_attempts"][0]["content"])]  # another operation's
    completions += [(p.id, p.metadata["reference_completion"]) for p in problems[1:]]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"problem_id": p, "completion": c}) for p, c in completions))
    proc = run("--completions", path, "--dataset", "builtin:arith-code", "--split", "validation", "--limit", 3,
               "--out", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["problems"] == 3 and summary["outcomes"] == {"pass": 2, "fail": 1}


def test_data_seed_poses_the_problems_a_training_run_evaluated(tmp_path):
    """The built-in default's own eval problems (grpo.seed 1) answered correctly: with --data-seed 1 eval poses those
    problems and every answer passes; with the loader's own seed the same ids are other problems."""
    from execrl.config import load_config
    from execrl.trainer.data import load_data

    val = load_data(load_config(None, []))[1][:8]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"problem_id": p.id, "completion": p.metadata["reference_completion"]})
                              for p in val))
    passes = {}
    for seed in (["--data-seed", 1], []):
        proc = run("--completions", path, "--dataset", "builtin:arith-code", "--split", "validation", *seed,
                   "--out", tmp_path / f"o{len(seed)}")
        assert proc.returncode == 0, proc.stderr
        passes[bool(seed)] = json.loads((tmp_path / f"o{len(seed)}" / "summary.json").read_text())["outcomes"]
    assert passes[True] == {"pass": 8} and passes[False].get("pass", 0) < 8
    # (a hunt's find) without --data-seed, summary.json names the loader's own seed that posed them (it said null)
    assert json.loads((tmp_path / "o0" / "summary.json").read_text())["ran"]["data_seed"] == 42
    assert json.loads((tmp_path / "o2" / "summary.json").read_text())["ran"]["data_seed"] == 1
    bad = run("--completions", path, "--dataset", "mbpp", "--split", "test", "--data-seed", 1, "--out", tmp_path / "b")
    assert bad.returncode == 2 and "--data-seed seeds a generated dataset" in bad.stderr
    # (a review's find) --limit counts a file's own problems apart: a mix of the dataset's and its own is still refused
    own = {"problem_id": "mine", "completion": "print(1)", "tests": {"inputs": [""], "outputs": ["1"]}}
    path.write_text(path.read_text() + "\n" + json.dumps(own))
    mixed = run("--completions", path, "--dataset", "builtin:arith-code", "--split", "validation", "--data-seed", 1,
                "--limit", 8, "--out", tmp_path / "m")
    assert mixed.returncode == 2 and "a pass@k over both is neither's" in mixed.stderr, mixed.stderr


def test_eval_with_guided_decoding_keeps_every_completion_to_the_grammar(tiny_model_dir, tmp_path):
    import re

    grammar = tmp_path / "block.lark"
    grammar.write_text('start: "```python\\nprint(" /[0-9]{1,3}/ ")\\n```"\n')
    out = tmp_path / "out"
    proc = run("--model", tiny_model_dir, "--dataset", "builtin:arith-code", "--split", "validation", "--limit", 4,
               "--samples", 2, "--temperature", 1.0, "--k", "1", "--max-new-tokens", 48, "--guided-grammar", grammar,
               "--out", out, "--workers", 2)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    texts = [c if isinstance(c, str) else c["completion"] for r in rows for c in r["completions"]]
    assert len(texts) == 8 and all(re.fullmatch(r"```python\nprint\([0-9]{1,3}\)\n```", t) for t in texts), texts
    bad = run("--model", tmp_path / "none", "--dataset", "builtin:arith-code", "--split", "validation", "--limit", 1,
              "--guided-regex", "(unclosed", "--out", tmp_path / "o2")  # (refused before the model is looked for)
    assert bad.returncode == 2 and "--guided-regex: the regex does not compile" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    bad = run("--model", tiny_model_dir, "--dataset", "builtin:arith-code", "--split", "validation", "--limit", 1,
              "--guided-json", "{not json", "--out", tmp_path / "o3")
    assert bad.returncode == 2 and "--guided-json" in bad.stderr
    # (a hunt's find) an inline schema over 255 bytes: OSError "File name too long", looking for it as a file
    from argparse import Namespace

    from execrl.cli import eval_constraint

    schema = {"type": "object", "properties": {f"field_{i}": {"type": "integer"} for i in range(30)}}
    args = Namespace(guided_regex=None, guided_json=json.dumps(schema), guided_grammar=None)
    assert eval_constraint(args) == ("json_schema", schema)


def test_eval_keeps_each_row_to_its_own_constraint(tiny_model_dir, tmp_path):
    import re

    rows = [{"id": "digits", "prompt": "How many?", "answer": "12", "guided_decoding": {"regex": "[0-9]{1,3}"}},
            {"id": "yesno", "prompt": "Is it?", "answer": "yes", "guided_decoding": {"regex": "(yes|no)"}},
            {"id": "broken", "prompt": "?", "answer": "1", "guided_decoding": {"regex": "(unclosed"}}]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "out"
    proc = run("--model", tiny_model_dir, "--dataset", "jsonl", "--data-path", data, "--samples", 3,
               "--temperature", 1.0, "--k", "1", "--max-new-tokens", 16, "--out", out, "--workers", 1)
    assert proc.returncode == 0, proc.stderr
    assert "unusable guided_decoding" in proc.stdout + proc.stderr  # the broken row, reported and skipped
    got = {r["problem_id"] if "problem_id" in r else r["id"]: [c if isinstance(c, str) else c["completion"]
                                                               for c in r["completions"]]
           for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(got) == {"digits", "yesno"}
    assert all(re.fullmatch("[0-9]{1,3}", t) for t in got["digits"]) and all(
        re.fullmatch("(yes|no)", t) for t in got["yesno"]), got


def test_eval_decodes_as_many_sequences_at_once_as_the_gpu_s_free_memory_holds_the_kv_cache_of():
    """--batch-size unset: 16 at a time on a CPU, as before; on a GPU as many as half the free memory holds the keys
    and values of (max_len tokens each), 16 to 512 (decoding 16 at a time left an H200 mostly idle)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from execrl.eval.generate import auto_slots, kv_bytes_per_token, slots_for

    config = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    assert kv_bytes_per_token(model) == 28 * 2 * 2 * 128 * 2  # Qwen2.5-1.5B's keys and values, bf16
    per_slot = kv_bytes_per_token(model) * 2560  # a 2,048-token prompt and 512 new
    assert slots_for(120e9, per_slot) == 512 and slots_for(20e9, per_slot) == 136 and slots_for(1e9, per_slot) == 16
    with torch.device("cpu"):
        assert auto_slots(Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32,
                                                       num_hidden_layers=1, num_attention_heads=2)), 2560) == 16


def test_eval_says_how_many_it_decodes_at_once(tiny_model_dir, tmp_path):
    shared_data("mbpp")
    proc = run("--model", tiny_model_dir, "--dataset", "mbpp", "--split", "test", "--limit", 3, "--samples", 2,
               "--max-new-tokens", 8, "--out", tmp_path / "out", "--workers", 2)
    assert proc.returncode == 0, proc.stderr
    assert "sampling, 6 at once" in proc.stderr  # 3 problems x 2 samples: fewer than the 16 a CPU decodes at once
    said = re.search(r"sampled 6 completions, (\d+) tokens, in [\d.]+ s: [\d,]+ tokens/s, 6 at once", proc.stderr)
    assert said and 6 <= int(said.group(1)) <= 6 * 8  # (the time and the speed it took)
    proc = run("--model", tiny_model_dir, "--dataset", "mbpp", "--split", "test", "--limit", 3, "--samples", 2,
               "--max-new-tokens", 8, "--out", tmp_path / "out2", "--workers", 2, "--batch-size", 4)
    assert proc.returncode == 0 and "sampling, 4 at once" in proc.stderr
    # a random model's 8 tokens end no answer: said, and counted (the hint was --code-style plain)
    cut = json.loads((tmp_path / "out2" / "summary.json").read_text())["samples_cut_at_max_new_tokens"]
    assert cut * 2 >= 6 and f"{cut} of 6 samples were cut at --max-new-tokens 8" in proc.stderr
    assert "--code-style plain" not in proc.stderr, proc.stderr


class Streaming:
    """The engine as on a GPU, where it hands each completion in as it ends (on a CPU it does not: the sandbox and
    the decode loop would share the cores)."""

    def __init__(self, build):
        self.build, self.made = build, []

    def __call__(self, *args, **kwargs):
        generator = self.build(*args, **kwargs)
        generator.streams = True
        self.made.append(generator)
        return generator


def test_eval_grades_code_while_sampling_as_it_would_after(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """Programs go to the sandbox as their samples end while the rest generate (2 slots for 12 samples): the same
    completions, outcomes and pass@k as grading after sampling, and the run says how many were graded meanwhile."""
    import execrl.eval.generate as generate
    from execrl.eval.run import EvalConfig, evaluate

    monkeypatch.setattr(generate, "build_generator", Streaming(generate.build_generator))
    program = r"```python\na, b = map\(int, input\(\)\.split\(\)\)\nprint\(a [-+*] b\)\n```"  # real programs to run
    runs = []
    for share in (0.5, 0.0):
        out = tmp_path / f"share{share}"
        cfg = EvalConfig(dataset="builtin:arith-code", split="validation", limit=4, samples=3, ks=(1, 2),
                         temperature=1.0, max_new_tokens=48, batch_size=2, out=str(out), workers=2,
                         grading_share=share, guided=("regex", program))
        summary = evaluate(cfg, model_name=tiny_model_dir)
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        runs.append((summary, rows, capsys.readouterr().err))
    (streamed, streamed_rows, said), (after, after_rows, said_after) = runs
    assert streamed_rows == after_rows and streamed == after
    assert set(streamed["outcomes"]) == {"pass", "fail"}  # the sandbox ran each program
    told = re.search(r"graded (\d+) of 12 programs while sampling \(1 of 2 sandbox workers meanwhile\)", said)
    assert told and 1 <= int(told.group(1)) < 12, said  # the last ones end with sampling
    assert "while sampling" not in said_after  # share 0: every program after sampling


def completions_eval(tmp_path, rows, dataset="", **settings):
    """execrl eval of a completions file, in process: its summary."""
    from execrl.eval.run import EvalConfig, evaluate

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return evaluate(EvalConfig(dataset=dataset, out=str(tmp_path / "o"), workers=1, **settings), completions=str(path))


def test_completions_rows_are_each_their_own_problem_and_checked(tmp_path):
    """Rows are grouped by the problem they name, never merged by a made-up id; an id whose rows carry different
    tests, one that names two problems of the dataset, and a bad num_tokens are refused; --max-tests holds for a
    row's own tests; rows of problems past --limit are left out; summary.json records what ran."""
    from execrl.tasks import DatasetError

    code = lambda v: f"```python\nprint({v})\n```"  # noqa: E731
    tests = lambda v: {"inputs": ["\n"], "outputs": [f"{v}\n"]}  # noqa: E731
    summary = completions_eval(tmp_path, [{"completion": code(2), "tests": tests(2)},  # (no id: "row 1")
                                          {"id": "row1", "completion": code(5), "tests": tests(5)}])
    assert (summary["problems"], summary["pass@1"]) == (2, 1.0)
    assert summary["ran"]["completions"] == str(tmp_path / "c.jsonl") and "temperature" not in summary["ran"]
    with pytest.raises(DatasetError, match="carries other tests"):
        completions_eval(tmp_path, [{"id": "a", "completion": code(2), "tests": tests(2)},
                                    {"id": "a", "completion": code(5), "tests": tests(5)}])
    two = {"id": "a", "completion": code(1), "tests": {"inputs": ["\n", "\n"], "outputs": ["1\n", "2\n"]}}
    assert completions_eval(tmp_path, [two], max_tests=1)["pass@1"] == 1.0
    assert completions_eval(tmp_path, [two])["pass@1"] == 0.0
    with pytest.raises(DatasetError, match="num_tokens must be a count"):
        completions_eval(tmp_path, [{**two, "num_tokens": "many"}])
    assert completions_eval(tmp_path, [{**two, "num_tokens": None}])["samples"] == 1
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": i, "prompt": "x", "tests": tests(v)}) + "\n" for i, v in
                            (("p", 1), ("q", 2))))
    rows = [{"problem_id": "p", "completion": code(1)}, {"problem_id": "q", "completion": code(2)}]
    summary = completions_eval(tmp_path, rows, "jsonl", data_path=str(data), limit=1)
    assert (summary["problems"], summary["pass@1"], summary["ran"]["limit"]) == (1, 1.0, 1)
    assert summary["ran"]["data_read_from"] == str(data)  # (a hub id's local copy of examples was recorded as null)
    data.write_text("".join(json.dumps({"id": "p", "prompt": "x", "tests": tests(v)}) + "\n" for v in (1, 2)))
    with pytest.raises(DatasetError, match="names more than one problem"):
        completions_eval(tmp_path, rows[:1], "jsonl", data_path=str(data))
    proc = run("--completions", tmp_path / "c.jsonl", "--model", "builtin:tiny-coder", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_eval_takes_the_dataset_names_training_takes(tmp_path):
    rows = [json.loads(line) for line in
            shared_data("nemotron_code_examples", "code_gen_example.jsonl").read_text().splitlines()[:1]]
    summary = completions_eval(tmp_path, [{"problem_id": f"nemotron/{rows[0]['hash_id']}", "completion": "x"}],
                               "nvidia/Nemotron-RL-coding-competitive_coding", split="train")
    assert summary["problems"] == 1 and summary["outcomes"] == {"no_code": 1}


def test_leetcode_stubs_run_below_the_harness_imports(tmp_path):
    """A correct completion of a LeetCode stub as posed (`nums: List[int]`, no import) passes, as under DeepSeek-Coder's
    harness, which puts typing's and collections' names above every program; a wrong one still fails."""
    shared_data("leetcode_contest")
    pid = "leetcode/weekly-contest-365-maximum-value-of-an-ordered-triplet-i"
    right = ("```python\nclass Solution:\n    def maximumTripletValue(self, nums: List[int]) -> int:\n"
             "        best = 0\n        n = len(nums)\n        for i in range(n):\n            for j in range(i + 1, n):\n"
             "                for k in range(j + 1, n):\n"
             "                    best = max(best, (nums[i] - nums[j]) * nums[k])\n        return best\n```")
    wrong = "```python\nclass Solution:\n    def maximumTripletValue(self, nums: List[int]) -> int:\n        return 0\n```"
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps({"problem_id": pid, "completion": c}) for c in (right, wrong)))
    out = tmp_path / "out"
    proc = run("--completions", path, "--dataset", "leetcode", "--samples", 2, "--k", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "summary.json").read_text())["outcomes"] == {"pass": 1, "fail": 1}


def test_a_row_cannot_replace_a_dataset_problems_tests(tmp_path):
    """A completions row naming a dataset problem and carrying tests of its own graded by those, and the result was
    saved as mbpp/test: a wrong solution with a weak assert scored pass@1 = 1.0. It is refused; rows whose problems
    are all their own are recorded as such, not as the dataset."""
    shared_data("mbpp")
    wrong = "```python\ndef remove_Occ(s, ch):\n    return s\n```"
    path = tmp_path / "shadow.jsonl"
    path.write_text(json.dumps({"problem_id": "mbpp/11", "completion": wrong,
                                "tests": {"asserts": ["assert remove_Occ('hello', 'l') is not None"]}}))
    proc = run("--completions", path, "--dataset", "mbpp", "--split", "test", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "is the dataset's, and the row carries other tests" in proc.stderr
    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({"id": "mine", "completion": "```python\nprint(2)\n```",
                               "tests": {"inputs": [""], "outputs": ["2\n"]}}))
    proc = run("--completions", own, "--out", tmp_path / "o2")  # (--dataset mbpp by default)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert (summary["dataset"], summary["pass@1"]) == ("", 1.0) and "no row of" in proc.stderr


def test_the_default_out_is_one_directory_per_model_and_dataset(tmp_path):
    """Before and after training, evals without --out wrote the same results/eval: the second replaced the first
    without a word."""
    own = tmp_path / "before.jsonl"
    own.write_text(json.dumps({"id": "mine", "completion": "```python\nprint(2)\n```",
                               "tests": {"inputs": [""], "outputs": ["2\n"]}}))
    after = tmp_path / "after.jsonl"
    after.write_text(own.read_text())
    for path in (own, after, after):
        proc = subprocess.run([sys.executable, "-m", "execrl.cli", "eval", "--completions", str(path), "--dataset", ""],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    found = sorted(p.parent.name for p in (tmp_path / "results" / "eval").rglob("summary.json"))
    assert len(found) == 2 and any("before" in f for f in found) and any("after" in f for f in found)
    assert "holds the results of an eval of" in proc.stderr  # (the third: the second's directory)


def test_problems_dropped_for_long_prompts_are_in_the_summary(tiny_model_dir, tmp_path):
    from execrl.eval.run import EvalConfig, evaluate

    data = tmp_path / "two.jsonl"
    data.write_text("\n".join(json.dumps({"id": i, "prompt": p, "answer": "2"})
                              for i, p in (("short", "1+1?"), ("long", "1+1? " * 200))))
    cfg = EvalConfig(dataset="jsonl", data_path=str(data), samples=1, ks=(1,), max_new_tokens=4, out=str(tmp_path / "o"),
                     max_prompt_tokens=64, workers=1)
    summary = evaluate(cfg, model_name=str(tiny_model_dir))
    assert summary["problems"] == 1 and summary["problems_dropped_long_prompt"] == 1
    # every prompt too long: it exited 0 with pass@1 null; now an error naming the flag (which was hard-coded)
    proc = run("--model", tiny_model_dir, "--dataset", "jsonl", "--data-path", data, "--max-prompt-tokens", 2,
               "--out", tmp_path / "none")
    assert proc.returncode == 2 and "nothing to evaluate" in proc.stderr and "--max-prompt-tokens" in proc.stderr


def test_a_loaders_options_from_the_command_line(tmp_path):
    """MBPP's prompt showed only the first of its three tests, and eval had no way to ask for all three (as Austin et
    al.'s prompt and published figures have them): --data-option prompt_tests=all, recorded in the summary."""
    from execrl.tasks import load_problems

    shared_data("mbpp")
    first = load_problems("mbpp", "test")[0][0].messages[0]["content"]
    every = load_problems("mbpp", "test", prompt_tests="all")[0][0]
    assert first.count("assert ") == 1 and every.messages[0]["content"].count("assert ") == 3
    assert "pass these tests:" in every.messages[0]["content"] and len(every.tests.asserts) == 3
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"problem_id": "mbpp/11", "completion": "x"}))
    proc = run("--completions", path, "--dataset", "mbpp", "--data-option", "prompt_tests=all", "--out", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["ran"]["data_options"] == {"prompt_tests": "all"}
    for bad, said in ((["--data-option", "prompt_test=all"], "mbpp takes no such option"),
                      (["--data-option", "prompt_tests"], "write KEY=VALUE"),
                      (["--data-option", "prompt_tests=some"], "prompt_tests must be 'first'"),
                      (["--data-option", "seed=3"], "seed is --data-seed")):
        proc = run("--completions", path, "--dataset", "mbpp", *bad, "--out", tmp_path / "b")
        assert proc.returncode != 0 and said in proc.stderr, proc.stderr


def test_dapo_answers_are_read_as_their_prompts_ask(tmp_path):
    """DAPO's prompts ask for an 'Answer:' line: eval read the last number with hf_math_verify (Answer: \\frac{1}{2}
    was 2, wrong) where a training run with NeMo RL's DAPO recipe scores it right; --math-verify-impl picks the check
    and summary.json records the one used. hf_math_verify compares values (0.5 is \\frac{1}{2}) and reads 2\\sqrt{2}
    whole, where math-verify's own search takes its 2 (a named difference: docs/configs.md); DAPO's check compares
    Minerva's normal form, text."""
    golds = ["\\frac{1}{2}", "2\\sqrt{2}", "204"]
    (tmp_path / "dapo").mkdir()
    (tmp_path / "dapo" / "train.jsonl").write_text("".join(json.dumps(
        {"prompt": [{"role": "user", "content": "Solve. The last line of your response should be of the form Answer: "
                     "$Answer"}], "reward_model": {"ground_truth": g}}) + "\n" for g in golds))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(
        {"problem_id": f"DAPOMath17K/train/{i}", "completion": f"Work.\nAnswer: {g}"}) + "\n"
        for i, g in enumerate(["0.5", *golds[1:]])))
    for flags, want, impl in (([], 2 / 3, "dapo_math_verify"), (["--math-verify-impl", "hf_math_verify"], 1.0,
                                                              "hf_math_verify")):
        out = tmp_path / impl
        proc = run("--completions", tmp_path / "c.jsonl", "--dataset", "DAPOMath17K", "--split", "train",
                   "--data-path", tmp_path / "dapo", "--out", out, *flags)
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["pass@1"] == pytest.approx(want) and summary["ran"]["math_verify_impl"] == [impl]


def test_guided_decoding_with_transformers_generate_is_refused_before_the_model_loads(tmp_path):
    """It failed after the model had loaded and sampling had begun, naming a training key (policy.generation.backend)
    that execrl eval has no flag for."""
    for regex in ("abc", ""):  # ('' is a regex too: a hunt's find, it passed as no constraint given)
        proc = run("--model", tmp_path / "none", "--dataset", "mbpp", "--backend", "transformers", "--guided-regex",
                   regex, "--out", tmp_path / "out")
        assert proc.returncode == 2 and "--guided-* needs the execrl engine" in proc.stderr, proc.stderr
    (tmp_path / "rows.jsonl").write_text(json.dumps({"id": "a", "prompt": "Say a.", "answer": "a",
                                                     "guided_decoding": {"regex": "a"}}) + "\n")
    proc = run("--model", tmp_path / "none", "--dataset", "jsonl", "--data-path", tmp_path / "rows.jsonl", "--backend",
               "transformers", "--out", tmp_path / "out2")
    assert proc.returncode != 0 and "guided_decoding constraint" in proc.stderr and "drop --backend" in proc.stderr


QWEN3_THINK = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is "
               "defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}")


def test_eval_of_a_checkpoint_poses_the_prompts_its_run_trained_on(tiny_model_dir, tmp_path, monkeypatch):
    """A run with policy.tokenizer.chat_template_kwargs={enable_thinking: false} (Qwen3) trained on prompts ending
    with the empty think block; its checkpoints' tokenizer forgot the kwargs and execrl eval posed thinking prompts.
    Now they are saved with the tokenizer (tokenizer_config.json) and read back; --chat-template-kwargs overrides."""
    import shutil

    import torch

    import execrl.eval.generate as generate
    from execrl.config import load_config
    from execrl.eval.run import EvalConfig, evaluate
    from execrl.prompts import render
    from execrl.trainer.policy import load_weights

    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "qwen3")
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    (model_dir / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": QWEN3_THINK}))
    (model_dir / "chat_template.jinja").unlink(missing_ok=True)
    cfg = load_config(None, [f"policy.model_name={model_dir}", "policy.device=cpu",
                             "policy.tokenizer.chat_template_kwargs={enable_thinking: false}"])
    model, tok = load_weights(cfg, torch.float32)
    model.save_pretrained(tmp_path / "policy")  # (as checkpoint.save writes a checkpoint's policy/)
    tok.save_pretrained(tmp_path / "policy")
    prompts = []
    monkeypatch.setattr(generate, "generate", lambda model, tok, conversations, samples, *a, **k: prompts.extend(
        render(m, tok) for m in conversations) or [[("", 0, False)] * samples for _ in conversations])
    for given, think in ((None, False), ({}, True)):
        prompts.clear()
        summary = evaluate(EvalConfig(dataset="builtin:arith-code", split="validation", limit=2, workers=1,
                                      out=str(tmp_path / "o"), **({} if given is None else
                                                                    {"chat_template_kwargs": given})),
                           model_name=str(tmp_path / "policy"))
        assert len(prompts) == 2 and all(p.endswith("<think>\n\n</think>\n\n") != think for p in prompts), prompts
        assert summary["ran"]["chat_template_kwargs"] == ({} if think else {"enable_thinking": False})


def test_eval_of_a_checkpoint_takes_its_runs_prompt_settings_where_no_flag_is_given(tmp_path, capsys):
    """(A newcomer's find) execrl eval of a checkpoint posed its prompts with eval's defaults, whatever the run had
    trained on: a tags-trained model scored 0.25 under them and 1.00 under its own, and summary.json recorded the
    defaults. A checkpoint of ours says how its run posed them (trainer_state.pt); a flag given still wins."""
    import torch

    from execrl.cli import eval_prompt, parse_args

    (tmp_path / "step_000003" / "policy").mkdir(parents=True)
    torch.save({"step": 3, "config": {"prompt": {"system_prompt": "Be brief.", "answer_format": "reasoning",
                                                 "code_style": "tags", "add_instructions": True, "template": None}}},
               tmp_path / "step_000003" / "trainer_state.pt")
    model = str(tmp_path / "step_000003" / "policy")
    prompt = eval_prompt(parse_args(["eval", "--model", model]))
    assert (prompt.system_prompt, prompt.answer_format, prompt.code_style) == ("Be brief.", "reasoning", "tags")
    assert "as the run that saved" in capsys.readouterr().err
    prompt = eval_prompt(parse_args(["eval", "--model", model, "--code-style", "fence", "--system-prompt", ""]))
    assert (prompt.system_prompt, prompt.answer_format, prompt.code_style) == (None, "reasoning", "fence")
    prompt = eval_prompt(parse_args(["eval", "--model", str(tmp_path)]))  # (not a checkpoint: the defaults)
    assert (prompt.system_prompt, prompt.answer_format, prompt.code_style) == (None, "code", "fence")


def test_eval_of_a_policy_folder_copied_out_of_its_run_poses_problems_as_the_run_did(tiny_model_dir, tmp_path, capsys):
    """(A hunt's find) eval read a run's prompt settings only from the trainer_state.pt beside its policy/ folder: a
    folder copied out of the run (keep_top_k deletes old checkpoints), or pushed to the hub, was evaluated with eval's
    defaults, 0.500 -> 0.203, without a word. The run records its prompt section in the generation config too."""
    import shutil

    from execrl.cli import eval_prompt, parse_args
    from execrl.models import SAVED_PROMPT

    copied = tmp_path / "kept" / "policy"
    shutil.copytree(tiny_model_dir, copied)
    config = copied / "generation_config.json"
    saved = json.loads(config.read_text()) if config.exists() else {}
    ran = {"system_prompt": "You write Python.", "answer_format": "code", "code_style": "auto",
           "add_instructions": True, "template": None}
    config.write_text(json.dumps({**saved, SAVED_PROMPT: ran}))
    prompt = eval_prompt(parse_args(["eval", "--model", str(copied)]))
    assert (prompt.system_prompt, prompt.code_style) == ("You write Python.", "auto")
    assert "as the run that saved" in capsys.readouterr().err
    prompt = eval_prompt(parse_args(["eval", "--model", str(tiny_model_dir)]))  # (nothing recorded: the defaults)
    assert (prompt.system_prompt, prompt.code_style) == (None, "fence")


def test_prompts_leave_room_for_the_completion_in_a_learned_position_table(capsys):
    """(A review's find) execrl eval of a GPT-2 (a learned table of positions) with a prompt and --max-new-tokens
    past its table stopped with an IndexError mid-sampling: the prompts it samples on are cut to leave the room."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from execrl.eval.run import EvalConfig, prompt_room

    model = GPT2LMHeadModel(GPT2Config(n_positions=256, n_embd=32, n_layer=1, n_head=2, vocab_size=300))
    assert prompt_room(EvalConfig(max_new_tokens=200), model, "gpt2") == 56
    assert "prompts of at most 56 tokens: gpt2's positions are a learned table of 256" in capsys.readouterr().err
    assert prompt_room(EvalConfig(max_new_tokens=200, max_prompt_tokens=50), model, "gpt2") == 50
    with pytest.raises(ValueError, match="--max-new-tokens 300 leaves no room for a prompt"):
        prompt_room(EvalConfig(max_new_tokens=300), model, "gpt2")


def test_eval_past_a_rotary_models_positions_warns_as_training_does(tiny_model_dir, capsys):
    """(A long-context hunt's find) execrl eval sampled past a rotary model's max_position_embeddings without a word,
    where training warns for the same length. The warning counts the longest prompt it samples on, so that a long
    --max-prompt-tokens alone does not raise it."""
    from execrl.eval.run import EvalConfig, past_positions
    from execrl.models import load_model_and_tokenizer
    from execrl.prompts import PromptConfig, build_messages, conversation_ids
    from execrl.tasks import Problem

    model, tok = load_model_and_tokenizer(str(tiny_model_dir), "cpu", "float32")
    limit = model.config.max_position_embeddings
    problems = [Problem("p", [{"role": "user", "content": "Print 1."}], "code")]
    prompt = len(conversation_ids([build_messages(problems[0], PromptConfig())], tok)[0])
    past_positions(EvalConfig(max_new_tokens=limit - prompt), model, "tiny", problems, tok, 10 * limit)
    assert "warning" not in capsys.readouterr().err  # (the prompt and the new tokens fill the positions exactly)
    past_positions(EvalConfig(max_new_tokens=limit - prompt + 1), model, "tiny", problems, tok, 10 * limit)
    err = " ".join(capsys.readouterr().err.split())
    assert f"the longest prompt ({prompt} tokens) and --max-new-tokens {limit - prompt + 1:,} run past the " \
        f"{limit:,} positions tiny was made for" in err and f"--max-new-tokens {limit - prompt:,} keeps every" in err
    long = [Problem("q", [{"role": "user", "content": "Print 1. " * limit}], "code")]  # (a prompt past them alone)
    past_positions(EvalConfig(max_new_tokens=8), model, "tiny", long, tok, 10 * limit)
    err = " ".join(capsys.readouterr().err.split())
    assert f"--max-prompt-tokens {limit - 8:,} (and a smaller --max-new-tokens) keeps every sample" in err, err


def test_an_answer_ending_on_its_last_allowed_token_is_not_counted_cut(tiny_model_dir):
    """samples_cut_at_max_new_tokens counted every answer of --max-new-tokens tokens, one whose end of sequence was
    its last allowed token too (it ended on its own); the generator's word on each sample is what counts now."""
    from execrl.eval.generate import generate
    from execrl.eval.run import EvalConfig, make_sample
    from execrl.models import load_model_and_tokenizer
    from execrl.tasks import Problem

    model, tok = load_model_and_tokenizer(str(tiny_model_dir), "cpu", "float32")
    guided = ("regex", "(yes|no)")  # (an answer that ends once the constraint is met)
    (text, n, cut), = generate(model, tok, ["Is it?"], 1, 24, temperature=1.0, batch_size=1, guided=guided)[0]
    assert not cut and n < 24
    assert generate(model, tok, ["Is it?"], 1, n, temperature=1.0, batch_size=1, guided=guided)[0] == [(text, n, False)]
    assert generate(model, tok, ["Is it?"], 1, n - 1, temperature=1.0, batch_size=1, guided=guided)[0][0][2]
    problem = Problem("p", [{"role": "user", "content": "Is it?"}], "math", answer="yes")
    assert not make_sample(EvalConfig(max_new_tokens=n), problem, text, n, cut=False).cut


def test_summary_records_the_prompt_limit_a_learned_position_table_applied(tiny_model_dir, tmp_path):
    """summary.json said max_prompt_tokens 2048 where a GPT-2's table of positions less --max-new-tokens kept
    shorter prompts only (and the drop line blamed --max-prompt-tokens): the record was not what ran."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from execrl.eval.run import EvalConfig, evaluate

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model_dir = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_positions=512, n_embd=32, n_layer=1, n_head=2, vocab_size=len(tok),
                               eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    summary = evaluate(EvalConfig(dataset="builtin:arith-code", split="validation", limit=4, max_new_tokens=16,
                                  out=str(tmp_path / "out"), workers=1, stop_token_ids=[7]), model_name=str(model_dir))
    assert summary["ran"]["max_prompt_tokens"] == 512 - 16
    # (a record's find) what ended the completions and how many were decoded at once change the figures (a stop id
    # that ends every answer early: pass@1 0), and summary.json named neither
    ran = summary["ran"]
    assert ran["stop_token_ids"] == [7] and ran["end_token_ids"] == sorted({7, tok.eos_token_id})
    assert ran["batch_size"] == 4


def test_eval_of_a_multi_turn_checkpoint_says_it_samples_single_turn_and_records_it(tmp_path, capsys, monkeypatch):
    """(A review's find) execrl eval of a checkpoint trained on interpreter episodes sampled one answer per problem
    without a word: its pass@1 read as the run's multi-turn one. It now says so, and summary.json records how the run
    posed its episodes."""
    import torch

    from execrl.cli import eval_config, parse_args
    from execrl.eval.run import ran

    monkeypatch.chdir(tmp_path)  # (the default --out, results/eval, is made where it runs)
    (tmp_path / "step_000002" / "policy").mkdir(parents=True)
    torch.save({"step": 2, "config": {"env": {"multi_turn": {"kind": "interpreter"}}, "grpo": {"max_rollout_turns": 4},
                                      "prompt": {}}}, tmp_path / "step_000002" / "trainer_state.pt")
    model = str(tmp_path / "step_000002" / "policy")
    cfg = eval_config(parse_args(["eval", "--model", model, "--dataset", "builtin:arith-code"]))
    assert cfg.trained_multi_turn == {"kind": "interpreter", "max_rollout_turns": 4}
    assert Path(cfg.out).parent == Path("results/eval") and ":" not in cfg.out  # (a hunt's find: the dataset's colon)
    said = capsys.readouterr().err
    assert "trained on multi-turn episodes (env.multi_turn.kind=interpreter, grpo.max_rollout_turns=4)" in said
    assert "single-turn" in said
    assert ran(cfg, {"model": model})["trained_multi_turn"] == {"kind": "interpreter", "max_rollout_turns": 4}
    (tmp_path / "single" / "policy").mkdir(parents=True)
    torch.save({"step": 1, "config": {"env": {"multi_turn": {"kind": "single_turn"}}, "grpo": {"max_rollout_turns": 1}}},
               tmp_path / "single" / "trainer_state.pt")
    cfg = eval_config(parse_args(["eval", "--model", str(tmp_path / "single" / "policy"), "--dataset",
                                  "builtin:arith-code"]))
    assert cfg.trained_multi_turn is None and "multi-turn" not in capsys.readouterr().err
    assert "trained_multi_turn" not in ran(cfg, {"model": "m"})


def test_a_stop_token_id_the_model_does_not_have_is_refused(tiny_model_dir, tmp_path):
    """(A hunt's find) --stop-token-ids 999999 on a model of a few hundred tokens was accepted and recorded, and ended
    nothing."""
    proc = run("--model", tiny_model_dir, "--dataset", "builtin:arith-code", "--split", "validation", "--limit", 1,
               "--max-new-tokens", 4, "--stop-token-ids", 999999, "--out", tmp_path / "o", "--workers", 1)
    assert proc.returncode == 2 and "--stop-token-ids 999999 is not a token of" in proc.stderr, proc.stderr


def test_a_stop_string_of_a_special_tokens_text_is_refused_with_its_id(tiny_model_dir, tmp_path):
    """(A hunt's find) --stop-string naming a special token's text ended nothing in the engine (completions are
    read without special tokens) and ended transformers' generate: refused, naming --stop-token-ids with the id."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    token = "<|im_start|>"  # (special, and no end id: the EOS's own text ends a completion anyway, and is let be)
    proc = run("--model", tiny_model_dir, "--dataset", "builtin:arith-code", "--split", "validation", "--limit", 1,
               "--max-new-tokens", 4, "--stop-string", token, "--out", tmp_path / "o", "--workers", 1)
    assert proc.returncode == 2, proc.stderr
    assert f"--stop-token-ids {tok.convert_tokens_to_ids(token)}, and drop the --stop-string" in proc.stderr


def test_a_checkpoints_stop_strings_end_its_eval_answers_and_are_recorded(tiny_model_dir, tmp_path):
    """(A hunt's find) a run's policy.generation.stop_strings were recorded nowhere a checkpoint's eval reads: its
    eval wrote whole programs where the run's answers stopped. The run records them in the generation config; eval
    stops there (--stop-string overrides) and summary.json says so."""
    from execrl.eval.generate import generate
    from execrl.eval.run import EvalConfig, evaluate
    from execrl.models import STOP_STRINGS, load_model_and_tokenizer
    from execrl.trainer.policy import record_ends

    model, tok = load_model_and_tokenizer(str(tiny_model_dir), "cpu", "float32")
    (text, _, _), = generate(model, tok, ["Add 1 and 2."], 1, 24, temperature=0.0, batch_size=1)[0]
    stop = next(c for c in text[2:] if c.strip())  # (a character greedy decoding writes, past its first two)
    (cut, _, _), = generate(model, tok, ["Add 1 and 2."], 1, 24, temperature=0.0, batch_size=1, stop_strings=[stop])[0]
    assert cut == text[:text.index(stop, 2 if stop not in text[:2] else 0) + 1] or cut.endswith(stop)
    record_ends(model, tok, None, [stop])
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    assert getattr(load_model_and_tokenizer(str(tmp_path / "ckpt"), "cpu", "float32")[0].generation_config,
                   STOP_STRINGS) == [stop]
    common = dict(dataset="builtin:arith-code", split="validation", limit=2, max_new_tokens=16, workers=1)
    summary = evaluate(EvalConfig(**common, out=str(tmp_path / "o1")), model_name=str(tmp_path / "ckpt"))
    assert summary["ran"]["stop_strings"] == [stop]
    summary = evaluate(EvalConfig(**common, out=str(tmp_path / "o2"), stop_strings=[]),
                       model_name=str(tmp_path / "ckpt"))
    assert summary["ran"]["stop_strings"] == []
    # (a review's finds) a stop string training refuses (inside the code block's opening) is refused here too
    with pytest.raises(ValueError, match=r"--stop-string: '```' is in '```python\\n'"):
        evaluate(EvalConfig(**common, out=str(tmp_path / "o3"), stop_strings=["```"]),
                 model_name=str(tmp_path / "ckpt"))
    proc = run("--completions", tmp_path / "c.jsonl", "--stop-string", "x", "--out", tmp_path / "o4")
    assert proc.returncode == 2 and "--stop-string sets how a --model is sampled" in proc.stderr


def test_a_refused_stop_string_is_refused_before_the_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    """(The last session's left-out) --stop-string, and a checkpoint's recorded stop strings, are refused before the
    sandbox starts and the model loads, not after minutes of loading a large one."""
    import shutil

    import execrl.models
    from execrl.eval.run import EvalConfig, evaluate
    from execrl.models import STOP_STRINGS

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, ckpt)
    config = ckpt / "generation_config.json"
    saved = json.loads(config.read_text()) if config.exists() else {}
    config.write_text(json.dumps({**saved, STOP_STRINGS: ["```"]}))

    def loaded(*a, **k):
        raise AssertionError("the model loaded before its stop strings were checked")
    monkeypatch.setattr(execrl.models, "load_pretrained", loaded)
    common = dict(dataset="builtin:arith-code", split="validation", limit=2, max_new_tokens=16, workers=1)
    with pytest.raises(ValueError, match=r"ckpt's stop strings \(its run's policy.generation.stop_strings"):
        evaluate(EvalConfig(**common, out=str(tmp_path / "o1")), model_name=str(ckpt))
    with pytest.raises(ValueError, match=r"--stop-string: an empty string"):
        evaluate(EvalConfig(**common, out=str(tmp_path / "o2"), stop_strings=[""]), model_name=str(ckpt))


def test_ctrl_c_while_grading_keeps_the_sampled_completions(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """(A hunt's find) Ctrl-C while grading threw away every completion (hours of sampling on a GPU). They are kept
    in the output directory, as rows --completions reads, and grading them there gives what the whole eval gives."""
    from execrl.eval.grading import EarlyGrading
    from execrl.eval.run import EvalConfig, evaluate

    settings = dict(dataset="builtin:arith-code", split="validation", limit=3, samples=2, ks=(1,), temperature=1.0,
                    max_new_tokens=24, workers=1, grading_share=0.0)
    whole = evaluate(EvalConfig(**settings, out=str(tmp_path / "whole")), model_name=tiny_model_dir)
    real = EarlyGrading.finish
    monkeypatch.setattr(EarlyGrading, "finish", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        evaluate(EvalConfig(**settings, out=str(tmp_path / "cut")), model_name=tiny_model_dir)
    kept = tmp_path / "cut" / "completions.jsonl"
    assert f"the 6 sampled completions are in {kept}" in " ".join(capsys.readouterr().err.split())
    monkeypatch.setattr(EarlyGrading, "finish", real)
    again = evaluate(EvalConfig(**settings, out=str(tmp_path / "again")), completions=str(kept))
    assert again["pass@1"] == whole["pass@1"] and again["samples"] == 6
    evaluate(EvalConfig(**settings, out=str(tmp_path / "cut")), completions=str(kept))  # (graded where they lie)
    assert "holds the completions an eval stopped" not in capsys.readouterr().err
    evaluate(EvalConfig(**settings, out=str(tmp_path / "cut")), model_name=tiny_model_dir)  # (a new eval beside them)
    assert f"{kept} holds the completions an eval stopped on" in " ".join(capsys.readouterr().err.split())
    # Ctrl-C while sampling: the completions that had ended are kept too (every one was lost: a hunt's find)
    import execrl.eval.generate as generating

    sample = generating.generate

    def stopped(*args, on_ended=None, **kwargs):
        def ended(*told):
            on_ended(*told)
            if len(rows) == 3:
                raise KeyboardInterrupt
            rows.append(told)
        return sample(*args, on_ended=ended, **kwargs)

    rows: list = []
    monkeypatch.setattr(generating, "generate", stopped)
    with pytest.raises(KeyboardInterrupt):
        evaluate(EvalConfig(**settings, out=str(tmp_path / "mid")), model_name=tiny_model_dir)
    said = " ".join(capsys.readouterr().err.split())
    kept = tmp_path / "mid" / "completions.jsonl"
    assert "interrupted while sampling: the 4 completions that had ended" in said and str(kept) in said
    assert "--code-style" in said  # (the flags to repeat: the prompt's too)
    assert len(kept.read_text().splitlines()) == 4
    # an error while grading (a bug, a row the grader cannot take): the sampled completions kept too, a hunt's find
    monkeypatch.setattr(generating, "generate", sample)
    monkeypatch.setattr(EarlyGrading, "finish", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("grader bug")))
    with pytest.raises(RuntimeError, match="grader bug"):
        evaluate(EvalConfig(**settings, out=str(tmp_path / "bug")), model_name=tiny_model_dir)
    kept = tmp_path / "bug" / "completions.jsonl"
    assert f"stopped by RuntimeError while grading: the 6 sampled completions are in {kept}" in " ".join(
        capsys.readouterr().err.split())


def test_eval_on_the_split_its_run_trained_on_is_warned(tmp_path, capsys):
    """(A hunt's find) execrl eval of a checkpoint on the split its run trained on scored without a word."""
    import torch

    from execrl.cli import parse_args, trained_on

    (tmp_path / "step_000001" / "policy").mkdir(parents=True)
    torch.save({"step": 1, "config": {"data": {"train": {"dataset_name": "mbpp", "split": "train"}}}},
               tmp_path / "step_000001" / "trainer_state.pt")
    model = str(tmp_path / "step_000001" / "policy")
    assert trained_on(parse_args(["eval", "--model", model, "--dataset", "mbpp", "--split", "train"]))
    assert "trained on mbpp/train: its score there is what it learned" in capsys.readouterr().err
    assert not trained_on(parse_args(["eval", "--model", model, "--dataset", "mbpp"]))  # (test: held out)
    assert not trained_on(parse_args(["eval", "--model", model, "--dataset", "gsm8k", "--split", "train"]))
    assert not trained_on(parse_args(["eval", "--model", str(tmp_path), "--dataset", "mbpp", "--split", "train"]))
    rows = tmp_path / "rows.jsonl"  # (a file's loader reads the file whatever --split says: the file is the split)
    (tmp_path / "step_000002" / "policy").mkdir(parents=True)
    torch.save({"step": 2, "config": {"data": {"train": [{"dataset_name": "jsonl", "path": str(rows)}]}}},
               tmp_path / "step_000002" / "trainer_state.pt")
    model = str(tmp_path / "step_000002" / "policy")
    assert trained_on(parse_args(["eval", "--model", model, "--dataset", "jsonl", "--data-path", str(rows)]))
    assert f"trained on {rows}" in capsys.readouterr().err
    assert not trained_on(parse_args(["eval", "--model", model, "--dataset", "jsonl", "--data-path",
                                      str(tmp_path / "other.jsonl")]))


def test_a_base_models_answers_end_at_its_next_turn_and_a_missed_turn_end_is_named(tiny_model_dir, tmp_path, capsys):
    """(A hunt's finds) With no chat template (the plain 'User: ...' / 'Assistant:' transcript) a base model's answers
    ran on into made-up next turns to the length limit, every one: they end at a next '\\nUser:' line (recorded). Where
    the template's end of turn ends no completion, the line about cut samples named 'raise it', which cannot help:
    it names --stop-token-ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from execrl.eval.run import EvalConfig, evaluate
    from execrl.prompts import PLAIN_TURN_END, plain_stops

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for name, template, eos in (("base", None, "<|im_end|>"), ("eos", "keep", "<|endoftext|>")):
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        tok.chat_template = None if template is None else tok.chat_template
        tok.eos_token = eos
        model.generation_config.eos_token_id = model.config.eos_token_id = tok.eos_token_id
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        summary = evaluate(EvalConfig(dataset="builtin:arith-code", split="validation", limit=2, max_new_tokens=8,
                                      out=str(tmp_path / f"out_{name}"), workers=1), model_name=str(tmp_path / name))
        said = capsys.readouterr().err
        if name == "base":
            assert summary["ran"]["stop_strings"] == [PLAIN_TURN_END] and "next '\\nUser:' line" in said
            assert summary["ran"]["first_prompt"].startswith("User: ")  # (the prompt as the model read it)
            assert plain_stops([], tok) == [] and plain_stops(["x"], tok) == ["x"]  # (the user's own, none included)
            from execrl.trainer.policy import record_ends  # (a review's find: a run that set none evaluated with it)

            record_ends(model, tok, None, [])
            model.save_pretrained(tmp_path / "none")
            tok.save_pretrained(tmp_path / "none")
            summary = evaluate(EvalConfig(dataset="builtin:arith-code", split="validation", limit=2, max_new_tokens=8,
                                          out=str(tmp_path / "out_none"), workers=1), model_name=str(tmp_path / "none"))
            assert summary["ran"]["stop_strings"] == []
            model.generation_config.execrl_stop_strings = None
            capsys.readouterr()
        else:
            assert summary["ran"]["stop_strings"] == [] and summary["samples_cut_at_max_new_tokens"] == 2
            assert "--stop-token-ids 2" in said and "raise it" not in said, said
            assert summary["ran"]["first_prompt"].startswith("<|im_start|>user\n")


def test_completions_of_another_split_name_their_split(tmp_path, capfd):
    """(A hunt's find) Completions of MBPP's test split graded with --split validation read as ids of no dataset: the
    error names the split that holds them. The other splits read for it print nothing (their lines read as a load of
    that split for the eval: another hunt's find)."""
    from execrl.eval.run import EvalConfig, evaluate
    from execrl.tasks import DatasetError

    rows = tmp_path / "c.jsonl"
    rows.write_text(json.dumps({"problem_id": "arith/train/3", "completion": "print(1)"}) + "\n")
    with pytest.raises(DatasetError, match=r"'arith/train/3' is not in the dataset.*: it is a problem of "
                                           r"builtin:arith-code's train split \(--split train\)"):
        evaluate(EvalConfig(dataset="builtin:arith-code", split="validation", out=str(tmp_path / "o"), workers=1),
                 completions=str(rows))
    mbpp = shared_data("mbpp", "mbpp.jsonl")
    rows.write_text(json.dumps({"problem_id": "mbpp/700", "completion": "print(1)"}) + "\n")
    capfd.readouterr()
    with pytest.raises(DatasetError, match=r"it is a problem of mbpp's train split \(--split train\)"):
        evaluate(EvalConfig(dataset="mbpp", split="test", data_path=str(mbpp), out=str(tmp_path / "o"), workers=1),
                 completions=str(rows))
    said = capfd.readouterr().err
    assert "mbpp/test" in said and "mbpp/train" not in said and "mbpp/validation" not in said, said


def test_results_and_summary_are_one_evals_or_none_and_a_full_disk_keeps_the_figures(tmp_path, monkeypatch, capsys):
    """(A hunt's find) An eval refused by a full disk while writing results.jsonl left its rows beside an earlier
    eval's summary.json, with a traceback, and its figures were never printed. Each file is written whole, the
    summary last, the earlier summary removed first; a write that fails is one error naming --out, after the table."""
    import errno

    import execrl.writable as writable
    from execrl.eval.run import EvalConfig, evaluate

    path = tmp_path / "own.jsonl"
    path.write_text(json.dumps({"id": "a", "completion": r"so \boxed{7}", "answer": "7"}) + "\n")
    out = tmp_path / "o"
    evaluate(EvalConfig(dataset="", out=str(out)), completions=str(path))
    assert json.loads((out / "summary.json").read_text())["pass@1"] == 1.0
    class Full:  # (the disk full as results.jsonl's first row is written)
        def __init__(self, path, mode):
            self.f = open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def writelines(self, lines):
            for text in lines:
                self.write(text)

    monkeypatch.setattr(writable, "open", Full, raising=False)
    path.write_text(json.dumps({"id": "b", "completion": r"so \boxed{8}", "answer": "7"}) + "\n")
    capsys.readouterr()
    with pytest.raises(ValueError, match=r"the results could not be written \(No space left on device\): the figures "
                                         r"above are this eval's; free space there or name another --out"):
        evaluate(EvalConfig(dataset="", out=str(out)), completions=str(path))
    shown = capsys.readouterr().out
    assert "pass@1" in shown and "0.0000" in shown and "per-problem results" not in shown
    assert not (out / "summary.json").exists()  # (the earlier eval's, beside rows that are not its, nowhere)
    assert json.loads((out / "results.jsonl").read_text())["id"] == "a"  # (whole: the earlier eval's rows)
    assert not (out / "results.jsonl.tmp").exists()  # (the partial copy removed)
