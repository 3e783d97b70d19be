"""`python -m execrl`: the `execrl` command."""

from execrl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
