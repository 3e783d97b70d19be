"""Answer and code extraction on messy model outputs."""

import pytest

from execrl.extract import answer_part, extract, fenced_blocks, last_boxed, math_answer


def test_last_python_block_wins_and_python_is_preferred():
    text = "```python\nprint(1)\n```\ntext\n```python\nprint(2)\n```\n```\nplain\n```\n```text\nnot code\n```"
    assert extract(text).code == "print(2)"
    assert extract("```\nx = 1\n```").code == "x = 1"  # any fence when there is no python one


def test_unclosed_fence_counts_only_without_a_closed_block():
    assert extract("```python\nprint(1)\n```\n```python\nprint(2") .code == "print(1)"
    e = extract("Sure!\n```python\nprint(3)\nprint(4)")
    assert e.code == "print(3)\nprint(4)" and not e.format_ok


def test_fences_inside_strings_do_not_split_blocks():
    text = '```python\ns = "```"\nprint(s)\n```'
    assert extract(text).code == 's = "```"\nprint(s)'


def test_no_code_is_an_outcome():
    e = extract("I think the answer is to use a loop.")
    assert e.code is None and not e.format_ok
    assert extract("```python\n\n```").code is None


def test_code_tags_and_auto():
    assert extract("<code>print(1)</code> then <code>print(2)</code>", code_style="tags").code == "print(2)"
    assert extract("```python\nprint(1)\n```\n<code>print(2)</code>", code_style="auto").code == "print(2)"
    assert extract("<code>print(2)</code>\n```python\nprint(1)\n```", code_style="auto").code == "print(1)"
    assert extract("<code>x</code>", code_style="fence").code is None
    assert extract("def f():\n    return 1\n", code_style="plain").code == "def f():\n    return 1"  # the whole answer
    assert extract("so:\n```python\nprint(1)\n```", code_style="plain").code == "print(1)"  # a block when there is one
    assert extract("<think>hm</think>\nprint(2)", "think", code_style="plain").code == "print(2)"
    assert extract("  \n", code_style="plain").code is None


def test_think_format_uses_what_follows_the_last_think():
    text = "<think>maybe ```python\nprint(0)\n``` no</think>\n```python\nprint(1)\n```"
    e = extract(text, answer_format="think")
    assert e.code == "print(1)" and e.format_ok
    assert not extract("<think>still thinking ```python\nprint(0)\n```", answer_format="think").format_ok


def test_reasoning_format():
    good = "<reasoning>add them</reasoning>\n<answer>\n```python\nprint(3)\n```\n</answer>"
    e = extract(good, answer_format="reasoning")
    assert e.code == "print(3)" and e.format_ok
    sloppy = "blah <answer>```python\nprint(3)\n```</answer>"
    e = extract(sloppy, answer_format="reasoning")
    assert e.code == "print(3)" and not e.format_ok


def test_fenced_blocks_reports_languages_and_closure():
    assert fenced_blocks("```py\na\n```\n```\nb") == [("py", "a", True), ("", "b", False)]


def test_math_answers():
    assert last_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{3}") == "3"
    assert last_boxed(r"\boxed{\frac{a}{b}}") == r"\frac{a}{b}"
    assert math_answer("work... #### 1,234") == "1,234"
    assert math_answer("She has 3 apples, then 5.") == "5"
    assert math_answer("no numbers here") is None


def test_tags_inside_fenced_code_are_just_code():
    text = '```python\nhtml = "<code>x</code>"\nprint(html)\n```'
    assert extract(text).code == 'html = "<code>x</code>"\nprint(html)'


def test_the_answer_after_hashes_is_the_number_a_human_reads():
    """After ####: words around the number ("18 dollars"), markdown emphasis, an equation, and "####" used as a
    markdown heading above the answer's sentence all give the number; LaTeX stays whole."""
    from execrl.extract import math_answer

    cases = {"#### 72": "72", "#### 18 dollars": "18", "#### **18**": "18", "#### 2 + 3 = 5": "5",
             "#### Step 1\nadd 3\n#### Final Answer\nJanet makes $18 every day.": "18",
             "#### \\frac{3}{4}": "\\frac{3}{4}", "#### -5": "-5", "#### 1,234": "1,234", "#### 3/4": "3/4"}
    assert {text: math_answer(text) for text in cases} == cases


