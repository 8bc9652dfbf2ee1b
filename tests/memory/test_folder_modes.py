"""The store's folders take a mode derived from the DB's: its bits plus the search bit wherever a
read bit is set, so whoever may read the learned files may also list and enter their folders."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.adversarial.memory_support import flows


@pytest.mark.parametrize(
    ("db_mode", "file_mode", "folder_mode"),
    [(0o600, 0o600, 0o700), (0o640, 0o640, 0o750), (0o660, 0o660, 0o770), (0o664, 0o664, 0o775)],
)
def test_learned_folders_take_the_dbs_mode_with_search_bits_where_it_has_read_bits(
    tmp_path: Path, db_mode: int, file_mode: int, folder_mode: int
) -> None:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    db.touch()
    os.chmod(db, db_mode)
    result = flows(db, "--json", "learn", "a finding the DB's group may read", "--scope", "s")
    assert result.returncode == 0, result.stderr
    # an update holds the scope's turn, which names its holder in a file of the turn folder
    memory_id = json.loads(result.stdout)["memoryId"]
    result = flows(db, "update", memory_id, "a new version the DB's group may read")
    assert result.returncode == 0, result.stderr
    root = tmp_path / "store" / "flows-memory"
    modes = {
        str(p.relative_to(root)): (stat.S_ISDIR(p.stat().st_mode), stat.S_IMODE(p.stat().st_mode))
        for p in [root, *root.rglob("*")]
    }
    assert {m for is_dir, m in modes.values() if is_dir} == {folder_mode}
    assert {m for is_dir, m in modes.values() if not is_dir} == {file_mode}
    assert len(modes) >= 5


def _umask_022() -> None:
    os.umask(0o022)


def test_a_store_made_under_a_common_umask_is_private_to_its_owner(tmp_path: Path) -> None:
    # SQLite makes a DB 0644 less the umask, readable by every account, and the learned files take
    # the DB's mode: a new store's DB is made 0600, so neither it nor what is learned after is shared
    # until its owner chmods the DB.
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    for args in (["learn", "first", "--scope", "s"], ["sync"], ["learn", "second", "--scope", "s"]):
        result = flows(db, *args, preexec=_umask_022)
        assert result.returncode == 0, result.stderr
    made = [p for p in db.parent.rglob("*") if p.is_file()]
    assert db in made and len(made) > 5
    shared = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in made if p.stat().st_mode & 0o077}
    assert shared == {}
