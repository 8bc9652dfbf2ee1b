"""``python -m benchmarks [--quick | --smoke] [--json]``: every performance figure in one run.

Sections (``--only`` picks some): ``writes`` (the fsync floor, learn with 1 and 8 writers on the file
and PostgreSQL journals, and the peers: sqlite3, eventsourcing, LangGraph, DBOS, rounds interleaved),
``reads`` (recall / why over 100,000 findings against SQLite, the peers' reads, resident memory),
``resume`` (republishing 10,000 committed findings), ``ledger`` (the agent's tick, status, why and journal on
a 1,000,000-line ledger against a 10-line one), ``langgraph`` (the LangGraph adapters against LangGraph's
SQLite ones), ``scale`` (learn and recall by store size, up to ``--scale-findings``). ``reads`` also
measures fresh processes: the first recall and ``flows recall`` end to end against sqlite3. The
peers run in the benchmark's own venv (``bash benchmarks/setup_peers.sh``); without it they are
reported as skipped, with the reason. ``--json`` prints one JSON document on stdout: every
figure, ratio and goal under the stable names below (progress goes to stderr). Work happens in a
temporary directory on ``--dir``'s file system (default: the system temp dir), removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from benchmarks._common import FULL, QUICK, SMOKE, Sheet, Sizes, say
from benchmarks.identity import NAMES as IDENTITY_NAMES
from benchmarks.langgraph_bench import NAMES as LANGGRAPH_NAMES
from benchmarks.langgraph_bench import RATIOS as LANGGRAPH_RATIOS
from benchmarks.retrieval import NAMES as RETRIEVAL_NAMES
from benchmarks.writes import WRITE_NAMES

SECTIONS = ("writes", "reads", "resume", "ledger", "langgraph", "scale", "retrieval", "identity")

FIGURES: dict[str, tuple[str, ...]] = {
    "writes": tuple(f"write.{name}_per_s" for name in WRITE_NAMES),
    "reads": (
        "read.recall_ms",
        "read.recall_cold_ms",
        "read.sqlite_tag_ms",
        "read.why_ms",
        "read.sqlite_fts_ms",
        "read.eventsourcing_tag_ms",
        "read.langgraph_tag_ms",
        "read.dbos_tag_ms",
        "read.recall_rss_mb",
        "read.import_rss_mb",
        "cold.first_recall_ms",
        "cold.first_recall_no_index_ms",
        "cold.sqlite_first_query_ms",
        "cold.cli_recall_ms",
        "cold.sqlite_cli_ms",
    ),
    "resume": ("resume.first_run_learn_per_s", "resume.materialize_per_s", "resume.flow_resume_per_s"),
    "ledger": (
        "ledger.tick_large_ms",
        "ledger.tick_small_ms",
        "ledger.status_large_ms",
        "ledger.status_small_ms",
        "ledger.why_large_ms",
        "ledger.why_small_ms",
        "ledger.journal_large_ms",
        "ledger.journal_small_ms",
        "ledger.journal_day_alone_ms",
        "ledger.lookup_snapshot_ms",
        "ledger.lookup_no_snapshot_ms",
        "ledger.full_rescan_ms",
    ),
    "langgraph": LANGGRAPH_NAMES,
    "scale": ("scale.learn_1000_per_s", "scale.recall_1000_ms"),  # and one pair per size asked
    "retrieval": RETRIEVAL_NAMES,
    "identity": IDENTITY_NAMES,
}
"""Every figure's stable name, by section: each is in ``figures`` or, with its reason, in ``skipped``."""