def test_fences_as_commonmark_reads_them():
    """A block inside a list item loses its fence's indentation (it was an IndentationError); a ```c++ or ```cxx
    block is cpp and an info string's first word is the language (the sample output's block after it was graded);
    a closing fence may be longer than the opening one, and a ```` block holds ``` lines."""
    item = "1. Define:\n   ```python\n   def f(a):\n       return 4 * a\n   ```"
    assert extract(item).code == "def f(a):\n    return 4 * a"
    assert extract("```c++\nint main(){}\n```\nOutput:\n```\n3\n```", language="cpp").code == "int main(){}"
    assert extract('```python title="main.py"\nprint(1)\n```\n```\n1\n```').code == "print(1)"
    assert extract("```python\nprint(2)\n````").code == "print(2)"
    assert fenced_blocks("````markdown\nx\n```python\nprint(3)\n```\ny\n````") == [
        ("markdown", "x\n```python\nprint(3)\n```\ny", True)]


def test_the_last_number_as_written():
    """The typeset minus sign is a minus, '.5' is a half (it was read as 5: a false pass against 5), 1e3 a
    thousand (it was 3)."""
    from execrl.rewards.math_answers import answers_match

    assert math_answer("The temperature is \u22125") == "-5" and answers_match(math_answer("it is .5"), "0.5")
    assert not answers_match(math_answer("The answer is .5"), "5") and answers_match(math_answer("about 1e3"), "1000")


def test_a_fence_holds_a_string_with_a_line_separator_character():
    """A string literal may hold U+2028 or \\x1c, at which str.splitlines() splits: the block was cut there and the
    program graded syntax_error."""
    from execrl.extract import fenced_blocks

    code = 'S = "a\u2028b\x1cc"\nprint(len(S))'
    assert fenced_blocks(f"Here:\n```python\n{code}\n```\n") == [("python", code, True)]
    assert fenced_blocks("```python\nx = 1\n") == [("python", "x = 1", False)]  # (no line added at the end)


def test_a_humaneval_body_with_a_helper_named_after_the_entry_point_continues_the_prompt():
    """`def fib` as a substring (a nested fib_memo, a comment) read as the completion defining the entry point: the
    prompt was left out and a correct body graded syntax_error."""
    from execrl.rewards.outcome import program_of
    from execrl.tasks import Problem

    p = Problem("HumanEval/55", [], "code", metadata={"entry_point": "fib", "code_prefix": "def fib(n: int):\n"})
    body = "    def fib_memo(k):  # def fib is below\n        return k\n    return fib_memo(n)\n"
    assert program_of(p, body).startswith("def fib(n: int):\n    def fib_memo")
    full = "def fib(n):\n    return n\n"
    assert program_of(p, full) == full
    typed = Problem("HumanEval/0", [], "code", metadata={"entry_point": "f", "code_prefix":
                                                         "from typing import (\n    List,\n)\n\n\ndef f(xs: List[int]):\n"})
    own = "def f(xs: List[int]) -> int:\n    return 0\n"  # (List from the prompt's import, as the harness runs it)
    program = program_of(typed, own)
    assert program.startswith("from typing import (\n    List,\n)") and program.endswith(own)
    cyclic = Problem("HumanEval/38", [], "code", metadata={"entry_point": "decode", "code_prefix":
                                                           "def encode(s):\n    return s[::-1]\n\n\ndef decode(s):\n"})
    assert "def encode(s)" in program_of(cyclic, "def decode(s):\n    return encode(s)\n")  # (the prompt's helper)


def test_a_closing_fence_with_text_after_it_closes_the_block():
    """Completions that keep special tokens (```<|im_end|>), end a sentence on the fence (```.) or close a tag on it
    (```</answer>): the fence line was read as a new, empty, unclosed block and a correct program graded no_code; a
    fence at the end of the code's last line (`return x```) kept its backticks (syntax_error)."""
    body = "def f(x):\n    return x"
    for tail in ("<|im_end|>", ".", "</answer>", " :)"):
        e = extract(f"```python\n{body}\n```{tail}")
        assert (e.code, e.format_ok) == (body, True), tail
    assert fenced_blocks("```python\nx = 1\n```python\ny = 2\n```") == [("python", "x = 1", False), ("python", "y = 2", True)]
    e = extract(f"Here:\n```python\n{body}```\n\n")
    assert (e.code, e.format_ok) == (body, True)
    assert extract("```python\ns = '```'\n").code == "s = '```'"  # (a string's backticks stay)
    # an empty block after the code holds no answer
    assert extract(f"```python\n{body}\n```\n```python\n```").code == body
    assert extract(f"```python\n{body}\n```\nthen\n```python\n").code == body


