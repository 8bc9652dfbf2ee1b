"""A populated store damaged at random: every command answers correctly or fails with a documented
code, within a time bound, and never writes outside the store.

Each example copies one populated store (rows in the history DB, unsynced learned files, a retired
file, three root runs in the file journal, a folder outside the store that links can point at),
applies one to three mutations (truncate, flip a byte, replace by a FIFO, a folder or a link, delete,
duplicate a line) to learned and retired files, the store's folders, the history DB and journal
files, then runs ``flows runs``,
``recall``, ``why``, ``check``, ``sync``, ``check --repair`` and ``recall`` again in one fresh
process, bounded by a timeout. Asserted: exit 0, or exit 1 with one JSON diagnostic whose code
is in docs/SURFACE.md (or ``check``'s report); never a traceback or a hang; every finding answered
is one that was learned, word for word; the folder outside the store and the store's parent are
exactly as they were."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
import memory
from tests.adversarial.memory_support import documented_codes, populate, snapshot
from tests.conftest import ROOT

TIME_BOUND_S = 90.0  # for all the commands of one example, on a loaded machine

COMMANDS: list[list[str]] = [
    ["runs", "--json"],
    ["recall", "--json", "--limit", "100"],
    ["why", "adv finding words", "--json"],
    ["check", "--json"],
    ["sync", "--json"],
    ["recall", "--json", "--limit", "100"],
    ["check", "--repair", "--json"],
    ["recall", "--json", "--limit", "100"],
]

DRIVER = r"""
import contextlib, io, sys, traceback, orjson
from flows._cli import main
db, commands = sys.argv[1], orjson.loads(sys.argv[2])
out = []
for args in commands:
    sys.stderr.write(f"running {args}\n")
    sys.stderr.flush()
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            code = main([*args, "--db", db])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            code, e = -1, io.StringIO(traceback.format_exc())
    out.append({"args": args, "code": code, "stdout": o.getvalue(), "stderr": e.getvalue()})
