"""Pull the answer out of a model's completion: the code to run, or the final answer of a math
problem.

Answer formats (`answer_format`):
  code       the completion is (or contains) a code block
  reasoning  <reasoning>...</reasoning><answer>...</answer>: the answer is inside the last <answer> tags
  think      <think>...</think> then the answer: everything after the last </think> (the <think> may be the chat
             template's, at the end of its generation prompt)
Code is the last fenced block (```python preferred, any fence otherwise; an unclosed final fence counts when
no block is closed; where the tests call a name the last block does not define, the last block that defines it) or the last <code>...</code> (`code_style`: fence, tags, or auto = either, latest wins; plain =
as auto, else the whole answer is the code: what a base model or a completions file without fences holds).
"No code found" is an outcome of its own (code is None), never an exception.
"""

from __future__ import annotations

import collections
import itertools
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from execrl.sandbox.languages import ALIASES

ANSWER_FORMATS = ("code", "reasoning", "think")
CODE_STYLES = ("fence", "tags", "auto", "plain")
READ_TAGS = frozenset(f"<{end}{name}>" for name in ("think", "reasoning", "answer", "code", "action")
                      for end in ("", "/"))
# (the tags a completion is read by: answer formats, code tags, a game's or puzzle's move; a tokenizer may make one a
# special token, which decoding would otherwise drop: rollout.completion.text_of)


@dataclass(frozen=True)
class Extracted:
    answer: str  # the part of the completion that holds the answer (after </think>, inside <answer>)
    format_ok: bool  # the completion follows the answer format (and, for code, holds a closed code block)
    code: str | None = None  # None: no code found


def answer_part(completion: str, answer_format: str, thinking: bool = False) -> tuple[str, bool]:
    """(the part that holds the answer, whether the completion follows the format); `thinking`: the chat template's
    generation prompt opened the <think> block (prompts.opens_think: DeepSeek-R1's distills, QwQ), so the completion
    has no <think> of its own (its format reward was 0 for all, a hunt's find)."""
    if answer_format == "think":
        if "</think>" not in completion:
            return "", False
        head, _, tail = completion.rpartition("</think>")
        opened = head.count("<think>")
        return tail.strip(), opened == 0 if thinking else opened == 1 and head.lstrip().startswith("<think>")
    if answer_format == "reasoning":  # (the last </answer> and the last <answer> before it, found from the end: a
        # search from each <answer> of thousands never closed took seconds)
        close = completion.rfind("</answer>")
        start = completion.rfind("<answer>", 0, close) if close >= 0 else -1
        if start < 0:
            return "", False
        return completion[start + len("<answer>"):close].strip(), _reasoning_then_answer(completion.strip())
    return completion, True


_SPLIT = re.compile(r"</reasoning>\s*<answer>")


def _reasoning_then_answer(text: str) -> bool:
    """Whether `text` is <reasoning>...</reasoning> <answer>...</answer> (what a fullmatch of that pattern with lazy
    parts says, in linear time: the lazy pattern took seconds on thousands of </reasoning> tags)."""
    if not (text.startswith("<reasoning>") and text.endswith("</answer>")):
        return False
    split = _SPLIT.search(text, len("<reasoning>"))
    return split is not None and split.end() <= len(text) - len("</answer>")


_FENCE = re.compile(r"`{3,}|~{3,}")  # (CommonMark's two kinds: a ~~~ block closes at ~~~ only)
_INFO = re.compile(r"\s*[\w{+#-]")  # what an info string (a language) starts with
INVISIBLE = "\ufeff\u200b\u200c\u200d\u2060"  # format characters no one sees (a byte-order mark, a zero-width
# space): before a fence, in a reference answer


def fenced_blocks(text: str, tildes: bool = True) -> list[tuple[str, str, bool]]:
    """(language, code, closed) for each ``` or ~~~ block, as CommonMark reads fences: a fence is a line that starts
    with 3 or more backticks (tildes), closed by a line of at least as many alone (a ```` block holds ``` lines); its
    language is the info string's first word (```python title="main.py": python); its lines lose the indentation
    of its opening fence, spaces or tabs (a block inside a list item). Where models differ from CommonMark: a fence
    with an info string inside an open block opens a new one (the model never closed the first); a fence followed by
    text that is no info string (```<|im_end|>, ```., ```</answer>) closes the open block; a block left open at the
    end whose last line ends in ``` (`return x```) was closed there; a ~~~ block never closed was a line of tildes
    (a separator), read again as text."""
    blocks, lang, buf, fence, indent = [], "", [], "", ""  # fence: the open block's backticks or tildes ("": none)
    tildes = tildes and "```" not in text  # (~~~ fences only in a text of no ``` fence: tilde lines are separators)
    # lines end at \n, \r\n or \r only (splitlines() also splits at U+2028 or \x1c, which a string literal may hold)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line in lines[:-1] if lines[-1] == "" else lines:
        stripped = line.strip().lstrip(INVISIBLE)
        ticks = _FENCE.match(stripped)
        run = ticks.group() if ticks and (tildes or stripped[0] == "`") else ""
        if fence and run[:1] == fence[0] and len(run) >= len(fence) and (
                stripped == run or not _INFO.match(stripped[len(run):])):  # its closing fence
            blocks.append((lang, "\n".join(buf), True))
            fence = ""
            continue
        if run and (not fence or run[0] == fence[0] and len(run) >= len(fence)):  # an opening fence (inside a block:
            if fence:  # the block was never closed)
                blocks.append((lang, "\n".join(buf), False))
            info = stripped[len(run):].strip().lower().split()
            fence, indent, lang, buf = run, line[:len(line) - len(line.lstrip(" \t"))], info[0] if info else "", []
            continue
        if fence:  # (the fence's own indent where the line has it, else as many spaces at most: a tab-indented
            buf.append(line[len(indent):] if line.startswith(indent) else  # body under a space-indented fence keeps
                       line[min(len(indent), len(line) - len(line.lstrip(" "))):])  # its tabs: a review's find)
    if fence:
        while buf and not buf[-1].strip():
            buf.pop()
        tail = buf[-1].rstrip() if buf else ""
        closed = tail.endswith(fence) and bool(tail.rstrip(fence[0])) and not tail.endswith(fence[0] + fence)
        if closed:
            buf[-1] = tail[:-len(fence)]
        elif fence[0] == "~":
            return fenced_blocks(text, tildes=False)
        blocks.append((lang, "\n".join(buf), closed))
    return blocks


