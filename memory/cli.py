"""The command-line conventions ``flows`` and ``sail`` share: parsing, diagnostics, exit statuses.

Both CLIs build a ``CommandLine``, register their commands on it (``command(name, handler, help)``
returns the subcommand's parser, for its own arguments) and hand ``main`` the argv. What it does for
every command, so the two behave alike:

* ``--version`` (from the installed distribution's metadata); ``-h``/``--help`` prints help and
  exits 0; no command prints help on stderr and exits 2.
* The global options (each CLI's own: ``--db``, ``--journal``, ``--home``; and ``--json``,
  ``-v/--verbose`` on both) are accepted before or after the subcommand.
* An option that takes one value, given twice (under any of its spellings; a global option before
  and after the command) is a usage error naming it (``_Once``, argparse's ``store`` in every
  parser built here), where argparse kept the last value without a word. ``append`` options and
  flags may repeat.
* A failure is one line on stderr, ``<prog>: error[<code>]: <message> (root run <id>)`` (the
  parenthesis only when a run is concerned), or with ``--json`` one JSON object on one line
  (``CodedError.as_json()``, plus ``runId``) with stdout left empty. Usage errors too: code
  ``usage``, exit 2. It is the last line on stderr; with ``--json`` the lines before it are text
  all the same (a command's notices while it waits, ``-v`` logs), so stderr as a whole is not JSON:
  ``--json`` promises JSON on stdout, and one object on the last line of stderr.
* Exit statuses: 0 done, 1 failed, 2 usage, 130 interrupted (Ctrl-C).
* Human output writes data read back (a finding's text, a ledger's reason) with its control
  characters escaped (``shown``): never raw to a terminal.
* A reader that goes away (``flows runs | head -1``) is not an error: what is still to be printed is
  dropped, nothing is said on stderr, and the command finishes with its own status.
* ``-v`` (info) / ``-vv`` (debug), or ``$FLOWS_LOG=<level>``, send the library's ``logging`` records
  to stderr; ``$FLOWS_DEBUG=1`` re-raises a failure for its traceback.
* Shell completion through ``argcomplete`` when it is installed (the ``completion`` extra).

Value types shared by both: ``limit`` (a whole number from 1 to ``LIMIT_MAX``), ``instant_ms``
(epoch milliseconds, an ISO 8601 date or date-time — a time without an offset is local time — or a
duration such as ``7d``, counted back from now) and ``expiry_ms`` (the same, a duration counted
forward), and
``format_ms`` for human output (local time, with its UTC offset shown).

This module sits in ``memory`` because it is the highest layer both CLIs' packages may import (they
sit side by side above it, and neither may import the other); it needs only the standard library
``staging.CodedError`` and the journal's error classes.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import errno
import functools
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, TextIO

import orjson

from journal import JournalNameInvalid, check_name
from memory._errors import ArgumentInvalid, FindingInvalid
from memory._finding import EXPIRES_MAX
from staging import CodedError, CodedInterrupt

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "INT64_MAX",
    "LIMIT_MAX",
    "CommandLine",
    "Handler",
    "InternalError",
    "Interrupted",
    "Option",
    "OutputUnwritable",
    "Progress",
    "UsageError",
    "asks_json",
    "db_path",
    "diagnose",
    "duration_ms",
    "expiry_ms",
    "format_ms",
    "instant_ms",
    "journal_location",
    "json_out",
    "json_text",
    "limit",
    "offset",
    "progress",
    "shown",
    "shown_surrogates",
    "stdout_to_stderr",
    "subject",
    "to_stderr",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: the largest ``--limit`` either CLI accepts
LIMIT_MAX = 100_000
#: the largest epoch-milliseconds value accepted (a signed 64-bit integer)
INT64_MAX = 2**63 - 1
_DIST = "flows-memory"

Handler = Callable[[argparse.Namespace], int]
Progress = Callable[[int, int], None]
log = logging.getLogger(__name__)


class UsageError(CodedError):
    """The command line is wrong: an unknown command or option, a missing or bad value.

    ``usage`` is the failing (sub)command's usage text, printed above the line in text mode only.
    """

    code = "usage"

    def __init__(self, message: str, *, usage: str = "") -> None:
        super().__init__(message)
        self._usage = usage


class Interrupted(CodedInterrupt):
    """The user interrupted a command (Ctrl-C) that has no more to say about what it stopped."""

    code = "interrupted"


class InternalError(CodedError):
    """An exception without a code escaped a command: a bug to report, with the traceback."""

    code = "internal_error"


class OutputUnwritable(CodedError):
    """stdout could not be written (closed, a full disk, an I/O error): the command ran to its end
    all the same, and what it wrote to the store is on record; only its output is lost."""

    code = "output_unwritable"


@dataclass(frozen=True)
class Option:
    """A global option of one CLI, accepted before or after the subcommand.

    ``flags`` as for ``add_argument``; ``switch`` makes it a flag without a value.
    """

    flags: tuple[str, ...]
    help: str
    metavar: str | None = None
    switch: bool = False
    type: Callable[[str], Any] | None = None


# -- value types -------------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]+\Z")


def meta_value(text: str) -> Any:
    """A ``K=V`` metadata value as the CLIs and the dashboard read it: JSON when it is JSON
    (``2500``, ``true``, ``"007"``, ``[1,2]``), else the text itself (``ETH``). An integer past 64
    bits is kept exact, for the memory's check to refuse: orjson reads it as a float, which was
    learned (or filtered on) in its place."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    with contextlib.suppress(RecursionError):  # nested past Python's stack: refused for its depth
        value = json.loads(text)
    return value


