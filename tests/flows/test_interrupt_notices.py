"""What ``flows run`` says while it waits on something that may take long: an interrupted run's
learns still in flight (at once on the first Ctrl-C, and what a second one does), and a flow file
whose top-level code does not finish (after a few seconds, and one Ctrl-C stops it).

Each test runs the real command in a fresh process and sends it a real SIGINT: from the flow body to
its own process at a known point, or from here once the line waited for has appeared. Nothing
asserts how long anything took."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from flows._steps import Step, settle
from tests._helpers.interrupts import cli_env, finish, read_until
from tests.flows.helpers import flows, write_flow

SLOW_LEARNS = "memory.before_stage=sleep1000"  # each learn waits a second before it stages a byte


def _popen(db: Path, *args: str, pass_fds: tuple[int, ...] = (), **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "flows", *args, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(TZ="UTC", **env),
        pass_fds=pass_fds,
    )


def _runs(db: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = orjson.loads(flows(db, "runs", "--json").stdout)
    return found


def _learned(db: Path) -> list[str]:
    return [f["text"] for f in orjson.loads(flows(db, "recall", "--limit", "100000", "--json").stdout)]


def _learning_flow(tmp_path: Path, count: int, *, interrupt_itself: bool) -> Path:
    body = f'steps = [f.memory.learn({{"text": f"finding {{i}}"}}) for i in range({count})]\n'
    if interrupt_itself:  # a Ctrl-C with every learn just begun, each still a second from its stage
        body += "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n"
    else:
        body += 'print("learning", file=__import__("sys").stderr, flush=True)\n'
    return write_flow(tmp_path / "learns.py", body + "await asyncio.gather(*steps)")


def test_a_ctrl_c_with_learns_in_flight_says_at_once_how_many_it_finishes_and_what_a_second_does(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    flow = _learning_flow(tmp_path, 24, interrupt_itself=True)
    with _popen(db, "run", str(flow), FLOWS_FAILPOINTS=SLOW_LEARNS) as proc:
        status, lines, out = finish(proc)
    assert (status, out) == (130, b""), lines
    (run,) = _runs(db)
    run_id = run["runId"]
    first, *between, last = lines
    assert first.startswith("flows: interrupted: finishing the "), lines
    in_flight = int(first.removeprefix("flows: interrupted: finishing the ").split(" ", 1)[0])
    assert 0 < in_flight <= 24, first
    assert first.endswith(
        f" learn(s) and step(s) of root run {run_id} already in flight (each is committed to the journal "
        "whole or not at all), then the run is marked interrupted; Ctrl-C again to stop at once: what "
        f"was committed stays, and `flows resume {run_id}` does the rest"
    ), first
    for line in between:  # how many are left, every few seconds while it waits
        assert line.startswith(f"flows: root run {run_id}: still finishing "), lines
    assert last.startswith("flows: error[flow_interrupted]: the run was interrupted (Ctrl-C) once its "), last
    assert run["state"] == "interrupted"
    assert sorted(_learned(db)) == sorted(f"finding {i}" for i in range(24))  # each one it waited for


def test_a_second_ctrl_c_stops_waiting_the_run_reads_interrupted_and_resume_learns_the_rest(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    flow = _learning_flow(tmp_path, 200, interrupt_itself=False)  # 25 s of learns on 8 threads
    with _popen(db, "run", str(flow), FLOWS_FAILPOINTS=SLOW_LEARNS) as proc:
        seen = read_until(proc, b"learning\n")
        proc.send_signal(signal.SIGINT)
        seen = read_until(proc, b"Ctrl-C again to stop at once", seen)
        proc.send_signal(signal.SIGINT)
        status, lines, out = finish(proc, seen)
    assert (status, out) == (130, b""), lines
    (run,) = _runs(db)
    assert run["state"] == "interrupted"
    stopped = "flows: error[flow_interrupted]: the run was interrupted (Ctrl-C) without waiting for "
    assert lines[-1].startswith(stopped), lines
    assert len(_learned(db)) < 200  # some were never begun
    assert flows(db, "check").returncode == 0  # what it committed is whole: nothing to repair
    resumed = flows(db, "resume", run["runId"])
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(_learned(db)) == sorted(f"finding {i}" for i in range(200))  # each once, none lost


HANGS = "import os\nos.read(int(os.environ['HANG_FD']), 1)  # blocks: nothing is ever written\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_flow_file_that_hangs_at_import_is_named_and_one_ctrl_c_stops_it(
    tmp_path: Path, as_json: bool
) -> None:
    db = tmp_path / "h.db"
    flow = tmp_path / "hangs.py"
    flow.write_text(HANGS + write_flow(tmp_path / "body.py", "return 1").read_text())
    read_end, write_end = os.pipe()
    json_flag = ["--json"] if as_json else []
    with _popen(db, "run", str(flow), *json_flag, pass_fds=(read_end,), HANG_FD=str(read_end)) as proc:
        os.close(read_end)
        try:
            seen = read_until(proc, b"Ctrl-C stops it\n")
            proc.send_signal(signal.SIGINT)
            status, lines, out = finish(proc, seen)
        finally:
            os.close(write_end)  # whatever happened, the file's read ends and so does the process
    assert (status, out) == (130, b""), lines
    notice, stopped = lines
    assert notice == (
        f"flows: the flow file {flow} is still being imported after 5 s (its top-level code has not "
        "finished); Ctrl-C stops it"
    )
    if as_json:
        assert orjson.loads(stopped)["code"] == "interrupted", stopped
    else:
        assert stopped.startswith("flows: error[interrupted]: interrupted (Ctrl-C)"), stopped
    assert _runs(db) == []  # nothing was begun


def test_settle_tells_how_many_are_left_at_once_then_while_it_waits() -> None:
    told: list[int] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gates = [loop.create_future() for _ in range(3)]
        steps = [Step(f"s{i}", loop.create_task(_gated(g))) for i, g in enumerate(gates)]
        waiter = loop.create_task(settle(steps, waiting=told.append, every_s=0.01))
        while len(told) < 2:  # told at once, then again while none has finished
            await asyncio.sleep(0)
        gates[0].set_result(None)
        while told[-1] != 2:
            await asyncio.sleep(0)
        for g in gates[1:]:
            g.set_result(None)
        await waiter

    asyncio.run(scenario())
    assert told[:2] == [3, 3] and 2 in told and told == sorted(told, reverse=True), told


async def _gated(gate: asyncio.Future[None]) -> None:
    await gate


def test_a_resume_whose_flow_file_hangs_at_import_names_it_and_one_ctrl_c_leaves_the_run_as_it_was(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    flow = write_flow(tmp_path / "fails.py", 'raise ValueError("not yet")')
    assert flows(db, "run", str(flow)).returncode == 1
    (run,) = _runs(db)
    flow.write_text(HANGS + flow.read_text())
    read_end, write_end = os.pipe()
    argv = ["resume", run["runId"], "--allow-changed"]
    with _popen(db, *argv, pass_fds=(read_end,), HANG_FD=str(read_end)) as proc:
        os.close(read_end)
        try:
            seen = read_until(proc, b"Ctrl-C stops it\n")
            proc.send_signal(signal.SIGINT)
            status, lines, _ = finish(proc, seen)
        finally:
            os.close(write_end)
    assert status == 130, lines
    assert lines[0].startswith(f"flows: the flow file {flow} is still being imported after 5 s"), lines
    assert lines[1].startswith("flows: error[interrupted]: interrupted (Ctrl-C)"), lines
    assert len(lines) == 2, lines
    assert [r["state"] for r in _runs(db)] == ["failed"]  # the lease is taken after the import: untouched
