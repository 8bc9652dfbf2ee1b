"""Another account in the history DB's group reads what the owner wrote, through the real commands.

The owner (root here) makes a store whose DB is 0640 and gives it to a group; a child process then
drops to another uid in that group (no account needs to exist: setgid/setuid to bare numbers) and
runs `recall`, `why`, `runs`, `show` and `journal`. The learned files, their folders and the file
journal all take the DB's mode, so every command answers; a store whose DB is 0600 answers that
account with a coded error and no traceback. The child imports every module it may need while it is
still root (the interpreter's own files may not be readable by the other account), and warms the
commands up on a store of its own first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.flows.helpers import flows

GID, UID = 4242, 4243

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second account")

_AS_ANOTHER_USER = r"""
import contextlib, importlib, io, json, os, pkgutil, sys, tempfile
import flows, journal, memory, staging
for pkg in (journal, staging, memory, flows):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not info.name.startswith(("flows.web", "flows.mcp", "flows.langgraph", "flows.__main__")):
            importlib.import_module(info.name)
from flows._cli import main
gid, uid, db, commands = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
warm = tempfile.mkdtemp() + "/history.db"
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    main(["learn", "--db", warm, "a warm-up finding", "--scope", "s"])
    for command in commands:
        main([a if a != db else warm for a in command])
