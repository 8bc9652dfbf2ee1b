"""``sail journal --learn``: each finished day's narrative learned into flows-memory.

Every sentence of a finished UTC day (one before today's, by this machine's clock) becomes one
finding in the agent's scope, learned through a ``MemorySession`` (its own root run, flow
``sail-journal``, source ``sail journal``):

* ``text``: the sentence, with its weekday, date and time, and for what held the next trade or a
  gap a plain lead (``the agent stopped trading`` / ``stopped ticking``), so a question in an
  owner's words (``why did the agent stop trading on Tuesday``) finds it by keyword as well as by
  meaning;
* ``tags``: ``sail-journal``, the sentence's kind, the date and the weekday (and ``stopped
  trading`` / ``stopped ticking``);
* ``metadata``: where it came from — the ledger (``ledger``), the narrative record (``journal``:
  the date and the sentence's place in that day) and the lines it cites (``cites``: ``file:line:
  sha256``, every one while they fit; past ``MAX_CITES``, the first and last halves, with
  ``citesTotal`` and ``citesSha256``, the SHA-256 of all of them joined by newlines, which
  ``sail journal --since DATE --json`` rebuilds).

Each day is told on its own window (``memory.ledger.narrate_days``), so a finished day's sentences
never change: the findings' keys are the same on every run, and a finding whose key the store
already holds live is not learned again (re-running learns nothing; a run with nothing new begins
no root run). A run reads the ledger from the start of the last day already learned into the scope
(the newest finding's), not from the ledger's start.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory.ledger import Ledger, Narrative, Sentence, narrate_days

#: the citations a finding's metadata lists in full (the rest by count and digest)
MAX_CITES = 100
SOURCE = "sail journal"
FLOW = "sail-journal"
TAG = "sail-journal"
_DAY_S = 86_400
_LEADS = {"blocked": "the agent stopped trading", "gap": "the agent stopped ticking"}


@dataclass
class LearnedJournal:
    """What a ``--learn`` did: the scope, the finished days read, the keys learned and known."""

    scope: str
    db: str
    days: list[str] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """``sail journal --learn --json``."""
        return {
            "scope": self.scope,
            "db": self.db,
            "days": self.days,
            "learned": self.learned,
            "known": self.known,
        }

    def lines(self) -> list[str]:
        """The text report."""
        return [
            f"learned {len(self.learned)} findings from {len(self.days)} finished days into scope "
            f"{self.scope!r} of {self.db} ({len(self.known)} already there)"
        ]


def default_scope(home: Path) -> str:
    """The agent's scope: ``sail:`` and its home folder's name."""
    return f"sail:{home.resolve().name or 'agent'}"


def findings(told: list[Narrative], ledger: Path) -> list[dict[str, Any]]:
    """The findings of the told days, in order (see the module docstring)."""
    out = []
    for narrative in told:
        for day in narrative.days:
            for place, sentence in enumerate(day.sentences):
                out.append(_finding(sentence, day.date, place, ledger))
    return out


def _finding(sentence: Sentence, date: str, place: int, ledger: Path) -> dict[str, Any]:
    moment = datetime.fromtimestamp(sentence.ts, UTC)
    weekday = moment.strftime("%A")
    lead = _LEADS.get(sentence.kind)
    head = f"On {weekday} {date} at {moment.strftime('%H:%M:%S')} UTC"
    text = f"{head}, {lead}: {sentence.text}" if lead else f"{head}: {sentence.text}"
    tags = [TAG, sentence.kind, date, weekday.lower()] + ([lead.removeprefix("the agent ")] if lead else [])
    cites = [f"{c.file}:{c.line}:{c.sha256}" for c in sentence.cites]
    metadata: dict[str, Any] = {
        "ledger": str(ledger),
        "journal": {"date": date, "sentence": place, "kind": sentence.kind, "ts": sentence.ts},
    }
    if len(cites) <= MAX_CITES:
        metadata["cites"] = cites
    else:
        half = MAX_CITES // 2
        metadata["cites"] = cites[:half] + cites[-half:]
        metadata["citesTotal"] = len(cites)
        metadata["citesSha256"] = hashlib.sha256("\n".join(cites).encode()).hexdigest()
    return {"text": text, "source": SOURCE, "tags": tags, "metadata": metadata}


def _last_learned_day(store: Any, scope: str) -> int | None:
    """Where the last day learned into ``scope`` starts (its findings are told again, and known),
    so a run reads the ledger from there on, not from its start; None when none was learned."""
    newest = store.recall(scope=scope, source=SOURCE, tags=[TAG], limit=1)
    if not newest:
        return None
    date = newest[0].metadata.get("journal", {}).get("date")
    try:
        return int(datetime.strptime(str(date), "%Y-%m-%d").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


def learn_journal(
    ledger: Ledger,
    *,
    token_in: str | None,
    interval_s: int | None,
    store: Any,
    scope: str,
    since: int | None = None,
    until: int | None = None,
    gap_s: int | None = None,
    clock: Callable[[], float] = time.time,
) -> LearnedJournal:
    """Learn each finished day of ``[since, until)`` into ``store`` (a ``memory.MemoryStore``) in
    ``scope``; findings already there live are not learned again.

    Raises:
        journal.JournalCorrupt: a damaged line in the ledger or the activity log.
        LedgerNotAFile: a file of the agent is not a regular file.
        memory.MemoryError: the store refused a learn (its code says why).
    """
    from memory import finding_id, validate

    now = int(clock())
    today = now - now % _DAY_S
    end = today if until is None else min(until, today)
    report = LearnedJournal(scope, str(store.db_path))
    resume = _last_learned_day(store, scope)
    if resume is not None:
        since = resume if since is None else max(since, resume)
    if since is not None and end <= since:
        return report
    told = narrate_days(ledger, token_in=token_in, interval_s=interval_s, since=since, until=end, gap_s=gap_s)
    report.days = [d.date for n in told for d in n.days]
    todo: list[tuple[str, dict[str, Any]]] = []
    for finding in findings(told, ledger.path):
        key = finding_id(scope, validate(finding, SOURCE))
        if store.get(key) is not None:
            report.known.append(key)
        else:
            todo.append((key, finding))
    if todo:
        with store.session(scope=scope, flow=FLOW, source=SOURCE) as session:
            for _, finding in todo:
                report.learned.append(session.learn(finding).key)
    return report