def test_a_block_of_example_calls_after_the_solution_is_not_the_code():
    """Chat models write the solution, then a ```python block of example calls: the last block was graded alone (a
    NameError: runtime_error for a right answer). Where the tests call a name the last block does not define, the
    last block that defines it is the code; stdin/stdout tests (no name) keep the last block, as LiveCodeBench."""
    from execrl.sandbox import AssertTests, StdioTests
    from execrl.sandbox.spec import entry_names

    text = ("```python\ndef remove_Occ(s, ch):\n    return s.replace(ch, '', 1)\n```\nExample:\n"
            "```python\nprint(remove_Occ('hello', 'l'))\n```\n")
    entries = entry_names(AssertTests(['assert remove_Occ("hello","l") == "helo"', "assert len(remove_Occ('ab', 'a')) == 1"]))
    assert entries == {"remove_Occ"}
    assert extract(text, entries=entries).code.startswith("def remove_Occ")
    assert extract(text).code.startswith("print(")  # (no tests named: the last block)
    assert entry_names(StdioTests(["1\n"], ["1\n"])) == frozenset()
    both = text + "```python\ndef remove_Occ(s, ch):\n    return s\n```\n"  # a later definition wins
    assert extract(both, entries=entries).code == "def remove_Occ(s, ch):\n    return s"


def test_the_names_tests_call_are_their_calls_not_words_in_their_strings():
    """MBPP rows: `assert sum(10,15) == 6` names a solution after a builtin (the builtins were dropped, no entry was
    left, and the example block was graded); `remove_parenthesis(["python (chrome)"])` made `python` an entry, and a
    usage block assigning `string = ...` (a word of another test's string) counted as defining one."""
    from execrl.sandbox import AssertTests
    from execrl.sandbox.spec import entry_names

    assert entry_names(AssertTests(["assert sum(10,15) == 6", "assert sum(4,6) == 3"])) == {"sum"}
    entries = entry_names(AssertTests(['assert remove_parenthesis(["python (chrome)"])==("python")',
                                       'assert remove_parenthesis(["string(.abc)"])==("string")']))
    assert entries == {"remove_parenthesis"}
    text = ("```python\nimport re\ndef remove_parenthesis(items):\n    return re.sub(r' ?\\([^)]*\\)', '', items[0])\n"
            "```\nUsage:\n```python\nstring = \"python (chrome)\"\nprint(remove_parenthesis([string]))\n```\n")
    assert extract(text, entries=entries).code.startswith("import re")
    assert entry_names(AssertTests(["assert f(len([1]), max(2, 3)) == 1"])) == {"f"}  # builtins beside: dropped
    assert entry_names(AssertTests(["assert f(1 == 1"])) == {"f"}  # (not Python: the names before a parenthesis)


def test_an_unboxed_latex_answer_is_the_span_not_its_last_digit():
    """Without \\boxed{} or ####, a LaTeX span that ends the answer is the answer, as math-verify's extraction (NeMo
    RL's hf_math_verify) reads it: "is \\(\\frac{3}{4}\\)" was read as 4 and a right answer scored 0. A number after
    the span is still the answer, two prices are not a span, and many unclosed delimiters cost linear time."""
    import time

    from execrl.extract import last_math_span
    from execrl.rewards.math_answers import answers_match

    right = {"The answer is \\(\\frac{3}{4}\\).": "\\frac{3}{4}", "So x = $\\sqrt{2}$.": "\\sqrt{2}",
             "She has \\[ \\frac{1}{2} \\] left.": "\\frac{1}{2}", "answer: \\(2^{10}\\)": "1024",
             "x=\\(\\pi\\)": "\\pi", "$$x = 7$$": "7", "It is $18$.": "18"}
    for text, gold in right.items():
        assert answers_match(math_answer(text), gold), (text, math_answer(text))
    assert math_answer("It is $\\frac{3}{4}$ since 3 of 4 parts") == "4"  # (math-verify reads 4 too)
    assert math_answer("The answer is $\\frac{3}{4}$ since 3 of 4 parts") == "\\frac{3}{4}"  # (what it says is the
    # answer: math-verify reads 4, a difference docs/configs.md names)
    assert math_answer("It costs $5 and $6") == "6" and last_math_span("It costs $5 and $6") is None
    assert math_answer("a \\$ sign, then $x^2$ and \\$5") == "5"
    hostile = "\\(" * 200_000 + "$" * 3 + "1"
    t = time.perf_counter()
    assert math_answer(hostile) == "1" and time.perf_counter() - t < 2
    # lines of blanks before the end ("Answer:" lines were looked for from each one to the end: minutes), a "####"
    # followed by 50,000 asterisks (the mark's check backtracked over them: two minutes)
    for hostile in ("#### " + "*" * 50_000 + "\n" * 50_000 + "y", "#### " + "*" * 50_000 + "x" * 50_000):
        t = time.perf_counter()
        assert math_answer(hostile) is None and time.perf_counter() - t < 2


