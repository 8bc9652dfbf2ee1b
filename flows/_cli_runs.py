"""The ``flows`` commands about runs: ``run``, ``resume``, ``runs`` (with its filters) and ``show``."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from flows import _langgraph_view as langgraph_view
from flows._cli_common import diagnose, filter_value
from flows._cli_common import json_out as _json_out
from flows._cli_common import open_store as _store
from flows._cli_common import table as _table
from flows._errors import FlowFailed, RunInterrupted
from flows._timeline import run_json, timeline
from journal import RunInfo, RunState
from memory.cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    LIMIT_MAX,
    Progress,
    format_ms,
    instant_ms,
    limit,
    progress,
    stdout_to_stderr,
    to_stderr,
)
from memory.cli import shown as _shown
from staging import CodedError, CodedInterrupt

if TYPE_CHECKING:
    from flows._runtime import RunResult

# The runtime (asyncio, steps, flow loading) is imported by the handlers that need it, not when the
# commands are registered: ``flows recall`` and ``flows why`` never pay for it.

Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


# -- argument types ---------------------------------------------------------------------------


def _not_a_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _input_arg(text: str) -> Any:
    """``--input``: a JSON value, or ``@path`` of a file holding one."""
    from flows._steps import MAX_JSON_BYTES, NotJson, json_value

    if text.startswith("@"):
        path = text[1:]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot open {path}: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise argparse.ArgumentTypeError(f"{path} is not a regular file")
            if info.st_size > MAX_JSON_BYTES:
                raise argparse.ArgumentTypeError(f"{path} is over {MAX_JSON_BYTES} bytes")
            data = os.read(fd, MAX_JSON_BYTES + 1)
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        where = path
    else:
        data, where = text.encode("utf-8", "surrogateescape"), "the value"
    try:  # the standard parser keeps an integer past 64 bits exact (orjson makes it a float), to refuse
        value = json.loads(data, parse_constant=_not_a_constant)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, too many digits, too deep
        raise argparse.ArgumentTypeError(f"{where} is not JSON ({exc}); quote it for the shell") from None
    try:  # JSON the journal cannot hold (nested over 200 levels, an integer past 64 bits): usage too
        return json_value(value)
    except NotJson as exc:
        raise argparse.ArgumentTypeError(f"{where} cannot be a flow's input: {exc}") from None


# -- run and resume ---------------------------------------------------------------------------


def _report_run(result: RunResult, args: argparse.Namespace, verb: str) -> int:
    from flows._runtime import error_fields

    if not result.ok:
        assert result.error is not None
        if args.verbose and not isinstance(result.error, CodedInterrupt):
            from flows._runtime import traceback_text

            to_stderr(_shown(traceback_text(result.error)) + "\n")  # its messages are data
        if isinstance(result.error, CodedInterrupt):
            raise result.error
        if isinstance(result.error, CodedError):
            # the run failed: 1, whatever the body's error (a malformed argument given to the
            # command itself is 2: ``memory.cli``'s exit status for its code)
            _say_resumable(result.error, result.run_id)
            _say_whose(result.error, result.run_id)
            diagnose(result.error, as_json=args.json, run_id=result.run_id)
            return EXIT_FAILED
        message = error_fields(result.error)["message"]  # a body's own exception: flow_failed
        raise FlowFailed(message, run_id=result.run_id) from result.error
    if args.json:
        _json_out({"runId": result.run_id, "state": result.state.value, "output": result.output})
    else:
        print(f"root run {result.run_id} {verb}: {result.state.value}")
        if result.output is not None:
            print(_shown(f"output: {orjson.dumps(result.output).decode()}", one_line=True))
    return EXIT_OK


def _say_resumable(error: CodedError, run_id: str) -> None:
    """A run the storage failed (a full disk, a read-only one, a server gone) is resumable once that
    is fixed: its message says so, naming the command, where it said only what to fix."""
    from journal import JournalReadInterrupted, JournalUnavailable, JournalUnwritable
    from memory import Unwritable

    if isinstance(error, Unwritable | JournalUnwritable | JournalUnavailable | JournalReadInterrupted):
        error.message += (
            f"; root run {run_id} is resumable: once that is fixed, `flows resume {run_id}` goes on "
            "from its recorded steps"
        )


def _say_whose(error: CodedError, run_id: str) -> None:
    """An error about another run (the body resumed a run a live process drives) failed this one:
    the line names this run, the one that failed, where it named only the other."""
    other = getattr(error, "run_id", None)
    if other is not None and other != run_id:
        error.message += f" (an error about root run {other}, raised by the body of the run it failed)"
        error.run_id = run_id  # type: ignore[attr-defined]


def _notice(line: str) -> None:
    """A line on stderr while a run waits on something that may take long: a flow file still being
    imported, or an interrupted run's writes in flight (``flows.run(notice=...)``). It is one line
    whatever it quotes (a file's name), and comes with ``--json`` too: stdout stays the JSON."""
    to_stderr(f"flows: {_shown(line, one_line=True)}\n")


def _interrupted(exc: RunInterrupted, args: argparse.Namespace) -> int:
    diagnose(exc, as_json=args.json, run_id=exc.run_id)
    return EXIT_INTERRUPTED


def _drive(args: argparse.Namespace, verb: str, drive: Callable[[Progress | None], RunResult]) -> int:
    """Run or resume, then report. With ``--json`` the flow body's own prints (and its children's)
    go to stderr, so stdout holds the one JSON object and nothing else."""
    if not args.json:
        try:
            with progress(f"{verb}: learns settled", enabled=verb == "resumed") as show:
                result = drive(show)
        except RunInterrupted as exc:
            return _interrupted(exc, args)
        return _report_run(result, args, verb)
    with stdout_to_stderr() as out:
        try:
            result = drive(None)
        except RunInterrupted as exc:
            return _interrupted(exc, args)
        sys.stdout, shown = out, sys.stdout
        try:
            return _report_run(result, args, verb)
        finally:
            sys.stdout = shown


def cmd_run(args: argparse.Namespace) -> int:
    """Run a flow file under a new root run, with ``--input`` as ``f.input``."""
    from flows._runtime import run
    from memory import check_store_location

    check_store_location(args.db, args.journal, creating=True)
    return _drive(
        args,
        "ran",
        lambda _: run(args.file, db=args.db, journal_location=args.journal, input=args.input, notice=_notice),
    )


def cmd_resume(args: argparse.Namespace) -> int:
    """Resume a failed or interrupted root run."""
    from flows._runtime import resume
    from memory import check_store_location

    check_store_location(args.db, args.journal, creating=False)
    return _drive(
        args,
        "resumed",
        lambda show: resume(
            args.run_id,
            db=args.db,
            journal_location=args.journal,
            progress=show,
            allow_changed=args.allow_changed,
            flow_file=args.flow_file,
            notice=_notice,
        ),
    )


# -- runs -------------------------------------------------------------------------------------


def cmd_runs(args: argparse.Namespace) -> int:
    """List root runs, newest first, filtered by state, flow and start time; at most ``--limit``."""
    from flows._runtime import RUN_STREAM

    with _store(args) as store:
        backend = store.open_journal()
        runs = [
            r
            for r in backend.runs()
            if (args.state is None or r.state.value == args.state)
            and (args.flow is None or r.flow == args.flow)
            and (args.since is None or r.created_ms >= args.since)
        ][: args.limit]
        listed = [
            run_json(r, backend.read(r.run_id, RUN_STREAM) if r.state is RunState.DONE else ()) for r in runs
        ]
    if args.json:
        _json_out(listed)
    elif not runs:
        filtered = args.state is not None or args.flow is not None or args.since is not None
        print(
            "no root runs match the filter (--state, --flow, --since)"
            if filtered
            else "no root runs yet: start one with `flows run FILE`"
        )
    else:
        print(_runs_table(runs))
    return EXIT_OK


def _code(error: Mapping[str, Any] | None) -> str:
    """A run's error code for a table cell: its ``run.json`` is read back untrusted, and only says
    the error is an object, so a code that is not a string is shown as its JSON."""
    code = (error or {}).get("code", "")
    return code if isinstance(code, str) else orjson.dumps(code, default=str).decode()


def _runs_table(runs: Sequence[RunInfo]) -> str:
    """The runs as a table; a THREAD column when any is a LangGraph run, whose STATE is then the
    one a reader wants (``open`` for a thread that can take more checkpoints)."""
    described = [langgraph_view.describe(r) for r in runs]
    rows = [
        [
            r.run_id,
            r.flow,
            r.scope,
            d["state"] if d else r.state.value,
            _when(r.created_ms),
            _code(r.error),
        ]
        for r, d in zip(runs, described, strict=True)
    ]
    headers = ["RUN", "FLOW", "SCOPE", "STATE", "STARTED", "ERROR"]
    if any(described):
        rows = [
            [*row[:3], langgraph_view.label(r, d), *row[3:]]
            for row, r, d in zip(rows, runs, described, strict=True)
        ]
        headers = [*headers[:3], "THREAD", *headers[3:]]
    return _table(rows, headers)


# -- show -------------------------------------------------------------------------------------


def _when(ms: int | None, *, precise: bool = False) -> str:
    return format_ms(ms, precise=precise)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _short(value: Any, width: int = 60) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def _timeline_row(e: Mapping[str, Any]) -> list[str]:
    kind, record = str(e["kind"]), str(e["citation"]["id"])
    when = _when(e["tsMs"], precise=True)
    if kind == "step":
        duration = f"{e['durationMs']} ms" if isinstance(e.get("durationMs"), int) else "-"
        if "result" in e:
            outcome = "ok " + _short(e["result"])
        else:
            error = _mapping(e.get("error"))
            retry = f" (retry in {e['retryInMs']} ms)" if "retryInMs" in e else ""
            outcome = f"error[{error.get('code')}] {str(error.get('message'))[:50]}{retry}"
        return [when, kind, str(e["step"]), str(e["attempt"]), duration, outcome, record]
    if kind in ("learn", "forget"):
        if kind == "learn":
            detail = _short(e.get("text"))  # (a LangGraph store's record that is not an item has none)
        else:
            detail = f"superseded by {e['by']}" if e.get("by") else _short(e.get("reason"))
        what = f"{len(e['keys'])} keys" if "keys" in e else str(e["key"])[:12]  # "keys": by filter
        return [when, kind, what, "-", "-", detail, record]
    if kind == "output" or kind in _LANGGRAPH_ROWS:
        what, outcome = _LANGGRAPH_ROWS[kind](e) if kind != "output" else ("-", _short(e.get("output")))
        return [when, kind, what, "-", "-", outcome, record]
    if kind == "resumed":
        changed = "code changed (allowed)" if e.get("changed") else "code unchanged"
        return [when, kind, f"epoch {e.get('epoch')}", "-", "-", changed, record]
    if kind in ("interrupted", "failed"):
        error = _mapping(e.get("error"))
        return [when, kind, f"epoch {e.get('epoch')}", "-", "-", f"error[{error.get('code')}]", record]
    return [
        when,
        kind,
        "-",
        "-",
        "-",
        _short({k: v for k, v in e.items() if k not in ("kind", "tsMs")}),
        record,
    ]


def _item_name(e: Mapping[str, Any]) -> str:
    namespace = e.get("namespace")
    where = "/".join(str(n) for n in namespace) if isinstance(namespace, list) else "?"
    key = e.get("itemKey")
    return f"{where} {str(key)[:40]}" if key is not None else f"{where} (finding {str(e.get('key'))[:12]})"


def _checkpoint_row(e: Mapping[str, Any]) -> tuple[str, str]:
    by = f" after {', '.join(e['nodes'])}" if e.get("nodes") else ""
    wrote = f" wrote {_short(e['writes'], 50)}" if e.get("writes") else ""
    return f"step {e.get('step')}", f"{e.get('source') or '-'}{by}{wrote} [{str(e.get('checkpoint'))[:13]}]"


def _registration_row(e: Mapping[str, Any]) -> tuple[str, str]:
    run = e.get("run") or "deleted: no run"
    return f"{str(e.get('threadId'))[:40]} gen {e.get('generation')}", f"{run} ({e.get('reason')})"


_LANGGRAPH_ROWS: dict[str, Callable[[Mapping[str, Any]], tuple[str, str]]] = {
    "checkpoint": _checkpoint_row,
    "writes": lambda e: (
        str(e.get("node") or "-"),
        f"{_short(e.get('writes'), 50)} to [{str(e.get('checkpoint'))[:13]}]",
    ),
    "store-put": lambda e: (_item_name(e), _short(e.get("value"))),
    "store-delete": lambda e: (_item_name(e), "deleted"),
    "store-replaced": lambda e: (_item_name(e), f"replaced by finding {str(e.get('by'))[:12]}"),
    "registration": _registration_row,
    "delete-thread": lambda e: ("-", "the thread was deleted"),
    "delete-runs": lambda e: ("-", f"checkpoints of LangGraph runs {_short(e.get('runIds'), 50)} deleted"),
    "compacted": lambda e: ("-", f"compacted into run {e.get('into')}"),
}
"""``(what, outcome)`` of each LangGraph timeline entry's kind."""


def _show_header(shown: Mapping[str, Any]) -> str:
    described = shown.get("langgraph")
    if not described:
        return f"root run {shown['runId']}: flow {shown['flow']}, scope {shown['scope']}, {shown['state']}"
    if described["role"] == "thread":
        what = f"LangGraph thread {described.get('threadId')!r} (generation {described.get('generation')})"
    else:
        what = f"LangGraph {described['role']}"
    return f"root run {shown['runId']}: {what}, {described['state']} (journal state {shown['state']})"


def cmd_show(args: argparse.Namespace) -> int:
    """Show a root run: its state, input and output, and its timeline of steps, learns and events."""
    with _store(args) as store:
        shown = timeline(store.open_journal(), args.run_id)
    if args.json:
        _json_out(shown)
        return EXIT_OK
    # What a run recorded is data (a file name, an exception's message, the body's output): every
    # control character is written as an escape, C1 included, which JSON leaves as it is.
    digest = shown["sourceSha256"]
    print(_shown(_show_header(shown), one_line=True))
    print(f"started {_when(shown['createdMs'])}, updated {_when(shown['updatedMs'])}, lease {shown['epoch']}")
    source = f"source  {shown['source'] or '-'}" + (f" (sha256 {digest})" if digest else "")
    print(_shown(source, one_line=True))
    print(_shown(f"input   {orjson.dumps(shown['input']).decode()}", one_line=True))
    print(_shown(f"output  {orjson.dumps(shown['output']).decode()}", one_line=True))
    if shown["error"]:
        error = shown["error"]
        print(_shown(f"error   [{error.get('code')}] {error.get('message')}", one_line=True))
        recorded = error.get("traceback")
        if isinstance(recorded, str) and recorded:
            print("\n".join("        " + _shown(line, one_line=True) for line in recorded.splitlines()))
    if not shown["timeline"]:
        print("\nnothing recorded yet")
        return EXIT_OK
    rows = [_timeline_row(e) for e in shown["timeline"]]
    print()
    print(_table(rows, ["TIME", "KIND", "WHAT", "ATTEMPT", "DURATION", "OUTCOME", "RECORD"]))
    return EXIT_OK


# -- registration -----------------------------------------------------------------------------


def add_run_commands(add: Add) -> None:
    """Register ``run``, ``resume``, ``runs`` and ``show`` with the ``flows`` parser's ``add``."""
    p = add("run", cmd_run, "run a flow file under a new root run")
    p.add_argument("file", help="the flow's .py file")
    p.add_argument(
        "--input",
        metavar="JSON",
        type=_input_arg,
        default=None,
        help="the flow's input, a JSON value or @FILE holding one (the body's f.input)",
    )
    p = add("resume", cmd_resume, "resume a failed or interrupted root run")
    p.add_argument("run_id", metavar="RUN_ID", help="the root run's id (as `flows runs` lists it)")
    p.add_argument(
        "--allow-changed",
        action="store_true",
        help="resume even if the flow file changed: recorded steps replay by key, new ones run",
    )
    p.add_argument(
        "--file",
        metavar="FILE",
        dest="flow_file",
        default=None,
        help="the flow file to run (default: the path the run recorded); it must hash as the run "
        "recorded, checked before any of it runs, unless --allow-changed",
    )
    p = add("runs", cmd_runs, "list root runs, newest first")
    p.add_argument("--state", choices=[s.value for s in RunState], help="only runs in this state")
    p.add_argument("--flow", metavar="NAME", type=filter_value, help="only runs of this flow")
    p.add_argument(
        "--since",
        metavar="WHEN",
        type=instant_ms,
        help="only runs started at or after WHEN: a duration ago (12h), an ISO 8601 date/time or epoch ms",
    )
    p.add_argument(
        "--limit",
        metavar="N",
        type=limit,
        default=20,
        help=f"at most N runs (1 to {LIMIT_MAX}; default 20)",
    )
    p = add("show", cmd_show, "show a root run: state, input, output, every step and learn in order")
    p.add_argument("run_id", metavar="RUN_ID", help="the root run's id (as `flows runs` lists it)")