def limit(text: str) -> int:
    """``--limit``: a whole number from 1 to ``LIMIT_MAX``."""
    digits = text.strip().lstrip("0")  # int() refuses thousands of digits: a number is checked short
    if not _DIGITS.match(text.strip()) or len(digits) > 12 or not 1 <= int(digits or "0") <= LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {LIMIT_MAX}, got {text!r:.80}")
    return int(digits)


def offset(text: str) -> int:
    """``--offset``: a whole number from 0 to ``INT64_MAX`` (how many of a list's first items to skip)."""
    digits = text.strip().lstrip("0")  # int() refuses thousands of digits: a number is checked short
    if not _DIGITS.match(text.strip()) or len(digits) > 19 or int(digits or "0") > INT64_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {INT64_MAX}, got {text!r:.80}")
    return int(digits or "0")


def subject(text: str) -> str:
    """A question to answer (``flows why``): any text with something besides white space."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"must be a question or words to match, got {text!r:.80}: nothing can answer an empty one"
        )
    return text


@functools.cache
def _duration_re() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A whole duration, and one part of it (compiled on first use: most commands take none)."""
    return re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w))+\Z"), re.compile(r"([0-9]+)(ms|s|m|h|d|w)")


_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_TIME_FORMS = (
    "epoch milliseconds, an ISO 8601 date/time (2026-01-31, 2026-01-31T08:00:00+00:00) or a "
    "duration (90s, 15m, 12h, 7d, 2w, 1h30m)"
)

_RANGE = "an ISO 8601 date from 1970-01-01 to 9999-12-31, after its offset"


def duration_ms(text: str) -> int | None:
    """``text`` as a duration in milliseconds (``90s``, ``15m``, ``12h``, ``7d``, ``2w``, ``1h30m``,
    ``250ms``), or None when it is not one."""
    text = text.strip()
    whole, part = _duration_re()
    if not whole.match(text):
        return None
    return sum(_bounded(n) * _UNIT_MS[unit] for n, unit in part.findall(text))


