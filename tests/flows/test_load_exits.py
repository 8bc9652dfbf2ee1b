"""A flow file that exits while it is imported has failed to load: ``flows run`` and ``flows resume``
answer ``flow_load_failed`` with exit status 1 and one diagnostic line, never 0 (which cron would
read as success), the file's own status, or a traceback; a failed root stays failed and resumable."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.adversarial.memory_support import error_code
from tests.flows.helpers import flows, write_flow

EXITS = {
    "exit-zero": "import sys\nsys.exit(0)\n",
    "exit-three": "import sys\nsys.exit(3)\n",
    "exit-text": "raise SystemExit('bye')\n",
    "exit-none": "import sys\nsys.exit()\n",
    "generator-exit": "raise GeneratorExit\n",
    "cancelled": "import asyncio\nraise asyncio.CancelledError()\n",
    "builtin-exit": "exit(0)\n",
}


def _runs(db: Path) -> list[dict[str, object]]:
    result = flows(db, "runs", "--json")
    assert result.returncode == 0, result.stderr
    runs = orjson.loads(result.stdout)
    assert isinstance(runs, list)
    return runs


@pytest.mark.parametrize("shape", sorted(EXITS))
def test_a_flow_file_that_exits_at_import_fails_to_load_and_begins_no_root(
    tmp_path: Path, shape: str
) -> None:
    db = tmp_path / "store" / "history.db"
    flows(db, "learn", "a finding so the store exists", "--scope", "s")
    flow = tmp_path / "x.py"
    flow.write_text(EXITS[shape])
    result = flows(db, "run", str(flow))
    assert result.returncode == 1
    assert error_code(result) == "flow_load_failed"
    assert str(flow) in result.stderr
    assert [r["flow"] for r in _runs(db)] == ["cli"]


def test_a_sys_exit_at_import_is_named_as_an_exit(tmp_path: Path) -> None:
    flow = tmp_path / "x.py"
    flow.write_text(EXITS["exit-zero"])
    result = flows(tmp_path / "store" / "history.db", "run", str(flow))
    assert f"{flow} exited while it was imported (sys.exit(0))" in result.stderr


def test_ctrl_c_while_a_flow_file_is_imported_is_an_interruption_not_a_success(tmp_path: Path) -> None:
    flow = tmp_path / "x.py"
    flow.write_text("raise KeyboardInterrupt\n")
    result = flows(tmp_path / "store" / "history.db", "run", str(flow))
    assert result.returncode == 130
    assert error_code(result) == "interrupted"


def test_resuming_a_failed_root_whose_file_now_exits_at_import_fails_and_leaves_it_resumable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store" / "history.db"
    flow = write_flow(tmp_path / "y.py", 'await f.memory.learn({"text": "kept"})\nraise ValueError("boom")')
    original = flow.read_text()
    assert flows(db, "run", str(flow)).returncode == 1
    (run,) = _runs(db)
    run_id = str(run["runId"])
    for exit_at_import in (EXITS["exit-zero"], EXITS["exit-three"], EXITS["generator-exit"]):
        flow.write_text(exit_at_import)
        result = flows(db, "resume", run_id, "--allow-changed")
        assert result.returncode == 1
        assert error_code(result) == "flow_load_failed"
        assert run_id in result.stderr
        (after,) = _runs(db)
        assert after["state"] == "failed"
    flow.write_text(original.replace('raise ValueError("boom")', "return 7"))
    resumed = flows(db, "resume", run_id, "--allow-changed")
    assert resumed.returncode == 0, resumed.stderr
    assert _runs(db)[0]["state"] == "done"


@pytest.mark.parametrize("kind", ["folder", "fifo", "missing", "loop"])
def test_a_flow_path_that_is_no_regular_file_says_what_it_is(tmp_path: Path, kind: str) -> None:
    import os

    db = tmp_path / "store" / "history.db"
    target = tmp_path / "flow.py"
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)  # never opened: a FIFO with no writer would block the read
    elif kind == "loop":  # a link to itself: Path.resolve raised RuntimeError, an internal_error
        target.symlink_to(target.name)
    result = flows(db, "run", str(target))
    assert result.returncode == 1 and error_code(result) == "flow_load_failed", result.stderr
    said = {
        "folder": "is a folder",
        "fifo": "is not a regular file",
        "missing": "no flow file at",
        "loop": "is a symbolic link that leads back to itself",
    }[kind]
    assert said in result.stderr and len(result.stderr.splitlines()) == 1