RATIOS: dict[str, tuple[str, str]] = {
    "ratio.learn_1w_vs_floor": ("write.learn_file_1w_per_s", "write.floor_journal_first_1w_per_s"),
    "ratio.update_1w_vs_learn_1w": ("write.update_file_1w_per_s", "write.learn_file_1w_per_s"),
    "ratio.update_floor_vs_one_flush_floor": (
        "write.floor_one_flush_update_1w_per_s",
        "write.floor_one_flush_1w_per_s",
    ),
    "ratio.learn_1w_vs_sqlite3": ("write.learn_file_1w_per_s", "write.sqlite3_full_1w_per_s"),
    "ratio.learn_1w_vs_one_flush_floor": ("write.learn_file_1w_per_s", "write.floor_one_flush_1w_per_s"),
    "ratio.one_flush_floor_vs_sqlite3": ("write.floor_one_flush_1w_per_s", "write.sqlite3_full_1w_per_s"),
    "ratio.one_flush_floor_vs_append": ("write.floor_one_flush_1w_per_s", "write.floor_append_1w_per_s"),
    "ratio.learn_1w_vs_eventsourcing": ("write.learn_file_1w_per_s", "write.eventsourcing_1w_per_s"),
    "ratio.learn_1w_vs_langgraph": ("write.learn_file_1w_per_s", "write.langgraph_put_1w_per_s"),
    "ratio.learn_1w_vs_langgraph_wal": ("write.learn_file_1w_per_s", "write.langgraph_put_wal_1w_per_s"),
    "ratio.learn_1w_vs_dbos": ("write.learn_file_1w_per_s", "write.dbos_step_1w_per_s"),
    "ratio.learn_pg_1w_vs_learn_1w": ("write.learn_pg_1w_per_s", "write.learn_file_1w_per_s"),
    "ratio.learn_8p_vs_floor_8p": ("write.learn_file_8p_per_s", "write.floor_journal_first_8p_per_s"),
    "ratio.learn_8p_vs_sqlite3_8p": ("write.learn_file_8p_per_s", "write.sqlite3_full_8p_per_s"),
    "ratio.learn_8t_vs_sqlite3_8p": ("write.learn_file_8t_per_s", "write.sqlite3_full_8p_per_s"),
    "ratio.learn_flow_8t_vs_sqlite3_8p": ("write.learn_flow_8t_per_s", "write.sqlite3_full_8p_per_s"),
    "ratio.learn_8p_vs_eventsourcing_8p": ("write.learn_file_8p_per_s", "write.eventsourcing_8p_per_s"),
    "ratio.learn_8t_vs_eventsourcing_8p": ("write.learn_file_8t_per_s", "write.eventsourcing_8p_per_s"),
    "ratio.learn_8p_vs_learn_1w": ("write.learn_file_8p_per_s", "write.learn_file_1w_per_s"),
    "ratio.learn_pg_8p_vs_sqlite3_8p": ("write.learn_pg_8p_per_s", "write.sqlite3_full_8p_per_s"),
    "ratio.recall_vs_sqlite": ("read.recall_ms", "read.sqlite_tag_ms"),
    "ratio.why_vs_sqlite_fts": ("read.why_ms", "read.sqlite_fts_ms"),
    "ratio.ledger_tick_large_vs_small": ("ledger.tick_large_ms", "ledger.tick_small_ms"),
    "ratio.ledger_status_large_vs_small": ("ledger.status_large_ms", "ledger.status_small_ms"),
    "ratio.ledger_why_large_vs_small": ("ledger.why_large_ms", "ledger.why_small_ms"),
    "ratio.ledger_journal_large_vs_small": ("ledger.journal_large_ms", "ledger.journal_small_ms"),
    "ratio.ledger_journal_large_vs_day_alone": ("ledger.journal_large_ms", "ledger.journal_day_alone_ms"),
    **LANGGRAPH_RATIOS,
    "ratio.first_recall_vs_sqlite": ("cold.first_recall_ms", "cold.sqlite_first_query_ms"),
    "ratio.cli_recall_vs_sqlite": ("cold.cli_recall_ms", "cold.sqlite_cli_ms"),
}
"""Stable ratio names: numerator / denominator figures."""

