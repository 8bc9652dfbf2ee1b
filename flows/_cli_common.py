"""What every ``flows`` command module shares: opening the store, printing a table or JSON, and the
one diagnostic line. The command modules and ``flows._cli`` (which builds the parser from them)
import this module; it imports none of them, so the arrows between the CLI's modules point one way.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
from collections.abc import Callable, Sequence
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


def filter_value(text: str) -> str:
    """A filter's name (``--scope``, ``--source``, ``--flow``): not empty. No finding or run has an
    empty one, so an empty filter (an unset shell variable: ``--scope "$SCOPE"``) answered as if
    nothing were learned, and a filtered ``forget`` as if nothing matched."""
    if not text:
        raise argparse.ArgumentTypeError(
            "is empty, which no finding or run has (an unset shell variable?): give a name, or leave "
            "the option out to match every one"
        )
    return text


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
    nothing of the embedders is imported). Loading it and each of its calls are bounded by
    ``embed_timeout()`` (``BoundedEmbedder``).

    Raises:
        memory.ArgumentInvalid: ``$FLOWS_EMBED_TIMEOUT`` is not a number of seconds it takes.
        memory.EmbedderUnavailable: it cannot be loaded, or its loading did not end in time.
    """
    spec = getattr(args, "embedder", None) or os.environ.get("FLOWS_EMBEDDER")
    mode = getattr(args, "mode", None)
    if not spec and mode not in ("semantic", "hybrid"):
        return None
    timeout_s = embed_timeout()
    from memory import embedder_named

    found = _within(timeout_s, spec or "default", lambda: embedder_named(spec or "default"))
    if found is None and mode in ("semantic", "hybrid"):
        found = _within(timeout_s, "default", lambda: embedder_named("default"))
    return None if found is None else BoundedEmbedder(found, timeout_s)


EMBED_TIMEOUT_ENV = "FLOWS_EMBED_TIMEOUT"
"""The environment variable that bounds, in seconds, how long the CLI and the MCP server wait for an
embedder to load and for each of its calls (default ``EMBED_TIMEOUT_S``)."""

EMBED_TIMEOUT_S = 60.0
"""How long an embedder may take to load, or to answer one call, by default (the offline default
loads in under a second and embeds a question in milliseconds)."""

EMBED_TIMEOUT_MAX = 86_400.0


def embed_timeout() -> float:
    """``$FLOWS_EMBED_TIMEOUT`` in seconds (more than 0, at most a day), else ``EMBED_TIMEOUT_S``.

    Raises:
        memory.ArgumentInvalid: it is set to anything else.
    """
    text = os.environ.get(EMBED_TIMEOUT_ENV, "").strip()
    if not text:
        return EMBED_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= EMBED_TIMEOUT_MAX:  # NaN fails both
        from memory import ArgumentInvalid

        raise ArgumentInvalid(
            f"${EMBED_TIMEOUT_ENV} must be seconds, more than 0 and at most {EMBED_TIMEOUT_MAX:.0f} (how "
            f"long an embedder may take to load or to answer), not {text!r:.80}"
        )
    return value


def _within(timeout_s: float, spec: str, load: Callable[[], Any]) -> Any:
    """``load()`` on a thread of its own, waited for at most ``timeout_s``: an embedder whose module
    hangs as it is imported (or a model that never finishes loading) is refused, not waited for."""
    done, value = _bounded_call(load, timeout_s)
    if not done:
        from memory import EmbedderUnavailable

        raise EmbedderUnavailable(
            f"the embedder {spec!r:.200} did not finish loading in {timeout_s:g} s; nothing was read: "
            f"ask by words (--mode keyword), or give it longer (${EMBED_TIMEOUT_ENV}=SECONDS)"
        )
    return value


def _bounded_call(fn: Callable[[], Any], timeout_s: float) -> tuple[bool, Any]:
    """``(True, fn())`` when ``fn`` returns within ``timeout_s`` on a daemon thread (what it raises
    is raised here), else ``(False, the thread)``: the thread is left to itself, and never keeps the
    process from ending."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller, whatever it is
            box["error"] = exc

    thread = threading.Thread(target=work, name="flows-embedder", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return False, thread
    if "error" in box:
        raise box["error"]
    return True, box["value"]


class BoundedEmbedder:
    """An embedder whose every ``embed`` call is waited for at most ``timeout_s``.

    A call that does not answer in time is ``memory_embedder_failed``, which ``why`` reports (the
    question is not answered: a hybrid search never quietly becomes a search by words, which would
    rank otherwise than it says); and while that call's thread still hangs, every later call is
    refused at once, so a server leaves one thread behind, not one per question. Its ``name``,
    ``dims``, ``min_similarity`` and ``word_alignment`` are the wrapped embedder's.
    """

    def __init__(self, inner: Any, timeout_s: float) -> None:
        self._inner = inner
        self._timeout_s = timeout_s
        self._hung: threading.Thread | None = None

    @property
    def name(self) -> Any:
        return self._inner.name

    @property
    def dims(self) -> Any:
        return self._inner.dims

    def __getattr__(self, attribute: str) -> Any:  # min_similarity, word_alignment: when it has them
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(self._inner, attribute)

    def embed(self, texts: Sequence[str]) -> Any:
        from memory import EmbedderFailed

        advice = f"ask by words (--mode keyword), or give it longer (${EMBED_TIMEOUT_ENV}=SECONDS)"
        hung = self._hung
        if hung is not None and hung.is_alive():
            raise EmbedderFailed(
                f"the embedder {self._inner.name!r:.200} has not answered an earlier call after "
                f"{self._timeout_s:g} s; the question was not answered: {advice}"
            )
        done, value = _bounded_call(lambda: self._inner.embed(texts), self._timeout_s)
        if not done:
            self._hung = value
            raise EmbedderFailed(
                f"the embedder {self._inner.name!r:.200} did not answer in {self._timeout_s:g} s "
                f"({len(texts)} text(s)); the question was not answered: {advice}"
            )
        return value

    def __repr__(self) -> str:
        return f"BoundedEmbedder({self._inner!r}, timeout_s={self._timeout_s:g})"


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
