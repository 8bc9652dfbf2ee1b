"""Findings-memory benchmark: learn against the journal-first floor and SQLite; recall and why at scale.

Kept as a shortcut into ``python -m benchmarks`` (the one entry point, see ``benchmarks/__main__.py``):
``python -m benchmarks.learn_bench [--quick] [--json]`` runs its ``writes`` and ``reads`` sections
(the peers too, when their venv exists).
"""

from __future__ import annotations

import sys

from benchmarks.__main__ import main as _main


def main(argv: list[str] | None = None) -> int:
    """Run the ``writes`` and ``reads`` sections of ``python -m benchmarks``."""
    return _main(["--only", "writes,reads", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