_CANON = {**ALIASES, "py3": "python"}  # a fence tag's language


def same_language(tag: str, language: str) -> bool:
    """Whether a fence's tag names `language` (py, python3: python; c++, cxx: cpp)."""
    return _CANON.get(tag, tag) == _CANON.get(language.lower(), language.lower())


def defines(code: str, names: frozenset[str]) -> bool:
    """Whether code defines one of `names` at its top level (def, class, or an assignment)."""
    return any(re.search(rf"^(?:(?:async\s+)?def|class)\s+{re.escape(n)}\b|^{re.escape(n)}\s*=", code, re.M)
               for n in names)


def _from_fences(text: str, language: str, entries: frozenset[str] = frozenset()) -> tuple[str | None, bool, int]:
    blocks = [b for b in fenced_blocks(text) if b[1].strip()]  # an empty block holds no answer
    closed = [b for b in blocks if b[2]]
    for pool in ([b for b in closed if same_language(b[0], language)], closed, [b for b in blocks if not b[2]]):
        if pool:
            lang, code, ok = pool[-1]
            if entries and not defines(code, entries):  # a usage example after the solution (print(f(...)) in a
                code = next((c for _, c, _ in reversed(pool) if defines(c, entries)), code)  # block of its own)
            if not _LETTER.search(code):  # (a block of the example's output after the program, "9": no program)
                code = next((c for _, c, _ in reversed(pool) if _LETTER.search(c)), code)
            return code, ok, max(text.rfind("```"), text.rfind("~~~"))
    return None, False, -1


_LETTER = re.compile(r"[^\W\d_]")  # what any program's text holds (a name, a keyword)


def _from_tags(text: str) -> tuple[str | None, bool, int]:
    cell = last_tag_cell(text)
    if cell is None:
        return None, False, -1
    return cell[1].strip("\n"), True, cell[0]


def last_tag_cell(text: str) -> tuple[int, str, int] | None:
    """(where its <code> tag starts, the code, where its </code> ends) of the last <code>...</code> cell. Its opening
    tag: the last one since the cell before that opens its line, else the last one there ("I will put it in a <code>
    block.\n<code>\n..." is the second's: a non-greedy match from the first took the prose into the code)."""
    close = text.rfind("</code>")
    if close < 0:
        return None
    before = text.rfind("</code>", 0, close)
    since = before + len("</code>") if before >= 0 else 0
    opens = [m.end() - len("<code>") for m in LINE_OPEN.finditer(text, since, close)]
    start = opens[-1] if opens else text.rfind("<code>", since, close)
    return (start, text[start + len("<code>"):close], close + len("</code>")) if start >= 0 else None


LINE_OPEN = re.compile(r"(?m)^[ \t]*<code>")


PLAIN_TURN_END = "\nUser:"  # where a model writing the plain transcript (no chat template) goes on to a turn of its
# own: the stop string such runs end at (prompts.plain_stops), which stays at the end of the text and is no answer's


