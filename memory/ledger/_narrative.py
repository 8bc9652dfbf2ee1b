"""The narrative journal: the agent's ledger told in plain sentences, every one citing its lines.

Built from the ledger's entries only — and, beside them, what the activity log already recorded:
the token metadata the figures are shown in and the revert reasons the runner read — never from the
chain, a clock or anything else, so it is deterministic: the same lines give the same narrative, and
it can be rebuilt at any time. It reads; it never writes or edits either file. A damaged line fails
closed (``journal.JournalCorrupt``), as every full read of the ledger does.

Per day (UTC), in time order:

* each trade: what it swapped, in human units, at what price, confirmed (in which block) or reverted
  and why (the reason the activity log recorded), or sent and not yet verifiable;
* the skips, grouped by their reason's kind (cadence, balance, allowance, quote, unresolved
  dispatch): how many, from when to when, and the latest reason;
* each span in which the owner, not the clock, held the next trade (balance, allowance, quote skips
  in a row, or an unresolved dispatch): from when, until when (or still), and what unblocks it;
* each gap with no ledgered decision longer than ``gap_s``.

A reason a sentence quotes is cut at ``MAX_TEXT_CHARS`` characters with ``fit_text``'s marker, and a
sentence at ``SENTENCE_MAX_CHARS`` (a ledger written before its texts were bounded may hold a reason,
or an amount's symbol, of megabytes).

Every sentence cites the lines it came from: ``{"file": "ledger"|"activity", "line", "sha256"}``,
the line number from 1 and the SHA-256 of the line's bytes without its newline (``sha256sum`` of
``sed -n 'Np' FILE | tr -d '\\n'``), so a reader can check each one.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from memory.ledger._activity import ActivityRecord, DispatchSettled
from memory.ledger._backing import BACKING_EVENTS, CLAIM_NOTE, Backing, is_claim
from memory.ledger._display import TokenBook, amount_text, learned_tokens, reason_text
from memory.ledger._entries import MAX_TEXT_CHARS, Acted, Amount, Entry, Outcome, Skipped, fit_text
from memory.ledger._ledger import CLOCK_SKEW_S, Ledger
from memory.ledger._status import ms

#: a span with no ledgered decision longer than this is a gap, when the interval is not known
DEFAULT_GAP_S = 7200
#: the most days a "last days" window spans (``sail journal --days``, the dashboard's journal)
MAX_DAYS = 366
_DAY_S = 86_400
_YEAR_10000 = 253_402_300_800  # 10000-01-01 UTC: past the calendar
_KINDS = {
    "cadence:": "cadence",
    "balance": "balance",
    "allowance": "allowance",
    "quote": "quote",
    "unresolved": "unresolved dispatch",
}
_HOLDS = ("balance", "allowance", "quote", "unresolved dispatch")  # not the clock: the owner or a dispatch
_ORDER = {"trade": 0, "blocked": 1, "skips": 2, "gap": 3}
_REVERTED = frozenset({"dispatch_reverted"})
#: how far before ``since`` a read from the tail looks (twice the stamps' allowed skew)
_MARGIN_S = 2 * CLOCK_SKEW_S


@dataclass(frozen=True)
class Cite:
    """One line a sentence came from: which file, its line number (from 1), its SHA-256."""

    file: str
    line: int
    sha256: str

    def as_json(self) -> dict[str, Any]:
        """``{"file", "line", "sha256"}``."""
        return {"file": self.file, "line": self.line, "sha256": self.sha256}

    def short(self) -> str:
        """``L12 1a2b3c4d5e6f`` (a ledger line) or ``A40 …`` (an activity line)."""
        return f"{'L' if self.file == 'ledger' else 'A'}{self.line} {self.sha256[:12]}"


#: the most characters a sentence holds (cut with ``fit_text``'s marker past it): room for a reason of
#: ``MAX_TEXT_CHARS`` and the words around it
SENTENCE_MAX_CHARS = 3 * MAX_TEXT_CHARS


@dataclass(frozen=True)
class Sentence:
    """One sentence of the narrative: its ``kind`` (trade, skips, blocked, gap), when (``ts``, unix
    seconds), its text, and the lines it came from."""

    kind: str
    ts: int
    text: str
    cites: tuple[Cite, ...]

    def __post_init__(self) -> None:
        # a ledger written before its texts were bounded may hold an amount whose symbol is megabytes
        object.__setattr__(self, "text", fit_text(self.text, SENTENCE_MAX_CHARS))

    def as_json(self) -> dict[str, Any]:
        """``{"kind", "tsMs", "text", "cites"}`` (``tsMs``: ``ts`` in epoch milliseconds, null beyond
        what 64 bits hold)."""
        return {
            "kind": self.kind,
            "tsMs": ms(self.ts),
            "text": self.text,
            "cites": [c.as_json() for c in self.cites],
        }


@dataclass(frozen=True)
class Day:
    """One UTC day of the narrative."""

    date: str
    sentences: tuple[Sentence, ...]

    def as_json(self) -> dict[str, Any]:
        """``{"date", "sentences"}``."""
        return {"date": self.date, "sentences": [s.as_json() for s in self.sentences]}


@dataclass(frozen=True)
class Narrative:
    """The narrative of a ledger over ``[since, until)`` (unix seconds; None: unbounded)."""

    ledger: str
    since: int | None
    until: int | None
    gap_s: int
    days: tuple[Day, ...] = field(default=())

    def as_json(self) -> dict[str, Any]:
        """What ``sail journal --json`` prints: the window (``sinceMs``, ``untilMs``: epoch
        milliseconds, as ``--since``/``--until`` take them; null when unbounded), the gap bound and
        the days."""
        return {
            "ledger": self.ledger,
            "timezone": "UTC",
            "sinceMs": None if self.since is None else ms(self.since),
            "untilMs": None if self.until is None else ms(self.until),
            "gapS": self.gap_s,
            "days": [d.as_json() for d in self.days],
        }

    def lines(self) -> list[str]:
        """The narrative as text: a heading per day, one line per sentence with its citations."""
        out = [
            f"the narrative of {self.ledger}, all times UTC; each sentence cites its lines "
            "[L<line> <sha256…> of the ledger, A<line> of the activity log]"
        ]
        if not self.days:
            out.append("no entries in this window")
        for day in self.days:
            out.append("")
            out.append(day.date)
            for s in day.sentences:
                out.append(f"  {_clock(s.ts)}  {s.text} [{_cites_text(s.cites)}]")
        return out


@dataclass(frozen=True)
class _Line:
    number: int
    sha256: str
    entry: Entry
    claim: bool = False  # a final line the activity log does not back

    @property
    def cite(self) -> Cite:
        return Cite("ledger", self.number, self.sha256)


def narrate(
    ledger: Ledger,
    *,
    token_in: str | None,
    interval_s: int | None = None,
    since: int | None = None,
    until: int | None = None,
    gap_s: int | None = None,
    tokens: TokenBook | None = None,
) -> Narrative:
    """The narrative of ``ledger``'s entries stamped in ``[since, until)``.

    ``token_in`` is the token a skip's figures are in (the config's); ``tokens`` the recorded token
    metadata (default: the verified snapshot's, read without writing it); ``gap_s`` the shortest gap
    told (default twice ``interval_s``, else ``DEFAULT_GAP_S``).

    Raises:
        journal.JournalCorrupt: a damaged line in the ledger or the activity log.
        LedgerNotAFile: a file of the agent is not a regular file.
    """
    lines, reverts, known = _read(ledger, since, until)
    bound = gap_s if gap_s is not None else (2 * interval_s if interval_s else DEFAULT_GAP_S)
    book = learned_tokens(
        (ln.entry for ln in lines if isinstance(ln.entry, Acted)), known if tokens is None else tokens
    )
    days = _tell(lines, reverts, book, token_in, bound=bound, since=since, until=until)
    return Narrative(str(ledger.path), since, until, bound, days)


def narrate_days(
    ledger: Ledger,
    *,
    token_in: str | None,
    interval_s: int | None = None,
    since: int | None = None,
    until: int | None = None,
    gap_s: int | None = None,
) -> list[Narrative]:
    """Each UTC day of ``[since, until)`` that holds an entry, told on its own: the narrative of
    that day's window alone (a span running past midnight ends with the day; token symbols from the
    recorded metadata and that day's own trades), from one read of the ledger. So a day's narrative
    is the same whatever window it was read in, and never changes once the day is over (no later
    entry is stamped in it) unless the activity log records a token's metadata meanwhile.

    Raises:
        journal.JournalCorrupt: a damaged line in the ledger or the activity log.
        LedgerNotAFile: a file of the agent is not a regular file.
    """
    lines, reverts, known = _read(ledger, since, until)
    bound = gap_s if gap_s is not None else (2 * interval_s if interval_s else DEFAULT_GAP_S)
    by_day: dict[int, list[_Line]] = {}
    for line in lines:
        by_day.setdefault(line.entry.ts - line.entry.ts % _DAY_S, []).append(line)
    told = []
    for start, members in sorted(by_day.items()):
        begin = start if since is None else max(since, start)
        end = start + _DAY_S if until is None else min(until, start + _DAY_S)
        book = learned_tokens((ln.entry for ln in members if isinstance(ln.entry, Acted)), known)
        days = _tell(members, reverts, book, token_in, bound=bound, since=begin, until=end)
        told.append(Narrative(str(ledger.path), begin, end, bound, days))
    return told


def _read(
    ledger: Ledger, since: int | None, until: int | None
) -> tuple[list[_Line], dict[str, tuple[str | None, Cite]], TokenBook]:
    """The window's lines, the revert reasons, the token book; each final line the activity log
    does not back (``Backing``) marked a claim. The activity log is read back to the window's bound:
    a line that backs an act is written after its block, by a tick's clock."""
    with ledger.tail() as tail:
        lines = _window(tail.ledger(), since, until)
        wanted = {_hash(ln) for ln in lines if _reverted(ln)}
        finals = any(_final(ln) for ln in lines)
        back_to = None if since is None else since - _MARGIN_S
        events = _REVERTED | BACKING_EVENTS
        records = list(tail.activity(events, back_to=back_to)) if finals else []
        reverts = _revert_reasons(records, wanted) if wanted else {}
        backing = Backing(record for _, _, record in records)
        lines = [replace(ln, claim=is_claim(ln.entry, backing)) if _final(ln) else ln for ln in lines]
        return lines, reverts, tail.snapshot.tokens


def _tell(
    lines: list[_Line],
    reverts: dict[str, tuple[str | None, Cite]],
    book: TokenBook,
    token_in: str | None,
    *,
    bound: int,
    since: int | None,
    until: int | None,
) -> tuple[Day, ...]:
    sentences = [
        *(_trade(ln, reverts, book) for ln in lines if isinstance(ln.entry, Acted)),
        *_skip_groups(lines, token_in, book),
        *_blocked_spans(lines, token_in, book),
        *_gaps(lines, bound, since, until),
    ]
    by_day: dict[str, list[Sentence]] = {}
    for s in sorted(sentences, key=lambda s: (s.ts, _ORDER[s.kind], s.cites[0].line)):
        by_day.setdefault(_date(s.ts), []).append(s)
    return tuple(Day(date, tuple(items)) for date, items in sorted(by_day.items()))


def last_days(ledger: Ledger, days: int = 1) -> int | None:
    """Where the narrative of the ledger's last ``days`` UTC days starts: midnight (UTC) of the day
    of the last entry, ``days - 1`` days back; None for an empty ledger. Reads the last line only.

    Raises:
        ValueError: ``days`` is not within 1 to ``MAX_DAYS``.
        journal.JournalCorrupt: a damaged last line.
        LedgerNotAFile: the ledger is not a regular file.
    """
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be 1 to {MAX_DAYS}, got {days}")
    last = next(iter(ledger.iter_reverse()), None)
    if last is None:
        return None
    return max(0, last.ts - last.ts % _DAY_S - (days - 1) * _DAY_S)


# -- trades -----------------------------------------------------------------------------------------


def _final(line: _Line) -> bool:
    return isinstance(line.entry, Acted) and line.entry.outcome is not Outcome.UNVERIFIED


def _reverted(line: _Line) -> bool:
    return isinstance(line.entry, Acted) and line.entry.outcome is Outcome.REVERTED


def _hash(line: _Line) -> str:
    return line.entry.tx_hash.lower() if isinstance(line.entry, Acted) else ""


def _window(
    newest_first: Iterable[tuple[int, str, Entry]], since: int | None, until: int | None
) -> list[_Line]:
    """The entries stamped in ``[since, until)``, oldest first, read from the ledger's end.

    The read stops at the first skip or unverified entry (stamped by its tick's clock when written)
    older than ``since`` by more than ``_MARGIN_S``: every line before it was written before then,
    and no line's stamp runs ahead of its writing by more than ``CLOCK_SKEW_S`` (a confirmed act is
    stamped with its block's time, before it is written).
    """
    found: list[_Line] = []
    for number, digest, entry in newest_first:
        if (since is None or entry.ts >= since) and (until is None or entry.ts < until):
            found.append(_Line(number, digest, entry))
        elif since is not None and _stamped_when_written(entry) and entry.ts + _MARGIN_S < since:
            break
    found.reverse()
    return found


def _stamped_when_written(entry: Entry) -> bool:
    return isinstance(entry, Skipped) or (isinstance(entry, Acted) and entry.outcome is Outcome.UNVERIFIED)


def _revert_reasons(
    newest_first: Iterable[tuple[int, str, ActivityRecord]], hashes: set[str]
) -> dict[str, tuple[str | None, Cite]]:
    """The reason the activity log recorded for each reverted tx hash, and its line: the last
    record that gave one, else the first record (read newest first, until each has its reason)."""
    found: dict[str, tuple[str | None, Cite]] = {}
    settled: set[str] = set()
    for number, digest, record in newest_first:
        if isinstance(record, DispatchSettled) and record.tx_hash.lower() in hashes:
            key = record.tx_hash.lower()
            if key in settled:
                continue
            found[key] = (record.reason, Cite("activity", number, digest))
            if record.reason is not None:
                settled.add(key)
                if len(settled) == len(hashes):
                    break
    return found


def _trade(line: _Line, reverts: dict[str, tuple[str | None, Cite]], book: TokenBook) -> Sentence:
    entry = line.entry
    assert isinstance(entry, Acted)
    given = _amount(entry.amount_in)
    known = None if entry.token_out is None else book.get(entry.token_out.lower())
    wanted = _symbol(entry.amount_out) or (known[1] if known else _short_address(entry.token_out))
    tx = f"tx {_short(entry.tx_hash)}"
    if line.claim:  # told as the line says, and said to be unbacked: never as a swap that happened
        said = (
            f"a confirmed swap of {given} to {_amount(entry.amount_out)}"
            if entry.outcome is Outcome.CONFIRMED
            else f"a reverted swap of {given} to {wanted}"
        )
        text = (
            f"A ledger line claims {said} in block {entry.block} ({tx}), {CLAIM_NOTE} (no "
            "dispatch_included of that block and status, nor a receipt line of its dispatch): it may "
            "never have happened."
        )
        return Sentence("trade", entry.ts, text, (line.cite,))
    if entry.outcome is Outcome.CONFIRMED:
        got = _amount(entry.amount_out)
        price = _price(entry.amount_in, entry.amount_out)
        at = f" at {price}" if price else ""
        text = f"Swapped {given} for {got}{at}, confirmed in block {entry.block} ({tx})."
        return Sentence("trade", entry.ts, text, (line.cite,))
    if entry.outcome is Outcome.REVERTED:
        reason, cite = reverts.get(entry.tx_hash.lower(), (None, None))
        why = f"reason: {fit_text(reason)}" if reason else "no reason recorded"
        text = f"Tried to swap {given} for {wanted}; it reverted in block {entry.block} ({why}; {tx})."
        cites = (line.cite,) if cite is None else (line.cite, cite)
        return Sentence("trade", entry.ts, text, cites)
    text = (
        f"Sent a swap of {given} for {wanted} that the chain could not confirm yet: ledgered unverified, "
        f"a later entry resolves it ({tx})."
    )
    return Sentence("trade", entry.ts, text, (line.cite,))


def _amount(amount: Amount | None) -> str:
    return "an unknown amount" if amount is None else amount.human


def _symbol(amount: Amount | None) -> str | None:
    return None if amount is None else amount.human.partition(" ")[2] or None


def _price(given: Amount | None, got: Amount | None) -> str | None:
    """``2545.55 USDC per WETH``: what one unit of the token bought cost, to 6 significant digits."""
    if given is None or got is None:
        return None
    try:
        spent, spent_symbol = _number(given.human)
        bought, bought_symbol = _number(got.human)
    except (InvalidOperation, ValueError):
        return None
    if bought == 0:
        return None
    return f"{_significant(spent / bought)} {spent_symbol} per {bought_symbol}"


def _number(human: str) -> tuple[Decimal, str]:
    number, _, symbol = human.partition(" ")
    if not symbol:
        raise ValueError(human)
    return Decimal(number), symbol


def _significant(value: Decimal, digits: int = 6) -> str:
    """``value`` rounded to ``digits`` significant digits, written without an exponent."""
    if value == 0:
        return "0"
    exponent = value.adjusted() - digits + 1
    rounded = value.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_EVEN)
    text = format(rounded, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


# -- skips, blocks, gaps ------------------------------------------------------------------------------


def _kind(reason: str) -> str:
    return _KINDS.get(reason.split(" ", 1)[0], "other")


def _skip_groups(lines: Sequence[_Line], token: str | None, book: TokenBook) -> Iterable[Sentence]:
    """One sentence per day and reason kind: how many skips, from when to when, the latest reason."""
    groups: dict[tuple[str, str], list[_Line]] = {}
    for line in lines:
        if isinstance(line.entry, Skipped):
            groups.setdefault((_date(line.entry.ts), _kind(line.entry.reason)), []).append(line)
    for (_, kind), members in groups.items():
        first, last = members[0].entry, members[-1].entry
        assert isinstance(last, Skipped)
        times = "once" if len(members) == 1 else f"{len(members)} times"
        span = "" if len(members) == 1 else f", {_clock(first.ts)} to {_clock(last.ts)}"
        latest = "its reason" if len(members) == 1 else "the latest reason"
        said = fit_text(reason_text(last.reason, token, book))
        text = f"Skipped {times} on {kind}{span}; {latest}: {said}."
        yield Sentence("skips", first.ts, text, tuple(m.cite for m in members))


def _blocked_spans(lines: Sequence[_Line], token: str | None, book: TokenBook) -> Iterable[Sentence]:
    """Each run of skips that wait on something other than the clock (the same kind in a row)."""
    run: list[_Line] = []
    for line in [*lines, None]:
        entry = None if line is None else line.entry
        kind = _kind(entry.reason) if isinstance(entry, Skipped) else None
        if run and (kind != _kind(_reason(run[0])) or line is None):
            yield _blocked(run, line, token, book)
            run = []
        if line is not None and kind in _HOLDS:
            run.append(line)


def _reason(line: _Line) -> str:
    assert isinstance(line.entry, Skipped)
    return line.entry.reason


def _blocked(run: list[_Line], after: _Line | None, token: str | None, book: TokenBook) -> Sentence:
    first, last = run[0], run[-1]
    kind = _kind(_reason(first))
    ticks = "one tick" if len(run) == 1 else f"{len(run)} ticks"
    shown = fit_text(reason_text(_reason(last), token, book))
    if after is None:
        until = f"still blocked at the last entry in view ({_when(last.entry.ts)}, {ticks})"
        cites = tuple(line.cite for line in run)
    else:
        until = f"until {_when(after.entry.ts)} ({ticks}), when {_what_followed(after.entry)}"
        cites = (*(line.cite for line in run), after.cite)
    text = (
        f"Blocked on {kind} from {_clock(first.entry.ts)}: {shown}; "
        f"{_unblocks(_reason(last), token, book)}; {until}."
    )
    return Sentence("blocked", first.entry.ts, text, cites)


def _what_followed(entry: Entry) -> str:
    if isinstance(entry, Acted):
        return f"a swap followed ({entry.outcome})"
    return f"the next tick skipped on {_kind(entry.reason)}"


def _unblocks(reason: str, token: str | None, book: TokenBook) -> str:
    """What lets the agent trade again, in the owner's terms."""
    words = reason.split(" ")
    if words[0] == "balance" and len(words) >= 5 and words[4].isdigit():
        minimum = amount_text(int(words[4]), token, book, raw=False)
        return f"it trades again once the agent holds at least {minimum}"
    if words[0] == "allowance" and len(words) >= 4 and words[3].isdigit():
        needed = amount_text(int(words[3]), token, book, raw=False)
        return f"it trades again once the owner lets the router spend at least {needed}"
    if words[0] == "quote":
        return "it trades again once the router quotes the pair"
    return "it trades again once a later tick resolves that dispatch from the chain"


def _gaps(lines: Sequence[_Line], bound: int, since: int | None, until: int | None) -> Iterable[Sentence]:
    """Each span longer than ``bound`` with no ledgered decision (within the window's edges)."""
    for before, after in itertools.pairwise(lines):
        if after.entry.ts - before.entry.ts > bound:
            yield _gap(before.entry.ts, after.entry.ts, (before.cite, after.cite))
    if lines and since is not None and lines[0].entry.ts - since > bound:
        yield _gap(since, lines[0].entry.ts, (lines[0].cite,))
    if lines and until is not None and until - lines[-1].entry.ts > bound:
        yield _gap(lines[-1].entry.ts, until, (lines[-1].cite,))


def _gap(start: int, end: int, cites: tuple[Cite, ...]) -> Sentence:
    text = (
        f"No decision ledgered from {_clock(start)} to {_when(end)} ({_span(end - start)}): the agent "
        "did not tick, or its ticks failed (the activity log says which)."
    )
    return Sentence("gap", start, text, cites)


# -- formatting --------------------------------------------------------------------------------------


def _utc(ts: int) -> datetime | None:
    try:
        return datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _date(ts: int) -> str:
    if 0 <= ts < _YEAR_10000:
        return _date_of_day(ts // _DAY_S)  # one strftime per day, not per line
    moment = _utc(ts)
    return "beyond the calendar" if moment is None else moment.strftime("%Y-%m-%d")


@functools.lru_cache(maxsize=4096)
def _date_of_day(day: int) -> str:
    return datetime.fromtimestamp(day * _DAY_S, UTC).strftime("%Y-%m-%d")


def _clock(ts: int) -> str:
    moment = _utc(ts)
    return f"ts {ts}" if moment is None else moment.strftime("%H:%M:%S")


def _when(ts: int) -> str:
    moment = _utc(ts)
    return f"ts {ts}" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _span(seconds: int) -> str:
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    parts.append(f"{secs}s" if secs and not days else "")
    return " ".join(p for p in parts if p) or "0s"


def _short(tx_hash: str) -> str:
    return f"{tx_hash[:6]}…{tx_hash[-4:]}" if len(tx_hash) > 12 else tx_hash


def _short_address(address: str | None) -> str:
    return "an unknown token" if address is None else _short(address)


def _cites_text(cites: Sequence[Cite]) -> str:
    if len(cites) <= 4:
        return ", ".join(c.short() for c in cites)
    head = f"{cites[0].short()}, {cites[1].short()} … {cites[-1].short()}"
    return f"{head}; {len(cites)} lines, --json lists all"
