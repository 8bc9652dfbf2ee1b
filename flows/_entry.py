"""The ``flows`` command's entry point: a Ctrl-C at any instant ends it with one line and status 130.

``flows._cli`` imports the command line's modules (the journal, the memory, orjson: a few hundred
milliseconds on a busy host), and a command imports more (starlette for ``serve``, the embedder's
model for ``why``). A Ctrl-C (SIGINT) in those imports, before ``CommandLine.main`` is there to
catch it, printed a Python traceback and exited 1 (or died of the signal); one during the
interpreter's exit (joining threads) printed "Exception ignored" and a traceback.

So this module, which imports nothing heavy (``staging.guarded_main``, shared with ``sail``), is
what the console script and ``python -m flows`` run. Until the command's own ``main`` is called,
and again once it has returned, a Ctrl-C writes the one diagnostic line (``error[interrupted]``, or
its JSON object with ``--json``) and ends the process at once with 130: nothing of the store was
opened before, and after, the command's work is done and its output flushed. While the command
runs, SIGINT is Python's own ``KeyboardInterrupt`` (asyncio's runner, which ``flows run`` uses,
installs its handler only over that one), which the command line reports itself.

A SIGINT the process was started with ignored (``nohup``, a background job) stays ignored. Before the
first line of ``flows`` runs, the interpreter's own start (its ``site`` module and the ``.pth`` files
of site-packages) is Python's: a Ctrl-C there is reported by Python.
"""

from __future__ import annotations

from collections.abc import Callable

from staging import guarded_main

_BEFORE = "before the command began; nothing was read or written"
_AFTER = "as the command ended; what it wrote is on record, its output already printed"


def _command_line() -> Callable[[list[str]], int]:
    from flows._cli import main

    return main


def main(argv: list[str] | None = None) -> int:
    """Run the ``flows`` command line (``flows._cli.main``) with every Ctrl-C reported: see above."""
    return guarded_main("flows", _command_line, argv, before=_BEFORE, after=_AFTER)