def _bounded(digits: str) -> int:
    """``digits`` as a number, or 10**21 (past any time taken) when longer than 20 digits: ``int``
    refuses a string of thousands of digits, and no time needs more than 20."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 20 else 10**21


def instant_ms(text: str, *, now_ms: int | None = None, ahead: bool = False) -> int:
    """``--before``/``--since``: epoch milliseconds, an ISO 8601 date or date-time, or a duration:
    that long ago (``ahead``: that long from now).

    A date is its midnight; a time without an offset is local time (``$TZ``), like the times the
    CLIs print. The value must fall in 1970 … the end of signed 64-bit milliseconds.
    """
    value = _instant(text, now_ms=now_ms, ahead=ahead)
    if not 0 <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"must be from 1970 to {INT64_MAX} ms ({_RANGE}), got {text!r:.80}")
    return value


def _instant(text: str, *, now_ms: int | None, ahead: bool) -> int:
    """``text`` as epoch milliseconds (see ``instant_ms``), out of range or not: -1 for an ISO date
    its offset moves before year 1 or past 9999, ``INT64_MAX + 1`` for digits past 64 bits."""
    text = text.strip()
    span = duration_ms(text)
    if span is not None:
        now = round(time.time() * 1000) if now_ms is None else now_ms
        return now + span if ahead else now - span
    if _DIGITS.match(text):
        return min(_bounded(text), INT64_MAX + 1)  # past 64 bits: refused
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {_TIME_FORMS}, got {text!r:.80}") from None
    try:
        return round(moment.astimezone().timestamp() * 1000)
    except (OverflowError, ValueError, OSError):  # its offset (or $TZ) moves it past year 1 … 9999
        return -1


def db_path(text: str) -> str:
    """``--db``: a path a history DB could be made at (``memory.resolve_db``): not empty (the current
    folder), without NUL, no name over 255 bytes (the DB's own over 247), not too long a folder."""
    from memory._errors import ArgumentInvalid
    from memory._paths import resolve_db

    try:
        resolve_db(text)
    except ArgumentInvalid as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def journal_location(text: str) -> str:
    """``--journal``: a journal location, not empty (which would be the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "the journal location is empty: give a folder, a file:/// URL or a postgresql:// DSN"
        )
    return text


def expiry_ms(text: str, *, now_ms: int | None = None) -> int:
    """``--expires``: as ``instant_ms``, a duration counting from now (``7d``: a week from now), in
    the range a finding's ``expiresMs`` takes (1 to ``EXPIRES_MAX``, 2**53 - 1: the largest integer
    every JSON reader keeps exact), so a time past it is refused here, as the other dates are."""
    value = _instant(text, now_ms=now_ms, ahead=True)
    if not 0 < value <= EXPIRES_MAX:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {EXPIRES_MAX} ms (2^53 - 1, the latest expiry a finding takes; "
            f"{_RANGE}; or a duration from now that ends by then), got {text!r:.80}"
        )
    return value


def format_ms(ms: int | None, *, precise: bool = False) -> str:
    """A time for people: local time with its UTC offset (``2026-01-31 08:00:00+00:00``; with
    ``precise``, milliseconds too: ``08:00:00.250+00:00``); ``-`` for None."""
    if ms is None:
        return "-"
    moment = local_moment(ms)
    if moment is None:  # past what a date shows: the number itself
        return f"{ms} ms since 1970"
    return moment.isoformat(sep=" ", timespec="milliseconds" if precise else "seconds")


def local_moment(ms: int) -> datetime | None:
    """``ms`` (milliseconds since 1970) as a local time with its offset, or None past what a
    calendar shows (year 10,000; and near it, a zone ahead of UTC)."""
    try:
        return datetime.fromtimestamp(ms // 1000).astimezone().replace(microsecond=ms % 1000 * 1000)
    except (OverflowError, OSError, ValueError):
        return None


# -- output ------------------------------------------------------------------------------------


# every control character: C0, DEL and C1 (a terminal may take U+009B for ESC [)
_SHOWN = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
}
# and the bidirectional controls: an override or isolate in a tag would reorder what follows it on
# the line (the key, the source), so the line would say something the data does not
BIDI_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)
_SHOWN |= {c: f"\\u{c:04x}" for c in BIDI_CONTROLS}
_SHOWN_LINES = {c: e for c, e in _SHOWN.items() if c != 0x0A}  # the same, newlines kept


@functools.cache
def _surrogate_escapes() -> dict[int, str]:
    """A lone surrogate: a byte of a name that is not UTF-8 as Python reads it (U+DCFF for the byte
    ff), which a terminal's strict UTF-8 stdout cannot write: the byte as an escape (\\xff), any
    other surrogate as its code point (\\ud800). Built the first time a text holds one: its 2,048
    entries cost every command's start a millisecond and more, and almost no text needs them."""
    return {c: f"\\x{c - 0xDC00:02x}" if c >= 0xDC80 else f"\\u{c:04x}" for c in range(0xD800, 0xE000)}