def extract(completion: str, answer_format: str = "code", code_style: str = "fence",
            language: str = "python", want_code: bool = True, entries: frozenset[str] = frozenset(),
            thinking: bool = False) -> Extracted:
    """The answer and the code of a completion. `entries`: the names the tests call (spec.entry_names); where the
    last block defines none of them and an earlier one does (the solution, then a block of example calls), that
    block is the code. `thinking`: as answer_part's."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    if code_style not in CODE_STYLES:
        raise ValueError(f"code_style must be one of {CODE_STYLES}, got {code_style!r}")
    completion = completion.removesuffix(PLAIN_TURN_END)  # (a bare program that ended so was a syntax error)
    answer, format_ok = answer_part(completion, answer_format, thinking)
    if not want_code:
        return Extracted(answer, format_ok)
    found = []
    if code_style in ("fence", "auto", "plain"):
        found.append(_from_fences(answer, language, entries))
    if code_style in ("tags", "auto", "plain"):
        found.append(_from_tags(answer))
    found = [f for f in found if f[0] is not None]
    if not found and code_style == "plain":  # (less one space before the first word: a sentencepiece word's, as
        code = answer.strip("\n")  # decoded after a prompt, which no program starts with)
        code = code[1:] if code.startswith(" ") and not code.startswith("  ") else code
        return Extracted(answer, format_ok, code if code.strip() else None)
    if not found:
        return Extracted(answer, False, None)
    code, closed, _ = max(found, key=lambda f: f[2])
    return Extracted(answer, format_ok and closed, code if code.strip() else None)


_BOXED = re.compile(r"\\boxed\s*\{")


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    i, depth = starts[-1], 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


NUMBER = re.compile(r"[-\u2212]?(?:\d{1,9}[ \t](?=\d{1,9}/\d)\d{1,9}/\d{1,9}(?![\d/.])|\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|"
                    r"\d{1,3}(?:[\u00a0\u2009\u202f]\d{3})+(?![\w/-])(?:\.\d+)?|"
                    r"(?<!\d)(?<!\d )\d{1,3}(?: \d{3})++(?=(?:\.\d+)?(?:[.,;:!?)]+(?:\s|$)|\s*$))(?:\.\d+)?|"
                    r"\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?")
# (a mixed number first: "3 1/2 hours" is 7/2, not 3; \u2212: the minus sign, as typeset; ".5" is a half, not 5; 1e3
# a thousand, not 3; commas only as thousands separators: "(1,2)" is 1 and 2, not 12; a no-break or a thin space
# between groups of three digits (SI's style, as typeset) too: "1 080" is 1080, not 080, but not "2 300-gram bags"; a
# plain space only where the number ends its sentence or line: "The answer is 1 080." is 1080, "4 150 ml servings" 4
# servings of 150 ml, "on day 3 120 cookies" day 3's 120; read from a run's first group only, and its groups never
# given back: a line of 16,000 groups took 10 s)
GROUPS = re.compile(r"(?<=\d)[, \u00a0\u2009\u202f](?=\d{3}(?!\d))")  # thousands separators within a number
POWER = re.compile(rf"(?:{NUMBER.pattern})(?:(?:\s*\^\s*(?:\{{\s*)?|\*\*(?=\d))(?:{NUMBER.pattern})(?:\s*\}})?)*")
# (2^10, 2**10: 1024, not 10; ** only between digits: bold **4** is no power; spaces only before a brace it holds:
# two runs of them side by side took quadratic time, 3.9 s for "2^" and 8,000 newlines)
ANSWER_IS = re.compile(r"(?im)\banswer is\b(?!\s+not\b):?|^[ \t*_#]*+(?:final )?answer[*_]*\s*:")  # "the final answer is", "Answer:"
FIRST_SPAN = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|(?<!\\)\$\$(.+?)\$\$|(?<!\\)\$([^$]+?)(?<!\\)\$")  # (\$: a dollar)
BARE_TEX = re.compile(r"\s*([-\u2212]?(?:\d+(?:\.\d+)?\s*)?\\[a-zA-Z].*?)(?=\s+[a-zA-Z]{2,}\b|[.,;:]?\s*$)")  # (to the
# first word; its sign and coefficient with it: -\frac{1}{2}, 2\sqrt{3}, 1.8 \times 10^{5})
# LaTeX written without delimiters, a run of commands, their braces (one level nested), scripts, digits and operators,
# with its sign and coefficient: "The probability is \frac{1}{6}." is 1/6, not its last digit (a coefficient read from
# its first digit, whole: from each digit of a long run, a run of 32,000 digits took 19 s)
BARE_RUN = re.compile(r"(?:[-\u2212]?(?<![\d.])\d++(?:\.\d++)?\s*+|[-\u2212])?\\[a-zA-Z]+(?:[ \t]*(?:\\[a-zA-Z]+|"
                      r"\{(?:[^{}]|\{[^{}]*\})*\}|[\^_]|"
                      r"\d+(?:\.\d+)?|[-+*/()]))*")
SUM_AFTER = re.compile(r"\s*(?:[-+*/\u00d7\u00f7\u2212]|\\(?:times|cdot|div))\s*\d")  # "16 - 3 ...": a sum's first operand
BOUND = (r"(?:[\u2264\u2265\u2266\u2267\u226a\u226b\u226e\u226f<>]|"
         r"\\(?:geq?q?|leq?q?|geqslant|leqslant|gtrsim|lesssim|gg|ll|nless|ngtr|succeq|preceq)(?![a-zA-Z])|"
         r"\b(?:at (?:least|most)|no (?:less|more|fewer) than|(?:more|less|fewer) than|a (?:minimum|maximum) of|"
         r"up to|minimum|maximum)\b)")  # a bound, not an answer: >= 18, \gtrsim 18,
# "a minimum of 18", "up to 18"
GSM8K_MARK = re.compile(rf"[\s*_`]*+(?:[-\u2212+$\\(\[.\d]|[^\n]*(?:answer|=)|{BOUND})", re.I)  # "#### 18", "#### Final
# Answer", "#### at least 18" (a bound: read as no answer)
# a markdown heading after ####, not GSM8K's mark: "#### Step 2: Earnings = 9 x 2", "#### 1. Eggs left" (a numbered
# one, with lines after it: "#### 18." alone is the mark)
HEADING = re.compile(r"[ \t*_]*(?:(?:step|part|case|stage|method|approach)[ \t]*\d+\b|\d{1,2}(?:[.)]|st|nd|rd|th)[ \t]+"
                     r"[A-Za-z][^\n]*\n\s*\S)", re.I)  # ("#### 2nd step", a line after it)
NEGATIVE_AMOUNT = re.compile(r"(?<![\w$])([-\u2212])\\?\$(?=\d)")  # -$5, -\$5: a sign, then a currency's dollar
# ("$10-$5" is a sum: a digit before its minus)
STRUCK = re.compile(r"~~[^~\n]{0,200}~~")  # markdown strike-through
DASH_MINUS = re.compile(r"(?<![\w.])[\u2010\u2011\u2013\ufe63\uff0d](?=\\?\$?\d)")  # a dash as a minus sign, before a
# number (or its dollar), after no digit: "–10", "–$10"; not a range's "18–20"
RANGE_DASH = re.compile(r"(?<![\d,.])(\d[\d,]*+(?:\.\d++)?+)[ \t]*+[\u2013\u2014][ \t]*+"
                        r"(?=\\?\$?(\d[\d,]*+(?:\.\d++)?+)\.?"
                        r"(?![\d,.(\\^\w\u221a]|[ \t]*[-+*/=\u00d7\u00f7\u2212\u2013\u2014]))")
# a range's en or em dash between two numbers, the second the larger ("18–20", "18 — 20"): read as "18 to 20" (two
# answers; the first was graded). Not a sum's ("16 – 3 – 4 = 9", "18 – 2(3)": an operator, "=" or a bracket after the
# second number) nor a remark's ("42 — 6 boxes of 7 each": a smaller number; a review's find)


def _range(m: re.Match) -> str:
    """RANGE_DASH's match as a range where its second number is the larger, else as written."""
    low, high = (float(g.replace(",", "")) for g in (m[1], m[2]))
    return m[1] + " to " if high > low else m[0]
