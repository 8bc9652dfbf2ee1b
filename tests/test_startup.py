"""Start-up: ``import flows`` and the read-only commands import only what they need.

Every CLI call pays for what it imports, so the flows package names its public names lazily and the
``flows`` commands import the runtime, the integrations and the lock library only in the handlers
that use them. These tests run a fresh interpreter and look at ``sys.modules`` afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import run_python

INTEGRATIONS = ("web3", "psycopg", "langgraph", "mcp", "starlette", "uvicorn", "eth_account")
"""Extras' libraries: never imported by ``import flows`` or a read-only ``flows`` command."""


def _modules_after(code: str) -> set[str]:
    result = run_python(
        f"import sys\n{code}\nprint(__import__('orjson').dumps(sorted(sys.modules)).decode())"
    )
    assert result.returncode == 0, result.stderr
    return set(orjson.loads(result.stdout.strip().splitlines()[-1]))


def test_import_flows_imports_no_runtime_no_integration_and_no_sqlite() -> None:
    loaded = _modules_after("import flows")
    unwanted = {
        *INTEGRATIONS,
        "sqlite3",
        "asyncio",
        "flows._runtime",
        "memory",
        "journal",
        "importlib.metadata",
    }
    assert sorted(unwanted & loaded) == []


def test_import_memory_imports_none_of_its_modules_until_a_name_is_used() -> None:
    loaded = _modules_after("import memory")
    assert sorted(m for m in loaded if m.startswith(("memory.", "journal", "sqlite3"))) == []
    loaded = _modules_after("import memory\nassert memory.MemoryStore.__module__ == 'memory._store'")
    assert "memory._store" in loaded and "memory._check" not in loaded


def test_a_public_name_of_flows_is_imported_on_first_use() -> None:
    loaded = _modules_after(
        "import flows\nassert flows.run.__module__ == 'flows._runtime'\nflows.__version__"
    )
    assert {"flows._runtime", "asyncio"} <= loaded


@pytest.mark.parametrize("command", [["why", "fog"], ["recall", "--limit", "10"]])
def test_a_read_only_command_imports_neither_the_runtime_nor_an_integration(
    tmp_path: Path, command: list[str]
) -> None:
    argv = ["--db", str(tmp_path / "history.db"), *command]
    loaded = _modules_after(f"from flows._cli import main\nassert main({argv!r}) == 0")
    unwanted = {
        *INTEGRATIONS,
        "asyncio",
        "flows._runtime",
        "flows._steps",
        "portalocker",
        "importlib.metadata",
        "flows.mcp",  # other commands' modules: only the named command's parser is built
        "flows._web_cli",
        "socket",
        "memory._check",  # the store's verifier: only `flows check` needs it
        "memory._session",  # sessions learn: a read never opens one
        "flows._cli_runs",  # run, resume, runs, show: built only when named
        "journal._postgres",  # a backend the store does not use
    }
    assert sorted(unwanted & loaded) == []
    assert "sqlite3" in loaded  # the command did read the store


def test_version_is_still_printed_when_asked_for() -> None:
    result = run_python("from flows._cli import main\nmain(['--version'])")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("flows ") and result.stdout.strip() != "flows"


@pytest.mark.parametrize("command", [["why", "fog"], ["recall", "--limit", "10"]])
def test_a_read_of_a_store_with_synced_and_unsynced_findings_loads_no_ctypes(
    tmp_path: Path, command: list[str]
) -> None:
    """``syncfs`` is looked up through ctypes on the first write that syncs, not at import: a read
    (its citation check of an unsynced file included) never loads ctypes."""
    import memory

    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as s:
        s.learn({"text": "fog lifts by ten", "tags": ["fog"]})
        store.sync()
        s.learn({"text": "fog returns at dusk", "tags": ["fog"]})
    argv = ["--db", str(db), *command]
    loaded = _modules_after(f"from flows._cli import main\nassert main({argv!r}) == 0")
    assert "sqlite3" in loaded and "ctypes" not in loaded


