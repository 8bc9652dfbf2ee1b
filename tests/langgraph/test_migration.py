"""Switching from LangGraph's SQLite/PostgreSQL classes is a change of class name.

``JournalSaver.from_conn_string(...)`` and ``JournalStore.from_conn_string(...)`` are context
managers (``with`` and ``async with``) like LangGraph's, ``setup()``/``asetup()`` exist, and a
program without the extra gets a coded "install the extra" error instead of a raw
``ModuleNotFoundError``.
"""

from __future__ import annotations

import asyncio
import operator
import re
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from flows.langgraph import ConfigInvalid, JournalSaver, JournalStore
from journal import JournalClosed
from tests.conftest import ROOT, run_python
from tests.langgraph.helpers import config, put_chain


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(saver: JournalSaver, store: JournalStore) -> Any:
    def step(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("notes",), f"n{len(state['log'])}", {"text": "seen"})
        return {"log": ["step"]}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver, store=store)


def test_from_conn_string_with_a_sqlite_file_name_keeps_state_across_opens(tmp_path: Path) -> None:
    conn = str(tmp_path / "checkpoints.sqlite")
    for expected in (1, 2):
        with JournalSaver.from_conn_string(conn) as saver, JournalStore.from_conn_string(conn) as store:
            saver.setup()
            store.setup()
            out = _graph(saver, store).invoke({"log": []}, config("t"))
            assert out["log"] == ["step"] * expected
            assert len(store.search(("notes",))) == expected
    assert (tmp_path / "flows-journal").is_dir()  # one journal beside the named DB, for both


def test_from_conn_string_closes_what_it_opened(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "h.db")) as saver:
        put_chain(saver, "t", [{"x": 1}])
    with pytest.raises(JournalClosed):
        saver.get_tuple(config("t"))
    with pytest.raises(JournalClosed):
        saver.setup()


def test_async_with_from_conn_string_and_asetup(tmp_path: Path) -> None:
    async def main() -> list[str]:
        conn = str(tmp_path / "h.db")
        async with JournalSaver.from_conn_string(conn) as saver, JournalStore.from_conn_string(conn) as store:
            await saver.asetup()
            await store.asetup()
            out = await _graph(saver, store).ainvoke({"log": []}, config("t"))
            return list(out["log"])

    assert asyncio.run(main()) == ["step"]


def test_memory_conn_string_is_a_temporary_store_removed_at_the_end() -> None:
    with JournalSaver.from_conn_string(":memory:") as saver:
        put_chain(saver, "t", [{"x": 1}])
        where = Path(saver.journal_location).parent
        assert where.is_dir()
    assert not where.exists()


def test_a_postgresql_conn_string_is_the_journal(journal_location: str, tmp_path: Path) -> None:
    if not journal_location.startswith("postgresql://"):
        pytest.skip("the PostgreSQL form needs the PostgreSQL backend")
    with JournalSaver.from_conn_string(journal_location, db=str(tmp_path / "h.db")) as saver:
        assert saver.journal_location == journal_location


@pytest.mark.parametrize("conn", ["", "   "])
def test_an_empty_conn_string_is_config_invalid(conn: str) -> None:
    with pytest.raises(ConfigInvalid), JournalSaver.from_conn_string(conn):
        pass


@pytest.mark.parametrize("cls", [JournalSaver, JournalStore])
def test_a_key_value_conn_string_is_refused_not_a_db_file_named_after_its_password(
    cls: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LangGraph's PostgreSQL classes take libpq's key=value form; taken for a path here, it would
    # make a DB file whose name holds the password.
    monkeypatch.chdir(tmp_path)
    with (
        pytest.raises(ConfigInvalid, match="postgresql://") as caught,
        cls.from_conn_string("host=127.0.0.1 dbname=test password=ZQXSECRET"),
    ):
        pass
    assert "ZQXSECRET" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cls", [JournalSaver, JournalStore])
@pytest.mark.parametrize(
    "conn", ["postgresql+psycopg://u:ZQXSECRET@127.0.0.1/test", "sqlite:///state.sqlite", "file://x.db"]
)
def test_a_url_of_another_scheme_is_refused_not_taken_for_a_path(
    cls: Any, conn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # taken for a path, it made folders named after its scheme (``sqlite:``, ``postgresql+psycopg:``)
    # and a history DB file named after the rest, password included
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigInvalid, match="postgresql://") as caught, cls.from_conn_string(conn):
        pass
    assert caught.value.code == "langgraph_config_invalid"
    assert "ZQXSECRET" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("blocked", ["langchain_core", "langgraph", "ormsgpack"])
def test_without_the_extra_the_import_says_what_to_install(blocked: str) -> None:
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "try:\n"
        "    from flows.langgraph import JournalSaver\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.code, exc.missing, isinstance(exc, ImportError)); print(exc)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    first, message = result.stdout.strip().split("\n")
    assert first == f"ExtraMissing langgraph_extra_missing {blocked} True"
    assert "pip install 'flows-memory[langgraph]'" in message


def test_the_docs_show_the_migration_as_a_diff_of_three_lines_or_fewer() -> None:
    text = (ROOT / "docs" / "LANGGRAPH.md").read_text()
    diffs = re.findall(r"```diff\n(.*?)```", text, re.S)
    assert diffs, "docs/LANGGRAPH.md has no diff block"
    for diff in diffs:
        removed = [ln for ln in diff.splitlines() if ln.startswith("-")]
        added = [ln for ln in diff.splitlines() if ln.startswith("+")]
        assert 0 < len(added) <= 3 and len(removed) <= 3, diff
    joined = "\n".join(diffs)
    for peer in ("SqliteSaver", "SqliteStore", "PostgresSaver"):
        assert peer in joined