# the 2 of "48 m^2", "m**2", "m ** 2" is no answer (not bold "makes **18**": read as an exponent, a reasoning's earlier
# number was graded)
UNIT_POWER = re.compile(r"[A-Za-z](?:\s*\^\s*\{?\s*|\*\*|[ \t]*\*\*[ \t]+)\Z")
CLOSERS = re.compile(r"(?:\s|\\\)|\\\]|\$)*")  # between a number and its unit: "\\(32\\) \\(\\text{in total}\\)"
CORRECTED = re.compile(r"(?i)\bwait\b[,.!]|\bhold on\b|\blet me re-?read\b|\boops\b|"
                       r"\bI (?:made|make) (?:a|an) (?:mistake|error)\b|\bmiscalculat\w*|"
                       r"\bmiscount\w*|\b(?:that|this) (?:is|was|'s) (?:wrong|incorrect)\b|\bI was wrong\b|"
                       r"\blet me (?:recalculate|recompute|redo|reconsider|recheck|correct)\b|\bcorrection\b")
TAKEN_BACK = re.compile(r"(?i)\?|[.!]?\s*(?:hmm,?\s*)?no\b[,.:!]")  # right after it: "72?", "72. Hmm, no: ..."
# (after the stated answer: it no longer stands. Not "let me recap", "a common mistake", "Actually, that matches")
REASON = re.compile(r",\s|\b(?:because|since|as|so|which|given|if|when|where|after|from|then|due|while|that)\b",
                    re.I)  # "18, because ... = 9", "18 since ... = 9": a reason after the answer (not the units of a
# product: "$5 per hour * 8 hours = $40", "4 packs of 6 cans = 24 cans")
UNIT = re.compile(r"(?:\\(?:text|mathrm|textrm|mbox|operatorname)\s*\{[^{}]*\}|\\[,;:! ]|[\s^_{}\d/.~])+")  # \text{km/h}


# a new turn a base model writes after answering: a next few-shot question, the user's next message (a question's
# marker undecorated: "**Question:**" is a chat model's own heading)
NEW_TURN = re.compile(r"(?m)^(?:(?:Question|Problem|Q)[ \t]*:|[ \t#]*(?:User|Human|Instruction)[ \t]*:|<\|im_start\|>|"
                      r"<\|user\|>|<start_of_turn>|\[INST\])")
GSM8K_ANSWER = re.compile(r"####[ \t*]*[-\u2212$\\]?\d")
STATES = re.compile(r"[^\n\d$.!?]{0,40}?(?:\d|\$|\\boxed|\(?[A-E]\)?(?![\w']))")  # in its sentence: a number, a
# math span, a box or a choice ("Answer: Let me think. 48/2 ..." states none)
FILLED_BOX = re.compile(r"\\boxed\s*\{\s*[^\s}]")  # (not the instruction's empty \boxed{})
ANSWER_LINE = re.compile(r"\bAnswer[ \t]*:|(?m:^)[ \t]*A[ \t]*:")  # a few-shot turn's answer


def _states_answer(line: str) -> bool:
    """Whether a line states an answer: a filled box, a #### mark, an "answer is" with a number or a choice."""
    if FILLED_BOX.search(line) or GSM8K_ANSWER.search(line):
        return True
    return any(STATES.match(line, m.end()) for m in itertools.islice(ANSWER_IS.finditer(line), 8))


def own_turn(text: str) -> str:
    """`text` less a new turn a base model went on with after answering (GSM8K's few-shot "Question: ... Answer:
    ...", a "User: ..." turn, with their own answers: a hunt's find, the next question's answer was graded): cut at
    such a marker's line where the line before states an answer and an answer follows the marker (for a question's
    marker, an "Answer:" line), after any reasoning block. A restated "Problem:" or "**Question:**" in the reasoning
    is read on."""
    head, think, tail = text.rpartition("</think>")
    if NEW_TURN.search(tail) is None:
        return text
    boxes, marks = tail.rfind("\\boxed"), collections.deque(GSM8K_ANSWER.finditer(tail), maxlen=1)
    stated = collections.deque(ANSWER_IS.finditer(tail), maxlen=1)
    last = max(boxes, marks[0].start() if marks else -1, stated[0].start() if stated else -1)
    answer_lines = collections.deque(ANSWER_LINE.finditer(tail), maxlen=1)
    for turn in itertools.islice(NEW_TURN.finditer(tail), 64):
        before = tail[:turn.start()].rstrip()
        if not _states_answer(before.rpartition("\n")[2][-400:]):
            continue
        question = turn.group().lstrip()[:1] in "QP"
        if (answer_lines and answer_lines[0].start() > turn.end()) if question else last > turn.end():
            return head + think + before + "\n"
    return text