def test_syncfs_is_looked_up_on_first_use_and_a_stand_in_set_before_is_kept() -> None:
    result = run_python(
        "import sys, staging, staging._stage as st\n"
        "assert 'ctypes' not in sys.modules\n"
        "fake = lambda fd: 0\n"
        "st._syncfs = fake\n"
        "have = staging.HAVE_SYNCFS\n"
        "assert st._syncfs is fake and st._the_syncfs() is fake\n"
        "print(have, staging.have_syncfs(), st.HAVE_SYNCFS, 'ctypes' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    linux = sys.platform.startswith("linux")
    assert result.stdout.split() == [str(linux), str(linux), str(linux), str(linux)]


def test_a_read_only_command_builds_no_table_or_pattern_only_odd_text_needs(tmp_path: Path) -> None:
    """The escapes of the 2,048 lone surrogates and the patterns of surrogates and durations are
    made the first time a text or an option needs them, not by every command's start."""
    import memory

    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as s:
        s.learn({"text": "fog lifts by ten", "tags": ["fog"]})
    argv = ["--db", str(db), "recall", "--limit", "10"]
    result = run_python(
        "import memory.cli as c\n"
        "from flows._cli import main\n"
        f"assert main({argv!r}) == 0\n"
        "made = [f.cache_info().currsize for f in (c._surrogate_escapes, c._surrogate_re, c._duration_re)]\n"
        "print(made, c.duration_ms('1h30m'), c.shown('a\\udcff\\ud800\\x1b\\n', one_line=True))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[0, 0, 0] 5400000 a\\xff\\ud800\\x1b\\n"


def test_shown_escapes_every_control_character_and_lone_surrogate_as_one_table_did() -> None:
    from memory.cli import shown

    table = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {
        0x09: "\\t",
        0x0A: "\\n",
        0x0D: "\\r",
    }
    bidi = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)  # the reorderers
    table |= {c: f"\\u{c:04x}" for c in bidi}
    table |= {c: f"\\x{c - 0xDC00:02x}" if c >= 0xDC80 else f"\\u{c:04x}" for c in range(0xD800, 0xE000)}
    lines = {c: e for c, e in table.items() if c != 0x0A}
    text = "".join(map(chr, range(0xE100))) + "é\udcff\n\u009b"
    assert shown(text, one_line=True) == text.translate(table)
    assert shown(text) == text.translate(lines)
    assert shown("plain é ✓") == "plain é ✓"


WRITE_RESULTS = (
    "Learned",
    "Explained",
    "SyncReport",
    "Forgotten",
    "ForgottenMany",
    "HistoryEvent",
    "HistoryPage",
)
"""What learns, ``why``, sync, forgets and history return: a recall returns none of them."""


def test_flows_recall_makes_no_result_class_it_does_not_return_and_no_pattern_only_odd_text_needs(
    tmp_path: Path,
) -> None:
    """Each frozen dataclass costs about half a millisecond to make and each of these patterns most of
    one to compile: a ``flows recall`` of a folder journal makes neither, and the names stay public."""
    import memory

    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as s:
        s.learn({"text": "fog lifts by ten", "tags": ["fog"]})
        store.sync()
        s.learn({"text": "fog returns at dusk", "tags": ["fog"]})  # unsynced: its citation is checked
    argv = ["--db", str(db), "recall", "--limit", "10"]
    result = run_python(
        "import sys\n"
        "import journal._dsn as d, journal._model as m\n"
        "from flows._cli import main\n"
        f"assert main({argv!r}) == 0\n"
        f"names = {WRITE_RESULTS!r}\n"
        "made = sorted({n for mod in list(sys.modules.values()) for n in names if n in vars(mod)})\n"
        "print(made, 'memory._outcomes' in sys.modules, m._unsafe_text.cache_info().currsize,"
        " d._keyword_dsn.cache_info().currsize)\n"
        "import memory\n"
        "print(sorted({getattr(memory, n).__name__ for n in names}))"
    )
    assert result.returncode == 0, result.stderr
    made, public = result.stdout.splitlines()[-2:]
    assert made == "[] False 0 0"
    assert public == str(sorted(WRITE_RESULTS))


def test_text_and_locations_are_still_checked_with_the_patterns_made_on_first_need() -> None:
    from journal import JournalNameInvalid, check_key, is_keyword_dsn

    assert check_key("plain key ~ with: punctuation!") == "plain key ~ with: punctuation!"
    for bad in ("a\x00b", "tab\there", "del\x7f", "c1\x85", "lone\ud800", "é\udcff"):
        with pytest.raises(JournalNameInvalid):
            check_key(bad)
    assert check_key("café ✓") == "café ✓"
    assert is_keyword_dsn("host=db dbname=app") and is_keyword_dsn("  PassWord = x")
    assert not is_keyword_dsn("./host=db") and not is_keyword_dsn("/srv/journal")


_GC_PROBE = """
import gc, sys
from staging import guarded_main

made = []


def load():
    made.append(gc.isenabled())  # the collector, while the command line loads
    made.append({"a": [1, 2]})  # an object the load makes and keeps
    return command


def command(args):
    kept = made[1]
    tracked = any(o is kept for o in gc.get_objects())  # the collected generations, not the frozen
    print(made[0], gc.isenabled(), gc.get_freeze_count() > 0, tracked)
    return 0


if sys.argv[1] == "off":
    gc.disable()
sys.exit(guarded_main("probe", load, [], before="b", after="a"))
"""


@pytest.mark.parametrize(
    ("collector", "expected"), [("on", "False True True False"), ("off", "False False True False")]
)
def test_a_command_line_loads_with_the_collector_paused_and_its_objects_frozen(
    collector: str, expected: str
) -> None:
    """Objects made while the command line loads live until the process ends: a collection that walks
    them (each young one while modules load, and the last as the interpreter exits) is wasted work, so
    ``guarded_main`` loads with the collector off, freezes what is alive, and runs the command with
    the collector as it found it."""
    result = run_python(_GC_PROBE, collector)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == expected


def test_flows_recall_runs_with_the_collector_on_and_the_command_lines_modules_frozen(tmp_path: Path) -> None:
    import memory

    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as s:
        s.learn({"text": "fog lifts by ten", "tags": ["fog"]})
    result = run_python(
        "import gc, sys\n"
        "from flows._entry import main\n"
        f"status = main(['--db', {str(db)!r}, 'recall', '--limit', '10'])\n"
        "cli = vars(sys.modules['memory.cli'])\n"
        "print(status, gc.isenabled(), gc.get_freeze_count() > 0, any(o is cli for o in gc.get_objects()))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "0 True True False"


@pytest.mark.parametrize("command", [["why", "fog"], ["recall", "--limit", "10"]])
def test_a_read_imports_neither_the_root_run_nor_the_embedders(tmp_path: Path, command: list[str]) -> None:
    """A store is opened for reads as often as for writes: the modules only a write or a meaning
    read uses (the root run's classes, the embedders and their ``numbers``) are imported when first
    used, not by the store's open."""
    import memory

    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="f") as s:
        s.learn({"text": "fog lifts by ten", "tags": ["fog"]})
        store.sync()
        s.learn({"text": "fog returns at dusk", "tags": ["fog"]})  # unsynced: its citation is checked
    memory.MemoryStore(db).close()  # this open walks the runs (the store's first since), as it must
    argv = ["--db", str(db), *command]
    loaded = _modules_after(f"from flows._cli import main\nassert main({argv!r}) == 0")
    unwanted = {"memory._root", "memory._embed", "numbers"}
    assert sorted(unwanted & loaded) == []
    assert {"sqlite3", "memory._search", "memory._retire"} <= loaded  # the command did read the store
