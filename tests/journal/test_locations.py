"""A journal location is a folder, a ``file:`` URL of a local folder, or a PostgreSQL DSN that names
its database; anything else (another scheme, a libpq ``key=value`` string) is
``journal_location_invalid`` before anything is created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import journal
from journal import FileJournal, JournalLocationInvalid
from tests.conftest import ROOT


def _flows(cwd: Path, location: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows", *args, "--db", str(cwd / "history.db")],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FLOWS_JOURNAL": location},
        timeout=60,
        check=False,
    )


def test_a_file_url_names_its_folder_and_makes_no_folder_named_file(tmp_path: Path) -> None:
    target = tmp_path / "a journal"
    result = _flows(tmp_path, f"file://{target.as_posix().replace(' ', '%20')}", "learn", "x", "--scope", "s")
    assert result.returncode == 0, result.stderr
    assert (target / "runs").is_dir()
    assert not (tmp_path / "file:").exists()
    assert isinstance(journal.open_journal(f"file://localhost{target}"), FileJournal)


@pytest.mark.parametrize(
    ("location", "says"),
    [
        ("file://elsewhere/x", "not a local file: URL"),
        ("file:relative/x", "not a local file: URL"),
        ("file:///x?y=1", "not a local file: URL"),
        ("http://example.com/journal", "is a http: URL"),
        ("s3://bucket/journal", "is a s3: URL"),
        ("postgresql://", "names no database"),
        ("postgresql://postgres@127.0.0.1:5432/", "names no database"),
        ("postgres://postgres@127.0.0.1:5432?sslmode=disable", "names no database"),
    ],
)
def test_a_location_no_backend_reads_is_refused_before_anything_is_made(
    tmp_path: Path, location: str, says: str
) -> None:
    with pytest.raises(JournalLocationInvalid, match=says):
        journal.open_journal(location)
    result = _flows(tmp_path, location, "learn", "x", "--scope", "s")
    assert result.returncode == 1 and "journal_location_invalid" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something was created"


@pytest.mark.parametrize(
    "location",
    [
        "host=127.0.0.1 port=5432 dbname=test password=ZQXSECRET",
        "  dbname=test user=postgres password='ZQXSECRET'",
        "PASSWORD=ZQXSECRET host=db",
    ],
)
def test_a_key_value_connection_string_is_refused_never_a_folder_and_its_password_never_shown(
    tmp_path: Path, location: str
) -> None:
    # As a folder it would write the password into a folder's name, and every message naming the
    # journal would show it.
    with pytest.raises(JournalLocationInvalid, match="postgresql://") as caught:
        journal.open_journal(location)
    assert "ZQXSECRET" not in str(caught.value)
    for args in (["learn", "x", "--scope", "s"], ["recall"]):
        result = _flows(tmp_path, location, *args)
        assert result.returncode == 1 and "journal_location_invalid" in result.stderr, result.stderr
        assert "ZQXSECRET" not in result.stderr + result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something was created"
    assert isinstance(journal.open_journal(str(tmp_path / "host=x")), FileJournal)  # a path is a path


@pytest.mark.parametrize(
    "location", ["j" * 100_000, "postgresql://u:ZQXSECRET@h/" + "d" * 100_000, "é" * 2_100]
)
def test_a_location_longer_than_any_path_is_refused_in_a_short_message(tmp_path: Path, location: str) -> None:
    with pytest.raises(JournalLocationInvalid, match="over the 4,096") as caught:
        journal.open_journal(location)
    assert len(str(caught.value)) < 300 and "ZQXSECRET" not in str(caught.value)
    result = _flows(tmp_path, location, "learn", "x", "--scope", "s")
    assert result.returncode == 1 and "journal_location_invalid" in result.stderr
    assert len(result.stderr) < 400, result.stderr[:400]
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something was created"


def test_an_empty_location_is_refused_not_taken_for_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(JournalLocationInvalid, match="empty"):
        journal.open_journal("")
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something was created"


def test_a_folder_whose_name_holds_a_colon_is_still_a_folder(tmp_path: Path) -> None:
    assert isinstance(journal.open_journal(str(tmp_path / "notes:2026")), FileJournal)
    assert isinstance(journal.open_journal("relative:name"), FileJournal)


def test_hosts_share_tells_a_dsn_from_a_folder_without_opening_either(tmp_path: Path) -> None:
    """``hosts_share`` answers as ``open_journal`` would choose, making nothing on disk, and refuses
    a folder's location ``open_journal`` refuses, with the same code."""
    assert journal.hosts_share("postgresql://u@db.example/j") is True
    assert journal.hosts_share("postgres://u@db.example/j") is True
    folder = tmp_path / "j"
    assert journal.hosts_share(str(folder)) is False
    assert journal.hosts_share(f"file://{folder}") is False
    assert not folder.exists()
    for bad in ("http://example.com/j", "host=db dbname=j", "a\x00b", "", "x" * 5000):
        with pytest.raises(JournalLocationInvalid) as caught:
            journal.hosts_share(bad)
        assert caught.value.code == "journal_location_invalid"
        with pytest.raises(JournalLocationInvalid):
            journal.open_journal(bad)
