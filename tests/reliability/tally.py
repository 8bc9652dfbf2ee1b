"""The figures every scenario reports, and the table that prints them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

HEADERS = (
    "scenario",
    "cases",
    "acknowledged",
    "lost",
    "doubled",
    "fabricated",
    "resurrected",
    "erased bytes left",
    "unexpected errors",
    "refused before recovery",
)


@dataclass
class Tally:
    """What one scenario saw: cases run, acknowledged writes, and every way one went wrong.

    ``notes`` keeps a short description of the first few failures, so a failing run says where.
    """

    scenario: str
    cases: int = 0
    acknowledged: int = 0
    lost: int = 0
    doubled: int = 0
    fabricated: int = 0
    resurrected: int = 0
    """Findings a forget, a supersede or an erase retired that a read returned again."""
    unerased: int = 0
    """States where bytes of an erased memory's text were left in a file of the store after
    recovery (or in the journal with no erase record to report them)."""
    unexpected: int = 0
    refused: int = 0
    """Reads that failed closed (a coded error naming a torn file whose finding the journal
    commits) in a reader that recovers nothing: expected, and not a failure."""
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing was lost, doubled, fabricated, resurrected or left behind by an erase,
        and nothing unexpected was raised."""
        return not (
            self.lost
            or self.doubled
            or self.fabricated
            or self.resurrected
            or self.unerased
            or self.unexpected
        )

    def note(self, text: str) -> None:
        """Remember ``text`` as one of the first failures (at most 20 are kept)."""
        if len(self.notes) < 20:
            self.notes.append(text)

    def add(self, other: Tally) -> None:
        """Add ``other``'s figures and notes to this tally."""
        self.cases += other.cases
        self.acknowledged += other.acknowledged
        self.lost += other.lost
        self.doubled += other.doubled
        self.fabricated += other.fabricated
        self.resurrected += other.resurrected
        self.unerased += other.unerased
        self.unexpected += other.unexpected
        self.refused += other.refused
        for n in other.notes:
            self.note(n)

    def row(self) -> tuple[str, ...]:
        """The tally as a table row."""
        return (
            self.scenario,
            str(self.cases),
            str(self.acknowledged),
            str(self.lost),
            str(self.doubled),
            str(self.fabricated),
            str(self.resurrected),
            str(self.unerased),
            str(self.unexpected),
            str(self.refused),
        )


def table(tallies: Iterable[Tally]) -> str:
    """A Markdown table of ``tallies`` (readable as plain text too)."""
    rows = [t.row() for t in tallies]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]

    def line(cells: tuple[str, ...]) -> str:
        out = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(out) + " |"

    rule = (
        "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    )
    return "\n".join([line(HEADERS), rule, *(line(r) for r in rows)])
