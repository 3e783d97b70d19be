"""execrl's console lines. A line wrapped whole in a style tag ("[yellow]warning: ...[/]") prints in that style, and
nothing in a line is read as rich markup: the paths, model names, dataset text and sandbox errors the lines quote hold
brackets (a checkpoint_dir of runs/sweep[lr=1e-5] was printed as runs/sweep, and one holding "[/x]" ended the run with
a MarkupError after its first checkpoint was written)."""

import os
import re

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.text import Span, Text

WRAPPED = re.compile(r"\[(?P<style>yellow|red|green|dim|bold|bold red|bold yellow)\](?P<body>.*)\[/(?P=style)?\]",
                     re.S)


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")  # C0 and C1 controls but
# tab and newline, and the bidirectional marks and overrides (U+202E showed the rest of a line reversed)


def shown(text: str) -> str:
    """Text as a terminal should show it: each control character as its escape (a dataset row's "\\x1b[2J" cleared
    the screen, and the text after it stood alone; ESC ] set the window's title)."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def escape(text: str) -> str:
    """Text quoted in a line of rich markup: its brackets escaped, its control characters shown."""
    return escape_markup(shown(text), TAG_AFTER_BACKSLASHES.sub)


TAG_AFTER_BACKSLASHES = re.compile(r"(?<!\\)(\\*+)(\[[a-z#/@][^[]*?])")  # rich's escape pattern, read from a run of
# backslashes' first one only (from each of them, a line of 32,000 took 4 s)


def shown_text(text: Text) -> Text:
    """A rich Text as shown(): each control character as its escape, each styled part keeping its styles (rich
    drops BEL, BS and CR from a Text, not ESC: a dataset row's id in a Text cleared the screen)."""
    if not CONTROL.search(text.plain):
        return text
    out = text.blank_copy()
    for part in text.divide(sorted({i for span in text.spans for i in (span.start, span.end)})):
        plain = shown(part.plain)
        out.append_text(Text(plain, spans=[Span(0, len(plain), span.style) for span in part.spans]))
    return out


class PlainConsole(Console):
    def print(self, *objects, **kwargs) -> None:
        objects = tuple(shown(o) if isinstance(o, str) else shown_text(o) if isinstance(o, Text) else o
                        for o in objects)
        if len(objects) == 1 and isinstance(objects[0], str) and "markup" not in kwargs:
            wrapped = WRAPPED.fullmatch(objects[0])
            if wrapped:
                objects, kwargs = (wrapped["body"],), {"style": wrapped["style"], **kwargs}
            kwargs["markup"] = False
        super().print(*objects, **kwargs)


def stderr_console(**kwargs) -> PlainConsole:
    return PlainConsole(stderr=True, soft_wrap=True, **kwargs)


NOTES_SAID = "EXECRL_NOTES_SAID"  # (set for the processes `execrl train` starts torchrun with: it said the notes)


def other_rank() -> bool:
    """A torchrun process of rank above 0 (rank 0 speaks for the run)."""
    return "LOCAL_RANK" in os.environ and os.environ.get("RANK", "0") != "0"


def says_notes() -> bool:
    """Whether this process says the start-up notes: not a torchrun process that `execrl train` started (it said
    them), nor one of rank above 0 under a torchrun started by hand (rank 0 says them; a hunt's find: none did, and
    the config loader's notes came once per process)."""
    return "LOCAL_RANK" not in os.environ or (NOTES_SAID not in os.environ and not other_rank())
