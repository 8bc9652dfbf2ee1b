"""The ``flows`` command's entry point: a Ctrl-C at any instant ends it with one line and status 130.

``flows._cli`` imports the command line's modules (the journal, the memory, orjson: a few hundred
milliseconds on a busy host), and a command imports more (starlette for ``serve``, the embedder's
model for ``why``). A Ctrl-C (SIGINT) in those imports, before ``CommandLine.main`` is there to
catch it, printed a Python traceback and exited 1 (or died of the signal); one during the
interpreter's exit (joining threads) printed "Exception ignored" and a traceback.

So this module, which imports nothing heavy, is what the console script and ``python -m flows``
run. Until the command's own ``main`` is called, and again once it has returned, a Ctrl-C writes the
one diagnostic line (``error[interrupted]``, or its JSON object with ``--json``) and ends the process
at once with 130: nothing of the store was opened before, and after, the command's work is done and
its output flushed. While the command runs, SIGINT is Python's own ``KeyboardInterrupt`` (asyncio's
runner, which ``flows run`` uses, installs its handler only over that one), which the command line
reports itself.

A SIGINT the process was started with ignored (``nohup``, a background job) stays ignored. Before the
first line of ``flows`` runs, the interpreter's own start (its ``site`` module and the ``.pth`` files
of site-packages) is Python's: a Ctrl-C there is reported by Python.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

_TEXT_LINE = b"flows: error[interrupted]: interrupted (Ctrl-C) %s\n"
_JSON_LINE = b'{"code":"interrupted","message":"interrupted (Ctrl-C) %s","runId":null}\n'
_BEFORE = b"before the command began; nothing was read or written"
_AFTER = b"as the command ended; what it wrote is on record, its output already printed"


class _Guard:
    """SIGINT while ``flows`` is not inside its command: the one line, then exit 130 at once."""

    def __init__(self, as_json: bool) -> None:
        self._line = _JSON_LINE if as_json else _TEXT_LINE
        self._when = _BEFORE
        try:
            # only over Python's default: a SIGINT ignored from the start stays ignored
            self._armed = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        except ValueError:  # not the main thread (an embedding host): leave signals to it
            self._armed = False

    def arm(self, *, after: bool) -> None:
        self._when = _AFTER if after else _BEFORE
        if self._armed:
            signal.signal(signal.SIGINT, self._stop)

    def disarm(self) -> None:
        if self._armed:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # a stderr closed or full loses the line, not the status
            os.write(2, self._line % self._when)
        os._exit(130)


def _failpoint(name: str) -> None:
    """A failpoint of the tests (``$FLOWS_FAILPOINTS``), looked up only when that is set."""
    if os.environ.get("FLOWS_FAILPOINTS"):
        from staging import failpoint

        failpoint(name)


def main(argv: list[str] | None = None) -> int:
    """Run the ``flows`` command line (``flows._cli.main``) with every Ctrl-C reported: see above."""
    args = list(sys.argv[1:] if argv is None else argv)
    before = args[: args.index("--")] if "--" in args else args
    guard = _Guard(any(arg in ("--js", "--jso", "--json") for arg in before))  # as memory.cli.asks_json
    guard.arm(after=False)
    from flows._cli import main as command_line

    try:
        try:
            guard.disarm()
            status = command_line(args)
        finally:
            guard.arm(after=True)
        _failpoint("flows.cli_returned")
    except KeyboardInterrupt:  # a Ctrl-C just as the command returned (its report already written)
        status = 130
    return status