def test_no_false_pass_from_commas_exponents_or_numbers_after_the_answer():
    """Commas joined a tuple or a decimal comma into one integer ("(1,2)" passed against 12), the last number read a
    power's exponent ("2^10" passed against 10) or a number after the stated answer ("5 and not 6" against 6): each
    a reward for a wrong answer. Thousands separators, "the answer is", "Answer:" lines, tuples and intervals in
    LaTeX, and powers are read as what they say."""
    from execrl.rewards.math_answers import answers_match

    wrong = {"She has 3 cats. So the point is (1,2).": "12", "The roots are 1,2,3": "123", "It is 3,5 kg.": "35",
             "The answer is 2^10": "10", "The answer is 5 and not 6.": "6", "x = 12,5": "125"}
    right = {"Let a=3. The answer is $(1,2)$.": "(1,2)", "Let a=3. The answer is $[-2,7]$.": "[-2,7]",
             "The answer is 4.\n\nDouble check: 2 x 3 = 6, 6 - 2 = 4, and 3 + 4 = 7.": "4",
             "Step 1: 2 apples. Step 2: 2 more. The answer is 4.\nStep 3: profit.": "4", "It is 10^3.": "1000",
             "Total 1,080 dollars": "1080", "**Answer:** 42": "42", "It costs $1,250.50 in all": "1250.5",
             "Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.": "\\frac{3}{4}"}
    assert not [t for t, gold in wrong.items() if answers_match(math_answer(t), gold)]
    assert [t for t, gold in right.items() if not answers_match(math_answer(t), gold)] == []


def test_an_answer_stated_as_a_sum_is_what_the_sum_equals():
    """"So the answer is 48+24 = 72." read the first operand (48): GSM8K's test answers restated that way scored
    160 of 1,319 right (1,314 now; 1,319 before "answer is" was read). After "answer is" or "Answer:", a sentence holding "=" is read as what its last "="
    equals; an "=" in a later sentence, or inside a LaTeX span, is not the answer's."""
    from execrl.rewards.math_answers import answers_match

    right = {"So the answer is 48+24 = 72.": "72", "Answer: The total is 5 + 13 = 18": "18",
             "The answer is 18 - 3 = 15 apples.": "15", "the final answer is 15 gallons * 8 pints / gallon = 120 pints":
             "120", "The answer is 15, since 20 - 5 = 15.": "15", "Thus, Eliza gets a total of $400 + $60 = 460.\n"
             "So the answer is $400 + $60 = 460.": "460", "The answer is $48+24=72$.": "72",
             "So the answer is Mr. Boarden needs 24 x 24 = 576.": "576", "The answer is 4. Check: 2 x 3 = 6": "4",
             "The answer is \\(x = \\frac{1}{2}\\)": "\\frac{1}{2}", "The answer is 15; then x = 3 fails.": "15"}
    assert [(t, math_answer(t)) for t, gold in right.items() if not answers_match(math_answer(t), gold)] == []