CHECK_LINE = re.compile(r"[ \t*_#>-]*(?:(?:double[- ]?|sanity[- ])?check(?:ing)?|verif(?:y|ying|ication))\b", re.I)


def _unchecked(text: str) -> str:
    """`text` less the check lines that restate its answer at its end ("Check: 72 - 24 = 48. ✓": the check's result,
    48, is a number before it, and the text's last number, 72, is in it; its last number is no answer: a hunt's
    find). A "Verify: 48 + 24 = 72" whose result is new is the answer, and stays."""
    lines = text.rstrip().split("\n")
    end = len(lines)
    while end > 1 and not lines[end - 1].strip():
        end -= 1
    if end < 2 or not CHECK_LINE.match(lines[end - 1][:400]):
        return text
    kept = "\n".join(lines[:end - 1])
    numbers, checked = NUMBER.findall(kept[-4000:]), NUMBER.findall(lines[end - 1][:400])
    if numbers and checked and checked[-1] in numbers and numbers[-1] in checked:
        return kept
    return text


def after_reasoning(text: str) -> str:
    """What follows the last </think>, where it holds a number or a box, else the whole text (a reasoning block's
    drafts are no answer: what follows it is, where it holds one; not a stray "**" or "</answer>")."""
    after = text.rpartition("</think>")[2]
    return after if re.search(r"\d|\\boxed", after) else text


def math_answer(answer_text: str) -> str | None:
    """A math completion's final answer: \\boxed{}, else after the last #### (GSM8K's mark, not a markdown heading
    such as "#### Step 2: Money"), else what the last "answer is" (or an "Answer:" line) states (_after_answer_is),
    else the last number, LaTeX math span or LaTeX run without delimiters ("\\frac{1}{6}", "2\\sqrt{3}"),
    whichever ends later (last_math_span, BARE_RUN; a unit's exponent, the 2 of "m^2", is no number). After ####: the line that follows (after its last "=", if any), less markdown emphasis;
    where it is words around a number ("18 dollars"), the number; where it holds none (a "#### Final Answer"
    heading), the last number after it. LaTeX (a backslash, braces) stays whole; a power (2^10) is one answer."""
    answer_text = own_turn(after_reasoning(answer_text))
    boxed = last_boxed(answer_text)
    if boxed is not None:
        return boxed
    answer_text = RANGE_DASH.sub(_range, answer_text)  # "18–20": a range
    answer_text = DASH_MINUS.sub("-", answer_text)  # "–10" (an en dash as its minus) is -10, not 10
    answer_text = STRUCK.sub(" ", answer_text)  # "~~18~~ 20": struck out, withdrawn
    answer_text = NEGATIVE_AMOUNT.sub(r"\1", answer_text)  # "a loss of -$5" is -5, not 5 (nor a $...$ span)
    tail = answer_text.rsplit("####", 1)[1].strip() if "####" in answer_text else None
    if tail == "":
        return None
    if tail and GSM8K_MARK.match(tail) and not HEADING.match(tail):  # (a markdown heading, "#### Step 2: Money": read
        # on)
        first_line = tail.splitlines()[0].strip().strip("*_` ")
        if HEDGED.match(first_line):  # "#### at least 18", "#### >= 18": a bound, no answer
            return first_line
        line = first_line.rsplit("=", 1)[-1].strip().strip("*_` ")  # ("2 + 3 = 5": what it equals)
        if re.search(r"[\\{}^]", line) or NUMBER.fullmatch(line.strip("$").rstrip(".")):
            return line
        numbers = NUMBER.findall(line) or NUMBER.findall(tail)
        first = NUMBER.search(line)
        if first and _alternative(line, first):  # "#### 18 or more", "#### 18 or 20": no one answer
            return line
        if first and SUM_AFTER.match(line, first.end()):  # "#### 3 / 4", "#### 18 - 20": the sum, not its first term
            return _sum_run(line, first.start())
        if first:
            return _stated(line, first)
        return _plain(numbers[-1]) if numbers else line
    stated = _after_answer_is(answer_text)
    if stated is not None:
        return stated
    answer_text = _unchecked(answer_text)
    numbers = [m for m in POWER.finditer(answer_text) if not UNIT_POWER.search(answer_text, max(0, m.start() - 12),
                                                                                                 m.start())]
    latex = last_math_span(answer_text)
    bare = collections.deque(BARE_RUN.finditer(answer_text), maxlen=1)  # (the last, without a list of every one)
    if bare and (not numbers or bare[0].end() >= numbers[-1].end()) and (latex is None or bare[0].end() > latex[2]):
        return bare[0].group().rstrip(" \t-+*/(")
    if latex is not None and (not numbers or latex[2] >= numbers[-1].end()):
        before = [m for m in numbers if m.end() <= latex[1]][-1:]
        if before and "\\" in latex[0] and UNIT.fullmatch(latex[0]) and CLOSERS.fullmatch(answer_text, before[0].end(),
                                                                                      latex[1]):
            return _plain(before[0].group())  # "60 \\(\\text{km/h}\\)": the number, not its unit
        return worked(latex[0])  # "is \\(\\frac{3}{4}\\)": the span, as math-verify's extraction (NeMo RL's
        # hf_math_verify) takes it, not its last digit
    return _stated(answer_text, numbers[-1]) if numbers else None


