"""``flows check``: verify a store end to end, and repair what can be repaired from the journal.

What is checked:

* every journal run and stream passes its line checks;
* every learned file parses, cites a record that exists, and is exactly that record's rendering, and
  is not the file of a finding the journal says was forgotten or superseded;
* every retired file parses, cites a ``memory-forget`` record that exists, and is exactly its
  rendering; every finding the journal retires has its retired file;
* every finding the journal records, and does not retire, has its learned file or its history-DB row;
* every history-DB row cites a record that exists;
* no stage file is older than the sweep age;
* each agent ledger and activity log given passes its line checks.

What ``repair`` does: republish missing or wrong learned and retired files from their journal
record; move a learned file that cites no record, or that belongs to a retired finding, into
``<db-dir>/flows-quarantine/`` (never delete it); sweep stale stages. It never republishes the
learned file of a retired finding. It never adds, changes or removes a journal record, and reports
what it cannot repair.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import journal
from memory._errors import Unreachable
from memory._files import learned_names, read_learned, read_retired
from memory._finding import (
    RETIRE_STREAM,
    STREAM,
    commit_to_publish,
    render,
    render_retirement,
    retirement_to_publish,
)
from memory._paths import learned_dir, retired_dir, retired_dirs, scope_dirs
from memory._store import MemoryStore
from staging import DEFAULT_SWEEP_AGE_S, stale_stages, sweep

QUARANTINE_DIR = "flows-quarantine"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a store: what (``kind``), where (``path``), and what repair would do."""

    kind: str
    path: str
    message: str
    repair: str
    repairable: bool

    def as_json(self) -> dict[str, Any]:
        """The problem as a JSON object."""
        return {
            "kind": self.kind,
            "path": self.path,
            "message": self.message,
            "repair": self.repair,
            "repairable": self.repairable,
        }


@dataclass
class _Context:
    store: MemoryStore
    records: dict[tuple[str, str], journal.Record]  # (run id, record id) -> memory-learn record
    latest: dict[str, journal.Record]  # finding id -> the commit to publish
    problems: list[Problem]
    retirements: dict[tuple[str, str], journal.Record] = field(default_factory=dict)
    retired: dict[str, journal.Record] = field(default_factory=dict)  # key -> the first retirement


def _journal_problems(ctx: _Context) -> None:
    """Read every run and stream afresh (no cache), collecting memory-learn records."""
    location = ctx.store.journal_location
    backend = journal.open_journal(location)
    try:
        try:
            runs = backend.runs()
        except journal.JournalCorrupt as exc:
            ctx.problems.append(_unrepairable("run_corrupt", exc.path, str(exc)))
            return
        for run in runs:
            for stream in backend.streams(run.run_id):
                try:
                    records = backend.read(run.run_id, stream)
                except journal.JournalCorrupt as exc:
                    ctx.problems.append(_unrepairable("stream_corrupt", exc.path, str(exc)))
                    continue
                if stream == RETIRE_STREAM:
                    for rec in records:
                        ctx.retirements[(rec.run_id, rec.id)] = rec
                        key = rec.payload.get("id")
                        if isinstance(key, str):
                            ctx.retired[key] = retirement_to_publish(ctx.retired.get(key), rec)
                if stream != STREAM:
                    continue
                for rec in records:
                    ctx.records[(rec.run_id, rec.id)] = rec
                    fid = rec.payload.get("id")
                    if isinstance(fid, str):
                        ctx.latest[fid] = commit_to_publish(ctx.latest.get(fid), rec)
    finally:
        backend.close()


def _unrepairable(kind: str, path: object, message: str) -> Problem:
    return Problem(
        kind,
        str(path),
        message,
        "nothing: --repair never changes the journal or the ledger; restore the file from a backup",
        False,
    )


