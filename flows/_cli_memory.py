"""The ``flows`` commands that change or explain one finding: ``learn``, ``forget``, ``history``; and
the filters ``recall`` and ``why`` share (``--tag`` repeated, ``--meta K=V`` repeated).

Every refusal of the command line's own input (a malformed key, finding, metadata or filter) is
printed with its own code (``memory_argument_invalid``, ``memory_finding_invalid``) and exits 2, and
happens before anything is journaled or written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import memory
from flows._cli_common import cell, filter_value
from flows._cli_common import json_out as _json_out
from flows._cli_common import open_store as _store
from flows._cli_common import table as _table
from memory.cli import (
    EXIT_OK,
    LIMIT_MAX,
    Interrupted,
    expiry_ms,
    format_ms,
    instant_ms,
    limit,
    meta_value,
    offset,
    progress,
)

Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]
Handler = Callable[[argparse.Namespace], int]

CLI_FLOW = "cli"
"""The flow name of the root run a ``flows learn`` or ``flows forget`` journals into."""


def meta_pairs(items: Sequence[str] | None) -> dict[str, Any] | None:
    """``--meta K=V`` options as an object: ``V`` is read as JSON when it is JSON (``2500``,
    ``true``, ``"007"``, ``[1,2]``), else taken as the text itself (``ETH``).

    Raises:
        memory.ArgumentInvalid: an item has no ``=`` or an empty key, or a key is given twice.
    """
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise memory.ArgumentInvalid(f"--meta takes KEY=VALUE, not {item!r:.80}")
        if key in out:
            raise memory.ArgumentInvalid(f"--meta {key} is given twice; give each key once")
        out[key] = meta_value(text)
    return out


def add_filter_options(p: argparse.ArgumentParser) -> None:
    """``--tag`` (repeated: every one must match) and ``--meta K=V`` (repeated) on ``recall``/``why``."""
    p.add_argument(
        "--tag", metavar="T", action="append", help="only findings with this tag (repeat: with every one)"
    )
    p.add_argument(
        "--meta",
        metavar="K=V",
        action="append",
        help="only findings whose metadata has K equal to V (V is JSON when it parses, else text; repeat)",
    )


def _citation(c: memory.Citation) -> str:
    return f"root run {c.run_id}, stream {c.stream}, record {c.id}"


# -- learn ------------------------------------------------------------------------------------


STDIN_TEXT = "-"
"""The ``TEXT`` of ``learn`` and ``update`` that means: read the text from standard input."""


def _stdin_text() -> str:
    """The text on standard input, as UTF-8, less one final line ending (what ``echo`` and most
    files end with). No more than a few bytes beyond ``memory.TEXT_MAX_BYTES`` are read, so a stream
    without end is refused, never held in memory; the finding's own check bounds the rest.

    Raises:
        memory.FindingInvalid: the input is over the bound, or is not UTF-8 (``field`` is ``text``).
    """
    cap = memory.TEXT_MAX_BYTES + 3  # the bound, a final CRLF (not part of the text) and one more
    if sys.stdin is not None and sys.stdin.isatty():  # a person at a terminal: say what it waits for
        print("reading the text from standard input; end it with Ctrl-D", file=sys.stderr)
    data = sys.stdin.buffer.read(cap) if sys.stdin is not None else b""
    problem = None if sys.stdin is not None else "cannot be read: this process has no standard input"
    if len(data) >= cap:
        problem = f"is over {memory.TEXT_MAX_BYTES:,} bytes; keep large data elsewhere and learn a reference"
    try:
        text = data.decode("utf-8") if problem is None else ""
    except UnicodeDecodeError as exc:
        problem = f"is not UTF-8 (byte {exc.start:,} of the input); convert it, or learn a reference"
    if problem is not None:
        error = memory.FindingInvalid(f"the text read from standard input (TEXT `-`) {problem}")
        error.field = "text"
        raise error
    for ending in ("\r\n", "\n"):
        if text.endswith(ending):
            return text[: -len(ending)]
    return text


def _finding_of(args: argparse.Namespace) -> dict[str, Any]:
    """The finding ``learn`` and ``update`` take from their options (``TEXT`` ``-``: standard input)."""
    text = _stdin_text() if args.text == STDIN_TEXT else args.text
    finding: dict[str, Any] = {"text": text, "tags": args.tag or []}
    if args.source is not None:
        finding["source"] = args.source
    metadata = meta_pairs(args.meta)
    if metadata is not None:
        finding["metadata"] = metadata
    if args.expires is not None:
        finding["expiresMs"] = args.expires
    return finding


def cmd_learn(args: argparse.Namespace) -> int:
    """Learn one finding under a root run of its own (flow ``cli``)."""
    finding = _finding_of(args)
    with _store(args, creating=True) as store:
        # The finding, the key and the session are all checked before the root run is begun.
        memory.validate(finding, CLI_FLOW)
        with store.session(scope=args.scope, flow=CLI_FLOW) as session:
            learned = session.learn(finding, supersedes=args.supersedes)
    if args.json:
        _json_out(
            {
                "memoryId": learned.memory_id,
                "key": learned.key,
                "scope": args.scope,
                "supersedes": args.supersedes,
                "learnedMs": learned.learned_ms,
                "citation": {**learned.citation.as_json(), "committedMs": learned.learned_ms},
                "path": str(learned.path),
            }
        )
    else:
        replaced = f"; it supersedes {args.supersedes}" if args.supersedes else ""
        print(f"learned {learned.key} in scope {args.scope!r}{replaced}")
        print(f"   {_citation(learned.citation)}, committed {format_ms(learned.learned_ms)}")
    return EXIT_OK


# -- update -----------------------------------------------------------------------------------


def cmd_update(args: argparse.Namespace) -> int:
    """Journal a new version of a memory, under a root run of its own (flow ``cli``)."""
    finding = _finding_of(args)
    with _store(args) as store:
        memory.check_key(args.memory_id, "memory id")
        live = store.current(args.memory_id)
        if live is None:
            raise memory.FindingUnknown(
                f"memory {args.memory_id} has no live version to update: it was never learned, or it "
                "was forgotten (`flows history` tells which); learn the finding again to start a new memory",
                key=args.memory_id,
            )
        memory.validate(finding, CLI_FLOW)
        with store.session(scope=live.scope, flow=CLI_FLOW) as session:
            learned = session.update(args.memory_id, finding)
    if args.json:
        _json_out(
            {
                "memoryId": learned.memory_id,
                "key": learned.key,
                "scope": live.scope,
                "supersedes": live.key if learned.key != live.key else None,
                "learnedMs": learned.learned_ms,
                "citation": {**learned.citation.as_json(), "committedMs": learned.learned_ms},
                "path": str(learned.path),
            }
        )
    elif learned.key == live.key:
        print(f"memory {learned.memory_id} already holds that content, as {learned.key}; nothing written")
    else:
        print(f"updated memory {learned.memory_id}: version {learned.key} supersedes {live.key}")
        print(f"   {_citation(learned.citation)}, committed {format_ms(learned.learned_ms)}")
    return EXIT_OK


# -- forget -----------------------------------------------------------------------------------


def _filtered(args: argparse.Namespace) -> bool:
    return bool(
        args.scope is not None or args.tag or args.meta or args.source is not None or args.before is not None
    )


def cmd_forget(args: argparse.Namespace) -> int:
    """Forget one finding by its key, or every finding a filter matches with one record, under a
    root run of its own (flow ``cli``)."""
    if args.key is not None and _filtered(args):
        raise memory.ArgumentInvalid(
            "give a KEY or a filter (--scope, --tag, --meta, --source, --before), not both"
        )
    if args.key is None:
        return _forget_where(args)
    if args.dry_run or args.yes:
        raise memory.ArgumentInvalid("--dry-run and --yes go with a filter; a KEY is forgotten as given")
    with _store(args) as store:
        memory.check_key(args.key)
        scope = store.scope_of(args.key) or CLI_FLOW  # the root run's scope: the finding's own
        with store.session(scope=scope, flow=CLI_FLOW) as session:
            forgotten = session.forget(args.key, reason=args.reason)
    if args.json:
        _json_out(forgotten.as_json())
    else:
        print(f"forgot {forgotten.key}: {cell(forgotten.reason)}")
        print(f"   {_citation(forgotten.citation)}, committed {format_ms(forgotten.forgotten_ms)}")
    return EXIT_OK


def _forget_where(args: argparse.Namespace) -> int:
    if not _filtered(args):
        raise memory.ArgumentInvalid(
            "forget needs a KEY, or a filter (--scope, --tag, --meta, --source, --before) for every "
            "finding it matches"
        )
    filters: dict[str, Any] = {
        "reason": args.reason,
        "tags": args.tag or (),
        "meta": meta_pairs(args.meta),
        "source": args.source,
        "before_ms": args.before,
    }
    with _store(args) as store, store.session(scope=args.scope or CLI_FLOW, flow=CLI_FLOW) as session:
        # listed first, without a root run; the forget itself lists again under it
        planned = session.forget_where(scope=args.scope, dry_run=True, **filters)
        if args.dry_run or not planned.keys:
            done = planned
        elif not args.yes:
            raise memory.ArgumentInvalid(
                f"this forgets {len(planned.keys)} finding(s) matching {dict(planned.filter)}: add --yes "
                "to forget them (one journal record), or --dry-run to list them"
            )
        else:
            try:
                done = session.forget_where(scope=args.scope, **filters)
            except KeyboardInterrupt as exc:
                raise _forget_interrupted(len(planned.keys), dict(planned.filter)) from exc
        shown: dict[str, memory.Recalled] = {}
        if done.dry_run and not args.json and done.keys:  # what each is, read as the filter reads
            del filters["reason"]
            shown = {r.key: r for r in store.recall(scope=args.scope, limit=None, **filters)}
    if args.json:
        _json_out(done.as_json())
        return EXIT_OK
    if done.dry_run:
        print(f"would forget {len(done.keys)} finding(s) matching {dict(done.filter)} (nothing written):")
        rows = [
            [key, shown[key].scope, shown[key].text[:60]] if key in shown else [key, "", ""]
            for key in done.keys
        ]
        print(_table(rows, ["KEY", "SCOPE", "TEXT"]))
    elif not done.keys:
        print(f"no live finding matches {dict(done.filter)}; nothing written")
    else:
        assert done.citation is not None and done.forgotten_ms is not None
        print(f"forgot {len(done.keys)} finding(s) matching {dict(done.filter)}: {cell(done.reason)}")
        print(f"   {_citation(done.citation)}, committed {format_ms(done.forgotten_ms)}")
    return EXIT_OK


# -- erase ------------------------------------------------------------------------------------


def cmd_erase(args: argparse.Namespace) -> int:
    """Erase a memory, every version, or every memory a filter matches, under a root run of its own
    (flow ``cli``)."""
    if args.key is not None and _filtered(args):
        raise memory.ArgumentInvalid(
            "give a KEY or a filter (--scope, --tag, --meta, --source, --before), not both"
        )
    if args.key is None:
        return _erase_where(args)
    memory.check_key(args.key)
    with _store(args) as store:
        with progress("erase: journal streams indexed", enabled=not args.json) as show:
            store.index_journal(show)  # the first time, a read of every run: shown
        events = store.history(args.key)
        keys = sorted({e.key for e in events if e.kind != "erased"})
        if not args.yes:
            raise memory.ArgumentInvalid(
                f"erasing memory {events[0].memory or args.key} removes the content of its {len(keys)} "
                "version(s) from the journal and everywhere the store keeps it, for good: add --yes"
            )
        scope = store.scope_of(args.key) or CLI_FLOW
        with store.session(scope=scope, flow=CLI_FLOW) as session:
            try:
                erased = session.erase(args.key, reason=args.reason)
            except KeyboardInterrupt as exc:
                memory_id = events[0].memory or args.key
                stopped = Interrupted(
                    f"interrupted (Ctrl-C) while erasing memory {memory_id} ({len(keys)} version(s)): "
                    "its erase may be part done; run the same command again to finish it (an erase "
                    "is idempotent), or `flows check --repair`"
                )
                vars(stopped)["memory"] = memory_id  # context, in the --json object
                raise stopped from exc
    if args.json:
        _json_out(erased.as_json())
    else:
        done = f"{len(erased.keys)} version(s), {erased.rewritten} journal record(s) rewritten"
        print(f"erased memory {erased.memory}: {done}")
        if erased.citation is not None:
            print(f"   {_citation(erased.citation)}")
    return EXIT_OK


def _erase_where(args: argparse.Namespace) -> int:
    if not _filtered(args):
        raise memory.ArgumentInvalid(
            "erase needs a KEY, or a filter (--scope, --tag, --meta, --source, --before) for every "
            "memory with a commit it matches"
        )
    filters: dict[str, Any] = {
        "reason": args.reason,
        "scope": args.scope,
        "tags": args.tag or (),
        "meta": meta_pairs(args.meta),
        "source": args.source,
        "before_ms": args.before,
    }
    with _store(args) as store, store.session(scope=args.scope or CLI_FLOW, flow=CLI_FLOW) as session:
        planned = session.erase_where(dry_run=True, **filters)
        if args.dry_run or not planned:
            done = planned
        elif not args.yes:
            raise memory.ArgumentInvalid(
                f"this erases {len(planned)} memor{'y' if len(planned) == 1 else 'ies'} for good (their "
                "content leaves the journal and every copy): add --yes, or --dry-run to list them"
            )
        else:
            done = _erase_each(session, planned, args.reason, show_progress=not args.json)
        live = {m: store.current(m) for m in done} if args.dry_run and not args.json else {}
    if args.json:
        _json_out({"memoryIds": done, "count": len(done), "dryRun": bool(args.dry_run)})
    elif args.dry_run:
        print(f"would erase {len(done)} memor{'y' if len(done) == 1 else 'ies'} (nothing written):")
        rows = [[m, "forgotten", "", ""] for m in done]
        for row in rows:
            now = live.get(row[0])
            if now is not None:
                row[1:] = ["live", now.scope, now.text[:60]]
        print(_table(rows, ["MEMORY", "STATE", "SCOPE", "TEXT"]))
    else:
        print(f"erased {len(done)} memor{'y' if len(done) == 1 else 'ies'}")
    return EXIT_OK


def _forget_interrupted(count: int, matched: dict[str, Any]) -> Interrupted:
    """What a Ctrl-C during ``forget --filter --yes`` says: the forget is one record, so it is all
    or nothing, and the same command finishes it."""
    stopped = Interrupted(
        f"interrupted (Ctrl-C) while forgetting {count} finding(s) matching {matched}: the forget is "
        "one journal record, so either all of them were forgotten or none was, and reads may list "
        "them until it is finished: run the same command again to finish it (a second record of the "
        "same forget is harmless), or `flows sync`, which publishes a forget the journal holds"
    )
    vars(stopped)["planned"] = count  # context: in the --json object
    return stopped


def _erase_each(session: Any, memories: Sequence[str], reason: str, *, show_progress: bool) -> list[str]:
    """Erase ``memories`` one after another (as ``erase_where`` does), counting: a Ctrl-C says how
    many were erased, which one was being erased, and that the same command finishes the rest."""
    erased: list[str] = []
    with progress("erase: memories erased", enabled=show_progress) as show:
        for memory_id in memories:
            try:
                session.erase(memory_id, reason=reason, settle=False)  # said once, after all
            except KeyboardInterrupt as exc:
                left = len(memories) - len(erased) - 1
                stopped = Interrupted(
                    f"interrupted (Ctrl-C) after erasing {len(erased)} of {len(memories)} "
                    f"memor{'y' if len(memories) == 1 else 'ies'}, while erasing memory {memory_id} "
                    f"(its erase may be part done); {left} more were not begun: run the same command "
                    "again to finish: an erase is idempotent, and the filter still matches every "
                    "memory not wholly erased (--dry-run lists them)"
                )
                # context, in the --json object
                vars(stopped).update(erased=len(erased), total=len(memories), memory=memory_id)
                raise stopped from exc
            erased.append(memory_id)
            if show is not None:
                show(len(erased), len(memories))
    session.settle_erasures(erased)  # what a reader kept of any of them: memory_erase_pending
    return erased


# -- history ----------------------------------------------------------------------------------


def cmd_history(args: argparse.Namespace) -> int:
    """One memory's history, every version, oldest first: a page of ``--limit`` events from
    ``--offset``, and how to see the rest."""
    with _store(args) as store:
        with progress("history: journal streams indexed", enabled=not args.json) as show:
            store.index_journal(show)  # the first time, a read of every run: shown
        page = store.history_page(args.key, offset=args.offset, limit=args.limit)
    if args.json:
        _json_out(page.as_json())
        return EXIT_OK
    rows = [
        [
            e.kind,
            e.key,
            format_ms(e.at_ms),
            e.citation.run_id,
            e.citation.stream,
            e.citation.id,
            e.flow or "",
            _detail(e),
        ]
        for e in page.events
    ]
    memory_id = page.events[0].memory if page.events else None
    print(f"memory {memory_id or args.key}: {page.versions} version(s)")
    if rows:
        print(_table(rows, ["EVENT", "KEY", "WHEN", "RUN", "STREAM", "RECORD", "FLOW", "DETAIL"]))
    else:
        print(f"no events from --offset {page.offset}: the last is at offset {page.total - 1}")
    if page.next_offset is not None:
        first, last = page.offset + 1, page.offset + len(page.events)
        print(
            f"events {first} to {last} of {page.total} shown; {page.total - last} more follow: run it "
            f"again with --offset {page.next_offset} (--limit sets how many a page holds)"
        )
    return EXIT_OK


_DETAIL_MAX = 80  # the longest learned text the history table shows (``--json`` has all of it)


def _detail(event: memory.HistoryEvent) -> str:
    """What the table says of an event: the key that replaced it, the reason, or the text learned."""
    if event.by:
        return f"by {event.by}"
    if event.reason:
        return event.reason
    if event.content is not None:
        text = " ".join(str(event.content.get("text", "")).split())
        return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 1] + "…"
    return ""


def _add_filter_options(p: argparse.ArgumentParser, what: str) -> None:
    """The filter options of ``forget`` and ``erase`` (``what`` they reach)."""
    p.add_argument("--scope", metavar="S", type=filter_value, help=f"filter: {what} of this scope")
    p.add_argument("--tag", metavar="T", action="append", help="filter: carrying this tag (repeat: all)")
    p.add_argument("--meta", metavar="K=V", action="append", help="filter: this metadata value (repeat)")
    p.add_argument("--source", metavar="S", type=filter_value, help="filter: from this source")
    p.add_argument(
        "--before",
        metavar="WHEN",
        type=instant_ms,
        help="filter: learned before WHEN (a duration ago, 7d; ISO 8601; epoch ms)",
    )


def _add_finding_options(p: argparse.ArgumentParser) -> None:
    """The options of a finding's fields, which ``learn`` and ``update`` share."""
    p.add_argument("--tag", metavar="T", action="append", help="a tag (repeat for more)")
    p.add_argument("--source", metavar="S", help="where it came from (default: cli)")
    p.add_argument(
        "--meta",
        metavar="K=V",
        action="append",
        help="a metadata key and value (V is JSON when it parses, else text; repeat for more)",
    )
    p.add_argument(
        "--expires",
        metavar="WHEN",
        type=expiry_ms,
        help="when it stops being returned: a duration from now (7d, 12h), an ISO date/time or epoch ms",
    )


