"""The start-up line: what a run compiled and captured before its steps ran at speed, from torch's own counters."""

import torch

from execrl.trainer import startup

ZERO = {"seconds": 0.0, "graphs": 0, "hits": 0, "misses": 0}


def test_nothing_compiled_nothing_said():
    assert startup.first_step_line(2.0, 1.5, ZERO, {"graphs": 0, "seconds": 0.0}) is None


def test_the_line_names_what_compiled_how_long_and_the_cache_a_second_start_reuses():
    line = startup.first_step_line(8.4, 15.2, {"seconds": 11.8, "graphs": 12, "hits": 17, "misses": 0},
                                   {"graphs": 2, "seconds": 0.4})
    assert line.startswith("start-up: loading 8.4 s, the first step 15.2 s; this run compiled 12 graphs in 11.8 s")
    assert "17 from the compile cache, 0 new, in " + startup.cache_dir() in line
    assert "2 CUDA graphs captured in 0.40 s" in line


def test_a_compilation_counts_in_what_a_run_did_since_it_began():
    """torch's counters (internal names that a torch release may move): a real compilation on this machine shows
    as a graph and seconds in the difference from before it."""
    before = startup.so_far()

    @torch.compile
    def f(x):
        return torch.sin(x) * 2 + 1

    f(torch.randn(8))
    after = startup.so_far()
    assert after["compiled"]["graphs"] - before["compiled"]["graphs"] >= 1
    assert after["compiled"]["seconds"] > before["compiled"]["seconds"]
    assert after["compiled"]["hits"] + after["compiled"]["misses"] > before["compiled"]["hits"] + \
        before["compiled"]["misses"]
    assert after["captured"] == before["captured"]  # (no CUDA graph on a CPU)
