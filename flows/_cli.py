"""The ``flows`` command line: run, resume, and ask what a flow remembers and why."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson

from flows._cli_common import add_embedder_option, filter_value
from flows._cli_common import cell as _cell
from flows._cli_common import json_out as _json_out
from flows._cli_common import open_store as _store
from flows._cli_common import table as _table
from memory.cli import (
    EXIT_FAILED,
    EXIT_OK,
    LIMIT_MAX,
    CommandLine,
    Option,
    db_path,
    format_ms,
    instant_ms,
    journal_location,
    json_out,
    limit,
    progress,
    stdout_to_stderr,
    subject,
)

_EPILOG = """\
storage:
  The history DB is --db, else $FLOWS_DB, else $XDG_DATA_HOME/flows/history.db. Learned files live
  beside it in <db-dir>/flows-memory/, and the journal in <db-dir>/flows-journal/ unless --journal
  (or $FLOWS_JOURNAL) names a postgresql:// DSN. <db-dir>/flows-cache/ holds derived indexes that
  make a command's first read faster; it is safe to delete.

times: printed in local time with the UTC offset; --before, --since and --expires take a duration (7d,
12h: ago, or from now for --expires), epoch milliseconds or an ISO 8601
date/time; every time in --json output is epoch milliseconds, in a key ending in Ms.

--json: stdout holds the command's result as one JSON document and nothing else (a flow's own
prints go to stderr; serve and mcp --http print one {"url": ...} line once they listen; mcp over
stdio speaks MCP there). An error is one JSON object on one line, the last on stderr; the lines
before it are text (a run's notices while it waits, -v logs, a flow's prints): read the last line.
check finding problems and a demo step failing exit 1 with their report on stdout, not an error.
"""

_ms = format_ms


# -- commands ---------------------------------------------------------------------------------


def cmd_journal(args: argparse.Namespace) -> int:
    """Show a root run's journal records."""
    with _store(args) as store:
        backend = store.open_journal()
        backend.run(args.run_id)
        # an empty --stream is a name the journal refuses, never no filter: it would show every stream
        streams = [args.stream] if args.stream is not None else backend.streams(args.run_id)
        records = [r for s in streams for r in backend.read(args.run_id, s)]
    if args.json:
        _json_out(
            [
                {
                    "runId": r.run_id,
                    "stream": r.stream,
                    "seq": r.seq,
                    "id": r.id,
                    "key": r.key,
                    "tsMs": r.ts_ms,
                    "payload": r.payload,
                }
                for r in records
            ]
        )
    elif not records:
        print(f"root run {args.run_id} has no records{' in ' + args.stream if args.stream else ''}")
    else:
        rows = [
            [r.stream, str(r.seq), r.id, _ms(r.ts_ms), orjson.dumps(r.payload).decode()[:80]] for r in records
        ]
        print(_table(rows, ["STREAM", "SEQ", "RECORD", "COMMITTED", "PAYLOAD"]))
    return EXIT_OK


def _finding_rows(items: Sequence[Any]) -> str:
    rows = [[e.memory_id, e.key, _ms(e.learned_ms), e.source, ",".join(e.tags), e.text[:60]] for e in items]
    return _table(rows, ["MEMORY", "KEY", "LEARNED", "SOURCE", "TAGS", "TEXT"])


def cmd_recall(args: argparse.Namespace) -> int:
    """List findings, newest first, filtered."""
    from flows._cli_memory import meta_pairs

    with _store(args) as store:
        found = store.recall(
            source=args.source,
            tags=args.tag or (),
            meta=meta_pairs(args.meta),
            before_ms=args.before,
            limit=args.limit,
            scope=args.scope,
        )
    if args.json:
        _json_out([e.as_json() for e in found])
    elif not found:
        print("no findings match: learn with `flows learn TEXT --scope S`, or `await f.memory.learn({...})`")
    else:
        print(_finding_rows(found))
    return EXIT_OK