def _file_problems(ctx: _Context) -> set[str]:
    """Check every learned file; return the finding ids that have a good file."""
    good: set[str] = set()
    for directory in scope_dirs(ctx.store.db_path):
        for name in learned_names(directory):
            path = directory / name
            key = name[: -len(".json")]
            rec = ctx.latest.get(key)
            if key in ctx.retired:
                ctx.problems.append(
                    Problem(
                        "learned_forgotten",
                        str(path),
                        f"{path} is the learned file of finding {key}, which record "
                        f"{ctx.retired[key].id} of root run {ctx.retired[key].run_id} forgot or superseded",
                        f"move it to {QUARANTINE_DIR}/",
                        True,
                    )
                )
                continue
            try:
                entry = read_learned(path)
            except Unreachable as exc:
                if rec is not None and learned_dir(ctx.store.db_path, rec.payload["scope"]) == directory:
                    ctx.problems.append(
                        Problem(
                            "learned_damaged",
                            str(path),
                            str(exc),
                            "republish it from its journal record",
                            True,
                        )
                    )
                else:
                    ctx.problems.append(
                        Problem("learned_damaged", str(path), str(exc), f"move it to {QUARANTINE_DIR}/", True)
                    )
                continue
            cited = ctx.records.get((entry.citation.run_id, entry.citation.id))
            if cited is None:
                ctx.problems.append(
                    Problem(
                        "learned_unjournaled",
                        str(path),
                        f"{path} cites record {entry.citation.id} of root run {entry.citation.run_id}, which "
                        "the journal does not hold",
                        f"move it to {QUARANTINE_DIR}/"
                        if rec is None
                        else "republish it from its journal record",
                        True,
                    )
                )
                continue
            if path.read_bytes() != render(cited):
                ctx.problems.append(
                    Problem(
                        "learned_mismatch",
                        str(path),
                        f"{path} differs from the rendering of the record it cites",
                        "republish it from its journal record",
                        True,
                    )
                )
                continue
            good.add(key)
    return good


def _retired_problems(ctx: _Context) -> set[str]:
    """Check every retired file; return the keys that have a good one."""
    good: set[str] = set()
    for directory in retired_dirs(ctx.store.db_path):
        for name in learned_names(directory):
            path = directory / name
            rec = ctx.retired.get(name[: -len(".json")])
            fits = rec is not None and retired_dir(ctx.store.db_path, rec.payload["scope"]) == directory
            repair = "republish it from its journal record" if fits else f"move it to {QUARANTINE_DIR}/"
            try:
                entry = read_retired(path)
            except Unreachable as exc:
                ctx.problems.append(Problem("retired_damaged", str(path), str(exc), repair, True))
                continue
            cited = ctx.retirements.get((entry.citation.run_id, entry.citation.id))
            if cited is None:
                ctx.problems.append(
                    Problem(
                        "retired_unjournaled",
                        str(path),
                        f"{path} cites record {entry.citation.id} of root run {entry.citation.run_id}, which "
                        "the journal does not hold",
                        repair,
                        True,
                    )
                )
            elif path.read_bytes() != render_retirement(cited):
                ctx.problems.append(
                    Problem(
                        "retired_mismatch",
                        str(path),
                        f"{path} differs from the rendering of the record it cites",
                        "republish it from its journal record",
                        True,
                    )
                )
            else:
                good.add(entry.key)
    for key, rec in ctx.retired.items():
        path = retired_dir(ctx.store.db_path, rec.payload["scope"]) / f"{key}.json"
        if key in good or any(p.path == str(path) for p in ctx.problems):
            continue
        ctx.problems.append(
            Problem(
                "retirement_unpublished",
                str(path),
                f"record {rec.id} of root run {rec.run_id} retires finding {key}, but its retired file "
                "is missing, so reads may still return it",
                "publish the retired file from its journal record",
                True,
            )
        )
    return good


def _record_problems(ctx: _Context, good: set[str]) -> None:
    held = ctx.store.db.held(ctx.latest)
    for fid, rec in ctx.latest.items():
        if fid in held or fid in good or fid in ctx.retired:
            continue
        path = learned_dir(ctx.store.db_path, rec.payload["scope"]) / f"{fid}.json"
        if any(p.path == str(path) for p in ctx.problems):
            continue  # already reported as a damaged or wrong file
        ctx.problems.append(
            Problem(
                "record_unpublished",
                str(path),
                f"record {rec.id} of root run {rec.run_id} has neither its learned file nor a history-DB row",
                "republish it from its journal record",
                True,
            )
        )


def _db_problems(ctx: _Context) -> None:
    if not ctx.store.db.exists():
        return
    for row in ctx.store.db.every_row():
        if (row.citation.run_id, row.citation.id) not in ctx.records:
            ctx.problems.append(
                _unrepairable(
                    "row_unjournaled",
                    ctx.store.db_path,
                    f"history-DB row {row.id} cites record {row.citation.id} of root run "
                    f"{row.citation.run_id}, which the journal does not hold",
                )
            )