HEDGED = re.compile(rf"[\s*_:]*(?:either\b|between\b|{BOUND})", re.I)
ALTERNATIVE = re.compile(r"\s*\+(?!\s*\d)|\s+and\s+(?:up|above|over|more)\b|"  # "18+", "18 and up"
                         r"\s+(?:to|and|through)\s+\$?\d[\d,.]*(?![\d,.]|\s*(?:[-+/=\u00d7\u00f7\u2212]|\*(?!\*)))|"
                         r"[\s,;(\u2013\u2014]*(?:(?:but|though|although|or)\s+)?(?:maybe|perhaps|possibly|probably|"
                         r"alternatively|else|otherwise|"
                         r"(?:it|that|this)\s+(?:could|might|may)\s+(?:also\s+)?be)\s+\$?\d[\d,.]*"
                         r"(?=\s*(?:[).,;!?]|$))|"
                         # "18 (maybe 20)", not "18, probably 2 more would be safer" (a review's find)
                         r"[\s,;(\u2013\u2014]*(?:[A-Za-z]+\s+)?or\s+(?:[A-Za-z]+\s+)?(?:\$?\d|(?:more|less|fewer|so|"
                         r"above|below|higher|lower|greater|smaller|over|under)\b|"
                         r"[a-z]*(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|teen|ty|hundred|"
                         r"thousand)\b)", re.I)  # "18 or 20", "18 dollars or 20", "18 (or possibly 20)", "18, or more",
# "18 or twenty", "18 and 20", "18 (maybe 20)", "18, though it could be 20": two answers, or a bound
SUM_RUN = re.compile(r"(?:\d{1,3}(?:,\d{3})+(?!\d)|[-\u2212\d.\s+*/()\u00d7\u00f7])+")  # a sum ("1,000 - 200")


def _alternative(text: str, first: re.Match) -> bool:
    """Whether a second answer or a bound follows the number `first` matched in text (ALTERNATIVE), other than the same
    value restated ("18, or $18.00")."""
    alt = ALTERNATIVE.match(text, first.end())
    if alt is None:
        return False
    value = _value(first.group())
    if value is None:
        return True
    word = OR_WORD.match(text, first.end())
    if word and NUMBER_WORDS.get(word[1].lower()) == value:  # "7, or seven": restated
        return False
    other = NUMBER.search(text, first.end())
    if other is None or other.start() >= alt.end() or SUM_AFTER.match(text, other.end()):  # ("or more", "or twenty":
        return True  # a bound, a number in words; "18 or 18 + 2": a sum, not 18 restated)
    restated = _value(other.group())
    if restated is None:
        return True
    return restated / (100 if PERCENT_AFTER.match(text, other.end()) else 1) != value  # ("0.25, or 25%", "18, or
    # $18.00": restated)


HUGE = re.compile(r"[eE][-+]?0*\d{5}|\d{4001}")  # an exponent of 10,000 or more, a run of over 4,000 digits


def _value(number: str) -> Fraction | None:
    """A number NUMBER matched, as a Fraction; None where it is none, or too large to build at once (Fraction evaluates
    an exponent: "1e99999999 or 20" took four minutes of the trainer's CPU, a hunt's find)."""
    plain = _plain(number)
    if HUGE.search(plain):
        return None
    try:
        return Fraction(plain)
    except (ValueError, ZeroDivisionError):
        return None


OR_WORD = re.compile(r"[\s,;(]*(?:[A-Za-z]+\s+)?or\s+([a-z]+)\b", re.I)  # "7, or seven": its word
PERCENT_AFTER = re.compile(r"\s*\\?%")
NUMBER_WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                           "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                           "twenty".split())}


def _sum_run(text: str, start: int) -> str:
    """The sum that starts at `start`, whole and without thousands separators: "2 * 9" (math-verify's: 18), "3 / 4"."""
    return SUM_RUN.match(text, start).group().strip().rstrip("+-*/(.\u00d7\u00f7\u2212 ").replace(",", "")
SENTENCE_END = re.compile(r"(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)(?<!\bvs)[.;!?](?=\s|$)")  # (not 2.5)


NEGATED = re.compile(r"(?i)\b(?:not|never|no longer|n't)\b|n't\b")  # before a stated number: no answer
REPLACED = re.compile(r"(?i)\s*(?:->|\u2192|=>|\u21d2|\\to\b|\\rightarrow\b|,?\s*(?:but\s+)?(?:it|the answer|that)\s+"
                      r"(?:is|was)\s+(?:actually\s+)?\$?\d|,?\s*(?:but\s+)?actually\b)")  # after it: another answer
# replaces it ("18, but it is 20", "18 -> 20"; not "18, but let me check")