print(orjson.dumps(out).decode())
"""


# -- the populated store, built once -------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("template")
    db = base / "store" / "history.db"
    synced = populate(db, [f"adv finding words {i} synced" for i in range(4)], scope="adv")
    with memory.MemoryStore(db) as store:
        store.sync()
    unsynced = populate(db, [f"adv finding words {i} on disk" for i in range(4)], scope="adv2", flow="other")
    with memory.MemoryStore(db) as store:  # one finding forgotten: a retired file to damage too
        jr = store.open_journal()
        _, lease = jr.begin("other", "adv2", {})
        gone = sorted(unsynced.keys)[0]
        store.forget(gone, memory.RootRun(jr, lease, "other", "adv2"), reason="wrong")
        jr.finish(lease, journal.RunState.DONE)
    del unsynced.keys[gone]
    outside = base / "outside"
    (outside / "victim-dir").mkdir(parents=True)
    (outside / "victim.json").write_bytes(b'{"text": "outside the store"}\n')
    (outside / "victim-dir" / ".stage-0123456789abcdef.finding").write_bytes(b"not the store's")
    os.utime(outside / "victim-dir" / ".stage-0123456789abcdef.finding", (1, 1))
    return base, {**synced.keys, **unsynced.keys}


# -- mutations ------------------------------------------------------------------------------------


def _category(rel: Path, is_dir: bool) -> str:
    parts = rel.parts
    if parts[0] == "flows-memory":
        return "memory folder" if is_dir else "learned file"
    if parts[0].startswith("history.db"):
        return "db"
    if parts[0] == "flows-journal" and not is_dir:
        if rel.name == "run.json":
            return "run record"
        return "stream" if rel.suffix == ".jsonl" else "lock"
    return ""


# Non-regular files and links in the journal's own files (run.json, streams, locks) are the
# journal's to refuse; here the journal's files are damaged only in their bytes or removed.
OPS_BY_CATEGORY = {
    "learned file": ["truncate", "flip", "fifo", "folder", "link", "delete", "duplicate", "socket"],
    "db": ["truncate", "flip", "fifo", "folder", "link", "delete"],
    "memory folder": ["link", "delete", "fifo"],
    "stream": ["truncate", "flip", "delete", "duplicate"],
    "run record": ["truncate", "delete"],
    "lock": ["truncate", "delete"],
}


def _targets(store: Path) -> list[tuple[Path, str]]:
    found = []
    for dirpath, dirnames, filenames in os.walk(store):
        for name in sorted([*dirnames, *filenames]):
            path = Path(dirpath) / name
            kind = _category(path.relative_to(store), path.is_dir() and not path.is_symlink())
            if kind:
                found.append((path, kind))
    return sorted(found)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _make_socket(path: Path) -> None:
    short = Path(os.path.realpath("/tmp")) / f"s{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(short))
    sock.close()
    os.rename(short, path)


def _mutate(path: Path, op: str, arg: int, outside: Path) -> None:
    if op in ("truncate", "flip", "duplicate"):
        if not path.is_file() or path.is_symlink():
            return  # already made something else by an earlier mutation
        data = path.read_bytes()
        if op == "truncate":
            data = data[: arg % (len(data) + 1)]
        elif op == "flip" and data:
            i = arg % len(data)
            data = data[:i] + bytes([data[i] ^ (1 << (arg % 8))]) + data[i + 1 :]
        elif op == "duplicate":
            lines = data.splitlines(keepends=True) or [b""]
            i = arg % len(lines)
            data = b"".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
        path.write_bytes(data)
        return
    actions: dict[str, Callable[[], None]] = {
        "fifo": lambda: os.mkfifo(path),
        "folder": path.mkdir,
        "socket": lambda: _make_socket(path),
        "link": lambda: path.symlink_to(outside / ("victim-dir" if arg % 2 else "victim.json")),
        "delete": lambda: None,
    }
    _remove(path)
    actions[op]()


MUTATIONS = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=3
)


# -- the property ---------------------------------------------------------------------------------


def _judge(result: dict[str, Any], codes: set[str], learned: dict[str, str]) -> None:
    args, code = result["args"], result["code"]
    stderr, stdout = str(result["stderr"]), str(result["stdout"])
    assert code in (0, 1), (args, code, stderr)
    assert "Traceback" not in stderr, (args, stderr)
    if code == 1 and stderr.strip():
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, (args, stderr)
        # flow_failed is what an exception without a code becomes: never an answer to damage
        assert orjson.loads(lines[0])["code"] in codes - {"flow_failed", "usage"}, (args, stderr)
    elif code == 1:
        assert args[0] == "check" and orjson.loads(stdout)["clean"] is False, (args, stdout)
    if code == 0 and args[0] in ("recall", "why"):
        for entry in orjson.loads(stdout):
            assert learned.get(entry["key"]) == entry["text"], (args, entry)  # nothing made up


def _outcome(result: dict[str, Any]) -> str:
    stderr = str(result["stderr"]).strip()
    return str(orjson.loads(stderr)["code"]) if stderr else "report"


SETTINGS = settings(
    max_examples=30,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(mutations=MUTATIONS)
def test_any_damage_to_a_store_is_answered_correctly_or_refused_with_a_documented_code(
    tmp_path: Path, template: tuple[Path, dict[str, str]], mutations: list[tuple[int, int, int]]
) -> None:
    base, learned = template
    case = Path(tempfile.mkdtemp(dir=os.path.realpath(tmp_path), prefix="case-")) / "copy"
    shutil.copytree(base, case, symlinks=True)
    store, outside = case / "store", case / "outside"
    applied: list[str] = []
    for pick, op_pick, arg in mutations:
        by_kind: dict[str, list[Path]] = {}
        for path, kind in _targets(store):
            by_kind.setdefault(kind, []).append(path)
        if not by_kind:
            break
        kind = sorted(by_kind)[pick % len(by_kind)]  # each kind of target as likely as any other
        path = by_kind[kind][(pick // len(by_kind)) % len(by_kind[kind])]
        ops = OPS_BY_CATEGORY[kind]
        _mutate(path, ops[op_pick % len(ops)], arg, outside)
        applied.append(f"{ops[op_pick % len(ops)]} {kind}")
    outside_before = snapshot(outside)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWS_JOURNAL", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, str(store / "history.db"), orjson.dumps(COMMANDS).decode()],
            capture_output=True,
            text=True,
            env=env,
            timeout=TIME_BOUND_S,
            check=False,
        )
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"a command hung after {mutations}: {hung.stderr!r}") from None
    assert done.returncode == 0, done.stderr
    codes = documented_codes()
    results = orjson.loads(done.stdout)
    for result in results:
        _judge(result, codes, learned)
    if os.environ.get("FLOWS_ADV_TALLY"):  # figures for docs/RELIABILITY.md: one line per example
        outcomes = [r["code"] if r["code"] == 0 else _outcome(r) for r in results]
        with open(os.environ["FLOWS_ADV_TALLY"], "ab") as tally:
            tally.write(orjson.dumps({"mutations": applied, "outcomes": outcomes}) + b"\n")
    assert snapshot(outside) == outside_before  # nothing outside the store touched
    assert sorted(os.listdir(case)) == ["outside", "store"]
    shutil.rmtree(case.parent, ignore_errors=True)