def test_what_follows_answer_is_in_another_sentence_a_unit_or_escaped_dollars_is_not_the_answer():
    """"I'm not sure the answer is right. 5 * 6 = 30" read 5 (the next sentence's first operand), "The answer is not
    12. ... 15" read 12, "60 \\(\\text{km/h}\\)" the unit, "\\$12 per hour, ... \\$96" the text between the
    dollars, "$2 and there are 3, so 2 \\times 3 = 6$" that prose as LaTeX, "The answer is \\frac{3}{4}." its 3; an
    answer taken back ("Wait, actually"), a description ("The answer is obtained by multiplying the 9 eggs"), a
    markdown "#### Step 2" heading and the exponent of "48 m^2" were each read as the answer."""
    from execrl.rewards.math_answers import answers_match

    right = {"I'm not sure the answer is right. Let me recompute: 5 * 6 = 30.": "30",
             "The answer is not 12. The correct total is 15.": "15", "The speed is 60 \\(\\text{km/h}\\).": "60",
             "So Natalia sold 72 \\(\\text{clips}\\) altogether.": "72", "The area is 25 $\\text{cm}^2$.": "25",
             "So the answer is \\$12 per hour, and for 8 hours she earns \\$96.": "12",
             "Each costs $2 and there are 3, so 2 \\times 3 = 6$ total": "6", "The answer is \\frac{3}{4}.": "3/4",
             "The answer is \\sqrt{2} meters": "\\sqrt{2}", "Answer: \\dfrac{7}{8}": "7/8",
             "So the answer is 20.\n\nWait, actually I miscounted: she sells 9 eggs, so 9 * 2 = 18.": "18",
             "The answer is obtained by multiplying the 9 eggs by $2, which gives 18.": "18",
             "#### Step 1: Eggs sold\n16 - 3 - 4 = 9\n#### Step 2: Money\n9 * 2 = 18\n\nJanet makes $18 every day.": "18",
             "Therefore, the area is 48 m^2.": "48", "we obtain \\(32\\) \\(\\text{in total}\\).": "32",
             "The answer is $\\$18$.": "18", "#### 18 dollars": "18", "#### Final Answer\n\n18": "18",
             # numbered and "Step" headings with a sum or a number in them (read as the mark, they gave 2, 3 and 9)
             "#### 1. Eggs left\n16 - 3 - 4 = 9 eggs.\n\n#### 2. Earnings\n9 x $2 = $18.\n\nJanet makes **$18** every "
             "day.": "18", "#### 3. Conclusion\nJanet makes $18 per day.": "18",
             "#### Step 2: Earnings = 9 x 2\nShe makes 9 x 2 = 18 dollars.\n\nThe answer is 18.": "18",
             "#### 18.": "18", "#### 18. \n": "18",
             # a reason after the answer, and words after it that take nothing back, leave the answer
             "The answer is 18, because she sells 16 - 3 - 4 = 9 eggs at $2 each.": "18",
             "The answer is 18 because after eating and baking she has 16 - 3 - 4 = 9 eggs left to sell.": "18",
             "The answer is 18.\n\nLet me recap: she lays 16 eggs, eats 3, bakes 4 and sells the remaining 9.": "18",
             "**Answer:** 18\n\nNote: a common mistake is to forget the 3 eggs she eats for breakfast.": "18",
             "The answer is 18.\n\nActually, that matches the 9 eggs x 2 computation.": "18"}
    assert [(t, math_answer(t)) for t, gold in right.items() if not answers_match(math_answer(t), gold)] == []


@pytest.mark.parametrize("text, expected", [
    ("The answer is -$5.", "-5"),  # (read as 5 before: the sign was cut off by the dollar after it)
    ("She lost money: -$5 in total.", "-5"),
    ("#### -$5", "-5"),
    ("Answer: -\\$12.50", "-12.50"),
    ("So he has \u2212$3 left.", "-3"),
    ("The change is $10-$5 = $5", "5"),  # a sum: a digit before its minus
])
def test_a_negative_amount_keeps_its_sign(text, expected):
    assert math_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("The answer is $5 per hour * 8 hours = $40.", "40"),  # (the units read as a reason before: 5)
    ("So the answer is 4 packs of 6 cans = 24 cans.", "24"),
    ("Answer: 2 hours and 30 minutes = 150 minutes", "150"),
    ("The answer is 18, because she sells 16 - 3 - 4 = 9 eggs", "18"),  # a reason after the answer
    ("The answer is 18 since 16 - 3 - 4 = 9 eggs", "18"),
])
def test_units_in_a_stated_product_are_no_reason(text, expected):
    assert math_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("She sells 16 - 3 - 4 = 9 eggs, so she makes **18** dollars.", "18"),  # (a hunt's find: the bold 18 was read as
    ("Janet sells 9 eggs.\n\nSo the total is **18**", "18"),  # an exponent, "s**" a unit's power: 9 was graded)
    ("**Final Answer**\n18", "18"),
    ("The area is 48 m^2", "48"),  # (a unit's exponent is still none)
    ("The area is 48 m**2", "48"),
    ("The area is 48 m ** 2", "48"),
])
def test_a_bold_number_is_no_exponent(text, expected):
    assert math_answer(text) == expected


def test_runs_of_spaces_around_a_power_cost_no_more_than_their_length():
    """(A hunt's find) "2^" and 8,000 newlines took 3.9 s of the trainer's CPU (two runs of spaces side by side, each
    split tried), a box of "1+", 8,000 spaces and x 0.23 s."""
    import threading

    from execrl.rewards.math_answers import answers_match

    done = threading.Event()
    texts = ["The area is 2^" + "\n" * 100_000 + "done", "2^3" + " " * 100_000 + "x",
             "\\boxed{1+" + " " * 100_000 + "x}"]
    worker = threading.Thread(target=lambda: ([answers_match(math_answer(t) or "", "18") for t in texts], done.set()),
                              daemon=True)
    worker.start()
    assert done.wait(60), "not read in 60 s"


