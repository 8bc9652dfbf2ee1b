"""The ``flows`` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the ``flows`` CLI; returns the exit status (0 ok, 1 failure, 2 usage)."""
    parser = argparse.ArgumentParser(prog="flows", description="Run flows with a journal-first memory.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="show the journal recovering from a crash mid-append")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from flows._demo import run_demo

        return run_demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
