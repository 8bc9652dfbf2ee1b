"""`flows forget --filter … --yes` and `flows erase --filter … --yes` stopped midway (Ctrl-C or
SIGKILL, at a failpoint): the interrupt says how far the command got and that the same command
finishes it; running it again does, and leaves the store clean."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.flows.helpers import flows, json_of

TEXTS = ("rain follows a falling barometer", "fog lifts by noon", "hail comes with cold fronts")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    db = tmp_path / "store" / "h.db"
    db.parent.mkdir()
    for text in TEXTS:
        assert flows(db, "learn", text, "--scope", "w", "--tag", "wx").returncode == 0
    assert flows(db, "learn", "keep me", "--scope", "w").returncode == 0
    return db


def _erase_all(db: Path, **env: str) -> object:
    return flows(db, "erase", "--tag", "wx", "--yes", env=env)


def _finished_and_clean(db: Path, command: tuple[str, ...]) -> None:
    again = flows(db, *command)
    assert again.returncode == 0, again.stderr
    left = json_of(flows(db, "recall", "--json"))
    assert [r["text"] for r in left] == ["keep me"]
    check = flows(db, "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_erase_by_filter_stopped_by_ctrl_c_says_how_far_it_got_and_rerunning_finishes(db: Path) -> None:
    command = ("erase", "--tag", "wx", "--yes")
    stopped = flows(db, *command, env={"FLOWS_FAILPOINTS": "memory.erase_after_record=sigint:nth2"})
    assert stopped.returncode == 130, stopped.stderr
    assert "Traceback" not in stopped.stderr and len(stopped.stderr.splitlines()) == 1, stopped.stderr
    assert "after erasing 1 of 3 memories, while erasing memory " in stopped.stderr
    assert "1 more were not begun: run the same command again to finish" in stopped.stderr
    assert "nothing was left half-written" not in stopped.stderr  # it was: a memory part erased
    as_json = flows(db, *command, "--json", env={"FLOWS_FAILPOINTS": "memory.erase_after_record=sigint:nth1"})
    assert as_json.returncode == 130 and as_json.stdout == "", as_json.stderr
    error = orjson.loads(as_json.stderr)
    assert (error["code"], error["erased"], error["total"]) == ("interrupted", 0, 2), error
    _finished_and_clean(db, command)


def test_an_erase_by_filter_killed_midway_is_finished_by_the_same_command(db: Path) -> None:
    command = ("erase", "--tag", "wx", "--yes")
    killed = flows(db, *command, env={"FLOWS_FAILPOINTS": "memory.erase_after_record=kill:nth2"})
    assert killed.returncode == -9, killed.stderr
    _finished_and_clean(db, command)


def test_a_forget_by_filter_stopped_by_ctrl_c_says_it_is_all_or_nothing_and_rerunning_finishes(
    db: Path,
) -> None:
    command = ("forget", "--tag", "wx", "--yes")
    stopped = flows(db, *command, env={"FLOWS_FAILPOINTS": "memory.after_append=sigint:once"})
    assert stopped.returncode == 130, stopped.stderr
    assert "Traceback" not in stopped.stderr and len(stopped.stderr.splitlines()) == 1, stopped.stderr
    assert "while forgetting 3 finding(s)" in stopped.stderr
    assert "either all of them were forgotten or none was" in stopped.stderr
    assert "run the same command again to finish it" in stopped.stderr
    _finished_and_clean(db, command)


def test_an_erase_of_one_memory_stopped_by_ctrl_c_says_it_may_be_part_done(db: Path) -> None:
    key = json_of(flows(db, "recall", "--tag", "wx", "--limit", "1", "--json"))[0]["key"]
    command = ("erase", key, "--yes")
    stopped = flows(db, *command, env={"FLOWS_FAILPOINTS": "memory.erase_after_record=sigint"})
    assert stopped.returncode == 130 and len(stopped.stderr.splitlines()) == 1, stopped.stderr
    assert f"while erasing memory {key} (1 version(s)): its erase may be part done" in stopped.stderr
    assert "nothing was left half-written" not in stopped.stderr
    again = flows(db, *command)
    assert again.returncode == 0, again.stderr
    assert flows(db, "check").returncode == 0