SUBJECT_SHOWN = 80
"""How many characters of a subject ``flows why`` echoes when nothing answers it."""


def cmd_why(args: argparse.Namespace) -> int:
    """Answer why: the findings that match a subject, with where each came from."""
    from flows._cli_memory import meta_pairs

    with _store(args) as store:
        answers = store.why(
            args.subject,
            limit=args.limit,
            scope=args.scope,
            tags=args.tag or (),
            meta=meta_pairs(args.meta),
            source=args.source,
            before_ms=args.before,
            mode=args.mode,
        )
        flows_of: dict[str, str] = {}
        for a in answers:
            flows_of.setdefault(a.finding.citation.run_id, a.finding.flow)
    if args.json:
        _json_out([a.as_json() for a in answers])
        return EXIT_OK
    if not answers:
        subject = args.subject  # echoed bounded: a subject may be a pasted page
        shown = repr(subject if len(subject) <= SUBJECT_SHOWN else subject[:SUBJECT_SHOWN] + "…")
        more = f" ({len(subject):,} characters)" if len(subject) > SUBJECT_SHOWN else ""
        print(f"nothing learned yet answers {shown}{more}")
        return EXIT_OK
    for n, a in enumerate(answers, 1):
        e, c = a.finding, a.finding.citation
        print(f"{n}. {_cell(e.text)}")  # a finding's text is data: its control characters are escaped
        print(f"   memory: {e.memory_id}   key: {e.key}")
        tags = _cell(", ".join(e.tags)) or "-"
        print(f"   tags: {tags}   source: {_cell(e.source)}   matched: {_cell(_how(a))}")
        print(
            f"   from flow {e.flow!r}, root run {c.run_id}, stream {c.stream}, record {c.id}, "
            f"committed {_ms(e.learned_ms)} ({'synced' if e.synced else 'not yet synced'})"
        )
    return EXIT_OK


def _how(a: Any) -> str:
    """Why an answer matched: its words, its meaning (with the similarity), or both."""
    words = f"words {', '.join(a.matched)}" if a.matched else ""
    meaning = f"meaning {a.similarity:.2f}" if a.similarity is not None else ""
    if a.matched_by == "words" or not meaning:
        return words or "-"
    return meaning if a.matched_by == "meaning" or not words else f"{words}; {meaning}"


def cmd_sync(args: argparse.Namespace) -> int:
    """Ingest learned files into the history DB and drop the copies it now holds."""
    with _store(args) as store, progress("sync: files ingested", enabled=not args.json) as show:
        report = store.sync(materialize=not args.no_materialize, progress=show)
    if args.json:
        _json_out(
            {"materialized": report.materialized, "ingested": report.ingested, "dropped": report.dropped}
        )
    else:
        print(
            f"synced {report.ingested} learned file(s) into {store.db_path}; dropped {report.dropped} "
            f"disk copies; materialised {report.materialized} from the journal"
        )
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    """Verify the store end to end; with --repair, mend what the journal can mend."""
    from memory import check_store, repair_store

    sail_dirs = (
        [_sail_dir(d) for d in args.sail] if args.sail else [".sail"] if os.path.isdir(".sail") else []
    )
    # check reports the store as it finds it (and --repair changes only what it reports): the
    # open-time republish of names a power loss took is left to the next other command
    with (
        _store(args, recover=False) as store,
        progress("check: phases done", enabled=not args.json) as show,
    ):
        problems = check_store(store, sail_dirs=sail_dirs, sweep_age_s=args.sweep_age, progress=show)
        actions: list[str] = []
        if args.repair and problems:
            actions = repair_store(store, problems, sweep_age_s=args.sweep_age)
            remaining = check_store(store, sail_dirs=sail_dirs, sweep_age_s=args.sweep_age)
        else:
            remaining = problems
    if args.json:
        _json_out(
            {
                "clean": not remaining,
                "problems": [p.as_json() for p in problems],
                "repaired": actions,
                "remaining": [p.as_json() for p in remaining],
            }
        )
    else:
        # paths are names anyone could give a file, and a message quotes them: each field on its own
        # line, escaped like all data shown, its newlines too (a name could forge a line of the report)
        for p in problems:
            print(f"{_cell(p.kind)}: {_cell(p.path)}\n    {_cell(p.message)}")
            print(f"    --repair would: {_cell(p.repair)}")
        for line in actions:
            print(f"repair: {_cell(line)}")
        if not remaining:
            print(f"store {_cell(str(store.db_path.parent))} is clean" + (" after repair" if actions else ""))
        else:
            print(
                f"{len(remaining)} problem(s) remain"
                + ("" if args.repair else "; run with --repair to mend them")
            )
    return EXIT_OK if not remaining else EXIT_FAILED