@pytest.mark.parametrize("text, reference, correct", [
    ("#### 3 / 4", "0.75", True),  # (a hunt's find: a sum after #### was read as its first term: 3, 18, 1)
    ("#### 3 / 4", "3", False),
    ("#### 18 - 20", "18", False),
    ("#### 2 * 9", "18", True),
    ("#### 3 / 4.", "0.75", True),
    ("#### 1,000 - 200", "800", True),
    ("The answer is 1,000 - 200.", "800", True),  # (read as 1 before)
])
def test_a_sum_after_the_mark_is_the_sums_value(text, reference, correct):
    from execrl.rewards.math_answers import answers_match

    assert answers_match(math_answer(text), reference) is correct


@pytest.mark.parametrize("text, reference, correct", [
    ("The answer is 3 1/2 hours.", "3", False),  # (read as 3 before, and scored 1)
    ("The answer is 3 1/2 hours.", "3.5", True),
    ("It takes 2 1/2 hours.", "2.5", True),
    ("#### -2 1/2", "-2.5", True),
    ("\\boxed{2 1/2}", "5/2", True),
    ("halves: 1/2 1/3 1/4", "0.25", True),
])
def test_a_mixed_number_is_its_value(text, reference, correct):
    from execrl.rewards.math_answers import answers_match

    assert answers_match(math_answer(text), reference) is correct


@pytest.mark.parametrize("text, reference, correct", [
    ("The answer is either 18 or 20.", "18", False),  # (18 and 20 both scored 1 before: the hedge paid)
    ("The answer is either 18 or 20.", "20", False),
    ("The answer is 18 dollars or 20 dollars.", "18", False),
    ("The answer is between 18 and 20.", "18", False),
    ("The answer is at least 18.", "18", False),
    ("The answer is 18 because either 3 or 4 eggs break.", "18", True),  # (the alternatives are the reason's)
    ("The answer is 18, or $18.00.", "18", True),
    ("#### 18 (or 20)", "18", False),  # (a hunt's find: the #### line's hedges in parentheses, after a comma, a
    ("#### 18, or 20", "18", False),  # range or "and" scored 1 on their first number, where "18 or 20" did not)
    ("#### 18 to 20", "18", False),
    ("#### 18 and 20", "18", False),
    ("The answer is 18 to 20.", "18", False),
    ("The answer is 18 (or possibly 20).", "18", False),
    ("The answer is 18 and 20.", "20", False),
    ("#### 18 (or $18.00)", "18", True),
    ("**Answer:** 18 to 20", "20", False),  # (a hunt's find: the hedge line kept its "**" and math-verify read 20)
    ("The answer is **18 to 20**.", "18", False),  # (the closing "**" read as a product)
    ("The answer is `18 and 20`", "20", False),
    ("#### 18 through 20", "18", False),
    ("#### 18 or 18 + 2", "18", False),  # (18 restated, read from the sum's first term)
    ("The answer is 0.25, or 25%.", "0.25", True),  # (a review's find: restated as a percent or in words, scored 0
    ("The final answer is 7, or seven.", "7", True),  # once the hedge rule read commas)
    ("The answer is 7, or eight.", "7", False),
    ("\\boxed{1 and 2}", "1, 2", True),  # (a list's "and" is a range only against one number)
    ("The answer is 3 to 1", "3:1", True),  # (and a ratio's "to")
    ("#### 6 to 2", "3:1", True),
    ("#### 3 to 2", "3:1", False),
    ("The answer is 5 and not 6.", "5", True),
    ("The answer is 4, and 4 + 3 = 7.", "4", True),
    ("The answer is 18\u201320.", "18", False),  # (a range's en or em dash, and a hedge in words, paid their first
    ("#### 18 \u2014 20", "18", False),  # number)
    ("The answer is 18\u201420 apples.", "18", False),
    ("The answer is 18 (maybe 20).", "18", False),
    ("The answer is $18 (perhaps $20)", "18", False),
    ("The final answer is 18, though it could be 20.", "18", False),
    ("The answer is 18 \u2014 or 20.", "18", False),
    ("The answer is 18 (maybe 18.0).", "18", True),
    ("The answer is 18, probably.", "18", True),
    ("#### 16 \u2013 3 \u2013 4 = 9", "9", True),  # (a sum's dashes, not a range's)
    ("The answer is 7 (pages 10\u201312).", "7", True),
    ("The answer is 42 \u2014 6 boxes of 7 each.", "42", True),  # (a review's find: a remark after a dash, and a
    ("#### 18 \u2014 2 more than yesterday", "18", True),  # number after "probably" that is no answer, paid nothing)
    ("The answer is 18 \u2013 2(3) = 12.", "12", True),
    ("Answer: 18, probably 2 more would be safer", "18", True),
    ("The answer is 1,000\u20131,200.", "1000", False),
    ("#### 72 else 73", "72", False),  # (a hunt's finds: these scored 1)
    ("#### 72, alternatively 73", "72", False),
    ("\\boxed{72 \\text{ (possibly } 73\\text{)}}", "72", False),
    ("\\boxed{72 \\text{ if } n \\text{ even, } 73 \\text{ otherwise}}", "72", False),
    ("\\boxed{\\begin{cases} 73 & n \\text{ odd} \\\\ 72 & n \\text{ even}\\end{cases}}", "72", False),
])
def test_a_hedged_answer_equals_no_reference(text, reference, correct):
    from execrl.rewards.math_answers import answers_match

    assert answers_match(math_answer(text), reference) is correct