def shown(text: str, *, one_line: bool = False) -> str:
    """``text`` as human output writes it: every control character but the newline (and, with
    ``one_line``, the newline too) as an escape (``\\x1b``, ``\\t``, ``\\n``), and every bidirectional
    control (``\\u202e``, ``\\u2066``, ``\\u200f``) too, so data read back from
    a store, a ledger or a chain (a finding's text, a contract's revert reason, a token's symbol)
    never moves the terminal's cursor, sets its title or writes its clipboard. A byte of a name that
    is not UTF-8 (a lone surrogate, as Python reads it) is written as ``\\xff``, which any stdout
    can take."""
    out = text.translate(_SHOWN if one_line else _SHOWN_LINES)
    if out.isascii():
        return out
    return shown_surrogates(out)


def shown_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (a byte of a name that is not UTF-8, as Python reads it)
    written as ``shown`` writes it (``\\xff``, else ``\\ud800``), and nothing else changed: what any
    UTF-8 output can take."""
    if text.isascii():
        return text
    try:
        text.encode()  # UTF-8 encodes every character but a lone surrogate
    except UnicodeEncodeError:
        return text.translate(_surrogate_escapes())
    return text


def json_out(obj: Any, file: TextIO | None = None) -> None:
    """Print ``obj`` as indented JSON on ``file`` (default stdout)."""
    (sys.stdout if file is None else file).write(json_text(obj, indent=True) + "\n")


@functools.cache
def _surrogate_re() -> re.Pattern[str]:
    """A lone surrogate (compiled on first use: a character class of them takes most of a
    millisecond to compile, and only odd names hold one)."""
    return re.compile("[\ud800-\udfff]")


def json_text(obj: Any, *, indent: bool = False) -> str:
    """``obj`` as JSON text (with ``indent``, two spaces a level).

    A name the OS gave in bytes that are not UTF-8 (a path, an argument) reaches Python as a string
    with lone surrogates (``\\udcff``), which no UTF-8 text can hold: such a string is written with
    those characters as JSON's ``\\u`` escapes (``\\udcff``), which a reader decodes to the same string (and
    ``os.fsencode`` of it to the same bytes), so the output stays one valid JSON document.
    """
    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2 if indent else 0).decode()
    except TypeError as exc:
        if str(exc) == _TOO_DEEP:  # a value read back, nested as deep as a record holds it, wrapped
            return json_text(fit_depth(obj), indent=indent)
        if not _holds_surrogate(obj):
            raise
    text = json.dumps(obj, ensure_ascii=False, indent=2 if indent else None, separators=_SEPARATORS[indent])
    return _surrogate_re().sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SEPARATORS = {True: (",", ": "), False: (",", ":")}
_TOO_DEEP = "Recursion limit reached"  # orjson's refusal of nesting past JSON_DEPTH

JSON_DEPTH = 254
"""The deepest nesting of lists and objects a JSON output holds (orjson writes no deeper)."""


def fit_depth(value: Any, room: int = JSON_DEPTH) -> Any:
    """``value`` (JSON-ready) with each list or object nested more than ``room`` levels deep (the
    outermost is level 1) replaced by a string saying so: what an output prints of a value read
    back (a journal record may nest its payload as deep as a record holds, and an output wraps it
    in more levels)."""
    if isinstance(value, dict | list | tuple) and room < 1:
        return f"(not shown: nested more than {JSON_DEPTH} levels deep, past what JSON output holds)"
    if isinstance(value, dict):
        return {k: fit_depth(v, room - 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [fit_depth(v, room - 1) for v in value]
    return value


def _holds_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _surrogate_re().search(value) is not None
    if isinstance(value, dict):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_surrogate(v) for v in value)
    return False


@contextlib.contextmanager
def progress(label: str, *, enabled: bool) -> Iterator[Progress | None]:
    """A ``(done, total)`` printer for long work, on stderr, when ``enabled`` and stderr is a TTY.

    Yields None otherwise (``--json``, piped, redirected); ends its line when the work ends.
    """
    if not (enabled and sys.stderr is not None and sys.stderr.isatty()):
        yield None
        return
    shown = False

    def show(done: int, total: int) -> None:
        nonlocal shown
        shown = True
        to_stderr(f"\r{label}: {done}/{total}")

    try:
        yield show
    finally:
        if shown:
            to_stderr("\n")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[TextIO]:
    """While inside, everything written to stdout (``print``, child processes) goes to stderr.

    Yields a stream on the real stdout, for the command's own output (``--json``).
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        real = _ReaderSafe(open(saved, "w", closefd=False, encoding="utf-8"))  # noqa: SIM115
        try:
            yield real  # type: ignore[misc]
        finally:
            real.flush()
            real.close_inner()
            sys.stdout.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class _ReaderSafe(io.TextIOBase):
    """stdout that outlives its reader: after EPIPE, later writes go nowhere instead of raising."""

    def __init__(self, inner: TextIO | None) -> None:
        self._inner = inner
        self.reader_gone = inner is None
        # why stdout could not be written (closed at the start, a full disk, an I/O error): the
        # command goes on to its end, its output going nowhere, and ``main`` then reports it
        self.failed: OSError | None = None if inner is not None else OSError(errno.EBADF, "stdout is closed")

    def _failed(self, exc: OSError) -> None:
        self.failed = exc
        self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        if self._inner is None:
            return
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._inner.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        if self.reader_gone or self._inner is None:
            return len(text)
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            self._gone()
        except OSError as exc:
            self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.reader_gone or self._inner is None:
            return
        try:
            self._inner.flush()
        except BrokenPipeError:
            self._gone()
        except OSError as exc:
            self._failed(exc)

    def fileno(self) -> int:
        if self._inner is None:
            raise OSError(errno.EBADF, "stdout is closed")
        return self._inner.fileno()

    def close_inner(self) -> None:
        """Close the wrapped stream (its descriptor too, unless it was opened with closefd=False)."""
        if self._inner is not None:
            with contextlib.suppress(OSError):
                self._inner.close()

    def isatty(self) -> bool:
        return self._inner is not None and self._inner.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it an attribute
        return "utf-8" if self._inner is None else self._inner.encoding