os.setgroups([gid]); os.setgid(gid); os.setuid(uid)
results = []
for command in commands:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(command)
        except SystemExit as exc:
            code = exc.code
    results.append({"command": command, "exit": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    # not under pytest's own temporary folder, which only root may enter
    path = Path(tempfile.mkdtemp(prefix="flows-second-user-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _owner(db: Path, *args: str) -> str:
    result = flows(db, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _store(base: Path, db_mode: int) -> tuple[Path, str]:
    store = base / "store"
    store.mkdir()
    store.chmod(0o755)
    db = store / "history.db"
    db.touch()
    db.chmod(db_mode)
    _owner(db, "learn", "the swap fee is 0.3 percent", "--scope", "desk")
    _owner(db, "sync")
    out = _owner(db, "learn", "the gas limit is 300000", "--scope", "desk", "--json")
    run_id = json.loads(out)["citation"]["runId"]
    for path in [store, *store.rglob("*")]:
        os.chown(path, -1, GID, follow_symlinks=False)
    return db, run_id


def _as_member(db: Path, commands: list[list[str]]) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-c", _AS_ANOTHER_USER, str(GID), str(UID), str(db), json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, object]] = json.loads(proc.stdout)
    return results


def _commands(db: Path, run_id: str) -> list[list[str]]:
    d = ["--db", str(db)]
    return [
        ["recall", *d, "--json"],
        ["why", "fee", *d, "--json"],
        ["runs", *d, "--json"],
        ["show", run_id, *d, "--json"],
        ["journal", run_id, *d, "--json"],
    ]


def test_a_member_of_the_dbs_group_reads_everything_the_owner_wrote(shared_dir: Path) -> None:
    db, run_id = _store(shared_dir, 0o640)
    for result in _as_member(db, _commands(db, run_id)):
        assert result["exit"] == 0, result
        assert "Traceback" not in str(result["err"]), result
    recall, why, runs, show, _ = (json.loads(str(r["out"])) for r in _as_member(db, _commands(db, run_id)))
    assert {f["text"] for f in recall} == {"the swap fee is 0.3 percent", "the gas limit is 300000"}
    assert why and "fee" in json.dumps(why[0])
    assert run_id in {r["runId"] for r in runs}
    assert show["runId"] == run_id
    journal_dir = db.parent / "flows-journal"
    modes = {oct(p.stat().st_mode & 0o777) for p in [journal_dir, *journal_dir.rglob("*")]}
    assert modes <= {"0o750", "0o640"}, modes


def test_a_member_of_the_group_of_a_private_store_gets_a_coded_refusal(shared_dir: Path) -> None:
    db, run_id = _store(shared_dir, 0o600)
    for result in _as_member(db, _commands(db, run_id)[:2]):
        assert result["exit"] not in (0, None), result
        assert "Traceback" not in str(result["err"]), result
        code = json.loads(str(result["err"]).strip().splitlines()[-1])["code"]
        assert code in {"memory_unreachable", "journal_read_interrupted"}, result


def test_a_store_whose_folder_the_account_cannot_search_gets_a_coded_refusal(shared_dir: Path) -> None:
    """The owner's store folder is 0700: the other account cannot even look at the DB's name in it.
    Every command says so with the store's own code (exit 1), never an internal error."""
    db, run_id = _store(shared_dir, 0o640)
    db.parent.chmod(0o700)
    commands = [
        *_commands(db, run_id),
        ["learn", "a fact", "--scope", "desk", "--db", str(db), "--json"],
        ["check", "--db", str(db), "--json"],
        ["history", "0" * 32, "--db", str(db), "--json"],
    ]
    for result in _as_member(db, commands):
        assert result["exit"] == 1, result
        error = json.loads(str(result["err"]).strip().splitlines()[-1])
        assert error["code"] in {"memory_unreachable", "journal_read_interrupted"}, result


def test_a_stream_the_account_cannot_read_is_a_problem_check_reports_with_what_to_do(
    shared_dir: Path,
) -> None:
    """A run's memory-learn stream the account may not read: `flows check` stopped at it with a
    bare "Permission denied" and reported nothing else. It is reported (``journal_unreadable``),
    saying to grant read access, and the rest of the store is still checked."""
    db, run_id = _store(shared_dir, 0o640)
    stream = db.parent / "flows-journal" / "runs" / run_id / "streams" / "memory-learn.jsonl"
    stream.chmod(0o600)
    [result] = _as_member(db, [["check", "--db", str(db), "--json"]])
    assert result["exit"] == 1, result
    report = json.loads(str(result["out"]))
    unreadable = [p for p in report["problems"] if p["kind"] == "journal_unreadable"]
    assert [p["path"] for p in unreadable] == [str(stream)], report
    assert "grant the user running this" in unreadable[0]["message"], unreadable
    assert unreadable[0]["runId"] == run_id and not unreadable[0]["repairable"]


def test_a_streams_folder_the_account_cannot_search_is_named_as_the_cause(shared_dir: Path) -> None:
    """A run's streams/ folder of mode 0700: `flows runs` said "cannot read .../streams/run.jsonl:
    Permission denied", naming a file that may not exist and no way out. It names the folder that
    refused, and says what to do."""
    db, run_id = _store(shared_dir, 0o640)
    streams = db.parent / "flows-journal" / "runs" / run_id / "streams"
    streams.chmod(0o700)
    [result] = _as_member(db, [["runs", "--db", str(db), "--json"]])
    assert result["exit"] == 1, result
    error = json.loads(str(result["err"]).strip().splitlines()[-1])
    assert error["code"] == "journal_read_interrupted", error
    assert f"on the folder {streams}, which the user running this" in error["message"], error
    assert "grant it read and search access" in error["message"], error


def test_an_erased_findings_file_is_never_offered_to_the_quarantine_while_its_erase_record_is_unread(
    shared_dir: Path,
) -> None:
    """A finding erased, its learned file back (from a backup), and the erase's memory-erase stream
    unreadable by the account: check called the file ``learned_forgotten``, and ``--repair`` moved
    the erased text into the quarantine. The file is now ``learned_unverified`` (left in place, not
    repairable), and the unbacked tombstone says the unreadable stream may hold its erase record."""
    db, _ = _store(shared_dir, 0o640)
    out = _owner(db, "learn", "the vault code is 4417", "--scope", "desk", "--json")
    key = json.loads(out)["key"]
    (learned,) = (db.parent / "flows-memory").rglob(f"{key}.json")
    backup = learned.read_bytes()
    _owner(db, "erase", key, "--yes", "--reason", "asked")
    learned.write_bytes(backup)  # restored from a backup
    for path in [db.parent, *db.parent.rglob("*")]:
        os.chown(path, -1, GID, follow_symlinks=False)
    (erase_stream,) = [
        p for p in (db.parent / "flows-journal").rglob("memory-erase.jsonl") if p.stat().st_size
    ]
    erase_stream.chmod(0o600)
    [result] = _as_member(db, [["check", "--db", str(db), "--json"]])
    assert result["exit"] == 1, result
    problems = json.loads(str(result["out"]))["problems"]
    by_kind = {p["kind"]: p for p in problems}
    assert by_kind["learned_unverified"]["path"] == str(learned), problems
    assert not by_kind["learned_unverified"]["repairable"]
    assert "learned_forgotten" not in by_kind, problems
    assert "cannot be read" in by_kind["tombstone_unbacked"]["message"], problems