GOALS: dict[str, tuple[str, str, float]] = {
    "goal.learn_1w_vs_floor": ("ratio.learn_1w_vs_floor", ">=", 0.85),
    "goal.update_1w_vs_learn_1w": ("ratio.update_1w_vs_learn_1w", ">=", 0.9),
    "goal.learn_1w_vs_eventsourcing": ("ratio.learn_1w_vs_eventsourcing", ">=", 1.0),
    "goal.learn_1w_vs_langgraph_wal": ("ratio.learn_1w_vs_langgraph_wal", ">=", 1.0),
    "goal.learn_1w_ahead_of_langgraph": ("ratio.learn_1w_vs_langgraph", ">", 1.0),
    "goal.learn_1w_ahead_of_dbos": ("ratio.learn_1w_vs_dbos", ">", 1.0),
    "goal.one_flush_floor_vs_append": ("ratio.one_flush_floor_vs_append", ">=", 0.6),
    "goal.learn_1w_vs_one_flush_floor": ("ratio.learn_1w_vs_one_flush_floor", ">=", 0.95),
    "goal.learn_1w_vs_sqlite3": ("ratio.learn_1w_vs_sqlite3", ">=", 0.8),
    "goal.learn_8p_vs_sqlite3_8p": ("ratio.learn_8p_vs_sqlite3_8p", ">=", 1.2),
    "goal.learn_8t_vs_sqlite3_8p": ("ratio.learn_8t_vs_sqlite3_8p", ">=", 1.2),
    "goal.store_put_vs_sqlitestore": ("ratio.store_put_vs_sqlitestore", ">=", 1.0),
    "goal.saver_get_tuple_vs_sqlitesaver": ("ratio.saver_get_tuple_ms_vs_sqlitesaver", "<=", 1.0),
    "goal.learn_8p_ahead_of_eventsourcing": ("ratio.learn_8p_vs_eventsourcing_8p", ">", 1.0),
    "goal.learn_8t_ahead_of_eventsourcing": ("ratio.learn_8t_vs_eventsourcing_8p", ">", 1.0),
    "goal.recall_within_2_5x_sqlite": ("ratio.recall_vs_sqlite", "<=", 2.5),
    "goal.why_within_10x_sqlite_fts": ("ratio.why_vs_sqlite_fts", "<=", 10.0),
    "goal.materialize_2000_per_s": ("resume.materialize_per_s", ">=", 2000.0),
    "goal.flow_resume_2000_per_s": ("resume.flow_resume_per_s", ">=", 2000.0),
    "goal.recall_rss_under_200_mb": ("read.recall_rss_mb", "<", 200.0),
    "goal.ledger_tick_within_1_5x": ("ratio.ledger_tick_large_vs_small", "<=", 1.5),
    "goal.ledger_status_within_1_5x": ("ratio.ledger_status_large_vs_small", "<=", 1.5),
    "goal.ledger_why_within_1_5x": ("ratio.ledger_why_large_vs_small", "<=", 1.5),
    "goal.ledger_journal_within_1_5x": ("ratio.ledger_journal_large_vs_small", "<=", 1.5),
    "goal.first_recall_fresh_within_5x_sqlite": ("ratio.first_recall_vs_sqlite", "<=", 5.0),
    "goal.cli_recall_within_2x_sqlite": ("ratio.cli_recall_vs_sqlite", "<=", 2.0),
    "goal.learn_large_store_vs_small": ("ratio.learn_large_vs_small", ">=", 0.9),
    "goal.hybrid_recall_at_5": ("retrieval.hybrid_recall_at_5", ">=", 0.85),
    "goal.hybrid_gain_over_keyword_at_5": ("retrieval.hybrid_gain_at_5", ">=", 0.25),
    "goal.no_forgotten_finding_returned": ("retrieval.forgotten_returned", "<=", 0.0),
    "goal.no_superseded_finding_returned": ("retrieval.superseded_returned", "<=", 0.0),
    "goal.erase_within_1_s": ("identity.erase_s", "<=", 1.0),
}
"""Stable goal names: the project's performance targets, each a figure or ratio, a comparison and a bound."""


def _paired(num: list[float] | None, den: list[float] | None) -> float | None:
    """The median of per-round ratios, when both figures were measured in the same rounds.

    Each round runs every write contender back to back, so a round's ratio compares them under the
    same machine weather; the median over rounds then drops the rounds a burst of load distorted.
    (A ratio of the two medians can pair one contender's calm round with the other's busy one.)
    """
    if not num or not den or len(num) != len(den) or any(d <= 0 for d in den):
        return None
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


