"""A damaged store shows its coded error (code, message, the file and line) and never a traceback."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import journal
import memory
from flows.web import ServeConfig
from flows.web import _agent as agent_module
from memory.ledger import Ledger
from tests.web.conftest import client_for
from tests.web.stores import DemoStore


@pytest.fixture
def copies(demo: DemoStore, agent: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the demo store's folder and of the agent home, to damage."""
    store = tmp_path / "store"
    shutil.copytree(demo.db.parent, store)
    home = tmp_path / "agent"
    shutil.copytree(agent, home)
    return store, home


@pytest.fixture
def damaged(copies: tuple[Path, Path]) -> Iterator[TestClient]:
    store, home = copies
    with client_for(ServeConfig(db=str(store / "history.db"), sail_homes=(home,))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def assert_coded(client: TestClient, page: str, api: str, code: str, status: int, *needles: str) -> None:
    html = client.get(page)
    assert html.status_code == status
    assert f'<code class="code">{code}</code>' in html.text
    assert "Traceback" not in html.text and 'File "' not in html.text
    for needle in needles:
        assert needle in html.text
    body = client.get(api)
    assert body.status_code == status and body.json()["code"] == code
    for needle in needles:
        assert needle in body.text


def test_a_damaged_run_record_fails_the_runs_listing_naming_the_file(
    damaged: TestClient, copies: tuple[Path, Path], demo: DemoStore
) -> None:
    run_json = copies[0] / "flows-journal" / "runs" / demo.failed_run / "run.json"
    run_json.write_bytes(b'{"runId": "not this one"')
    assert_coded(damaged, "/runs", "/api/runs", "journal_corrupt", 500, str(run_json))


def test_a_damaged_stream_line_fails_the_runs_timeline_naming_the_line(
    damaged: TestClient, copies: tuple[Path, Path], demo: DemoStore
) -> None:
    log = copies[0] / "flows-journal" / "runs" / demo.done_run / "streams" / "memory-learn.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"fog", b"FOG")  # the checksum no longer matches
    log.write_bytes(b"\n".join(lines))
    page, api = f"/runs/{demo.done_run}", f"/api/runs/{demo.done_run}"
    assert_coded(damaged, page, api, "journal_corrupt", 500, str(log))
    assert damaged.get(api).json()["line"] == 2


def test_a_damaged_learned_file_fails_the_findings_naming_the_file(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    learned = next((copies[0] / "flows-memory").rglob("*.json"))
    learned.write_bytes(b"{ not json")
    assert_coded(damaged, "/findings", "/api/findings", "memory_unreachable", 500, str(learned))
    assert damaged.get("/api/findings", params={"q": "storm"}).json()["code"] == "memory_unreachable"


def test_a_history_db_that_is_not_a_database_is_a_coded_error(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    db = copies[0] / "history.db"
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    assert_coded(damaged, "/findings", "/api/findings", "memory_unreachable", 500, str(db))


def test_an_older_db_is_refused_and_left_exactly_as_it_was(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    db = copies[0] / "history.db"
    old = copies[0] / "old.db"
    sqlite3.connect(old).close()  # an empty DB: schema 0, which the memory layer would migrate
    os.replace(old, db)
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    assert_coded(damaged, "/findings", "/api/findings", "serve_db_outdated", 503, "flows sync")
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before
    assert memory.SCHEMA_VERSION >= 1


def test_a_damaged_ledger_line_fails_the_agent_page_naming_the_line(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    lines = ledger.read_bytes().split(b"\n")
    # the same length: a shorter file would also have lost acknowledged bytes at its end
    lines[2] = lines[2].replace(b'"outcome":"reverted"', b'"outcome":"maybe"   ')
    ledger.write_bytes(b"\n".join(lines))
    assert_coded(damaged, "/agents/0", "/api/agents/0/ledger", "journal_corrupt", 500, str(ledger))
    assert damaged.get("/api/agents/0/ledger").json()["line"] == 3


def test_a_torn_last_ledger_line_is_not_an_error_and_not_shown(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    with ledger.open("ab") as f:
        f.write(b'{"ts": 17672')  # an append in flight
    assert len(damaged.get("/api/agents/0/ledger").json()) == 6


@pytest.mark.parametrize("damage", ["garbled", "lost"])
def test_an_acknowledged_last_ledger_line_damaged_or_lost_fails_closed_as_sail_does(
    damaged: TestClient, copies: tuple[Path, Path], damage: str
) -> None:
    """The line log's watermark says the last line was acknowledged: its loss is damage, not a tear."""
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    lines = ledger.read_bytes().split(b"\n")  # six entries and the empty text after the last newline
    if damage == "garbled":
        lines[5] = b"x" * len(lines[5])  # not JSON: what a tear would leave, but below the watermark
    else:
        del lines[5]
    ledger.write_bytes(b"\n".join(lines))
    with pytest.raises(journal.JournalCorrupt):
        list(Ledger(copies[1] / ".sail").iter_reverse())  # what `sail ledger` reads
    for api in ("/api/agents/0/ledger", "/api/agents/0/balances"):
        response = damaged.get(api)
        assert response.status_code == 500 and response.json()["code"] == "journal_corrupt", api
        assert response.json()["path"] == str(ledger) and response.json()["line"] == 6


def test_a_torn_whole_line_past_the_watermark_is_not_an_error_and_not_shown(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    with ledger.open("ab") as f:
        f.write(b'{"ts": 17672\n')  # a torn append with its newline, never acknowledged
    assert len(damaged.get("/api/agents/0/ledger").json()) == 6
    assert damaged.get("/agents/0").status_code == 200


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_a_ledger_that_is_not_a_regular_file_is_a_coded_error_and_never_blocks(
    damaged: TestClient, copies: tuple[Path, Path], kind: str
) -> None:
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    real = ledger.with_name("elsewhere.jsonl")
    os.replace(ledger, real)
    if kind == "link":
        ledger.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(ledger)
    else:
        ledger.mkdir()
    assert_coded(damaged, "/agents/0", "/api/agents/0/ledger", "journal_corrupt", 500, str(ledger))


@pytest.mark.parametrize("kind", ["missing", "fifo", "garbage"])
def test_an_unreadable_config_leaves_the_cadence_unknown_not_the_page_broken(
    damaged: TestClient, copies: tuple[Path, Path], kind: str
) -> None:
    config = copies[1] / ".sail" / "config.toml"
    config.unlink()
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "garbage":
        config.write_text("interval_s = [nope")
    status = damaged.get("/api/agents/0/status").json()
    assert status["intervalS"] is None and str(config) in status["intervalProblem"]
    assert damaged.get("/agents/0").status_code == 200


def test_an_unexpected_failure_is_serve_internal_without_its_traceback(
    damaged: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self: object, *args: object) -> None:
        raise ZeroDivisionError("a bug deep inside")

    monkeypatch.setattr(agent_module.Agent, "recent_skips", boom)  # the page's skips
    monkeypatch.setattr(agent_module.Agent, "skips", boom)  # the why API's
    page = damaged.get("/agents/0")
    assert page.status_code == 500 and "serve_internal" in page.text
    assert "a bug deep inside" not in page.text and "Traceback" not in page.text
    assert damaged.get("/api/agents/0/why").json()["code"] == "serve_internal"


def test_what_the_runs_folder_holds_is_judged_as_the_journal_judges_it(
    damaged: TestClient, copies: tuple[Path, Path], demo: DemoStore
) -> None:
    runs = copies[0] / "flows-journal" / "runs"
    stray = runs / "not a run!"  # a name no run has, holding a run record
    shutil.copytree(runs / demo.done_run, stray)
    assert_coded(damaged, "/runs", "/api/runs", "journal_corrupt", 500, "not a run", "move it out")
    shutil.rmtree(stray)
    assert damaged.get("/api/runs").status_code == 200
    # records without a run record: the journal will not read them as no run (a forget among them)
    headless = runs / demo.done_run
    (headless / "run.json").rename(copies[0] / "run.json.aside")
    assert_coded(damaged, "/runs", "/api/runs", "journal_corrupt", 500, "no run.json")
    with pytest.raises(journal.JournalCorrupt, match=r"no run\.json"):
        journal.FileJournal(copies[0] / "flows-journal").runs()


def test_records_of_another_shape_are_shown_as_they_are_never_failing_the_page(tmp_path: Path) -> None:
    # the journal holds any JSON object: a run's error without a code, a message that is a number,
    # a step's error that is text, an event without its epoch, a learn whose key is a number. Each
    # failed the runs listing (every page holding the run) or the run's page with serve_internal,
    # where `flows runs` and `flows show` showed them. A finding whose only commit is not of a commit's
    # shape (tags that are a number) is unknown to a history, which reads nothing from such a record
    # (`flows check` reports it): its page is a 404, never a failure
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    backend = journal.open_journal(db.parent / "flows-journal")
    try:
        info, lease = backend.begin("odd", "s", {})
        backend.append(lease, "steps", {"step": "s", "position": 1, "ok": False, "error": "it broke"})
        backend.append(lease, "run", {"event": "failed", "error": {"message": 5}})
        backend.append(lease, "run", {"event": "resumed"})
        backend.append(lease, "run", {"event": "registration", "reason": ["r"]})
        backend.append(lease, memory.STREAM, {"id": 7, "finding": {"text": 8, "tags": "t"}, "supersedes": 9})
        backend.append(lease, memory.RETIRE_STREAM, {"id": 10, "by": 11})
        odd = "0" * 32  # a finding learned with tags that are a number, and forgotten: its page shows them
        learned = {"text": "x", "tags": 5, "source": "s"}
        backend.append(
            lease, memory.STREAM, {"id": odd, "scope": "s", "flow": "odd", "learnedMs": 1, "finding": learned}
        )
        backend.append(lease, memory.RETIRE_STREAM, {"id": odd, "reason": "r", "forgottenMs": 2})
        backend.finish(lease, journal.RunState.FAILED, {"message": 12, "traceback": ["not text"]})
    finally:
        backend.close()
    with client_for(ServeConfig(db=str(db))) as client:
        runs, page = client.get("/runs"), client.get(f"/runs/{info.run_id}")
        api = client.get(f"/api/runs/{info.run_id}")
        forgotten = client.get(f"/findings/{odd}")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert runs.status_code == 200 and info.run_id in runs.text
    assert '<code class="code"><bdi></bdi></code> <bdi>12</bdi>' in runs.text  # no code; the message
    assert page.status_code == 200, page.text[-2000:]
    assert "<bdi>it broke</bdi>" in page.text and "traceback" not in page.text
    assert len(api.json()["timeline"]) == 8
    assert forgotten.status_code == 404 and "Traceback" not in forgotten.text


def test_a_damaged_ledger_line_fails_the_why_api_as_sail_why_fails(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    """The why API filtered the raw lines for skips and decoded only those: a damaged line of
    another kind between two skips was passed over, and the API answered 200 where `sail why` and the
    agent's page fail closed."""
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    lines = ledger.read_bytes().split(b"\n")
    acted = next(i for i, line in enumerate(lines[:-2]) if b'"kind":"acted"' in line)
    lines[acted] = lines[acted].replace(b'"kind":"acted"', b'"kind":"actex"')
    ledger.write_bytes(b"\n".join(lines))
    body = damaged.get("/api/agents/0/why")
    assert body.status_code == 500 and body.json()["code"] == "journal_corrupt"
    assert body.json()["line"] == acted + 1


def test_a_skip_written_with_other_spacing_is_in_the_why_api_as_in_sail_why(
    damaged: TestClient, copies: tuple[Path, Path]
) -> None:
    ledger = copies[1] / ".sail" / "memory" / "ledger.jsonl"
    body = ledger.read_bytes()
    spaced = b'{"ts": 4000000000, "block": 2, "chainId": 1, "kind": "skipped", "reason": "spaced skip"}\n'
    ledger.write_bytes(body + spaced)
    reasons = [s["reason"] for s in damaged.get("/api/agents/0/why").json()]
    assert reasons[0] == "spaced skip"
    assert reasons == [s.reason for s in agent_module.recent_skips(Ledger(copies[1] / ".sail"), 10)]
