"""The ``sail`` command's entry point: a Ctrl-C at any instant ends it with one line and status 130.

``sail._cli`` imports the ledger, the journal and orjson before its ``main`` is there to catch a
Ctrl-C, and ``sail tick`` imports web3 (a second or more on a small machine): a Ctrl-C (SIGINT) in
those imports printed a Python traceback and exited 1. This module imports nothing heavy
(``staging.guarded_main``, shared with ``flows``) and is what the console script and ``python -m
sail`` run: until the command's ``main`` is called, and again once it has returned, a Ctrl-C writes
``sail: error[interrupted]: …`` (its JSON object with ``--json``) and ends the process at once with
130. While the command runs, ``memory.cli`` reports the ``KeyboardInterrupt`` itself, with the same
code: what the ledger and the activity log hold stays as written, and the next ``sail tick``
resolves a swap an interrupted tick signed (docs/SAIL.md).
"""

from __future__ import annotations

from collections.abc import Callable

from staging import guarded_main

_BEFORE = "before the command began; nothing was read or written"
_AFTER = (
    "as the command ended; what it recorded in the ledger and activity log stays, its output already printed"
)


def _command_line() -> Callable[[list[str]], int]:
    from sail._cli import main

    return main


def main(argv: list[str] | None = None) -> int:
    """Run the ``sail`` command line (``sail._cli.main``) with every Ctrl-C reported: see above."""
    return guarded_main("sail", _command_line, argv, before=_BEFORE, after=_AFTER)