def _derive(sheet: Sheet, sections: tuple[str, ...]) -> None:
    asked = {name for s in sections for name in FIGURES[s]}
    for name, (num, den) in RATIOS.items():
        if num not in asked or den not in asked:
            continue
        paired = _paired(sheet.rounds.get(num), sheet.rounds.get(den))
        if paired is not None:
            sheet.ratios[name] = paired
        elif num in sheet.figures and den in sheet.figures and sheet.figures[den] > 0:
            sheet.ratios[name] = sheet.figures[num] / sheet.figures[den]
        else:
            missing = [x for x in (num, den) if x not in sheet.figures]
            sheet.skip(
                name, "needs " + ", ".join(f"{x} ({sheet.skipped.get(x, 'not measured')})" for x in missing)
            )
    for name, (of, op, bound) in GOALS.items():
        value = sheet.ratios.get(of, sheet.figures.get(of))
        if value is None:
            if of in sheet.skipped:
                why = f"{of} skipped: {sheet.skipped[of]}"
                sheet.goals[name] = {
                    "of": of,
                    "target": f"{op} {bound:g}",
                    "value": None,
                    "met": None,
                    "why": why,
                }
                sheet.skip(name, why)
            continue
        met = {">=": value >= bound, ">": value > bound, "<=": value <= bound, "<": value < bound}[op]
        sheet.goals[name] = {"of": of, "target": f"{op} {bound:g}", "value": value, "met": met}


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(sheet: Sheet, sections: tuple[str, ...], out: TextIO) -> None:
    """Print the figures, ratios and goals as aligned text."""
    for section in sections:
        say(out, f"\n{section}")
        extra = sorted(n for n in sheet.figures if n.startswith(f"{section}.") and n not in FIGURES[section])
        for name in (*FIGURES[section], *extra):
            if name in sheet.figures:
                say(out, f"  {name:<40} {_fmt(sheet.figures[name]):>12}   {sheet.notes.get(name, '')}")
            else:
                say(out, f"  {name:<40} {'skipped':>12}   {sheet.skipped.get(name, '')}")
    if sheet.ratios:
        say(out, "\nratios")
        for name, value in sheet.ratios.items():
            say(out, f"  {name:<40} {value:>12.3f}")
    if sheet.goals:
        say(out, "\ngoals")
        for name, g in sheet.goals.items():
            verdict = "skipped" if g["met"] is None else ("met" if g["met"] else "MISSED")
            value = "-" if g["value"] is None else _fmt(g["value"])
            say(out, f"  {name:<40} {value:>12} {g['target']:<9} {verdict}  {g.get('why', '')}".rstrip())


def _commit() -> str | None:
    """The work tree's commit (with ``+dirty`` when it has changes), so figures name what they measured."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _bench_ledger(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    """The agent's tick, status, why and journal on a large ledger against a small one, and the
    cadence lookup."""
    from benchmarks.ledger_bench import SMALL, measure

    m, rounds = measure(base / "ledger", sizes.ledger_entries, sizes.ledger_runs)
    say(
        out,
        f"ledger: {sizes.ledger_entries:,} ticks (ledger {m['size_mib']:.0f} MiB, activity"
        f" {m['activity_mib']:.0f} MiB) and {SMALL} ticks, built in {m['built_s']:.1f} s",
    )
    for what, note in (
        ("tick", "sail tick, a cadence skip on the in-process EVM"),
        ("status", "sail status"),
        ("why", "sail why, the 10 newest skips"),
        ("journal", "sail journal --days 1 --json, the last day's narrative"),
    ):
        for scale, lines in (("large", sizes.ledger_entries), ("small", SMALL)):
            figure = f"ledger.{what}_{scale}_ms"
            sheet.put(figure, m[f"{what}_{scale}_ms"], f"{note}, {lines:,} lines")
            sheet.rounds[figure] = rounds[f"{what}_{scale}_ms"]
    sheet.put(
        "ledger.journal_day_alone_ms",
        m["journal_day_ms"],
        f"sail journal --days 1 --json on the last day alone ({m['journal_day_lines']:.0f} lines)",
    )
    sheet.rounds["ledger.journal_day_alone_ms"] = rounds["journal_day_ms"]
    sheet.put("ledger.lookup_snapshot_ms", m["with_snapshot_ms"], "last confirmed act, valid snapshot")
    sheet.put(
        "ledger.lookup_no_snapshot_ms",
        m["without_snapshot_ms"],
        "snapshot deleted: rebuilt from the ledger and the activity log, and written",
    )
    sheet.put("ledger.full_rescan_ms", m["rescan_ms"], "decode and validate every line")
    sheet.meta["ledger_entries"] = sizes.ledger_entries


def _memory_sections(
    sections: tuple[str, ...],
    base: Path,
    sizes: Sizes,
    sheet: Sheet,
    out: TextIO | None,
    *,
    scale_findings: int | None,
) -> None:
    """The sections about a store's size and what it answers and forgets: scale, retrieval, identity."""
    if "scale" in sections:
        from benchmarks.scale import bench_scale

        largest = scale_findings or sizes.scale_findings
        bench_scale(
            base, largest=largest, rounds=sizes.rounds, per_round=sizes.per_round, sheet=sheet, out=out
        )
    if "retrieval" in sections:
        from benchmarks.retrieval import bench_retrieval

        bench_retrieval(base, sheet, out, sizes)
    if "identity" in sections:
        from benchmarks.identity import bench_erase, bench_identity

        bench_identity(base, sizes, sheet, out)
        bench_erase(base, sizes, sheet, out)


