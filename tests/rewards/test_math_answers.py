"""The math answer check (answers_match, math_correct) on answers that once hung the reward or never matched."""

import re
import time

import pytest

from execrl.extract import math_answer
from execrl.rewards.math_answers import answers_match


def test_numbers_with_huge_exponents_are_compared_not_evaluated():
    """Fraction("1e9999999") built ten million digits (13 s for one answer, scored inline in training); an integer
    over 4,300 digits raised inside Fraction (Python's int-string limit), so it equalled nothing."""
    start = time.perf_counter()
    assert math_answer("So she sold 1e9999999 clips.") == "1e9999999"
    assert not answers_match("1e9999999", "72") and not answers_match("72", "1e99999999")
    assert answers_match("1e9999999", "10e9999998") and not answers_match("1e9999999", "1e9999998")
    assert time.perf_counter() - start < 2
    assert answers_match("1" + "0" * 5000, "1e5000") and not answers_match("1" + "0" * 5000, "1e4999")
    for predicted, reference in [("72", "72.0"), ("0.5", "1/2"), ("-3/4", "-.75"), ("2.5E-7", "0.00000025"),
                                 ("1,000", "1e3"), ("2/6", "1/3"), ("-0", "0")]:
        assert answers_match(predicted, reference), (predicted, reference)
    for predicted, reference in [("1/3", "0.333"), ("3/4", "-.75"), ("1/0", "0")]:
        assert not answers_match(predicted, reference), (predicted, reference)


def test_a_huge_number_beside_a_hedge_or_a_fraction_is_read_at_once_and_scores_0(monkeypatch, caplog):
    """(A hunt's finds) "#### 1e99999999 or 20" took four minutes of the trainer's CPU (Fraction built the exponent
    to tell whether 20 restates it); a run of 4,301 digits before ½ or a ratio's colon raised (Python's int-string
    limit) out of the reward and ended the training step."""
    from execrl.config.schema import RewardConfig
    from execrl.extract import extract
    from execrl.rewards import Sample, score
    from execrl.tasks import Problem

    start = time.perf_counter()
    for text in ["#### 1e99999999 or 20", "The answer is 18, or 1e10000000", "#### 18 or 1e99999999"]:
        assert not answers_match(math_answer(text), "20") and not answers_match(math_answer(text), "18"), text
    assert time.perf_counter() - start < 2
    assert math_answer("#### 1e3 or 1000") == "1e3"  # (the same value restated: still one answer)
    digits = "1" * 4301
    problem = Problem(id="p", messages=[{"role": "user", "content": "Compute."}], answer="72", kind="math")
    config = RewardConfig(components=[{"name": "math_correct"}])
    for text in [f"\\boxed{{{digits}\u00bd}}", f"so {digits}\u00bd", f"#### {digits}\u00bd", f"\\boxed{{{digits}:1}}"]:
        text = "<think>.</think>" + text
        sample = Sample(problem, text, extract(text, "think", want_code=False))
        assert score(sample, config).total == 0.0
    from execrl.rewards import math_answers  # and what no rule foresaw: scored 0 and said, not raised
    from execrl.rewards.base import COMPONENTS

    assert COMPONENTS["math_correct"] is math_answers.math_correct  # (a review's find: a helper took its decorator)

    monkeypatch.setattr(math_answers, "_math_verdict", lambda sample: int("9" * 5000))
    text = "<think>.</think>#### 72"
    assert score(Sample(problem, text, extract(text, "think", want_code=False)), config).total == 0.0
    assert "math answer scored 0: reading it raised ValueError" in caplog.text


def test_math_verify_is_cut_off_in_threads(monkeypatch):
    """math-verify ran with its timeouts off (they use signal.alarm: main thread only), so \\boxed{10^{10^{10}}} kept a
    scoring thread in sympy for minutes: it now runs in a child process, killed past VERIFY_SECONDS (scored 0, counted),
    and the next answer gets a new one."""
    import threading

    from execrl.rewards import math_answers

    monkeypatch.setattr(math_answers, "VERIFY_SECONDS", 1.0, raising=False)
    before = getattr(math_answers, "TIMEOUTS", [0])[0]
    results = {}

    def check(answer):
        results[answer] = answers_match(answer, "72")

    threads = [threading.Thread(target=check, args=(a,), daemon=True) for a in (r"10^{10^{10}}", r"9^{9^{9}}")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)  # a child's start (imports) is not timed: a few seconds on a busy machine
    assert not any(t.is_alive() for t in threads) and results == {r"10^{10^{10}}": False, r"9^{9^{9}}": False}
    assert math_answers.TIMEOUTS[0] == before + 2
    assert answers_match(r"\frac{144}{2}", "72") and not answers_match(r"\frac{142}{2}", "72")


