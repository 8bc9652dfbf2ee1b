"""`flows check [--repair] [--json]`: a store verified end to end."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import orjson

import memory
from tests.flows.helpers import flows, journal_of, json_of, write_flow

FOUR = """
for i in range(4):
    await f.memory.learn({"text": f"note {i}", "tags": ["n"]})
"""


def _store(tmp_path: Path) -> tuple[Path, str, Path]:
    db = tmp_path / "store" / "history.db"
    flow = write_flow(tmp_path / "four.py", FOUR, 'scope="chk"')
    assert flows(db, "run", str(flow)).returncode == 0
    run_id = json_of(flows(db, "runs", "--json"))[0]["runId"]
    return db, run_id, memory.learned_dir(db, "chk")


def _check(db: Path, *extra: str) -> tuple[int, dict[str, object]]:
    result = flows(db, "check", "--json", *extra)
    return result.returncode, orjson.loads(result.stdout)


def test_a_clean_store_checks_clean(tmp_path: Path) -> None:
    db, _, _ = _store(tmp_path)
    code, report = _check(db)
    assert (code, report["clean"], report["problems"]) == (0, True, [])
    assert flows(db, "sync").returncode == 0
    assert _check(db)[0] == 0
    human = flows(db, "check")
    assert human.returncode == 0 and "is clean" in human.stdout


def test_each_kind_of_damage_is_reported_with_its_path_and_repaired_from_the_journal(tmp_path: Path) -> None:
    db, run_id, d = _store(tmp_path)
    names = sorted(os.listdir(d))
    originals = {n: (d / n).read_bytes() for n in names}
    (d / names[0]).write_bytes(b"{not json")  # damaged
    (d / names[1]).unlink()  # lost after its commit
    entry = orjson.loads(originals[names[2]])
    entry["learnedMs"] += 1
    (d / names[2]).write_bytes(
        orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) + b"\n"
    )  # not the record's bytes
    stray = orjson.loads(originals[names[3]])
    stray["journal"]["id"] = "0000000000000000"
    stray_text = {"text": "made up", "source": stray["source"], "tags": stray["tags"]}
    stray.update(text="made up", id=memory.finding_id("chk", memory.validate(stray_text, "x")))
    stray_path = d / f"{stray['id']}.json"
    stray_path.write_bytes(orjson.dumps(stray, option=orjson.OPT_SORT_KEYS) + b"\n")  # cites no record
    stage = d / ".stage-0123456789abcdef.finding"
    stage.write_bytes(b"left by a crash")
    past = time.time() - 7200
    os.utime(stage, (past, past))

    code, report = _check(db)
    assert code == 1
    kinds = {(p["kind"], Path(p["path"]).name) for p in report["problems"]}  # type: ignore[union-attr]
    assert kinds == {
        ("learned_damaged", names[0]),
        ("record_unpublished", names[1]),
        ("learned_mismatch", names[2]),
        ("learned_unjournaled", stray_path.name),
        ("stage_stale", stage.name),
    }
    assert all(p["repair"] for p in report["problems"])  # type: ignore[union-attr]
    human = flows(db, "check")
    assert human.returncode == 1 and str(d / names[0]) in human.stdout and "--repair would:" in human.stdout

    records_before = [r.id for r in journal_of(db).read(run_id, memory.STREAM)]
    repaired = flows(db, "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout
    assert "clean after repair" in repaired.stdout
    assert {n: (d / n).read_bytes() for n in names} == originals  # byte-identical from the journal
    assert not stray_path.exists() and not stage.exists()
    quarantined = list((db.parent / memory.QUARANTINE_DIR).rglob(stray_path.name))
    assert len(quarantined) == 1  # moved aside, never deleted
    assert [r.id for r in journal_of(db).read(run_id, memory.STREAM)] == records_before
    assert _check(db)[0] == 0


def test_a_damaged_journal_line_is_reported_and_never_repaired(tmp_path: Path) -> None:
    db, run_id, _ = _store(tmp_path)
    stream = journal_of(db).stream_path(run_id, memory.STREAM)
    lines = stream.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"note", b"nope")
    stream.write_bytes(b"".join(lines))
    damaged = stream.read_bytes()
    code, report = _check(db, "--repair")
    assert code == 1
    (problem,) = [p for p in report["remaining"] if p["kind"] == "stream_corrupt"]  # type: ignore[union-attr]
    assert problem["path"] == str(stream) and problem["repairable"] is False
    assert "line 2" in problem["message"]
    assert stream.read_bytes() == damaged


def test_an_agent_ledger_is_checked_line_by_line(tmp_path: Path) -> None:
    db, _, _ = _store(tmp_path)
    sail = tmp_path / ".sail"
    (sail / "memory").mkdir(parents=True)
    good = b'{"ts":1,"block":2,"chainId":31337,"kind":"skipped","reason":"quote returned 0"}\n'
    (sail / "memory" / "ledger.jsonl").write_bytes(good + b'{"ts":"x"}\n' + good)
    code, report = _check(db, "--sail", str(sail))
    assert code == 1
    (problem,) = report["problems"]  # type: ignore[misc]
    assert problem["kind"] == "ledger_corrupt"
    assert "ledger.jsonl" in problem["path"]
    (sail / "memory" / "ledger.jsonl").write_bytes(good + good)
    assert _check(db, "--sail", str(sail))[0] == 0


def test_check_sail_takes_an_agents_home_or_its_sail_folder_and_refuses_anything_else(tmp_path: Path) -> None:
    """``--sail`` given the agent's home reads its ``.sail/`` (it read the home as a ``.sail/`` with no
    ledger and called the store clean); a missing path, a file or a folder with no agent in it is
    refused (exit 2), never checked as an agent with nothing to read."""
    db, _, _ = _store(tmp_path)
    home = tmp_path / "agent"
    (home / ".sail" / "memory").mkdir(parents=True)
    (home / ".sail" / "memory" / "ledger.jsonl").write_bytes(b'{"ts":"x"}\n')
    for given in (home, home / ".sail"):
        code, report = _check(db, "--sail", str(given))
        assert code == 1 and [p["kind"] for p in report["problems"]] == ["ledger_corrupt"], given  # type: ignore[union-attr]
    for given in (tmp_path / "nowhere", db, tmp_path / "store-or-any-folder"):
        if given.name == "store-or-any-folder":
            given.mkdir()
        result = flows(db, "check", "--json", "--sail", str(given))
        assert result.returncode == 2 and result.stdout == "", (given, result.stdout)
        error = orjson.loads(result.stderr)
        assert error["code"] == "memory_argument_invalid" and str(given) in error["message"], error


def test_check_reads_a_store_it_cannot_mend_without_writing_anything(tmp_path: Path) -> None:
    db, _, d = _store(tmp_path)
    (d / sorted(os.listdir(d))[0]).unlink()
    snapshot = tmp_path / "copy"
    shutil.copytree(db.parent, snapshot)
    assert _check(db)[0] == 1
    for path in snapshot.rglob("*"):
        if path.is_file():
            assert (db.parent / path.relative_to(snapshot)).read_bytes() == path.read_bytes()


def test_check_reports_a_name_a_power_loss_took_and_leaves_republishing_to_repair(tmp_path: Path) -> None:
    """The open-time republish of lost names is not run by ``check``: it reports the store as it finds
    it, and only ``--repair`` changes it."""
    db = tmp_path / "h.db"
    store = memory.MemoryStore(db)
    try:
        with store.session(scope="s", flow="f") as session:
            session.learn({"text": "a name a power loss took", "tags": ["t"]})
            raise RuntimeError("the session fails, so its run is one the open-time check walks")
    except RuntimeError:
        pass
    store.close()
    learned = list((tmp_path / "flows-memory").rglob("compacted/*.json"))
    assert len(learned) == 1
    learned[0].unlink()  # the rename a power loss undid
    shutil.rmtree(tmp_path / "flows-cache", ignore_errors=True)  # and the open-time check's memo
    code, report = _check(db)
    assert code == 1
    assert [p["kind"] for p in report["problems"]] == ["record_unpublished"]  # type: ignore[index]
    assert not learned[0].exists()
    code, report = _check(db, "--repair")
    assert report["remaining"] == [] and learned[0].exists()