@pytest.mark.parametrize("text, reference, correct", [
    ("The answer is 1 080.", "1080", True),  # (read as 1 before)
    ("She has 1\u202f080 dollars.", "1080", True),  # a narrow no-break space, as typeset, anywhere
    ("The answer is 4 150 ml servings.", "4", True),  # a plain space: only where the number ends its sentence
    ("#### 4 150 ml servings", "4", True),
    ("So after day 3 120 cookies remain.", "120", True),
    ("In week 4 200 people attended.", "200", True),
    ("She has 1\u2009234\u2009567.5 dollars.", "1234567.5", True),
    ("The answer is 12 345.", "12345", True),
    ("\\boxed{1 080}", "1080", True),
    ("#### 1 080", "1080", True),
    ("In 2023 100 people came.", "100", True),  # four digits are no group of three
    ("He buys 2 300-gram bags.", "300", True),  # a count, then a quantity: two numbers
    ("She fills 3 250ml cups.", "250", True),
    ("It takes 2 1/2 hours.", "2.5", True),  # still a mixed number
    ("\\boxed{2 100/3}", "106/3", True),
])
def test_thousands_separated_by_spaces(text, reference, correct):
    from execrl.rewards.math_answers import answers_match

    assert answers_match(math_answer(text), reference) is correct


@pytest.mark.parametrize("text, reference, correct", [
    ("#### 2nd step\nShe earns 9 * 2 = 18 dollars.", "18", True),  # an ordinal heading (read as 2 before)
    ("\\boxed{18 dollars}", "18", False),  # words in a box without \text: no answer, as math-verify (NeMo RL) reads
    ("\\boxed{18 thousand}", "18", False),  # it (read as units, magnitudes and hedges paid: "18 OR MORE")
    ("\\boxed{18 OR MORE}", "18", False),
    ("\\boxed{18 (or 20)}", "20", False),  # alternatives or a bound in a box (math-verify paid one of them)
    ("\\boxed{18 \\lor 20}", "20", False),
    ("\\boxed{\\geq 18}", "18", False),
    ("\\boxed{18 \\text{ or more}}", "18", False),
    ("\\boxed{x \\geq 3}", "x \\geq 3", True),  # (a reference that is a bound)
    ("The answer is 18 or more.", "18", False),
    ("#### 18 or more", "18", False),
    ("The answer is 18 or twenty.", "18", False),
    ("\\[ 16 - 3 - 4 = 9,\\quad 9 \\times 2 = 18 \\]", "18", True),  # worked sums ending the text: their result
    ("\\[ 16 - 3 - 4 = 9,\\quad 9 \\times 2 = 18 \\]", "9", False),
    ("\\( 9 \\times 2 = 18 \\)", "18", True),
    ("\\[ 9 \\times 2 = 18 \\text{ dollars} = 1800 \\text{ cents} \\]", "18", True),  # one chain: whole
    ("\\[ 16 - 3 - 4 = 9,\\quad 9 \\times 2 = 18 \\quad\\text{or}\\quad 9 \\times 2.5 = 22.5 \\]", "22.5", False),
])
def test_headings_words_in_a_box_and_worked_sums(text, reference, correct):
    from execrl.rewards.math_answers import answers_match

    assert answers_match(math_answer(text), reference) is correct