def test_math_verify_is_timed_by_its_cpu_and_a_reference_it_cannot_compare_is_remembered(monkeypatch):
    """(A hunt's finds) a right answer that math-verify took 3.4 s over scored 0 whenever the machine was busy (the
    clock ran past 5 s): a child is timed by the CPU it spends, the clock bounding it at WALL_SECONDS times that. A
    9-character reference (9^{9^{9}}) ran every answer to it out of time, 40 s a group: after the first, its answers
    score 0 at once."""
    import subprocess
    import sys
    import time

    from execrl.rewards import math_answers

    asleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5); print(1, flush=True)"],
                              stdout=subprocess.PIPE, text=True)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert math_answers._reply(asleep, 1.0, cpu=True) == "1\n"  # (1.5 s on the clock, no CPU)
        start = time.monotonic()
        assert math_answers._reply(busy, 0.5, cpu=True) is None and time.monotonic() - start < 2.0 * 4
    finally:
        for child in (asleep, busy):
            child.kill()
            child.wait()
    monkeypatch.setattr(math_answers, "VERIFY_SECONDS", 1.0)
    monkeypatch.setattr(math_answers, "UNREADABLE", set())
    assert not answers_match("5", r"9^{9^{9}}") and math_answers.UNREADABLE == {r"9^{9^{9}}"}
    start = time.monotonic()
    assert not any(answers_match(str(i), r"9^{9^{9}}") for i in range(8)) and time.monotonic() - start < 0.5
    assert answers_match(r"9^{9^{9}}", r"9^{9^{9}}")  # (the same text: no math-verify)


def test_long_references_can_be_matched():
    """MAX_ANSWER_CHARS capped the predicted answer's length whatever the reference's, so a reference over 200
    characters never scored 1, not even against itself: the same text matches first, and the cap is twice the
    reference's length."""
    terms = " + ".join(f"x^{{{i}}}" for i in range(40))  # 347 characters
    assert len(terms) > 200 and answers_match(terms, terms) and answers_match(f"\\[{terms}\\]", terms)
    tuple_ = "(" + ", ".join(str(i) for i in range(80)) + ")"
    assert len(tuple_) > 200 and answers_match(tuple_.replace(", ", ","), tuple_)  # math-verify: the same tuple
    assert not answers_match(tuple_.replace("79", "78"), tuple_)
    assert not answers_match("1 + " * 60 + "1", "61")  # a long answer to a short reference: the numeric check only


def test_math_verify_answers_with_many_files_open_and_after_a_fork():
    """The child was waited on with select, which refuses a descriptor over 1,023: a grader of ~100 workers holds
    that many files, and every answer math-verify checks raised. A fork while the children were busy kept the
    parent's lock and slots in the fork, where no thread would ever release them: its first answer hung."""
    import os
    import resource

    from execrl.rewards import math_answers

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # (a login user's soft limit is 1,024: raised to what
    if soft < 1200 and (hard == resource.RLIM_INFINITY or hard >= 1200):  # the process may, as a grader of ~100
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))  # workers would need)
    elif soft < 1200:
        pytest.skip(f"this process may open at most {hard} files")
    held = [open(os.devnull) for _ in range(1100)]
    try:
        assert answers_match(r"\frac{1}{2}", r"\dfrac{2}{4}") and not answers_match(r"\frac{1}{3}", r"\frac{1}{2}")
    finally:
        for f in held:
            f.close()
    children = math_answers._children
    for _ in range(math_answers.VERIFY_WORKERS):  # every slot held, as by scoring threads at the fork
        children.slots.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # (the fork's answer, then out: 0 if it came)
            os._exit(0 if answers_match(r"\frac{2}{6}", r"\frac{1}{3}") else 1)
        deadline = time.time() + 60
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the fork's answer never came")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        for _ in range(math_answers.VERIFY_WORKERS):
            children.slots.release()


