"""The agent pages' data: one agent home's ledger, cadence, skips and balances, read-only.

Nothing here writes. What the agent's state is — the last confirmed act, every dispatch not yet
resolved and its state, what holds the next trade, the last tick, the recent skips — comes from the
memory layer's one reader (``memory.ledger.agent_state``, ``recent_skips``), the very one ``sail
status`` and ``sail why`` use, called with ``save=False``: it reads the verified snapshot and the
logs' last lines (a missing or disagreeing snapshot is rebuilt in memory from both files, never
written back here). The rest costs the lines it reads, never the whole ledger:

* the ledger timeline pages backwards by byte offset (``TailReader``): a page costs its lines;
* the balances chart reads the acted entries among the last ``CHART_SCAN`` lines (skips are not
  decoded: a byte check picks the acted lines), at most ``CHART_POINTS`` of them;
* a reverted trade's reason is read from the activity log backwards (at most ``MAX_SCAN`` lines);
* the narrative journal tells the last ``JOURNAL_DAYS`` UTC days (``memory.ledger.narrate``, what
  ``sail journal --days N`` prints).
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from flows._bounded import LIST_MAX_BYTES, fitting
from flows.web._errors import ServeBadRequest
from flows.web._tail import TailReader
from memory.ledger import (
    MAX_DAYS,
    MAX_SKIP_SCAN,
    Acted,
    ActivityCodec,
    ActivityLog,
    ActivityRecord,
    DispatchSettled,
    Entry,
    Ledger,
    LedgerCodec,
    Narrative,
    Sentence,
    Skipped,
    agent_state,
    last_days,
    learned_tokens,
    narrate,
    reason_text,
    recent_skips,
)

LEDGER_PAGE = 50
MAX_SCAN = 100_000
CHART_SCAN = 20_000
CHART_POINTS = 200
#: the days the agent page's journal tells by default (the last entry's, and the one before)
JOURNAL_DAYS = 2
#: the most sentences of the journal the agent page shows (the newest of its window; ``jend`` pages back)
JOURNAL_SHOWN = 100
#: the sentences a page of ``/api/agents/N/journal`` holds by default, and the most ``limit`` asks for
JOURNAL_PAGE = 1000
JOURNAL_MAX_PAGE = 5000
_CONFIG_MAX_BYTES = 1 << 20
_DAY_S = 86_400
#: the largest ``interval_s`` the agent's config takes (sail's own bound: what the logs' integers carry)
MAX_INTERVAL_S = 2**63 - 1


@dataclass(frozen=True)
class Token:
    """What the ledger tells of a token: its symbol and decimals (from an amount it rendered)."""

    address: str
    symbol: str
    decimals: int


@dataclass(frozen=True)
class JournalPage:
    """Sentences ``[start, end)`` of the narrative of a window, of ``total``: the narrative's JSON with
    only those sentences (``sail journal --json``'s shape, a day without any of them left out) and
    the sentences themselves with their day."""

    narrative: Narrative
    start: int
    end: int
    total: int
    truncated: bool = False

    def sentences(self) -> list[tuple[str, Sentence]]:
        """The page's sentences, oldest first, each with its UTC date."""
        return _numbered(self.narrative)[self.start : self.end]

    def days(self) -> list[tuple[str, list[Sentence]]]:
        """The page's sentences grouped by their UTC date, oldest first."""
        grouped: dict[str, list[Sentence]] = {}
        for date, sentence in self.sentences():
            grouped.setdefault(date, []).append(sentence)
        return list(grouped.items())

    def as_json(self) -> dict[str, Any]:
        """``sail journal --json`` with the page's sentences only."""
        body = self.narrative.as_json()
        body["days"] = [
            {"date": date, "sentences": [s.as_json() for s in sentences]} for date, sentences in self.days()
        ]
        return body


def _numbered(narrative: Narrative) -> list[tuple[str, Sentence]]:
    return [(day.date, s) for day in narrative.days for s in day.sentences]


def journal_page(
    narrative: Narrative, offset: int, limit: int, max_bytes: int = LIST_MAX_BYTES
) -> JournalPage:
    """Up to ``limit`` sentences of ``narrative`` from the ``offset``-th (counted from its first, 0),
    stopping before they pass ``max_bytes`` as JSON (the first is always given).

    Raises:
        ServeBadRequest: ``offset`` is past the narrative's sentences.
    """
    told = _numbered(narrative)
    if offset > len(told):
        raise ServeBadRequest(
            f"offset {offset} is past the {len(told)} sentences of this journal; start from its first page"
        )
    wanted = told[offset : offset + limit]
    cut = fitting((len(orjson.dumps(s.as_json())) for _, s in wanted), max_bytes)
    end = offset + (len(wanted) if cut is None else cut)
    return JournalPage(narrative, offset, end, len(told), truncated=cut is not None)


@dataclass(frozen=True)
class Interval:
    """The agent's interval between confirmed trades, or why it is unknown."""

    seconds: int | None
    problem: str | None


class Agent:
    """One agent home (the folder that holds ``.sail/``), read without writing anything.

    Args:
        number: its place among the ``--sail-home`` options (its URL is ``/agents/<number>``).
        home: the agent's home.
    """

    def __init__(self, number: int, home: Path) -> None:
        self.number = number
        self.home = home
        self.sail_dir = home / ".sail"
        self.ledger_path = Ledger(self.sail_dir).path
        self.activity_path = self.sail_dir / "activity.jsonl"
        self.config_path = self.sail_dir / "config.toml"
        # where each file's lines end is the agent's own readers' judgement (the durability watermark)
        ends = Ledger(self.sail_dir).lines.readable_end, ActivityLog(self.sail_dir).lines.readable_end
        self._ledger = TailReader(self.ledger_path, LedgerCodec().decode, ends[0])
        self._activity: TailReader[ActivityRecord] = TailReader(
            self.activity_path, ActivityCodec().decode, ends[1]
        )

    @property
    def name(self) -> str:
        """A short name for menus: the home folder's name."""
        return self.home.name or str(self.home)

    # -- the ledger, newest first ---------------------------------------------------------------

    def page(
        self, before: int | None, limit: int = LEDGER_PAGE, max_bytes: int = LIST_MAX_BYTES
    ) -> tuple[list[tuple[int, Entry]], int | None, bool]:
        """Up to ``limit`` entries older than the line at offset ``before`` (newest first; from the
        end when None), each with its offset; the offset to ask for the next page (None at the
        start of the ledger); and whether the page stopped at ``max_bytes`` of entries as JSON
        before its ``limit`` (at least one is given): an entry's size is not capped (a skip's
        reason may be megabytes), so a page of them is bounded here.

        Raises:
            ServeBadRequest: ``before`` is not the start of a line of the ledger.
            journal.JournalCorrupt: a damaged line among those read.
        """
        rows: list[tuple[int, Entry]] = []
        total = 0
        try:
            for offset, entry in self._ledger.backwards(before):
                if len(rows) == limit:
                    return rows, rows[-1][0], False
                total += len(orjson.dumps(entry.to_wire()))
                if rows and total > max_bytes:
                    return rows, rows[-1][0], True
                rows.append((offset, entry))
        except ValueError as exc:
            raise ServeBadRequest(f"{exc}; start from the newest page") from None
        return rows, None, False

    def skips(
        self, before: int | None, limit: int, max_bytes: int = LIST_MAX_BYTES
    ) -> tuple[list[tuple[int, Skipped]], int | None, bool]:
        """Up to ``limit`` skips older than the line at offset ``before`` (newest first; from the end
        when None) among the ``MAX_SKIP_SCAN`` lines read back from there, each with its offset: from
        the end, what ``recent_skips`` gives. Stops before ``max_bytes`` of skips as JSON (the first is
        always given: a ledger written before reasons were bounded may hold one of megabytes); then
        the offset to go on from, and True.

        Raises:
            ServeBadRequest: ``before`` is not the start of a line of the ledger.
            journal.JournalCorrupt: a damaged line among those read.
        """
        rows: list[tuple[int, Skipped]] = []
        total = 0
        try:
            # every line is decoded, as `sail why` decodes it: a filter on the raw bytes left out
            # a skip written with other spacing, and never checked a damaged line it passed over
            for offset, entry in self._ledger.backwards(before, lines=MAX_SKIP_SCAN):
                if not isinstance(entry, Skipped):
                    continue
                total += len(orjson.dumps(entry.to_wire()))
                if rows and total > max_bytes:
                    return rows, rows[-1][0], True
                rows.append((offset, entry))
                if len(rows) == limit:
                    break
        except ValueError as exc:
            raise ServeBadRequest(f"{exc}; start from the newest page") from None
        return rows, None, False

    def recent_skips(self, limit: int = 10) -> list[Skipped]:
        """The ``limit`` most recent skips, newest first: ``memory.ledger.recent_skips``, what
        ``sail why`` shows."""
        return recent_skips(Ledger(self.sail_dir), limit)

    def acted_window(self) -> list[Acted]:
        """The acted entries among the last ``CHART_SCAN`` lines, at most ``CHART_POINTS``, oldest first."""
        found: list[Acted] = []
        # the window is counted in lines read, skips included: a long run of skips ends the read
        for _, entry in self._ledger.backwards(lines=CHART_SCAN):
            if isinstance(entry, Acted):
                found.append(entry)
            if len(found) >= CHART_POINTS:
                break
        found.reverse()
        return found

    # -- status -----------------------------------------------------------------------------------

    def _config(self) -> tuple[dict[str, Any] | None, str | None]:
        """``.sail/config.toml`` as TOML (or why it cannot be read), read without following a link
        or blocking."""
        try:
            fd = os.open(self.config_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None, f"no agent config at {self.config_path} (run `sail init`)"
        except OSError as exc:
            return None, f"cannot read {self.config_path}: {exc.strerror or exc}"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > _CONFIG_MAX_BYTES:
                return None, f"{self.config_path} is not a regular file of at most 1 MiB"
            return tomllib.loads(os.read(fd, _CONFIG_MAX_BYTES).decode("utf-8")), None
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            return None, f"cannot read {self.config_path}: {exc}"
        finally:
            os.close(fd)

    def interval(self) -> Interval:
        """``interval_s`` from ``.sail/config.toml``, read without following a link or blocking."""
        raw, problem = self._config()
        if raw is None:
            return Interval(None, problem)
        value = raw.get("interval_s")
        if type(value) is not int or not 0 <= value <= MAX_INTERVAL_S:
            return Interval(None, f"{self.config_path} has no valid interval_s (0 to {MAX_INTERVAL_S})")
        return Interval(value, None)

    def token_in(self) -> str | None:
        """The token the agent spends (``token_in`` in its config), or None when it cannot be read."""
        raw, _ = self._config()
        value = None if raw is None else raw.get("token_in")
        return value if isinstance(value, str) else None

    def renderer(self, acted: Iterable[Acted] = ()) -> Callable[[str], str]:
        """How the page shows a skip reason: its figures in the spent token's units beside the raw
        ones (``balance 10.0 USDC (10000000) < min 25.0 USDC``), the token's decimals and symbol from
        the verified snapshot (never written here) and the amounts ``acted`` rendered.

        Raises:
            journal.JournalCorrupt: a damaged line among those the snapshot's check reads.
        """
        book = learned_tokens(acted, Ledger(self.sail_dir).state(save=False).tokens)
        token = self.token_in()

        def render(reason: str) -> str:
            return reason_text(reason, token, book)

        return render

    def revert_reasons(self, tx_hashes: Iterable[str]) -> dict[str, str | None]:
        """Why each of ``tx_hashes`` reverted, from the activity log's ``dispatch_reverted`` lines
        (read backwards, at most ``MAX_SCAN`` of them, until all are found); None where it gave none."""
        wanted = {h.lower() for h in tx_hashes}
        found: dict[str, str | None] = {}
        if not wanted:
            return found
        for n, (_, record) in enumerate(self._activity.backwards()):
            if n >= MAX_SCAN or len(found) == len(wanted):
                break
            if isinstance(record, DispatchSettled) and record.event == "dispatch_reverted":
                key = record.tx_hash.lower()
                if key in wanted and found.get(key) is None:
                    found[key] = record.reason
        return found

    def journal(self, days: int = JOURNAL_DAYS, since: int | None = None) -> Narrative:
        """The narrative journal of the last ``days`` UTC days (up to the last entry's): what ``sail
        journal --days N --json`` prints, with the config's spent token and interval, writing nothing.
        With ``since`` (a UTC midnight, from a page's link), the window starting there instead: the
        pages of one window keep their places however many entries are appended meanwhile.

        Raises:
            ServeBadRequest: ``since`` is not a UTC midnight within the last ``MAX_DAYS`` days.
            journal.JournalCorrupt: a damaged line among those read.
        """
        ledger = Ledger(self.sail_dir)
        if since is None:
            since = last_days(ledger, days)
        else:
            oldest = last_days(ledger, MAX_DAYS)
            if since % _DAY_S or (oldest is not None and since < oldest):
                raise ServeBadRequest(
                    f"since must be a UTC midnight (unix seconds) within the last {MAX_DAYS} days of the "
                    f"ledger, got {since}; start from the journal's first page"
                )
        return narrate(
            ledger,
            token_in=self.token_in(),
            interval_s=self.interval().seconds,
            since=since,
        )

    def status(self) -> dict[str, Any]:
        """What ``sail status --json`` says, field by field: ``memory.ledger.agent_state``, the one
        reader of the agent's state, with the interval from the config (``intervalProblem`` when the
        config cannot say it), writing nothing (not even a rebuilt snapshot).

        Raises:
            journal.JournalCorrupt: a damaged line among those read.
        """
        interval = self.interval()
        return agent_state(
            self.sail_dir, interval_s=interval.seconds, interval_problem=interval.problem, save=False
        )


def tokens_of(entries: list[Acted]) -> dict[str, Token]:
    """Each token's symbol and decimals, learned from the amounts the entries rendered."""
    return {
        address: Token(address, symbol, decimals)
        for address, (decimals, symbol) in learned_tokens(entries).items()
    }


def short_hash(tx_hash: str) -> str:
    """A hash shortened for the page, ``0x1234…abcd`` (the page puts the whole one in its title)."""
    return f"{tx_hash[:6]}…{tx_hash[-4:]}" if len(tx_hash) > 12 else tx_hash
