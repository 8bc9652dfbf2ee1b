"""What every ``flows`` command module shares: opening the store, printing a table or JSON, and the
one diagnostic line. The command modules and ``flows._cli`` (which builds the parser from them)
import this module; it imports none of them, so the arrows between the CLI's modules point one way.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from memory.cli import diagnose as _diagnose
from memory.cli import json_out
from memory.cli import shown as _shown

__all__ = ["PROG", "cell", "diagnose", "json_out", "open_store", "table"]

PROG = "flows"


def cell(text: str) -> str:
    """``text`` on one line: newlines, tabs and other control characters shown as escapes (``\\n``),
    so a cell never breaks its table's rows or moves the terminal's cursor (``memory.cli.shown``)."""
    return _shown(text, one_line=True)


def table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    """``rows`` under ``headers`` as left-aligned columns two spaces apart (trailing blanks cut);
    each cell on one line (``cell``)."""
    rows = [[cell(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def open_store(args: argparse.Namespace, *, recover: bool | None = None, creating: bool = False) -> Any:
    """The ``MemoryStore`` a command's ``--db`` and ``--journal`` name (imported only when opened),
    with the embedder its ``--embedder`` / ``--mode`` ask for (``embedder_for``).

    The path is never guessed (``memory.check_store_location``): a command that reads refuses a
    path with no store at it, a write refuses a ``--db`` whose folder does not exist (``creating``),
    and both refuse a DB name beside another store's DB.
    """
    from memory import MemoryStore, check_store_location

    check_store_location(args.db, args.journal, creating=creating)
    embedder = embedder_for(args) if hasattr(args, "embedder") else None  # why and check take one
    return MemoryStore(args.db, journal=args.journal, recover=recover, embedder=embedder)


def embedder_for(args: argparse.Namespace) -> Any:
    """The embedder a command is configured with: ``--embedder``, else ``$FLOWS_EMBEDDER``; the
    offline default when neither names one and ``--mode`` asks for meaning; None otherwise (and
    nothing of the embedders is imported)."""
    spec = getattr(args, "embedder", None) or os.environ.get("FLOWS_EMBEDDER")
    mode = getattr(args, "mode", None)
    if not spec and mode not in ("semantic", "hybrid"):
        return None
    from memory import embedder_named

    found = embedder_named(spec or "default")
    if found is None and mode in ("semantic", "hybrid"):
        found = embedder_named("default")
    return found


def add_embedder_option(p: argparse.ArgumentParser) -> None:
    """``--embedder NAME``: the embedder of a search by meaning (or of ``check --repair``)."""
    p.add_argument(
        "--embedder",
        metavar="NAME",
        help="how findings are embedded for a search by meaning: 'default' (the offline model of the "
        "semantic extra), 'none', or MODULE:ATTRIBUTE (an embedder, or a function returning one); "
        "default: $FLOWS_EMBEDDER, else none",
    )


def diagnose(exc: BaseException, *, as_json: bool, run_id: str | None = None) -> int:
    """Print the one diagnostic line for ``exc`` on stderr, as ``flows``; return its exit status."""
    return _diagnose(PROG, exc, as_json=as_json, run_id=run_id)