def test_an_answer_is_checked_once_however_often_it_is_asked(monkeypatch):
    """(A review's find) the reward, the step's metrics (in the main thread, one answer after another) and the
    rollouts' records each checked every answer again: an answer that costs math-verify its 5 s cut-off cost it 3
    times. The verdict is kept on the sample."""
    import execrl.rewards.math_answers as ma
    from execrl.extract import Extracted
    from execrl.rewards import Sample
    from execrl.rewards.outcome import is_correct, outcome
    from execrl.tasks import Problem

    calls = []
    real = ma.answers_match
    monkeypatch.setattr(ma, "answers_match", lambda *a: calls.append(a) or real(*a))
    text = "So she sold \\boxed{72} clips."
    s = Sample(Problem("m/1", [{"role": "user", "content": "How many?"}], "math", answer="72"), text,
               Extracted(text, True))
    assert ma.math_correct(s) == 1.0 and is_correct(s) and outcome(s) == "correct" and len(calls) == 1


def test_latex_without_delimiters_sums_and_percentages_are_read_whole():
    """(A review's finds) LaTeX written without $...$ or \\boxed was graded on a digit inside it: "The probability is
    \\frac{1}{6}." scored 1 against 6 and 0 against 1/6; "The answer is 2\\sqrt{3}." scored against 2. A stated sum
    gave its first operand ("16 - 3 - 4 = 9 eggs, times 2 = 18": 16), and "0.25 = 25%" the 25 without its unit."""
    for text, right, wrong in [
            ("The probability is \\frac{1}{6}.", "\\frac{1}{6}", "6"), ("Thus the radius is \\sqrt{5}.", "\\sqrt{5}", "5"),
            ("So x = 2\\sqrt{3}.", "2\\sqrt{3}", "3"), ("The final answer is -\\frac{1}{2}", "-0.5", "1"),
            ("Answer: -\\sqrt{2}", "-\\sqrt{2}", "2"), ("The answer is 2\\sqrt{3}.", "2\\sqrt{3}", "2"),
            ("The answer is 3\\pi.", "3\\pi", "3"), ("The answer is 1.8 \\times 10^{5}.", "180000", "1.8"),
            ("The answer is 16 - 3 - 4 = 9 eggs, times 2 = 18.", "18", "16"), ("The answer is 2 * 9.", "18", "2"),
            ("The answer is 0.25 = 25%.", "0.25", "25"),
            # (as before)
            ("The answer is 18, because she sells 16 - 3 - 4 = 9 eggs", "18", "9"),
            ("Answer: 15 gallons * 8 pints / gallon = 120 pints", "120", "15"), ("3 \\times 6 = 18.", "18", "6"),
            ("The speed is 60 \\(\\text{km/h}\\).", "60", "6"), ("She pays \\$18 in total.", "18", "1")]:
        found = math_answer(text)
        assert answers_match(found, right) and not answers_match(found, wrong), (text, found)
    start = time.perf_counter()  # (commands and a brace never closed: read in linear time)
    math_answer("So it is " + "\\a" * 20000 + "{" + "x" * 100000 + " 7")
    assert time.perf_counter() - start < 1