def test_a_line_of_digit_groups_is_read_in_linear_time():
    """A run of space-separated groups of three digits (16,000 of them, 64 KB: a model's output) was read again from
    each group's start, a plain space's grouping given back group by group: 10 s for one answer."""
    import time

    start = time.perf_counter()
    math_answer("x " + "000 " * 16000 + "abc")
    math_answer("x " + "000 " * 16000 + "0000.")
    math_answer("1" * 64000)  # (LaTeX's coefficient was read from each digit: 19 s at 32,000 digits)
    assert time.perf_counter() - start < 1


def test_the_reasoning_format_is_read_in_linear_time():
    """Thousands of <answer> tags never closed, or of </reasoning><answer> pairs, were searched again from each one
    (the lazy patterns of the answer's search and the format's check): 12 s for one 160 KB answer."""
    import time

    start = time.perf_counter()
    assert extract("x " + "<answer>" * 20000 + " y", "reasoning", want_code=False).format_ok is False
    assert extract("<reasoning>" + "</reasoning> <answer>" * 8000 + "<answer>1</answer>z", "reasoning",
                   want_code=False).format_ok is False
    assert time.perf_counter() - start < 1
    for text, answer, ok in [("<reasoning>r</reasoning>\n<answer> 5 </answer>\n", "5", True),
                             ("<reasoning>r</reasoning><answer>x <answer>5</answer>", "5", True),
                             ("<answer>5</answer><reasoning>r</reasoning>", "5", False),
                             ("<reasoning>r</reasoning> text <answer>5</answer>", "5", False)]:
        assert answer_part(text, "reasoning") == (answer, ok), text


def test_tilde_fences_invisible_marks_tab_indents_and_an_output_block_after_the_program():
    """(A hunt's finds) each scored a right program 0: a ~~~ fence (CommonMark's other kind), a byte-order mark or a
    zero-width space before the fence, a fence indented by a tab (its lines kept the tab: an IndentationError), and
    an untagged block of the example's output after the untagged program (the output was graded)."""
    program = "n = int(input())\nprint(n * n)"
    tabbed = "1. Solution:\n\t```python\n\t" + program.replace("\n", "\n\t") + "\n\t```"
    for text in ["~~~python\n" + program + "\n~~~", "\ufeff```python\n" + program + "\n```",
                 "\u200b```python\n" + program + "\n```", tabbed,
                 "```\n" + program + "\n```\nOutput for 3:\n```\n9\n```",
                 "~~~~\n```python\nprint(0)\n```\n~~~~\n```python\n" + program + "\n```"]:
        assert extract(text).code == program, text
    # a line of tildes never closed is a separator, not a block that swallows the code after it
    assert fenced_blocks("Plan\n~~~~~~~~\nSo:\n```python\nprint(1)\n```\n") == [("python", "print(1)", True)]
    assert fenced_blocks("```\n~~~\nx\n```") == [("", "~~~\nx", True)]  # (a ~~~ line inside a ``` block is its text)
    # (a review's finds) tab-indented code under a space-indented fence keeps its tabs; tilde lines beside ``` fences
    # are separators
    tabs = "def f(x):\n\tif x:\n\t\treturn 1"
    assert extract("1. Solution:\n   ```python\n" + tabs + "\n   ```").code == tabs
    assert extract("```\nprint(1)\n```\n~~~~~~~~\nThis runs in O(n).\n~~~~~~~~").code == "print(1)"
    assert extract("~~~~~~~~\n```python\nprint(1)\n```\n~~~~~~~~").code == "print(1)"


def test_plain_code_loses_a_sentencepiece_words_space_and_keeps_an_indented_body():
    """A completion decoded after its prompt starts with the space of its first word where a sentencepiece
    tokenizer wrote one ('▁def'): as a whole program it did not compile (a review's find). A HumanEval body's
    indentation is kept."""
    assert extract(" def f(x):\n    return x\n", "code", "plain").code == "def f(x):\n    return x"
    assert extract("    return x\n", "code", "plain").code == "    return x"


def test_the_plain_transcripts_turn_end_is_no_part_of_an_answer():
    """(A review's find) With no chat template answers stop at a next '\\nUser:' line, which stays at the text's end:
    a bare program (code_style plain) that ended so was a syntax error."""
    from execrl.extract import extract

    got = extract("def add(a, b):\n    return a + b\nUser:", "code", "plain")
    assert got.code.rstrip() == "def add(a, b):\n    return a + b"
