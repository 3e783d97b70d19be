"""execrl's console lines. A line wrapped whole in a style tag ("[yellow]warning: ...[/]") prints in that style, and
nothing in a line is read as rich markup: the paths, model names, dataset text and sandbox errors the lines quote hold
brackets (a checkpoint_dir of runs/sweep[lr=1e-5] was printed as runs/sweep, and one holding "[/x]" ended the run with
a MarkupError after its first checkpoint was written)."""

import re

from rich.console import Console

WRAPPED = re.compile(r"\[(?P<style>yellow|red|green|dim|bold|bold red|bold yellow)\](?P<body>.*)\[/(?P=style)?\]",
                     re.S)


class PlainConsole(Console):
    def print(self, *objects, **kwargs) -> None:
        if len(objects) == 1 and isinstance(objects[0], str) and "markup" not in kwargs:
            wrapped = WRAPPED.fullmatch(objects[0])
            if wrapped:
                objects, kwargs = (wrapped["body"],), {"style": wrapped["style"], **kwargs}
            kwargs["markup"] = False
        super().print(*objects, **kwargs)


def stderr_console(**kwargs) -> PlainConsole:
    return PlainConsole(stderr=True, soft_wrap=True, **kwargs)
