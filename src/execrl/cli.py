"""The `execrl` command: one subcommand per job."""

from __future__ import annotations

import argparse
import sys

from execrl import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="execrl", description="RL for code and math LMs with verifiable rewards")
    parser.add_argument("--version", action="version", version=f"execrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="run programs from a JSONL file against their tests in the sandbox")
    g.add_argument("input", help="JSONL rows: {id, code, language?, tests, timeout_s?, memory_mb?}")
    g.add_argument("--out", required=True, help="where to write one result row per input row (JSONL)")
    g.add_argument("--timeout", type=float, default=None, help="seconds of CPU per test (default 2)")
    g.add_argument("--memory-mb", type=int, default=None, help="address-space limit per program (default 1024)")
    g.add_argument("--workers", type=int, default=0, help="sandbox workers (default: one per CPU core)")
    g.add_argument("--languages", default=None, help="YAML file adding languages: {name: {file, run, compile?}}")
    g.add_argument("--quiet", action="store_true", help="no progress bar")

    args = parser.parse_args(argv)
    if args.command == "grade":
        from execrl.grade import run_grade

        return run_grade(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
