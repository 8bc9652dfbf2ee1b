"""A console script's Ctrl-C outside its command: one diagnostic line and status 130, at any instant.

A command line imports its modules (the journal, the memory, orjson, web3: from a few hundred
milliseconds to seconds on a busy host) before its own ``main`` is there to catch a Ctrl-C, and a
Ctrl-C in those imports printed a Python traceback and exited 1 (or died of the signal); one during
the interpreter's exit (joining threads) printed "Exception ignored" and a traceback.

``guarded_main`` is what ``flows`` and ``sail`` run as their entry points. Until the command's own
``main`` is called, and again once it has returned, a Ctrl-C writes the one diagnostic line
(``<prog>: error[interrupted]: …``, or its JSON object with ``--json``) and ends the process at once
with 130: nothing of the store was opened before, and after, the command's work is done and its
output flushed. While the command runs, SIGINT is Python's own ``KeyboardInterrupt``, which the
command line reports itself.

A SIGINT the process was started with ignored (``nohup``, a background job) stays ignored, and one
the host owns (not the main thread) is left to it. This module imports only what the interpreter has
already loaded at start-up (and ``gc``, built into it), and the ``staging`` package imports its other
modules lazily, so the guard is armed within a millisecond of the script's first line.

The command line's modules are loaded with the cyclic garbage collector paused, and what they made
(functions, classes, tables: kept until the process ends) is then moved out of its reach
(``gc.freeze``) before the command runs with the collector on again. A collection traverses every
object of the generations it collects, and the interpreter collects once more as it exits: a
``flows recall`` spent an eighth of its instructions in the collector, most of it walking objects
that are never garbage. What the command itself makes is collected as before.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType

_JSON_FLAGS = ("--js", "--jso", "--json")  # argparse takes a flag's unique prefix (memory.cli.asks_json)


class _Guard:
    """SIGINT while the program is not inside its command: the one line, then exit 130 at once."""

    def __init__(self, prog: str, as_json: bool, before: str, after: str) -> None:
        def line(when: str) -> bytes:
            message = f"interrupted (Ctrl-C) {when}"
            if as_json:
                return f'{{"code":"interrupted","message":"{message}","runId":null}}\n'.encode()
            return f"{prog}: error[interrupted]: {message}\n".encode()

        self._lines = {False: line(before), True: line(after)}
        self._after = False
        try:
            # only over Python's default: a SIGINT ignored from the start stays ignored
            self._armed = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        except ValueError:  # not the main thread (an embedding host): leave signals to it
            self._armed = False

    def arm(self, *, after: bool) -> None:
        self._after = after
        if self._armed:
            signal.signal(signal.SIGINT, self._stop)

    def disarm(self) -> None:
        if self._armed:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # a stderr closed or full loses the line, not the status
            os.write(2, self._lines[self._after])
        os._exit(130)


def _failpoint(name: str) -> None:
    """A failpoint of the tests (``$FLOWS_FAILPOINTS``), looked up only when that is set."""
    if os.environ.get("FLOWS_FAILPOINTS"):
        from staging._failpoints import hit

        hit(name)


def _load_frozen(load: Callable[[], Callable[[list[str]], int]]) -> Callable[[list[str]], int]:
    """``load()`` with the collector paused, then every object alive frozen (see above); the
    collector is on again afterwards, whether ``load`` returned or raised, unless it was off before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        command_line = load()
        gc.freeze()
    finally:
        if was_on:
            gc.enable()
    return command_line


def guarded_main(
    prog: str,
    load: Callable[[], Callable[[list[str]], int]],
    argv: Sequence[str] | None = None,
    *,
    before: str,
    after: str,
) -> int:
    """Run the command line ``load()`` returns with every Ctrl-C outside it reported (see above).

    Args:
        prog: the program's name, which starts the diagnostic line.
        load: imports the command line and returns its ``main`` (called with the guard armed).
        argv: the arguments (default ``sys.argv[1:]``).
        before: what the line says of a Ctrl-C before the command began (after "interrupted (Ctrl-C) ").
        after: what it says of one as the command ended. Both plain text without quotes or backslashes
            (they are written into the JSON object as they are).

    The failpoint ``<prog>.cli_returned`` is reached once the command has returned.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    flags = args[: args.index("--")] if "--" in args else args
    guard = _Guard(prog, any(arg in _JSON_FLAGS for arg in flags), before, after)
    guard.arm(after=False)
    command_line = _load_frozen(load)
    try:
        try:
            guard.disarm()
            status = command_line(args)
        finally:
            guard.arm(after=True)
        _failpoint(f"{prog}.cli_returned")
    except KeyboardInterrupt:  # a Ctrl-C just as the command returned (its report already written)
        status = 130
    return status