# -- the parser --------------------------------------------------------------------------------


USAGE_SHOWN = 400
"""How many characters of argparse's own message a usage error keeps: it quotes the argument it
refuses whole (``invalid choice: '<a pasted page>'``)."""


_GIVEN: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("_GIVEN", default=None)
"""The options that take one value given so far in the parse under way (by destination, each with
the spelling it was given as): the command's parser and its subcommand's share one."""


class _Once(argparse.Action):
    """``store`` (argparse's default action), for an option given at most once: a second value,
    under any of its spellings, and before or after the command for a global option, is a usage
    error naming it, where argparse kept the last one without a word (``--limit 5 --limit 50``).
    Options meant to repeat (``append``, ``count``) and flags keep argparse's own actions."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = _GIVEN.get()
        if option_string is not None and given is not None:  # a positional is taken once by argparse
            earlier = given.get(self.dest)
            if earlier is not None:
                spelled = "" if earlier == option_string else f" (as {earlier}, then as {option_string})"
                raise argparse.ArgumentError(
                    self, f"given more than once{spelled}; it takes one value: give it once"
                )
            given[self.dest] = option_string
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in (None, "store"):  # the argument groups and subcommands share this registry
            self.register("action", name, _Once)

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if _GIVEN.get() is not None:  # a subcommand's parse, inside its command line's
            return super().parse_known_args(args, namespace)
        token = _GIVEN.set({})
        try:
            return super().parse_known_args(args, namespace)
        finally:
            _GIVEN.reset(token)

    def error(self, message: str) -> NoReturn:
        if len(message) > USAGE_SHOWN:
            message = f"{message[:USAGE_SHOWN]}… ({len(message):,} characters)"
        raise UsageError(f"{message}; see `{self.prog} --help`", usage=self.format_usage())


_JSON = Option(
    ("--json",),
    "print the result as JSON on stdout, and nothing else there; an error as one JSON object on one "
    "line, the last on stderr (the lines before it are text: notices, logs)",
    switch=True,
)


class CommandLine:
    """One CLI: its parser, global options, commands, and ``main``.

    Args:
        prog: the command's name (``flows``, ``sail``).
        description: one line under the usage.
        epilog: text after the option list (storage, exit statuses …).
        options: the CLI's own global options; ``--json`` and ``-v/--verbose`` are always there.
        interrupted: what a Ctrl-C while a command runs leaves, after "interrupted (Ctrl-C); " in
            its ``interrupted`` line (what this CLI's user must know to go on).
    """

    def __init__(
        self,
        prog: str,
        *,
        description: str,
        epilog: str = "",
        options: Sequence[Option] = (),
        whole: Callable[[], CommandLine] | None = None,
        interrupted: str = "what was acknowledged is on record",
    ) -> None:
        self.prog = prog
        self._interrupted = interrupted
        self._whole = whole  # set when this CLI holds only some commands: builds the one with all
        self._options = (*options, _JSON)
        self.parser = _Parser(
            prog=prog,
            description=description,
            epilog=epilog + _EXIT_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.parser.add_argument(
            "--version", action=_VersionAction, nargs=0, help="show program's version number and exit"
        )
        self._add_globals(self.parser, top=True)
        self._sub = self.parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def _add_globals(self, parser: argparse.ArgumentParser, *, top: bool) -> None:
        # A subcommand's copy has no default, so it never overwrites a value given before the command.
        group = parser.add_argument_group("global options (before or after the command)")
        for opt in self._options:
            kwargs: dict[str, Any] = {"help": opt.help}
            if opt.switch:
                kwargs["action"] = "store_true"
            else:
                kwargs["metavar"] = opt.metavar
                if opt.type is not None:
                    kwargs["type"] = opt.type
            if not top:
                kwargs["default"] = argparse.SUPPRESS
            group.add_argument(*opt.flags, **kwargs)
        group.add_argument(
            "-v",
            "--verbose",
            action="count",
            help="log what the library does on stderr (-vv: more); or set $FLOWS_LOG=info|debug",
            **({"default": 0} if top else {"default": argparse.SUPPRESS}),
        )

    def command(
        self, name: str, handler: Handler, help: str, examples: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        """Register a subcommand run by ``handler(args) -> exit status``; return its parser.
        ``examples`` (whole command lines) are printed under its help, as they are written."""
        epilog = "examples:\n" + "".join(f"  {line}\n" for line in examples) if examples else None
        parser = self._sub.add_parser(
            name,
            help=help,
            description=help,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self._add_globals(parser, top=False)
        parser.set_defaults(handler=handler)
        return parser

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        """Parse ``argv``; raises ``UsageError`` (or ``SystemExit(0)`` for help and version).

        A CLI built with only some commands (``whole`` given) parses with them first: a parse that
        succeeds there gives what the parser with every command gives (the same global options, and
        the command's own parser). Anything else — a usage error, help, the version, a completion
        request — is parsed again, or at once, by the CLI with every command.
        """
        if self._whole is not None and (_asks_for_every_command(argv) or "_ARGCOMPLETE" in os.environ):
            self._take(self._whole())
        _complete(self.parser)
        try:
            return self.parser.parse_args(list(argv))
        except UsageError:
            if self._whole is None:
                raise
        self._take(self._whole())
        return self.parser.parse_args(list(argv))

    def _take(self, whole: CommandLine) -> None:
        self.parser, self._sub, self._whole = whole.parser, whole._sub, None

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run one command line and return its exit status (never raises, but for ``$FLOWS_DEBUG``)."""
        argv = list(sys.argv[1:] if argv is None else argv)
        wants_json = asks_json(argv)
        guarded = _ReaderSafe(sys.stdout)
        real_stdout, sys.stdout = sys.stdout, guarded
        args: argparse.Namespace | None = None
        try:
            try:
                args = self.parse(argv)
                wants_json = wants_json or bool(getattr(args, "json", False))
                _configure_logging(args.verbose)
                if args.command is None:
                    if not wants_json:
                        to_stderr(self.parser.format_help())
                    raise UsageError(f"a command is required; see `{self.prog} --help`")
                status = int(args.handler(args))
                sys.stdout.flush()
                if guarded.failed is not None:
                    raise _output_lost(guarded.failed, status)
                return status
            except SystemExit as exc:  # --help, --version
                sys.stdout.flush()
                status = exc.code if isinstance(exc.code, int) else EXIT_USAGE
                if guarded.failed is not None:
                    return self.diagnose(_output_lost(guarded.failed, status), as_json=wants_json)
                return status
            except CodedInterrupt as exc:  # a Ctrl-C that says what it stopped (a flow run)
                return self.diagnose(exc, as_json=wants_json, run_id=_run_id_of(args))
            except KeyboardInterrupt:
                stopped = Interrupted(f"interrupted (Ctrl-C); {self._interrupted}")
                return self.diagnose(stopped, as_json=wants_json, run_id=_run_id_of(args))
            except Exception as exc:  # every failure becomes one classified line, never a traceback
                if os.environ.get("FLOWS_DEBUG"):
                    raise
                return self.diagnose(exc, as_json=wants_json, run_id=_run_id_of(args))
        finally:
            sys.stdout = real_stdout

    def diagnose(self, exc: BaseException, *, as_json: bool, run_id: str | None = None) -> int:
        """Print the one diagnostic for ``exc`` on stderr; return its exit status (see ``diagnose``)."""
        return diagnose(self.prog, exc, as_json=as_json, run_id=run_id)


def diagnose(prog: str, exc: BaseException, *, as_json: bool, run_id: str | None = None) -> int:
    """Print the one diagnostic line for ``exc`` on stderr, as ``prog``; return its exit status.

    ``run_id`` names the root run the command concerns, when the error does not say. Anything that
    is not a coded error is reported as ``internal_error`` (a bug).
    """
    if not isinstance(exc, CodedError | CodedInterrupt):
        log.debug("uncoded failure", exc_info=exc)
        exc = InternalError(
            f"{type(exc).__name__}: {exc} (a bug: rerun with FLOWS_DEBUG=1 for the traceback; "
            "please report it)"
        )
    fields = exc.as_json()
    run_id = fields.get("runId") or run_id
    if as_json:
        to_stderr(json_text({**fields, "runId": run_id}) + "\n")
    else:
        where = f" (root run {shown(run_id, one_line=True)})" if run_id else ""
        # one line, whatever the message quotes (a path, a value): its control characters escaped
        line = f"{prog}: error[{exc.code}]: {shown(exc.message, one_line=True)}{where}\n"
        to_stderr((exc._usage if isinstance(exc, UsageError) else "") + line)
    return _exit_status(exc)


def to_stderr(text: str) -> None:
    """Write ``text`` on stderr, if it can be written: a stderr that is closed (``2>&-``), full
    (``2>/dev/full``) or failing loses the diagnostic, never the exit status that goes with it
    (an exception here would end the process with 1, a usage error or a Ctrl-C included). After a
    failure stderr is pointed at the null device, so the interpreter's own flush at exit does not
    fail again (which would make the status 120)."""
    stream = sys.stderr
    try:
        if stream is None:
            return
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # ValueError: a stream already closed
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)


def _output_lost(exc: OSError, status: int) -> OutputUnwritable:
    how = "ran to its end" if status == 0 else f"ended with status {status}"
    return OutputUnwritable(
        f"cannot write to stdout ({exc.strerror or exc}); the command {how} and whatever it wrote to "
        "the store or a ledger is on record, only its output is lost: give stdout a file or a "
        "terminal to see it"
    )


def asks_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for ``--json`` (before any ``--``), spelled whole or shortened as the
    parser takes it (``--js``, ``--jso``): a failure is then reported as JSON, as the output would
    have been (a shortened ``--json`` printed JSON on success and a text line on failure)."""
    for arg in argv:
        if arg == "--":
            return False
        if len(arg) >= len("--js") and "--json".startswith(arg):
            return True
    return False


def _asks_for_every_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` may ask for help or the version (which a parser with some commands would
    answer differently): ``-h``, ``--help``, ``--version``, an abbreviation, or ``-h`` among short flags."""
    for arg in argv:
        if arg == "--":
            return False
        if arg.startswith("--") and len(arg) > 2:
            flag = arg.split("=", 1)[0]
            if "--help".startswith(flag) or "--version".startswith(flag):
                return True
        elif arg.startswith("-") and not arg.startswith("--") and "h" in arg:
            return True
    return False


_EXIT_EPILOG = """
exit status: 0 done, 1 failed (one line on stderr: <prog>: error[<code>]: <what to do>), 2 usage
or a bad argument (also when no command is given), 130 interrupted. A reader that goes away
(| head) is not an error.
"""


def _run_id_of(args: argparse.Namespace | None) -> str | None:
    """The run id the command was given, when it can be one (an invalid one is the error's
    subject, named there in short, and no root run)."""
    value = vars(args).get("run_id") if args is not None else None
    if not isinstance(value, str):
        return None
    try:
        return check_name("run id", value)
    except JournalNameInvalid:
        return None


def _exit_status(exc: CodedError | CodedInterrupt) -> int:
    """The exit status of a command that ends with ``exc``, as docs/SURFACE.md's table gives it for
    its code: 2 for a bad command line or argument (``usage``, an unsafe run id, a malformed
    argument or finding, ``$FLOWS_DB`` included, whichever command meets it), 130 interrupted, else
    1. A flow body's own error is its run's failure, which its command reports as 1 itself."""
    if isinstance(exc, CodedInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, UsageError | JournalNameInvalid | ArgumentInvalid | FindingInvalid):
        return EXIT_USAGE
    return EXIT_FAILED


class _VersionAction(argparse.Action):
    """``--version``: the version is looked up only when asked for, not on every start."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def _version() -> str:
    from importlib import metadata  # tens of milliseconds to import: only for --version

    try:
        return metadata.version(_DIST)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _configure_logging(verbose: int) -> None:
    level_name = os.environ.get("FLOWS_LOG", "").strip().upper()
    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
    elif level_name:
        level = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    else:
        # quiet by default: without a handler, Python would print warnings on stderr itself, and a
        # failure must stay the one line the command prints
        logging.getLogger().addHandler(logging.NullHandler())
        return
    logging.basicConfig(level=level, stream=sys.stderr, format="%(name)s: %(levelname)s: %(message)s")


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer a shell's completion request (argcomplete sets ``_ARGCOMPLETE``), then exit."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:  # the completion extra is not installed: no completions, no error
        return
    argcomplete.autocomplete(parser)
