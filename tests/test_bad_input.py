"""Bad input: every finding, line and argument either works or fails with its documented code,
never a traceback, and a failure leaves storage untouched."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import journal
import memory
from flows._cli import main as flows_main
from memory.ledger import ActivityCodec, LedgerCodec

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FINDINGS = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"text": JSON | st.text(max_size=30)},
        optional={
            "source": JSON | st.text(max_size=10),
            "tags": st.lists(st.text(max_size=6), max_size=3) | JSON,
        },
    ),
)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@SETTINGS
@given(finding=FINDINGS)
def test_any_finding_is_learned_or_refused_as_invalid_with_storage_untouched(
    tmp_path: Path, finding: Any
) -> None:
    db = tmp_path / f"s{abs(hash(repr(finding)))}" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("f", "s", {})
        root = memory.RootRun(jr, lease, "f", "s")
        before = _snapshot(db.parent)
        try:
            learned = store.learn(finding, root)
        except memory.FindingInvalid as exc:
            assert exc.code == "memory_finding_invalid"
            assert _snapshot(db.parent) == before
            assert list(jr.read(lease.run_id, memory.STREAM)) == []
        else:
            assert memory.read_learned(learned.path).key == learned.id
            assert isinstance(finding, dict) and isinstance(finding["text"], str) and finding["text"].strip()


@SETTINGS
@given(line=st.binary(max_size=300) | JSON.map(lambda v: orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS)))
def test_any_bytes_as_a_ledger_activity_or_journal_line_decode_or_raise_line_damaged(line: bytes) -> None:
    line = line.replace(b"\n", b" ")
    for codec in (LedgerCodec(), ActivityCodec(), journal.RecordCodec("r", "s")):
        with contextlib.suppress(journal.LineDamaged):
            codec.decode(line)


ARGS = st.lists(
    st.sampled_from(
        [
            "run",
            "resume",
            "runs",
            "journal",
            "recall",
            "why",
            "sync",
            "check",
            "--json",
            "--limit",
            "--tag",
            "--before",
            "--source",
            "--stream",
            "--repair",
            "--scope",
            "0",
            "-1",
            "abc",
            "../x",
            "",
            "--",
            "-x",
        ]
    )
    | st.text(max_size=8),
    max_size=5,
)


@SETTINGS
@given(argv=ARGS)
def test_any_command_line_exits_0_1_or_2_with_at_most_one_diagnostic_line(
    tmp_path: Path, argv: list[str]
) -> None:
    # the servers run until they are stopped: their input is fuzzed by their own tests (web, MCP)
    assume(not {"serve", "mcp"} & set(argv))
    db = tmp_path / "cli" / "history.db"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = flows_main([*argv, "--db", str(db)])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    assert code in (0, 1, 2), (argv, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 1:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith(("flows: error[", '{"code"')), err.getvalue()
    assert not (db.parent / "flows-memory").exists()  # nothing here learns, so nothing is published


NAME_TOO_LONG = "x" * 300  # longer than a file name may be: the OS refuses it (ENAMETOOLONG)
PAGE = "x" * 100_000


@pytest.mark.parametrize(
    "argv",
    [
        ["run", NAME_TOO_LONG],
        ["demo", "--keep", NAME_TOO_LONG],
        ["run", NAME_TOO_LONG + "/flow.py"],
        ["resume", "r1", "--file", NAME_TOO_LONG],
        ["serve", "--sail-home", NAME_TOO_LONG],
        ["show", PAGE],
        ["journal", PAGE],
        ["resume", PAGE],
        ["why", "q", "--mode", PAGE],
        ["runs", "--state", PAGE],
        [PAGE],
    ],
    ids=lambda argv: " ".join(a[:12] for a in argv),
)
def test_a_name_too_long_or_a_pasted_page_as_an_argument_is_one_short_coded_line(
    tmp_path: Path, argv: list[str]
) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = flows_main([*argv, "--db", str(tmp_path / "history.db")])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    said = err.getvalue()
    assert code in (1, 2) and "error[" in said and "internal_error" not in said, said[:500]
    assert len(said) < 2_000, said[:500]


@pytest.mark.parametrize(
    "argv",
    [["learn", "a", "--scope", "s"], ["run", "flow.py"], ["sync"], ["demo", "--keep", "{file}/demo"]],
)
def test_a_file_where_the_stores_folder_should_be_is_a_coded_error(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "flow.py").write_text("import flows\n\n@flows.flow()\nasync def body(f):\n    return 1\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    out, err = io.StringIO(), io.StringIO()
    argv = [a.replace("{file}", str(a_file)) for a in argv]
    if argv[0] == "run":
        argv[1] = str(tmp_path / argv[1])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = flows_main([*argv, "--db", str(a_file / "history.db")])
    said = err.getvalue()
    assert code in (1, 2) and "error[" in said and "internal_error" not in said, said[:500]
    assert a_file.read_text() == "not a folder"


def test_a_time_past_what_a_local_date_shows_prints_as_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last time a record may carry is 9999-12-31 UTC; fourteen hours east of UTC that is year
    10,000, which no date shows: the table prints the number, not a traceback."""
    import time

    from memory._finding import TIME_MAX_MS
    from memory.cli import format_ms

    monkeypatch.setenv("TZ", "Etc/GMT-14")
    time.tzset()
    try:
        assert format_ms(TIME_MAX_MS) == f"{TIME_MAX_MS} ms since 1970"
        assert format_ms(0).startswith("1970-01-01 14:00:00")
    finally:
        monkeypatch.undo()
        time.tzset()
