"""Bad input and a foreign store: lone surrogates in a finding are ``memory_finding_invalid`` (nothing
staged or journaled); filters no stored finding can equal (invalid UTF-8 on the command line) match
nothing; a store this user may not list answers with ``memory_unreachable`` (reads) or
``memory_unwritable`` (sync), never ``flow_failed`` with a ``PermissionError``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import memory
import staging
from tests.adversarial.memory_support import error_code, flows, populate, snapshot, without_dac_override
from tests.conftest import ROOT

LONE = "\ud800"


@pytest.mark.parametrize(
    "finding",
    [
        {"text": f"half a pair {LONE}"},
        {"text": "ok", "source": f"src{LONE}"},
        {"text": "ok", "tags": ["fine", f"t{LONE}"]},
        {"text": "\udcff"},  # what surrogateescape makes of an undecodable byte
    ],
)
def test_a_lone_surrogate_in_a_finding_is_invalid_and_nothing_is_written(
    tmp_path: Path, finding: dict[str, object]
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        before = snapshot(tmp_path)
        with pytest.raises(memory.FindingInvalid, match="surrogate"):
            store.learn(finding, memory.RootRun(jr, lease, "adv", "adv"))
        assert snapshot(tmp_path) == before
        assert list(jr.read(lease.run_id, memory.STREAM)) == []


def test_a_flow_learning_a_lone_surrogate_fails_with_the_invalid_finding_code(tmp_path: Path) -> None:
    flow = tmp_path / "surrogate.py"
    flow.write_text(
        "import flows\n\n\n@flows.flow()\nasync def body(f):\n"
        '    await f.memory.learn({"text": "bad \\ud800 text"})\n'
    )
    result = flows(tmp_path / "store" / "history.db", "run", str(flow))
    assert result.returncode == 1
    assert error_code(result) == "memory_finding_invalid"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("scope", "journal_name_invalid"),
        ("flow", "journal_name_invalid"),
        ("source", "memory_argument_invalid"),
    ],
)
def test_a_sessions_scope_flow_or_source_with_a_lone_surrogate_is_refused_naming_it(
    tmp_path: Path, name: str, code: str
) -> None:
    db = tmp_path / "store" / "history.db"
    names = {"scope": "desk", name: "caf\udce9"}  # no source: a session's flow is its findings' source
    with memory.MemoryStore(db) as store:
        with pytest.raises(staging.CodedError) as caught, store.session(**names) as s:
            s.learn({"text": "x"})
        assert caught.value.code == code
        assert name in str(caught.value) and "finding" not in str(caught.value)
        assert store.recall(scope=None) == []


def test_a_cli_scope_of_undecodable_bytes_a_lone_surrogate_is_journal_name_invalid(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    result = _flows_bytes(db, b"learn", b"x", b"--scope", b"caf\xe9")
    assert result.returncode == 2, result.stderr
    assert b"error[journal_name_invalid]" in result.stderr and b"scope" in result.stderr


def _flows_bytes(db: Path, *args: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWS_JOURNAL", None)
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"flows", *args, b"--db", bytes(db)],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        (b"recall", b"--tag", b"\xff"),
        (b"recall", b"--source", b"bad\xfe"),
        (b"recall", b"--scope", b"\xed\xa0\x80"),
        (b"why", b"why \xff adv", b"--scope", b"\xff"),
    ],
)
def test_a_filter_no_stored_finding_can_equal_matches_nothing(
    tmp_path: Path, args: tuple[bytes, ...]
) -> None:
    s = populate(tmp_path / "store" / "history.db", ["adv one"])
    assert flows(s.db, "sync").returncode == 0
    populate(s.db, ["adv two"])  # rows and files both
    result = _flows_bytes(s.db, *args, b"--json")
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == []


def test_a_why_whose_words_are_partly_undecodable_still_answers_on_the_rest(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["adv one"])
    result = _flows_bytes(s.db, b"why", b"adv \xff", b"--json")
    assert result.returncode == 0, result.stderr
    assert [a["text"] for a in orjson.loads(result.stdout)] == ["adv one"]


@pytest.mark.parametrize("where", ["flows-memory", "scope folder", "compacted"])
def test_a_store_this_user_may_not_list_is_unreachable_to_reads_and_unwritable_to_sync(
    tmp_path: Path, where: str
) -> None:
    s = populate(tmp_path / "store" / "history.db", ["adv one"])
    folder = {
        "flows-memory": s.db.parent / "flows-memory",
        "scope folder": s.folder.parent.parent,
        "compacted": s.folder,
    }[where]
    os.chmod(folder, 0)
    try:
        for args, code in (
            (("recall",), "memory_unreachable"),
            (("why", "adv"), "memory_unreachable"),
            (("check",), "memory_unreachable"),
            (("sync", "--no-materialize"), "memory_unwritable"),
        ):
            result = flows(s.db, *args, preexec=without_dac_override)
            assert result.returncode == 1, (args, result.stdout)
            assert error_code(result) == code, (args, result.stderr)
            assert "Permission denied" in result.stderr
    finally:
        os.chmod(folder, 0o700)


@pytest.mark.parametrize("where", ["flows-memory", "compacted"])
def test_a_learn_into_a_store_this_user_may_not_write_is_unwritable(tmp_path: Path, where: str) -> None:
    s = populate(tmp_path / "store" / "history.db", ["adv one"])
    flow = tmp_path / "learn.py"
    flow.write_text(
        'import flows\n\n\n@flows.flow(scope="adv")\nasync def body(f):\n'
        '    await f.memory.learn({"text": "adv two"})\n'
    )
    folder = s.db.parent / "flows-memory" if where == "flows-memory" else s.folder
    os.chmod(folder, 0)
    try:
        result = flows(s.db, "run", str(flow), preexec=without_dac_override)
    finally:
        os.chmod(folder, 0o700)
    assert result.returncode == 1
    assert error_code(result) == "memory_unwritable"
    assert "Permission denied" in result.stderr


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("n" * 300 + ".db", "longer than 247"),
        ("n" * 250, "longer than 247"),
        ("d" * 256 + "/history.db", "folder"),
        ("a\0b.db", "NUL"),
    ],
)
def test_a_db_path_no_file_could_have_is_refused_naming_it(tmp_path: Path, name: str, says: str) -> None:
    db = tmp_path / name
    with pytest.raises(memory.ArgumentInvalid, match=says) as caught:
        memory.MemoryStore(db)
    assert caught.value.code == "memory_argument_invalid"
    if "\0" in name:
        return  # argv cannot carry a NUL
    for args in (("recall",), ("learn", "x", "--scope", "s"), ("check",), ("runs",), ("sync",)):
        result = flows(db, *args, "--json")
        assert result.returncode == 2, (args, result.stderr)
        assert error_code(result) == "usage" and "--db" in result.stderr and says in result.stderr, args
    assert os.listdir(tmp_path) == []


def test_an_empty_db_or_journal_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    (tmp_path / "cwd").mkdir()
    with pytest.raises(memory.ArgumentInvalid, match="empty"):
        memory.MemoryStore("")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for where in (("--db", ""), ("--db", str(tmp_path / "store.db"), "--journal", "")):
        for args in (("learn", "x", "--scope", "s"), ("recall",)):
            result = subprocess.run(
                [sys.executable, "-m", "flows", *args, *where, "--json"],
                capture_output=True, text=True, env=env, cwd=tmp_path / "cwd", timeout=60, check=False,
            )
            assert result.returncode == 2, (where, args, result.stderr)
            assert error_code(result) == "usage" and "empty" in result.stderr
    assert os.listdir(tmp_path) == ["cwd"] and os.listdir(tmp_path / "cwd") == []


@pytest.mark.parametrize("name", ["\ud800", "a\udbffb", "\udfff.db"])
def test_a_history_db_path_with_a_lone_surrogate_no_byte_makes_is_argument_invalid(
    tmp_path: Path, name: str
) -> None:
    # surrogateescape makes U+DC80..U+DCFF of undecodable bytes; any other lone surrogate, passed by
    # a caller, failed os.fsencode with a bare UnicodeEncodeError before the check that codes it
    with pytest.raises(memory.ArgumentInvalid, match="not UTF-8") as caught:
        memory.MemoryStore(str(tmp_path / name))
    assert caught.value.code == "memory_argument_invalid"
    with pytest.raises(memory.ArgumentInvalid, match="not UTF-8"):
        memory.resolve_db(str(tmp_path / name))
    assert list(tmp_path.iterdir()) == []
