"""Ctrl-C at any instant of a ``flows`` command: one diagnostic line (or JSON object), status 130,
never a traceback. Each SIGINT is sent by the process to itself at a known point (a stub module on
``PYTHONPATH`` that the import chain loads, a failpoint), so nothing depends on timing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import ROOT
from tests.flows.helpers import flows

SIGINT_ON_IMPORT = "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(30)\n"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "store" / "h.db"
    db.parent.mkdir()
    assert flows(db, "learn", "rain follows a falling barometer", "--scope", "w").returncode == 0
    return db


def _run(db: Path, *args: str, stubs: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([*([str(stubs)] if stubs else []), str(ROOT)])
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWS_", "_ARGCOMPLETE"))}
    return subprocess.run(
        [sys.executable, "-m", "flows", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        env={**full, "PYTHONPATH": path, **env},
        timeout=60,
        check=False,
    )


def _one_line(result: subprocess.CompletedProcess[str], *, as_json: bool) -> dict[str, object]:
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    if as_json:
        shown: dict[str, object] = orjson.loads(lines[0])
        return shown
    assert lines[0].startswith("flows: error[interrupted]: interrupted (Ctrl-C)"), lines
    return {}


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_the_command_line_is_imported_is_one_line_and_130(
    store: Path, tmp_path: Path, as_json: bool
) -> None:
    """The SIGINT lands in the import of ``flows._cli``'s modules (orjson, which ``memory.cli``
    imports, is a stub that interrupts its own process): before, a traceback and status 1 or -2."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "orjson.py").write_text(SIGINT_ON_IMPORT)
    result = _run(store, "recall", *(["--json"] if as_json else []), stubs=stubs)
    shown = _one_line(result, as_json=as_json)
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
    shown = _one_line(result, as_json=as_json)
    if as_json:
        assert shown["code"] == "interrupted", shown
        assert orjson.loads(result.stdout)[0]["text"] == "rain follows a falling barometer"  # printed whole
    else:
        assert "rain follows" in result.stdout  # the output was printed before
        assert "as the command ended" in result.stderr


def test_ctrl_c_while_why_loads_its_embedder_is_one_line_and_130(store: Path, tmp_path: Path) -> None:
    """The command's own import (an embedder's module, like the semantic model's) interrupted."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "slow_embedder.py").write_text(SIGINT_ON_IMPORT)
    result = _run(store, "why", "rain", "--mode", "hybrid", "--embedder", "slow_embedder:make", stubs=stubs)
    _one_line(result, as_json=False)


def test_a_sigint_ignored_from_the_start_stays_ignored(store: Path) -> None:
    """``nohup flows …``: the guard does not take over a SIGINT the process was started ignoring."""
    code = (
        "import signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from flows._entry import main\nsys.exit(main(['recall', '--db', sys.argv[1]]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWS_FAILPOINTS": "flows.cli_returned=sigint"}
    result = subprocess.run(
        [sys.executable, "-c", code, str(store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