def _after_answer_is(text: str) -> str | None:
    """The first number or LaTeX span after the last "answer is" (not "answer is not"; or an "Answer:" line), in its
    sentence; where that sentence is a sum, what its last "=" equals: "The answer is 4. Double check: ... 7" is 4,
    "the answer is 5 and not 6" 5, "So the answer is 48+24 = 72." 72, "Answer: 15 gallons * 8 pints / gallon = 120
    pints" 120. None where the sentence states no number ("I'm not sure the answer is right. 5 * 6 = 30"), where
    more than two words come before it (a description), or where the text takes it back after it ("Wait,",
    "actually", "mistake")."""
    stated = collections.deque(ANSWER_IS.finditer(text), maxlen=1)  # (the last, without a list of every one)
    stated = stated[0] if stated else None
    if stated is None:
        return None
    end = text.find("\n", stated.end())
    line = SENTENCE_END.split(text[stated.end():end if end >= 0 else len(text)][:300], maxsplit=1)[0]  # (its
    # sentence: "I'm not sure the answer is right. 5 * 6 = 30" states none)
    rest = stated.end() + len(line)  # "So the answer is 20. Wait, ... 9 * 2 = 18.", "The answer is 72? ...", "... 72.
    if CORRECTED.search(text, rest) or TAKEN_BACK.match(text[rest:rest + 20]):  # Hmm, no: ..." (a hunt's finds)
        return None
    blanked = FIRST_SPAN.sub(lambda m: " " * len(m.group()) if _is_math(_content(m)) else m.group(), line)
    eq = blanked.rfind("=")  # (an "=" in a LaTeX span is the span's)
    equals = line[eq + 1:] if eq >= 0 else ""
    first = POWER.search(blanked)
    if first and (NEGATED.search(blanked[:first.start()]) or REPLACED.match(blanked, first.end())):  # "Answer: not
        return None  # 18 but 20", "the answer is never 18", "18 -> 20": not the number stated (read as the text ends)
    if HEDGED.match(line) or (first and _alternative(blanked, first)):  # "either 18 or 20", "at least 18":
        return line.strip()  # two answers, or a bound, which equal no reference (the last number would pay the hedge)
    summed = first is not None and SUM_AFTER.match(blanked, first.end())  # "16 - 3 - 4 = 9 eggs, times 2 = 18": not 16
    if summed and eq < 0 and not BARE_TEX.match(line):  # "The answer is 2 * 9.": the sum whole (math-verify's: 18)
        return _sum_run(blanked, first.start())
    if first is not None and first.end() <= eq and not summed and REASON.search(blanked, first.end(), eq):  # ("The answer is 18,
        if re.search(r"[A-Za-z]{2,}", blanked[:first.start()]):  # because she sells 16 - 3 - 4 = 9 eggs": the sum is
            # the reason's;
            return None  # "... is If only 14 remained, then 40-14 = 26": a description, read as the text ends)
        equals = ""  # ("15 gallons * 8 pints / gallon = 120" is one sum)
    if (FIRST_SPAN.search(equals) or POWER.search(equals)) and not (first is not None and first.end() <= eq and
                                                                   re.search(r"\d\s*\\?%", equals) and not summed):
        line = equals  # (not "0.25 = 25%": the percentage restates it, its unit dropped)
    bare = BARE_TEX.match(line)  # "The answer is \\frac{3}{4}.": LaTeX without delimiters, whole
    if bare:
        return bare.group(1)
    span, number = FIRST_SPAN.search(line), POWER.search(line)
    content = _content(span) if span else ""
    content = content.rsplit("=", 1)[-1].strip() or content  # "$x = 5$", "$48+24=72$": what it equals
    found = span if span and _is_math(content) and (number is None or span.start() <= number.start()) else number
    if found is None and (words := spelled(line.strip(" \t*_:"))) is not None:  # "The answer is five."
        return words
    if found is None or len(re.findall(r"[A-Za-z]{2,}", line[:found.start()])) > 2:  # ("The answer is obtained by
        return None  # multiplying the 9 eggs by $2, which gives 18": a description, not the answer)
    return content if found is span else _stated(line, number)


WORKED_PARTS = re.compile(r"\\q?quad\b|\\\\|[,;]")  # between the equations of a display


def worked(content: str) -> str:
    """A span of worked sums, equations apart ("16 - 3 - 4 = 9,\\quad 9 \\times 2 = 18"): what its last "=" equals,
    where math-verify reads a set of equations that equals no number. Whole: one chain ("18 \\text{ dollars} = 1800
    \\text{ cents}"), a span with a variable ("x = 2, y = 3") or with an "or" (a hedge)."""
    parts = [p for p in WORKED_PARTS.split(content) if p.strip()]
    if len(parts) < 2 or not all("=" in p for p in parts) or re.search(r"\bor\b", content) or re.search(
            r"[A-Za-z]", re.sub(r"\\(?:text|mathrm|mbox)\s*\{[^{}]*\}|\\[A-Za-z]+", "", content)):
        return content
    return parts[-1].rsplit("=", 1)[1].strip(" \t.")


def _content(span: re.Match) -> str:
    return next(g for g in span.groups() if g is not None).strip()


MATH_DELIMITERS = (("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"), ("$", "$"))