SAIL_MARKS = ("config.toml", "activity.jsonl", "memory")
"""What an agent's ``.sail`` folder holds from its ``sail init`` on (any one of them)."""


def _sail_dir(given: str) -> str:
    """A ``check --sail DIR``: an agent's ``.sail`` folder, or the agent's home that holds one (as
    ``flows serve --sail-home`` takes it). Anything else is refused: a folder with none of an
    agent's files, a missing path or a file would be checked as an agent without a ledger, and the
    store called clean, its agent never read.

    Raises:
        memory.ArgumentInvalid: ``given`` is no agent's folder (named).
    """
    from memory import ArgumentInvalid

    for candidate in (os.path.join(given, ".sail"), given):
        if os.path.isdir(candidate) and any(os.path.lexists(os.path.join(candidate, m)) for m in SAIL_MARKS):
            return candidate
    what = (
        "is not a folder" if not os.path.isdir(given) else "holds no agent (no .sail/ in it, nor its files)"
    )
    raise ArgumentInvalid(
        f"check --sail {given} {what}: give an agent's home (the folder `sail init` ran in) or its "
        ".sail/ folder"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the embedded demo; with ``--json`` its story goes to stderr and its outcome to stdout."""
    from flows._demo import run_demo

    if not args.json:
        with progress("demo: findings published before the kill", enabled=True) as show:
            return run_demo(args.home, progress=show).status
    with stdout_to_stderr() as out:
        outcome = run_demo(args.home)
        json_out(outcome.as_json(), out)
    return outcome.status


# -- parser and dispatch -------------------------------------------------------------------------

SWEEP_AGE_MAX = 10 * 365 * 86_400
"""The largest ``check --sweep-age``, in seconds (ten years): any stage older is surely stale."""


def sweep_age(text: str) -> float:
    """``check --sweep-age``: seconds from 0 to ``SWEEP_AGE_MAX``. NaN would make no stage stale (a
    store with a crash's leftovers checked clean), a negative age every stage, a live writer's
    included (``--repair`` would sweep it from under its learn)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= SWEEP_AGE_MAX:  # NaN fails both
        raise argparse.ArgumentTypeError(
            f"must be seconds from 0 to {SWEEP_AGE_MAX} (how old a stage must be to count as a "
            f"crash's leftover), got {text!r:.80}"
        )
    return value


_OPTIONS = (
    Option(("--db",), "history DB (default: $FLOWS_DB or the XDG data dir)", metavar="PATH", type=db_path),
    Option(
        ("--journal",),
        "journal directory or postgresql:// DSN (default: $FLOWS_JOURNAL)",
        metavar="LOCATION",
        type=journal_location,
    ),
)


class _Unused:
    """Takes the options of a command the command line does not name, and keeps nothing."""

    def __getattr__(self, name: str) -> Callable[..., _Unused]:
        return self._take

    def _take(self, *args: object, **kwargs: object) -> _Unused:
        return self


EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": ("flows run triage.py --input '{\"id\": 7}'", "flows run triage.py --input @ticket.json --json"),
    "resume": (
        "flows resume 20260131T080000-1a2b3c4d5e",
        "flows resume 20260131T080000-1a2b3c4d5e --allow-changed --file moved/triage.py",
    ),
    "runs": ("flows runs --state failed --since 7d", "flows runs --flow triage --limit 5 --json"),
    "show": ("flows show 20260131T080000-1a2b3c4d5e", "flows show 20260131T080000-1a2b3c4d5e --json"),
    "journal": ("flows journal 20260131T080000-1a2b3c4d5e --stream steps",),
    "learn": (
        "flows learn 'rain follows a falling barometer' --scope weather --tag forecast",
        "flows learn - --scope notes --meta lang=en --expires 30d < note.txt",
    ),
    "update": ("flows update 0a1b2c3d4e5f60718293a4b5c6d7e8f9 'rain follows a fast-falling barometer'",),
    "forget": (
        "flows forget 0a1b2c3d4e5f60718293a4b5c6d7e8f9 --reason 'wrong station'",
        "flows forget --scope weather --before 2026-01-01 --dry-run",
        "flows forget --meta user=42 --yes --reason 'account closed'",
    ),
    "erase": (
        "flows erase 0a1b2c3d4e5f60718293a4b5c6d7e8f9 --yes",
        "flows erase --meta user=42 --dry-run",
        "flows erase --meta user=42 --yes --reason 'deletion request'",
    ),
    "history": ("flows history 0a1b2c3d4e5f60718293a4b5c6d7e8f9 --limit 20 --offset 100",),
    "recall": ("flows recall --tag forecast --limit 5", "flows recall --scope weather --before 7d --json"),
    "why": (
        "flows why 'why does it rain?'",
        "flows why 'rain' --mode keyword --tag forecast --scope weather",
    ),
    "sync": ("flows sync", "flows sync --no-materialize --json"),
    "check": ("flows check", "flows check --repair --sail ./agent"),
    "demo": ("flows demo", "flows demo --keep /tmp/flows-demo"),
    "serve": (
        "flows serve --port 8080",
        "flows serve --host 0.0.0.0 --port 8080 --token 9pQ2-vX7mK4tR8wZ --sail-home ./agent",
    ),
    "mcp": ("flows mcp --scope notes", "flows mcp --http 127.0.0.1:8765 --idle-timeout 600"),
}
"""A few command lines of each command, shown under its ``--help`` (each parses:
``tests/test_cli_conventions.py``)."""

RUN_COMMANDS = ("run", "resume", "runs", "show")
"""The commands ``flows._cli_runs`` adds (``build_cli`` imports it only for one of them)."""


def build_cli(only: str | None = None) -> CommandLine:
    """The ``flows`` command line: its global options and every command (with ``only``, the one
    command so named, the others built only if the parse needs them: see ``CommandLine.parse``)."""
    cli = CommandLine(
        "flows",
        description="Run flows whose memory is journal-first, and ask what they learned and why.",
        epilog=_EPILOG,
        options=_OPTIONS,
        whole=None if only is None else build_cli,
        # an update's commit comes before its old version's retirement: a Ctrl-C between them
        interrupted="what was acknowledged is on record, and `flows check --repair` finishes a change "
        "it stopped midway",
    )

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return cast(argparse.ArgumentParser, _Unused())
        return cli.command(name, fn, help_, EXAMPLES[name])

    from flows._cli_memory import add_filter_options, add_memory_commands

    if only is None or only in RUN_COMMANDS:  # another command need not import their module
        from flows._cli_runs import add_run_commands

        add_run_commands(add)
    add_memory_commands(add)  # learn, forget, history
    p = add("journal", cmd_journal, "show a root run's journal records")
    p.add_argument("run_id", metavar="RUN_ID", help="the root run's id (as `flows runs` lists it)")
    p.add_argument("--stream", metavar="S", help="only this stream (e.g. memory-learn)")
    for name, fn, help_ in (
        ("recall", cmd_recall, "list findings, newest first"),
        ("why", cmd_why, "which findings answer a subject, and where each came from"),
    ):
        p = add(name, fn, help_)
        add_filter_options(p)
        if name == "why":
            p.add_argument("subject", type=subject, help="a question or words to match against findings")
            p.add_argument(
                "--mode",
                choices=("hybrid", "keyword", "semantic"),
                help="match by words (keyword), by meaning (semantic: needs an embedder, the offline "
                "default unless --embedder names another) or both (hybrid); default: hybrid when an "
                "embedder is configured, else keyword",
            )
            add_embedder_option(p)
        p.add_argument("--source", metavar="S", type=filter_value, help="only findings from this source")
        p.add_argument(
            "--before",
            metavar="WHEN",
            type=instant_ms,
            help="only findings learned before WHEN: a duration ago (7d), ISO 8601 or epoch ms",
        )
        default = 20 if name == "recall" else 10
        p.add_argument(
            "--limit",
            metavar="N",
            type=limit,
            default=default,
            help=f"at most N (1 to {LIMIT_MAX}; default {default})",
        )
        p.add_argument(
            "--scope", metavar="SCOPE", type=filter_value, help="only this scope (default: every scope)"
        )
    p = add("sync", cmd_sync, "ingest learned files into the history DB, then drop the disk copies")
    p.add_argument(
        "--no-materialize", action="store_true", help="do not write files for journal-only findings"
    )
    p = add("check", cmd_check, "verify the store: journal, learned files, DB rows, stages, agent ledgers")
    p.add_argument(
        "--repair", action="store_true", help="republish from the journal, quarantine, sweep stages"
    )
    p.add_argument(
        "--sail",
        metavar="DIR",
        action="append",
        help="an agent's home or its .sail dir to check (repeat for more; default: ./.sail when it exists)",
    )
    p.add_argument(
        "--sweep-age",
        metavar="SECONDS",
        type=sweep_age,
        default=3600.0,
        help="how old a stage must be to count as a crash's leftover (0 to ten years; default 3600)",
    )
    add_embedder_option(p)  # with --repair: derive the live findings' vectors again
    p = add("demo", cmd_demo, "run the embedded demo: learn, crash, resume, ask why")
    p.add_argument(
        "--keep",
        "--home",
        dest="home",
        metavar="DIR",
        help="keep the demo's store in DIR and print commands to try on it (default: a temporary directory)",
    )
    if only in (None, "serve"):
        from flows._web_cli import add_serve_command  # serve: the read-only web dashboard

        add_serve_command(add)
    if only in (None, "mcp"):
        from flows.mcp import add_mcp_arguments, cmd_mcp  # mcp: the memory as an MCP server

        add_mcp_arguments(add("mcp", cmd_mcp, "serve the memory to AI agents over MCP (stdio, or --http)"))
    return cli


def build_parser() -> argparse.ArgumentParser:
    """The ``flows`` argument parser (for documentation and completion)."""
    return build_cli().parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The first word of ``argv`` that is not an option or a global option's value: the command,
    when the parse agrees (``CommandLine.parse`` checks)."""
    takes_value = {flag for opt in _OPTIONS if not opt.switch for flag in opt.flags}
    words = iter(argv)
    for arg in words:
        if arg == "--":
            return None
        if arg in takes_value:
            next(words, None)
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the ``flows`` CLI; returns the exit status (0 ok, 1 failure, 2 usage, 130 interrupted).

    Only the named command's parser is built (argparse builds every command's otherwise: a few
    milliseconds of each start), unless the parse needs the others."""
    args = list(sys.argv[1:] if argv is None else argv)
    return build_cli(_named_command(args)).main(args)


if __name__ == "__main__":
    sys.exit(main())
