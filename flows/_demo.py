"""The embedded demo: a flow learns, is killed mid-way, resumes, and is asked why.

With a folder to keep (``flows demo --keep DIR``) the store stays there and the demo ends with
commands a user can copy and run on it; otherwise it runs in a temporary folder, removed after.

The story is printed on stdout; ``flows demo --json`` sends it to stderr and prints only the outcome
(``DemoOutcome.as_json``) on stdout.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory import Unwritable

_FLOW = '''\
"""A demo flow: it learns what it observes about the weather, one finding at a time."""
import asyncio
import flows

OBSERVATIONS = [
    ("rain follows a falling barometer", ["weather", "pressure"]),
    ("fog forms when the air cools to its dew point", ["weather", "fog"]),
    ("a red sky at night often means fair weather next day", ["weather", "sky"]),
    ("thunder follows lightning because sound is slower than light", ["storm", "physics"]),
    ("snow needs the air near the ground below about 2 C", ["weather", "snow"]),
    ("wind flows from high pressure toward low pressure", ["wind", "pressure"]),
]


@flows.flow(name="weather-notes", scope="weather")
async def body(f):
    for text, tags in OBSERVATIONS:
        await f.memory.learn({"text": text, "tags": tags, "source": "observation"})
        await asyncio.sleep(0.3)  # time to crash in
'''


def _flows(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "flows", *args, "--db", str(home / "history.db")]
    print(f"$ flows {shlex.join(args)}", flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stdout.write(result.stdout)
    sys.stdout.write(result.stderr)
    sys.stdout.flush()
    return result


def _learned(home: Path) -> int:
    return sum(1 for _ in (home / "flows-memory").rglob("*.json")) if (home / "flows-memory").exists() else 0


@dataclass(frozen=True)
class DemoOutcome:
    """What the demo did: whether every step held, the run it killed and resumed, the kept store."""

    ok: bool
    run_id: str | None
    kept: Path | None
    commands: tuple[str, ...]

    @property
    def status(self) -> int:
        """The command's exit status: 0 when every step held, else 1."""
        return 0 if self.ok else 1

    def as_json(self) -> dict[str, Any]:
        """``{"ok", "runId", "kept", "try"}``: ``kept`` is the store's folder, or null when it was
        temporary; ``try`` the commands to run on a kept store."""
        return {
            "ok": self.ok,
            "runId": self.run_id,
            "kept": None if self.kept is None else str(self.kept),
            "try": list(self.commands),
        }


def run_demo(home: str | None = None, progress: Callable[[int, int], None] | None = None) -> DemoOutcome:
    """Run the demo in ``home`` (a temporary directory when None), telling its story on stdout.

    ``progress(done, total)`` is told how many findings are published while the demo waits to
    kill the flow.
    """
    if home is None:
        with tempfile.TemporaryDirectory(prefix="flows-demo-") as tmp:
            ok, run_id = _demo(Path(tmp), progress)
        print("\n(the store was temporary and is gone: `flows demo --keep DIR` keeps it to explore)")
        return DemoOutcome(ok, run_id, None, ())
    ok, run_id = _demo(Path(home), progress)
    commands = _next_steps(Path(home))
    print(f"\nthe store is kept in {home}; try:")
    for command in commands:
        print(f"  {command}")
    return DemoOutcome(ok, run_id, Path(home), commands)


def _next_steps(home: Path) -> tuple[str, ...]:
    db = shlex.quote(str(home / "history.db"))
    return (
        f"flows runs --db {db}",
        f"flows why 'what does fog need' --db {db}",
        f"flows recall --tag weather --json --db {db}",
        f"flows check --db {db}",
    )


def _demo(home: Path, progress: Callable[[int, int], None] | None) -> tuple[bool, str | None]:
    flow_file = home / "weather_notes.py"
    try:
        home.mkdir(parents=True, exist_ok=True)
        flow_file.write_text(_FLOW)
    except OSError as exc:  # a file where a folder should be, a name too long, a read-only disk
        raise Unwritable(
            f"cannot make the demo's store in {home}: {exc.strerror or exc}; give --keep a folder "
            "this user can create or write",
            path=home,
            errno=exc.errno,
        ) from exc
    print(f"flows demo in {home}\n")
    print("1. run a flow that learns six findings, and kill it (SIGKILL) after the third")
    child = subprocess.Popen(
        [sys.executable, "-m", "flows", "run", str(flow_file), "--db", str(home / "history.db")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while _learned(home) < 3 and time.monotonic() < deadline and child.poll() is None:
        if progress is not None:
            progress(_learned(home), 3)
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    print(f"   killed after {_learned(home)} findings were published\n")
    print("2. the root run is interrupted: its lease died with its process")
    runs = _flows(home, "runs")
    listed = runs.stdout.splitlines()
    run_id = listed[1].split()[0] if runs.returncode == 0 and len(listed) > 1 else None
    if run_id is None:
        print("\ndemo FAILED: `flows runs` listed no root run")
        return False, None
    print("\n3. resume it: committed learns republish without journaling again; the rest are learned")
    resumed = _flows(home, "resume", run_id)
    print("\n4. the journal holds exactly one record per finding")
    _flows(home, "journal", run_id, "--stream", "memory-learn")
    print("\n5. ask why")
    why = _flows(home, "why", "why does it rain when pressure falls?")
    print("\n6. sync into the history DB; the answer now comes from the DB, with the same citation")
    _flows(home, "sync")
    _flows(home, "recall", "--tag", "pressure")
    ok = resumed.returncode == 0 and why.returncode == 0 and "barometer" in why.stdout
    print("\ndemo " + ("complete" if ok else "FAILED"))
    return ok, run_id