def test_minervas_rewrites_are_re_subs_in_linear_time():
    """DAPO's normalization re.sub'd five patterns that rescan each line from every position where their opening does
    not close: a reference (a dataset row) of 64 KB took 20 s for every sample graded against it. _rewrite gives
    what re.sub gives (here on random strings of the patterns' own pieces) in linear time."""
    import random
    import re

    from execrl.rewards.math_answers import MINERVA_REWRITE, _rewrite, dapo_correct

    def by_re_sub(text):
        for pattern, repl in MINERVA_REWRITE:
            text = re.sub(pattern, repl, text)
        return text

    rng = random.Random(0)
    pieces = ["$", "\\text{", "\\textbf{", "\\overline{", "\\boxed{", "}", "{", "\n", "a", "1", "frac", "sqrt", " ", "\\"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _rewrite(text) == by_re_sub(text), text
    start = time.perf_counter()
    for unit in ("x", "\\text{", "\\overline{", "\\boxed{", "$a"):
        assert not dapo_correct("Answer: 5", unit * 16000)
    assert time.perf_counter() - start < 2


def test_a_percentage_is_read_one_way_where_the_question_asks_for_one():
    """(A hunt's find) math-verify reads N% as N and as N/100, so a reference of 50 was matched by 50% and by 5000%,
    100x apart. Where the question asks for a percentage (or the reference is one) an answer is read as written;
    elsewhere either way, as before (50% for a probability of 0.5; 94% for "what score?")."""
    from execrl.extract import Extracted
    from execrl.rewards import Sample
    from execrl.rewards.math_answers import math_correct
    from execrl.tasks import Problem

    asks = "What percentage of the class are girls?"
    for answer, reference, question, right in [
            ("50%", "50", asks, True), ("50\\%", "50", asks, True), ("50 \\text{\\%}", "50", asks, True),
            ("5000%", "50", asks, False), ("0.5%", "50", asks, False), ("50", "50\\%", "", True),
            ("5000\\%", "50\\%", "", False), ("0.5", "50\\%", "", False),
            ("12.5 %", "12.5", "As a percent, how much?", True),
            ("50%", "0.5", "What is the probability?", True), ("94%", "94", "What score does he need?", True),
            ("-5%", "-0.05", "", True), ("1/8%", "0.00125", "", True)]:
        assert answers_match(answer, reference, question) is right, (answer, reference, question)
        text = f"So the answer is \\boxed{{{answer}}}."
        s = Sample(Problem("m/1", [{"role": "user", "content": question or "How much?"}], "math", answer=reference),
                   text, Extracted(text, True))
        assert math_correct(s) == float(right), (answer, reference, question)
    start = time.perf_counter()  # (a hunt's find: the sign's regex took cubic time on a run of spaces, 38 s for 2,000)
    assert not answers_match("18" + " " * 20000 + "\\text{ dollars}", "18")
    assert time.perf_counter() - start < 2


def test_bounds_and_dashes_in_their_other_spellings():
    """(A hunt's finds) a bound scored 1 spelled \\geqq, \\gtrsim, 18 \\text{ at least}, 18+, >= 18, "a minimum of
    18" or after ####; an en dash or a non-breaking hyphen as the minus sign was dropped: "The answer is \u201310."
    read 10."""
    for text in ["\\boxed{\\geqq 18}", "\\boxed{\\gtrsim 18}", "\\boxed{18 \\text{ at least}}", "\\boxed{18\\text{+}}",
                 "\\boxed{18 \\text{ and up}}", "The answer is \u2265 18.", "The answer is >= 18.", "Answer: \u226518",
                 "The answer is no less than 18.", "The answer is a minimum of 18.", "The answer is up to 18.",
                 "The answer is 18+.", "#### at least 18", "#### >= 18", "#### 18+"]:
        assert not answers_match(math_answer(text), "18"), text
    for text in ["The answer is \u201310.", "#### \u201310", "The change is \u2013$10.", "The answer is \u201110."]:
        assert answers_match(math_answer(text), "-10") and not answers_match(math_answer(text), "10"), text
    assert answers_match(math_answer("From 18\u201320 apples, she keeps 20."), "20")


def test_a_stated_answer_its_sentence_takes_back_is_not_read():
    """(A hunt's find) "Answer: not 18 but 20", "the answer is never 18", "~~18~~ 20", "18 -> 20" and "18, but it is
    20" paid 18, the number the text withdraws."""
    for text in ["**Answer:** not 18 but 20", "Answer: Not 18. It is 20.", "The answer is **not** 18, it is 20.",
                 "The answer is definitely not 18. It is 20.", "The answer is never 18, it is 20",
                 "**Answer:** ~~18~~ 20",
                 "The answer is 18 \u2192 20.", "One might think the answer is 18, but it is 20.",
                 "The answer is 18, actually 20."]:
        found = math_answer(text)
        assert answers_match(found, "20") and not answers_match(found, "18"), (text, found)
    assert answers_match(math_answer("The answer is 18, but I should double-check the units: 18 apples."), "18")


def test_a_magnitude_word_scales_its_number():
    """(A hunt's find) math-verify drops a word in \\text{} as a unit: 18 thousand, \\$18 M and 18k matched 18, and
    GSM8K's "\\$192 million" missed 192000000."""
    for answer, right, wrong in [("18\\text{ thousand}", "18000", "18"), ("18 \\text{ million}", "18000000", "18"),
                                 ("\\$18\\text{M}", "18000000", "18"), ("18\\text{k}", "18000", "18"),
                                 ("\\$192\\text{ million}", "192000000", "192"), ("1.5 thousand", "1500", "1.5")]:
        assert answers_match(answer, right) and not answers_match(answer, wrong), answer
    assert answers_match("18 \\text{m}", "18")  # (metres, not millions)


def test_a_magnitude_or_a_unicode_fraction_after_an_unboxed_answer_is_read_with_it():
    """(A hunt's find) the magnitude word was read in a boxed answer only: "The answer is 18 thousand." and "#### 18k"
    matched 18 and missed 18000, "1\u00bd" matched 1."""
    for text, right, wrong in [("The answer is 18 thousand.", "18000", "18"), ("#### 18k", "18000", "18"),
                               ("The answer is $1.5 million.", "1500000", "1.5"),
                               ("The answer is 1\u00bd.", "1.5", "1"),
                               ("#### -2\u00be", "-11/4", "-2"), ("In all she made $18K", "18000", "18")]:
        found = math_answer(text)
        assert answers_match(found, right) and not answers_match(found, wrong), (text, found)
    for text in ("The answer is 18 m.", "#### 18 dollars", "He ran 5 km, then 18", "She has 18 kg"):  # (units)
        assert answers_match(math_answer(text), "18"), text


def test_a_reference_with_unit_words_is_its_number():
    """(A hunt's find) math-verify matched a reference of "18 apples" with 18 and never "18 dollars" or "18 eggs": a
    row no answer could score on. Words that change the number are not units."""
    for reference in ("18 dollars", "18 eggs", "$18 dollars", "18 books.", "\\$18 dollars"):
        assert answers_match("18", reference) and not answers_match("19", reference), reference
    assert answers_match("1800", "1,800 dollars") and answers_match("18000", "18 thousand")
    assert not answers_match("2", "2 and a half") and not answers_match("18", "18 thousand")


def test_a_reference_of_a_number_and_a_long_run_of_letters_is_read_at_once():
    """(A hunt's find) the unit-words pattern split a run of letters every way before it failed: a reference of 18, a
    space, 1,600 letters and "!" took 26 s of the grader's CPU for each sample (cubic: ~200 s at 3,200)."""
    import threading

    reference = "18 " + "x" * 20_000 + "!"
    done = threading.Event()
    worker = threading.Thread(target=lambda: (answers_match("17", reference), done.set()), daemon=True)
    worker.start()
    assert done.wait(60), "answers_match did not return in 60 s"
    assert answers_match("18", "18 " + "dollars " * 2 + "each") and not answers_match("18", "18 " + "ab " * 4)


def test_an_answer_in_the_questions_own_magnitude_matches_and_unit_letters_are_no_magnitude():
    """(A review's find) GSM8K references in the question's unit ("$32 million ... how many million dollars are
    left?": 4) missed "$4 million"; "300K" (Kelvin) read as 300,000 and "4 million-dollar homes" as 4,000,000."""
    asks = "A firm had $32 million and spent $28 million. How many million dollars does it have left?"
    assert answers_match(math_answer("It has $4 million left."), "4", asks)
    assert not answers_match(math_answer("It has $4 million left."), "4", "How much money does it have left?")
    assert answers_match(math_answer("It has $4 million left."), "4000000", "How much money does it have left?")
    assert answers_match(math_answer("The gas is at 300K."), "300", "What is its temperature in kelvin?")
    assert answers_match(math_answer("They built 4 million-dollar homes."), "4", "How many homes did they build?")
    assert answers_match(math_answer("She walked 18 thousand steps."), "18", "How many thousand steps did she walk?")


def test_a_reference_of_a_number_and_math_words_is_no_number_with_units():
    """(A review's find) "4xy", "2 pi", "6 sqrt" were read as a number and its units: 4, 2 and 6 scored on them."""
    for reference in ("4xy", "2pi", "2 pi", "6 sqrt", "8 cos", "6 xyz", "2 ii", "6 tenths", "3 squared", "5 factorial"):
        number = re.match(r"\d+", reference).group()
        assert not answers_match(number, reference), reference
    for reference in ("18 km", "18 men", "18 lb", "18 apples"):
        assert answers_match("18", reference), reference


def test_unicode_fractions_and_invisible_marks_in_a_reference():
    """(A hunt's finds) "The answer is 1½." against the reference 1½ scored 0 (the answer was read as 3/2, the
    reference never), and a reference holding a zero-width space or a byte-order mark matched nothing. (A bare ½ is
    no number of the text: "about ½ of them" after the answer was read as it, a review's find.)"""
    from execrl.extract import math_answer

    for text, reference in [("The answer is 1½.", "1½"), (r"\boxed{½}", "0.5"), (r"\boxed{0.5}", "½"),
                            (r"\boxed{-2.75}", "-2¾"), ("18", "18\u200b"), ("18", "\ufeff18")]:
        assert answers_match(math_answer(text), reference), (text, reference)
    assert not answers_match(math_answer(r"\boxed{1}"), "1½") and not answers_match("2", "½")
    assert math_answer("She has 12 apples left, about ½ of the original.") == "12"
    assert math_answer("So the answer is **4** 5-pound bags.") == "4"  # (bold is no power)


def test_a_power_written_as_python_writes_it():
    """(A hunt's find) "The answer is 2**10." was read as 2."""
    from execrl.extract import math_answer

    assert answers_match(math_answer("The answer is 2**10."), "1024")
    assert math_answer("Area is 48 m**2") == "48" and math_answer("so x = 3 ** 2 = 9") == "9"


def test_a_math_verify_that_verifies_nothing_is_refused_with_its_fix(tmp_path, monkeypatch):
    """(A hunt's find) math-verify 0.7 raised inside on a timeout of None, logged it and returned no answer: every
    math sample scored 0 without a word. The worker now checks 1/2 = 0.5 as it starts (here a stand-in package
    that verifies nothing, found first on the worker's path)."""
    import pytest

    from execrl.rewards.math_answers import _start

    fake = tmp_path / "math_verify"
    fake.mkdir()
    (fake / "__init__.py").write_text("def parse(text, **kw):\n    return []\n\n\ndef verify(a, b, **kw):\n"
                                      "    return False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match=r"math-verify cannot verify 1/2 = 0.5 .* install math-verify>=0.8"):
        _start()


@pytest.mark.parametrize("text,truth,right", [
    # an answer stated, then taken back: the later one stands
    ("48 + 24 = 72, so the answer is 72. But hold on, May is a third of April: 48/3 = 16, so the total is 64 clips.",
     "72", False),
    ("The answer is 72. Hmm, no: May is 16, so the total is 48 + 16 = 64.", "72", False),
    ("The answer is 72? Let me double-check. 48/3 = 16. So Natalia sold 64 clips.", "72", False),
    ("I think the answer is 70. Hmm, let me re-read the problem. So the total is 48 + 24 = 72.", "72", True),
    # a reasoning block's drafts, under the code format
    ("<think>so \\boxed{72}.</think>\n\nThe answer is 70.", "72", False),
    ("<think>First guess \\boxed{70}.</think>\n\nNatalia sold 72 clips altogether.", "72", True),
    # a percent sign outside a box
    ("The answer is 50%.", "0.5", True),
    ("So the probability is 50%.", "\\frac{1}{2}", True),
])
def test_realistic_answers_taken_back_drafted_or_in_percent(text, truth, right):
    """(A hunt's bank of 432 realistic completions: 13.7% of right answers scored 0, 6.8% of wrong ones 1) an earlier
    "the answer is" beat the final answer, a <think> draft's box beat the answer after it, and "50%" was read as 50."""
    from execrl.config.schema import RewardConfig
    from execrl.extract import extract
    from execrl.rewards import Sample, score
    from execrl.tasks import Problem

    problem = Problem(id="p", messages=[{"role": "user", "content": "How many clips? What is the probability?"}],
                      answer=truth, kind="math")
    sample = Sample(problem, text, extract(text, "code", want_code=False))
    assert score(sample, RewardConfig(components=[{"name": "math_correct"}])).total == float(right), text


def test_a_degree_sign_reads_as_degrees():
    """(A hunt's find) \\boxed{30°} scored 0 against 30 (30^\\circ scored 1)."""
    assert answers_match("30°", "30") and answers_match("30 °", "30") and answers_match("45°", "45^\\circ")
    assert not answers_match("31°", "30")


NATALIA = "Natalia sold 48 clips in April and 24 in May: 48 + 24 = 72 clips.\n"


@pytest.mark.parametrize("text,truth,right", [
    # a base model's next turn after its answer: the next few-shot question's answer, the user's next message
    (NATALIA + "#### 72\n\nQuestion: Tom has 3 apples and buys 2 more.\nAnswer: 3+2 = <<3+2=5>>5.\n#### 5", "72", True),
    (NATALIA + "#### 72\n\nQuestion: Tom has 3 apples and buys 2 more.\nAnswer: 3+2 = <<3+2=5>>5.\n#### 5", "5", False),
    (NATALIA + "The answer is 72.\n\nUser: What is 15 + 7?\n\nAssistant: 15 + 7 = 22. The answer is 22.", "72", True),
    (NATALIA + "\\boxed{72}\n\nHuman: And 10 more?\n\nAssistant: Then 72 + 10 = \\boxed{82}.", "82", False),
    (NATALIA + "\\boxed{72}\n<|im_start|>user\nAnd 10 more?<|im_end|>\n<|im_start|>assistant\n\\boxed{82}", "72", True),
    # a turn marker before any answer is read on: a restated problem, an answer that names no number
    ("Problem: 48 clips in April, half as many in May.\nSo 48 + 24 = 72.\n\\boxed{72}", "72", True),
    ("The answer is the total of both months.\nQuestion: how many in May? 24.\nSo 48 + 24 = 72.", "72", True),
    # a dash as a minus, mixed numbers, repeating decimals, numbers in words
    ("\\boxed{– 10}", "-10", True), ("\\boxed{–10}", "-10", True), ("\\boxed{−10}", "10", False),
    ("#### 1 1/2", "\\frac{3}{2}", True), ("\\boxed{1 1/2}", "\\frac{3}{2}", True), ("\\boxed{3\\ 1/2}", "3.5", True),
    ("\\boxed{2 1/4}", "\\frac{9}{4}", True), ("\\boxed{\\frac{9}{4}}", "2\\frac{1}{4}", True),
    ("\\boxed{2\\frac{1}{4}}", "\\frac{1}{2}", False), ("\\boxed{1 1/2}", "\\frac{1}{2}", False),
    ("\\boxed{0.\\overline{3}}", "\\frac{1}{3}", True), ("\\boxed{\\frac{1}{3}}", "0.\\overline{3}", True),
    ("\\boxed{0.\\bar{7}}", "\\frac{7}{9}", True), ("\\boxed{0.1\\overline{6}}", "1/6", True),
    ("\\boxed{0.\\overline{3}}", "0.3", False), ("\\boxed{1.\\overline{142857}}", "\\frac{8}{7}", True),
    ("\\boxed{0.333333}", "\\frac{1}{3}", True),  # (math-verify's rounding, as in NeMo RL)
    ("\\boxed{five}", "5", True), ("\\boxed{\\text{seventy-two}}", "72", True), ("The answer is five.", "5", True),
    ("\\boxed{five five}", "10", False), ("\\boxed{one hundred and five}", "105", True),
    # multiple choice (MATH's AMC problems): the letter chosen
    ("Check each choice.\nThe answer is (C).", "\\text{(C)}", True), ("The answer is C.", "\\text{(C)}", True),
    ("The correct option is (C).", "\\text{(C)}", True), ("\\boxed{(C) 12}", "\\text{(C)}", True),
    ("\\boxed{\\text{(C) } 12}", "\\text{(C)}", True), ("\\boxed{\\mathrm{(C)}}", "\\text{(C)}", True),
    ("\\boxed{\\text{(C)}}", "C", True), ("\\boxed{(B)}", "\\text{(C)}", False),
    ("The answer is (B). Option C fails.", "\\text{(C)}", False), ("\\boxed{12}", "\\text{(C)}", False),
    ("\\boxed{Cats}", "C", False),
    # a check of the answer after it: its last number is no answer
    ("Total: 48 + 24 = 72 clips.\n\nCheck: 72 - 24 = 48. \u2713", "72", True),
    ("So she sold 48 + 24 = 72 clips.\nVerification: 72 - 48 = 24 \u2714\n", "72", True), ("Check: 5", "5", True),
    # (a review's finds) a check whose result is new is the answer; a tick is no check; restated questions in
    # reasoning, an echoed instruction's empty box and a draft's answer cut nothing; hedged or extra letters choose none
    ("48/2 = 24 in May.\nVerify: 48 + 24 = 72", "72", True),
    ("Step 2: May = 24\nStep 3: 48 + 24 = 72 \u2713", "72", True),
    ("Total: 70\nCheck: 48 + 24 = 72, so actually the total is 72 \u2713", "72", True),
    ("May: 48 / 2 = \\boxed{24}.\n\n**Question:** What is the total?\n\n48 + 24 = 72, so \\boxed{72}.", "72", True),
    ("Put your final answer within \\boxed{}.\nProblem: How many clips?\n48 + 24 = 72\n\\boxed{72}", "72", True),
    ("The answer is the sum of 48 and 24.\nQuestion: what is 48 + 24?\nSo the answer is 72.", "72", True),
    ("Suppose the answer is 10. Then ...\nQ: Does 10 work? No.\nTry 72: works.\n\\boxed{72}", "72", True),
    ("<think>\nthe answer is 70\nProblem: reread. 48+24=72\n</think>\nThe answer is seventy-two.", "72", True),
    ("Answer: Let me think. 48/2 = 24.\nQ: How many total?\n48+24 = 72.\nAnswer: 72", "72", True),
    ("\\boxed{(A) or (C)}", "\\text{(A)}", False), ("\\boxed{A, B, C, D, E}", "\\text{(A)}", False),
    ("\\boxed{\\text{(B) or (D)}}", "\\text{(B)}", False), ("The answer is (A) or (C).", "\\text{(A)}", False),
    ("\\boxed{C = 5}", "C", False), ("\\boxed{A + B}", "A", False), ("\\boxed{(c)}", "\\text{(C)}", True),
    ("The answer is (C).\n\\boxed{\\text{all of the above}}", "\\text{(C)}", False),
    ("Answer: (C)\n\nQuestion: Which has most sides?\n(A) 3 (B) 4 (C) 5 (D) 6\nAnswer: (D)", "\\text{(D)}", False),
    ("48 + 24 = 72, which is choice (C).\nThe answer is (C).", "\\text{(C)}", True),
    ("The correct answer is $\\textbf{(C)}$.", "\\text{(C)}", True), ("Answer: (C) 72", "\\text{(C)}", True),
    ("\\boxed{two million three million}", "5000000", False),
    ("I think the answer is B, or maybe C.", "\\text{(B)}", False),
])
def test_a_base_models_next_turn_mixed_numbers_repeating_decimals_words_and_choices(text, truth, right):
    """(The answer bank's remaining misses) a base model that went on with the next few-shot question or a user's
    turn was graded on that turn's answer; math-verify read "1 1/2" and "2\\frac{1}{4}" as products, repeating
    decimals, an en dash's minus in a box, numbers in words and choice letters not at all; a check line after the
    answer was read as the answer."""
    from execrl.config.schema import RewardConfig
    from execrl.extract import extract
    from execrl.rewards import Sample, score
    from execrl.tasks import Problem

    problem = Problem(id="p", messages=[{"role": "user", "content": "How many clips?"}], answer=truth, kind="math")
    sample = Sample(problem, text, extract(text, "code", want_code=False))
    assert score(sample, RewardConfig(components=[{"name": "math_correct"}])).total == float(right), text