PROSE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,} +[a-zA-Z]{2,} +[a-zA-Z]{2,}(?![a-zA-Z{])")  # three words in a row


def _is_math(content: str) -> bool:
    """TeX markup, a number, or a tuple or interval, and not prose: "$5 and $" or "$2 and there are 3, so 2 \\times
    3 = 6$" between two prices is not."""
    if not content or PROSE.search(re.sub(r"\\(?:text|mathrm|textrm|mbox)\s*\{[^{}]*\}", " ", content)):
        return False
    return bool(re.search(r"[\\{}^_]", content) or NUMBER.fullmatch(content) or re.fullmatch(r"[(\[].*[)\]]", content,
                                                                                                 re.S))


def last_math_span(text: str) -> tuple[str, int, int] | None:
    """The content of the last LaTeX math span (\\(...\\), \\[...\\], $$...$$, $...$) and the indices where it starts and ends,
    where that content is mathematics (_is_math). Found from the text's end (rfind), in linear time however many
    unclosed delimiters it holds."""
    best = None
    for opener, closer in MATH_DELIMITERS:
        close = text.rfind(closer)
        while close > 0 and text[close - 1] == "\\" and closer == "$":  # an escaped \\$ is a dollar sign
            close = text.rfind(closer, 0, close - 1)
        start = text.rfind(opener, 0, close) if close > 0 else -1
        if start < 0 or (closer == "$" and (text[close - 1:close] == "$" or text[start - 1:start] == "$")):
            continue  # (a single $ beside another: the $$ form's)
        content = text[start + len(opener):close].strip()
        end = close + len(closer)
        if _is_math(content) and (best is None or end > best[2]):
            best = (content, start, end)
    return best


MIXED = re.compile(r"([-\u2212]?)(\d{1,9})(?:[ \t~]|\\[ ,;])+(\d{1,9})/(\d{1,9})")  # 2 1/2, 3\ 1/2


def improper(text: str) -> str | None:
    """A mixed number as an improper fraction (2 1/2: 5/2, -2 1/2: -5/2); None where `text` is none."""
    mixed = MIXED.fullmatch(text)
    if mixed is None:
        return None
    sign, whole, top, bottom = mixed.groups()
    return f"{'-' if sign else ''}{int(whole) * int(bottom) + int(top)}/{bottom}"


TENS = {w: 10 * n for n, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
SPELLED = re.compile(r"(?:\\text\s*\{\s*)?([a-z][a-z \t-]{1,80}?)(?:\s*\})?\.?", re.I)


def spelled(text: str) -> str | None:
    """A whole number written in words ("five", "seventy-two", "one hundred and five", "\\text{twelve}") as digits;
    None where `text` is anything else."""
    m = SPELLED.fullmatch(text.strip())
    if m is None:
        return None
    total = current = 0
    last = ""  # what the word before was: "", small (0-19), tens, hundred, scale, and
    smallest = 10 ** 9  # the smallest scale word so far (each later one smaller)
    words = [w for w in re.split(r"[\s-]+", m[1].lower()) if w]
    for word in words:
        small = NUMBER_WORDS.get(word) if word != "twenty" else None
        if small is not None and (last in ("", "hundred", "scale", "and") or last == "tens" and 0 < small < 10):
            current, last = current + small, "small"
        elif word in TENS and last in ("", "hundred", "scale", "and"):
            current, last = current + TENS[word], "tens"
        elif word == "hundred" and last == "small" and 0 < current < 10:
            current, last = current * 100, "hundred"
        elif word in ("thousand", "million") and last in ("small", "tens", "hundred") and current and \
                (scale := 1000 if word == "thousand" else 10 ** 6) < smallest:  # ("two million three million": none)
            total, current, last, smallest = total + current * scale, 0, "scale", scale
        elif word == "and" and last in ("hundred", "scale"):
            last = "and"
        else:
            return None
    if last == "and" or "zero" in words and len(words) > 1:
        return None
    return str(total + current)


def _plain(number: str) -> str:
    """A number as answers_match reads it: no thousands commas, an ASCII minus, a mixed number improper (2 1/2: 5/2)."""
    return improper(number) or GROUPS.sub("", number).replace("\u2212", "-").replace("**", "^")


SCALE_AFTER = re.compile(r"(?:[ \t]*(?:thousand|million|billion|trillion)|k|K|bn|M|B)(?![-\w])")  # 18 thousand,
# 18k, $1.5M, $18K (K, M and B after a dollar only: 300K is Kelvin, 18 m metres; none before a hyphen or a letter:
# "4 million-dollar homes" are 4)
VULGAR = re.compile(r"[\u00bc-\u00be\u2150-\u215e]")  # ½, ⅓, ¾, ...: a Unicode fraction after whole digits


def _stated(text: str, number: re.Match) -> str:
    """The number matched in text as an answer, with what follows it that changes its value: a magnitude word ("18
    thousand", "18k", "$1.5M"; kept, for answers_match's MAGNITUDE to read as 18,000 and 1,500,000) or a Unicode
    fraction ("1½": 3/2). Read bare, "18 thousand" matched a reference of 18 and "1½" one of 1 (boxed answers were
    read whole already)."""
    plain = _plain(number.group())
    after = text[number.end():number.end() + 16]
    if re.fullmatch(r"-?[\d.]+", plain) and PERCENT_AFTER.match(after):  # ("50%" read as 50: a hunt's find)
        return plain + "%"
    if not re.fullmatch(r"-?[\d.]+", plain):  # (a power, a fraction, an exponent: as it is)
        return plain
    if (frac := VULGAR.match(after)) and plain.lstrip("-").isdigit() and len(plain) <= 4000:  # (int() refuses more
        # than 4,300 digits: a ValueError that ended the training step, a hunt's find)
        value = abs(int(plain)) + Fraction(unicodedata.numeric(frac.group())).limit_denominator(100)
        return f"{'-' if plain.startswith('-') else ''}{value}"
    scale = SCALE_AFTER.match(after)
    dollar = text[max(0, number.start() - 2):number.start()].rstrip().endswith("$")
    if scale is None or (scale.group() in ("K", "M", "B") and not dollar):
        return plain
    return f"{'$' if dollar else ''}{plain} {scale.group().strip()}"
