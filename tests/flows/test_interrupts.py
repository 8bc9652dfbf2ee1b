"""Ctrl-C at any instant of a ``flows`` command: one diagnostic line (or JSON object), status 130,
never a traceback. Each SIGINT is sent by the process to itself at a known point (a stub module on
``PYTHONPATH`` that the import chain loads, a failpoint), so nothing depends on timing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from tests._helpers.failpoints import run_armed
from tests._helpers.interrupts import one_line_130, run_cli, sigint_stubs
from tests.flows.helpers import flows


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "store" / "h.db"
    db.parent.mkdir()
    assert flows(db, "learn", "rain follows a falling barometer", "--scope", "w").returncode == 0
    return db


def _run(db: Path, *args: str, stubs: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli("flows", *args, "--db", str(db), stubs=stubs, **env)


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_the_command_line_is_imported_is_one_line_and_130(
    store: Path, tmp_path: Path, as_json: bool
) -> None:
    """The SIGINT lands in the import of ``flows._cli``'s modules (orjson, which ``memory.cli``
    imports, is a stub that interrupts its own process): before, a traceback and status 1 or -2."""
    stubs = sigint_stubs(tmp_path / "stubs", "orjson")
    result = _run(store, "recall", *(["--json"] if as_json else []), stubs=stubs)
    shown = one_line_130(result, "flows", as_json=as_json)
    assert result.stdout == ""
    if as_json:
        assert shown["code"] == "interrupted" and shown["runId"] is None, shown
    else:
        assert "before the command began; nothing was read or written" in result.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_as_the_command_returns_is_one_line_and_130(store: Path, as_json: bool) -> None:
    result = _run(
        store, "recall", *(["--json"] if as_json else []), FLOWS_FAILPOINTS="flows.cli_returned=sigint"
    )
    shown = one_line_130(result, "flows", as_json=as_json)
    if as_json:
        assert shown["code"] == "interrupted", shown
        assert orjson.loads(result.stdout)[0]["text"] == "rain follows a falling barometer"  # printed whole
    else:
        assert "rain follows" in result.stdout  # the output was printed before
        assert "as the command ended" in result.stderr


def test_ctrl_c_while_why_loads_its_embedder_is_one_line_and_130(store: Path, tmp_path: Path) -> None:
    """The command's own import (an embedder's module, like the semantic model's) interrupted."""
    stubs = sigint_stubs(tmp_path / "stubs", "slow_embedder")
    result = _run(store, "why", "rain", "--mode", "hybrid", "--embedder", "slow_embedder:make", stubs=stubs)
    one_line_130(result, "flows", as_json=False)


def test_a_sigint_ignored_from_the_start_stays_ignored(store: Path) -> None:
    """``nohup flows …``: the guard does not take over a SIGINT the process was started ignoring."""
    code = (
        "import signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from flows._entry import main\nsys.exit(main(['recall', '--db', sys.argv[1]]))"
    )
    result = run_armed("flows.cli_returned=sigint", code, str(store), timeout=60)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


_DIES_AFTER_LEARNING = """\
import os
import flows


@flows.flow(scope="int")
async def body(f):
    steps = [f.memory.learn({"text": f"fact number {i}"}) for i in range(300)]
    for s in steps:
        await s
    if os.environ.get("DIE"):
        os.kill(os.getpid(), 9)
    return len(steps)
"""


def test_one_ctrl_c_while_a_resume_republishes_says_nothing_was_in_flight(tmp_path: Path) -> None:
    """A Ctrl-C before the body began (the resume still republishing the run's committed learns)
    said the second Ctrl-C's words, "without waiting for learn(s) and step(s) still in flight",
    though nothing was in flight and nothing was let go."""
    import os
    import signal
    import sys
    import time

    from tests.conftest import ROOT

    db = tmp_path / "m.db"
    src = tmp_path / "flow.py"
    src.write_text(_DIES_AFTER_LEARNING)
    flows(db, "run", str(src), env={"DIE": "1"})
    (row,) = orjson.loads(flows(db, "runs", "--json").stdout)
    for folder, _, names in os.walk(tmp_path / "flows-memory"):  # lost: the resume republishes them
        for name in names:
            if name.endswith(".json"):
                os.unlink(os.path.join(folder, name))
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWS_EMBEDDER", "FLOWS_JOURNAL")}
    env |= {"PYTHONPATH": str(ROOT), "FLOWS_FAILPOINTS": "staging.before_rename=sleep20"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows", "-v", "resume", row["runId"], "--db", str(db)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)  # the resume waits in its first republish's rename for 20 s
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "driving flow" not in err  # the body never began
    last = err.strip().splitlines()[-1]
    assert "before its body began, with nothing in flight" in last, last
    assert "without waiting" not in err