def main(argv: list[str] | None = None) -> int:
    """Run the asked sections; print the table, or the JSON document with ``--json``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer rounds and smaller N (about 2 minutes)")
    size.add_argument(
        "--smoke", action="store_true", help="tiny sizes, to check it runs (seconds); figures meaningless"
    )
    parser.add_argument(
        "--json", action="store_true", help="print every figure as one JSON document on stdout"
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated sections of {','.join(SECTIONS)}"
    )
    parser.add_argument("--no-peers", action="store_true", help="skip the peers even if their venv exists")
    parser.add_argument(
        "--dir", default=None, help="where to make the temporary directory (the disk to measure)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--scale-findings",
        type=int,
        default=None,
        metavar="N",
        help="the largest store of the scale section (default: 100,000; 1,000,000 takes minutes)",
    )
    args = parser.parse_args(argv)
    sections = tuple(s for s in SECTIONS if s in args.only.split(","))
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown or not sections:
        parser.error(f"--only takes sections of {', '.join(SECTIONS)}")
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    out = sys.stderr if args.json else sys.stdout

    sheet = Sheet()
    sheet.meta.update(
        command="python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:]),
        sizes=sizes.name,
        sections=list(sections),
        python=platform.python_version(),
        machine=f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        commit=_commit(),
    )
    try:
        base = Path(tempfile.mkdtemp(prefix="flows-bench-", dir=args.dir))
    except OSError as exc:
        parser.error(
            f"--dir {args.dir}: cannot make a directory there ({exc.strerror or exc}); "
            "name an existing, writable directory on the disk to measure"
        )
    sheet.meta["dir"] = str(base)
    t0 = time.perf_counter()
    try:
        if "writes" in sections:
            from benchmarks.writes import bench_writes

            bench_writes(base / "writes", sizes, sheet, out, peers=not args.no_peers)
        if "reads" in sections:
            from benchmarks.reads import bench_reads

            bench_reads(base, sizes, sheet, out, peers=not args.no_peers)
            from benchmarks.cold import bench_cold

            bench_cold(base, max(3, sizes.read_calls // 40), sheet, out)
        if "resume" in sections:
            from benchmarks.resume import bench_resume

            bench_resume(base, sizes, sheet, out)
        if "ledger" in sections:
            _bench_ledger(base, sizes, sheet, out)
        if "langgraph" in sections:
            from benchmarks.langgraph_bench import bench_langgraph

            bench_langgraph(base / "langgraph", sizes, sheet, out)
        _memory_sections(sections, base, sizes, sheet, out, scale_findings=args.scale_findings)
    finally:
        if args.keep:
            say(out, f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    sheet.meta["seconds"] = round(time.perf_counter() - t0, 1)
    _derive(sheet, sections)
    table(sheet, sections, out)
    if args.json:
        json.dump(sheet.as_json(), sys.stdout, indent=1, sort_keys=False)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