def _stage_dirs(store: MemoryStore) -> list[Path]:
    dirs = [*scope_dirs(store.db_path), *retired_dirs(store.db_path)]
    root = Path(store.journal_location) / "runs"
    if root.is_dir():
        dirs += [root / n for n in sorted(os.listdir(root))]
    return dirs


def _stage_problems(ctx: _Context, sweep_age_s: float, now: float) -> None:
    for directory in _stage_dirs(ctx.store):
        for path in stale_stages(directory, sweep_age_s, now=now):
            ctx.problems.append(
                Problem(
                    "stage_stale",
                    str(path),
                    f"{path} is a stage older than {sweep_age_s:.0f}s, left by a crash",
                    "sweep it",
                    True,
                )
            )


def _sail_problems(ctx: _Context, sail_dirs: Iterable[Path]) -> None:
    from memory.ledger import ActivityLog, Ledger, LedgerError

    for sail_dir in sail_dirs:
        for label, read in (
            ("ledger", lambda d: Ledger(d).entries()),
            ("activity", lambda d: ActivityLog(d).read()),
        ):
            try:
                read(sail_dir)
            except (journal.JournalCorrupt, LedgerError) as exc:
                where = getattr(exc, "path", None) or sail_dir
                ctx.problems.append(_unrepairable(f"{label}_corrupt", where, str(exc)))


def check_store(
    store: MemoryStore,
    *,
    sail_dirs: Iterable[str | os.PathLike[str]] = (),
    sweep_age_s: float = DEFAULT_SWEEP_AGE_S,
    now: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Problem]:
    """Return every problem of the store (empty when clean). Reads only; writes nothing.

    ``progress(done, total)``, if given, is told as each of the check's phases ends.
    """
    ctx = _Context(store, {}, {}, [])
    good: set[str] = set()

    def files() -> None:
        good.update(_file_problems(ctx))

    def retired() -> None:
        _retired_problems(ctx)

    phases: list[Callable[[], None]] = [
        lambda: _journal_problems(ctx),
        files,
        retired,
        lambda: _record_problems(ctx, good),
        lambda: _db_problems(ctx),
        lambda: _stage_problems(ctx, sweep_age_s, time.time() if now is None else now),
        lambda: _sail_problems(ctx, [Path(d) for d in sail_dirs]),
    ]
    for done, phase in enumerate(phases, 1):
        phase()
        if progress is not None:
            progress(done, len(phases))
    return ctx.problems


def repair_store(
    store: MemoryStore,
    problems: Iterable[Problem],
    *,
    sweep_age_s: float = DEFAULT_SWEEP_AGE_S,
    now: float | None = None,
) -> list[str]:
    """Repair what ``check_store`` found; return one line per action taken.

    Republishes from the journal, quarantines files that cite no record, sweeps stale stages. Never
    touches the journal, the DB's rows or a ledger.
    """
    ctx = _Context(store, {}, {}, [])
    _journal_problems(ctx)
    actions: list[str] = []
    quarantine = store.db_path.parent / QUARANTINE_DIR / time.strftime("%Y%m%dT%H%M%S")
    for problem in problems:
        if not problem.repairable:
            continue
        path = Path(problem.path)
        if problem.kind == "stage_stale":
            for swept in sweep(path.parent, sweep_age_s, now=now):
                actions.append(f"swept {swept}")
            continue
        key = path.name[: -len(".json")]
        if path.parent.name == "retired":
            retirement = ctx.retired.get(key)
            home = None if retirement is None else retired_dir(store.db_path, retirement.payload["scope"])
            if retirement is not None and home == path.parent:
                store.republish(retirement)
                actions.append(
                    f"republished {path} from record {retirement.id} of root run {retirement.run_id}"
                )
                continue
        rec = None if key in ctx.retired else ctx.latest.get(key)  # never republish a retired finding
        fits = rec is not None and learned_dir(store.db_path, rec.payload["scope"]) == path.parent
        if fits and rec is not None:
            store.republish(rec)
            actions.append(f"republished {path} from record {rec.id} of root run {rec.run_id}")
        elif path.exists():
            target = quarantine / path.relative_to(store.db_path.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
            actions.append(f"quarantined {path} to {target}")
    return actions
