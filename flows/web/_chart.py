"""The balances chart: server-rendered SVG, one small chart per token, one point per acted entry.

A confirmed entry carries the balances read at its block. A reverted or unverified one carries none
(the ledger never makes a balance up), so its point is drawn hollow at the last balance known
before it, and its tooltip says so. No script, no style attributes: the page's stylesheet colours
the classes, so the chart obeys the page's content security policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

from flows.web._agent import Token
from memory.cli import shown
from memory.ledger import Acted, format_human

WIDTH, HEIGHT = 720, 170
#: the most characters of a token's symbol a chart shows (an SVG text holds no ``<bdi>``, and a
#: ledger written before the agent's texts were bounded may hold a symbol of megabytes, which each
#: point's tooltip repeated)
SYMBOL_SHOWN = 40
_LEFT, _RIGHT, _TOP, _BOTTOM = 110, 16, 14, 30


@dataclass(frozen=True)
class Point:
    """One acted entry on one token's chart."""

    ts: int
    units: int | None  # the balance the entry read, None when it read none
    shown: int | None  # what is drawn: the entry's balance, else the last one known before it
    outcome: str
    tx_hash: str

    def as_json(self) -> dict[str, object]:
        """``{"ts", "balance", "outcome", "txHash"}`` (balance in base units, a string, or null)."""
        return {
            "ts": self.ts,
            "balance": None if self.units is None else str(self.units),
            "outcome": self.outcome,
            "txHash": self.tx_hash,
        }


def series(entries: Sequence[Acted]) -> dict[str, list[Point]]:
    """For each token any entry holds a balance of, one point per entry, oldest first."""
    addresses: list[str] = []
    for e in entries:
        for token in e.balances_after or {}:
            if token.lower() not in addresses:
                addresses.append(token.lower())
    out: dict[str, list[Point]] = {}
    for address in addresses:
        points, known = [], None
        for e in entries:
            balances = {k.lower(): v for k, v in (e.balances_after or {}).items()}
            units = balances.get(address)
            known = units if units is not None else known
            points.append(Point(e.ts, units, known, str(e.outcome), e.tx_hash))
        out[address] = points
    return out


def _symbol(token: Token) -> str:
    """A token's symbol as a chart shows it: as the CLI writes a line (each control and bidi control
    as its escape), cut at ``SYMBOL_SHOWN`` characters with ``…``."""
    text = shown(token.symbol[: SYMBOL_SHOWN + 1], one_line=True)
    return text if len(text) <= SYMBOL_SHOWN else text[:SYMBOL_SHOWN] + "…"


def _label(units: int, address: str, tokens: Mapping[str, Token]) -> str:
    token = tokens.get(address)
    if token is None:
        return f"{units} base units"
    return format_human(units, token.decimals, _symbol(token))


def _when(ts: int) -> str:
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return f"ts {ts}"


def chart(address: str, points: Sequence[Point], tokens: Mapping[str, Token]) -> Markup:
    """One token's balance over time as an ``<svg>`` element (every text escaped)."""
    token = tokens.get(address)
    title = f"{_symbol(token)} balance" if token else f"balance of {address}"
    shown = [p.shown for p in points if p.shown is not None]
    low, high = (min(shown), max(shown)) if shown else (0, 1)
    if low == high:
        low, high = max(0, low - 1), high + 1
    t0, t1 = points[0].ts, points[-1].ts
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM

    def x(ts: int) -> float:
        return _LEFT + (plot_w / 2 if t1 == t0 else (ts - t0) / (t1 - t0) * plot_w)

    def y(units: int | None) -> float:
        return _TOP + plot_h if units is None else _TOP + (high - units) / (high - low) * plot_h

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        f' xmlns="http://www.w3.org/2000/svg" data-token="{escape(address)}">',
        f"<title>{escape(title)}</title>",
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{WIDTH - _RIGHT}" y2="{_TOP + plot_h}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}"/>',
        f'<text class="tick" x="{_LEFT - 6}" y="{_TOP + 4}" text-anchor="end">'
        f"{escape(_label(high, address, tokens))}</text>",
        f'<text class="tick" x="{_LEFT - 6}" y="{_TOP + plot_h}" text-anchor="end">'
        f"{escape(_label(low, address, tokens))}</text>",
        f'<text class="tick" x="{_LEFT}" y="{HEIGHT - 8}">{escape(_when(t0))}</text>',
        f'<text class="tick" x="{WIDTH - _RIGHT}" y="{HEIGHT - 8}" text-anchor="end">'
        f"{escape(_when(t1))}</text>",
    ]
    line = " ".join(f"{x(p.ts):.1f},{y(p.units):.1f}" for p in points if p.units is not None)
    if line:
        parts.append(f'<polyline class="line" points="{line}"/>')
    for p in points:
        hollow = p.units is None
        if p.units is not None:
            note = f"balance {_label(p.units, address, tokens)}"
        elif p.shown is not None:
            note = (
                f"no balance read ({p.outcome}); drawn at the last known, {_label(p.shown, address, tokens)}"
            )
        else:
            note = f"no balance read ({p.outcome}) and none known before"
        tip = f"{_when(p.ts)} {p.outcome}: {note} (tx {p.tx_hash})"
        parts.append(
            f'<circle class="point {escape(p.outcome)}{" hollow" if hollow else ""}" cx="{x(p.ts):.1f}"'
            f' cy="{y(p.shown):.1f}" r="5" data-ts="{p.ts}" data-outcome="{escape(p.outcome)}">'
            f"<title>{escape(tip)}</title></circle>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every value in it went through escape()