def add_memory_commands(add: Add) -> None:
    """Register ``learn``, ``forget`` and ``history`` with the ``flows`` parser's ``add``."""
    p = add(
        "learn",
        cmd_learn,
        "learn a finding under a root run of its own (flow 'cli'); print its key and citation",
    )
    p.add_argument("text", help="the finding's text; - reads it from standard input (UTF-8, up to 1 MiB)")
    p.add_argument("--scope", metavar="S", required=True, help="the scope it is learned in")
    _add_finding_options(p)
    p.add_argument("--supersedes", metavar="KEY", help="the key of a finding this one replaces")
    p = add(
        "update",
        cmd_update,
        "journal a new version of a memory (it keeps its memory id; history lists every version)",
    )
    p.add_argument("memory_id", metavar="MEMORY_ID", help="the memory's id (as `flows recall` shows it)")
    p.add_argument("text", help="the new version's text; - reads it from standard input (UTF-8, up to 1 MiB)")
    _add_finding_options(p)
    p = add(
        "forget",
        cmd_forget,
        "forget a finding by its key, or all a filter matches (journaled, then gone from reads)",
    )
    p.add_argument(
        "key",
        metavar="KEY",
        nargs="?",
        help="the finding's key (as `flows recall` shows it); or give a filter",
    )
    p.add_argument(
        "--reason",
        metavar="TEXT",
        default="forgotten from the command line",
        help="why (recorded; default: 'forgotten from the command line')",
    )
    _add_filter_options(p, "every live finding")
    p.add_argument(
        "--dry-run", action="store_true", help="with a filter: list what would be forgotten, write nothing"
    )
    p.add_argument(
        "--yes", action="store_true", help="with a filter: forget everything it matches (one record)"
    )
    p = add(
        "erase",
        cmd_erase,
        "erase a memory for good: its content leaves the journal and every copy; a record of it stays",
    )
    p.add_argument(
        "key", metavar="KEY", nargs="?", help="the memory's id, or any of its versions' keys; or a filter"
    )
    p.add_argument(
        "--reason",
        metavar="TEXT",
        default="erased from the command line",
        help="why (recorded; default: 'erased from the command line')",
    )
    _add_filter_options(p, "every memory with a commit")
    p.add_argument("--dry-run", action="store_true", help="with a filter: list the memories, erase nothing")
    p.add_argument("--yes", action="store_true", help="erase (without it, nothing is done)")
    p = add(
        "history",
        cmd_history,
        "a memory's history, oldest first, a page at a time: every version learned, superseded, forgotten",
    )
    p.add_argument("key", metavar="KEY", help="the memory's id, or the key of any of its versions")
    p.add_argument(
        "--limit",
        metavar="N",
        type=limit,
        default=memory.HISTORY_PAGE,
        help=f"at most N events, oldest first (1 to {LIMIT_MAX}; default {memory.HISTORY_PAGE})",
    )
    p.add_argument(
        "--offset",
        metavar="N",
        type=offset,
        default=0,
        help="skip the N oldest events (default 0): the next page starts where the last line says",
    )
